/* tls.h -- the TLS record calls of OpenSSL and GnuTLS (tls.c). */
#ifndef NS_TLS_H
#define NS_TLS_H

#include <sys/types.h>
#include "base.h"

/* tls.c: the record calls of OpenSSL and GnuTLS (opaque session pointers). */
/* caller: the return address of the exported wrapper's call */
NS_HIDDEN int ns_ssl_read(void *ssl, void *buf, int num, const void *caller);
NS_HIDDEN int ns_ssl_write(void *ssl, const void *buf, int num, const void *caller);
NS_HIDDEN int ns_ssl_read_ex(void *ssl, void *buf, size_t num, size_t *got, const void *caller);
NS_HIDDEN int ns_ssl_write_ex(void *ssl, const void *buf, size_t num, size_t *put, const void *caller);
NS_HIDDEN ssize_t ns_gnutls_record_recv(void *session, void *data, size_t size, const void *caller);
NS_HIDDEN ssize_t ns_gnutls_record_send(void *session, const void *data, size_t size, const void *caller);
/* The handshake and GnuTLS's verification, for an injected tlsfail (tls.c). */
NS_HIDDEN int ns_ssl_connect(void *ssl, const void *caller);
NS_HIDDEN int ns_ssl_do_handshake(void *ssl, const void *caller);
NS_HIDDEN int ns_gnutls_verify_peers2(void *session, unsigned *status, const void *caller);
NS_HIDDEN int ns_gnutls_verify_peers3(void *session, const char *host, unsigned *status, const void *caller);
#endif

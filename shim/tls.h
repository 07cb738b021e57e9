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
/* A TLS socket (a ClientHello went out on it) moved bytes: inside a record
 * call, the session's socket; outside, a send whose whole bytes ended with
 * the 16 at sent_tail (NULL: a receive, or not known) may carry a
 * memory-BIO session's noted write (tls.c), when ns_tls_pair_send did not
 * see it before it went. */
NS_HIDDEN void ns_tls_note_fd(int fd, const void *sent_tail);
/* Before a send on a TLS socket not paired with a session yet, outside any
 * record call, whose bytes end with the 16 at tail (NULL: not known): maybe
 * the ciphertext of a memory-BIO session's write (asyncio), which then
 * takes this socket, and whose request asks for its max_requests place
 * here. 0: the send goes; -1 with errno: held (EAGAIN) or refused after
 * queue_timeout (ECONNREFUSED), as ns_req_start. */
NS_HIDDEN int ns_tls_pair_send(int fd, const void *tail, int nonblock);
/* Is this thread inside a record call (its socket's I/O is the library's)? */
NS_HIDDEN int ns_tls_in_call(void);

#endif

/* tlspair.h -- the socket under a TLS session whose library does not name
 * it (tlspair.c), for tls.c's record calls and the socket layer. */
#ifndef NS_TLSPAIR_H
#define NS_TLSPAIR_H

#include <sys/types.h>

#include "conn.h"

typedef void *(*ns_ssl_wbio_fn)(const void *);
typedef int (*ns_bio_type_fn)(const void *);
typedef long (*ns_bio_ctrl_fn)(void *, int, long, void *);

/* Before a record call on sess (fd: the socket its library names, or -1):
 * its connection if known (named, or a pair that still holds), and the
 * note-taking of the socket used inside the call on. */
NS_HIDDEN struct ns_conn *ns_tls_begin(void *sess, int fd);
/* After it (c: what ns_tls_begin said; n bytes of buf moved in direction
 * d): the socket learnt during the call (it overrides a remembered pair),
 * the bytes seen as the connection's turns. 1: a write on a session whose
 * socket is not known, for the caller to note (ns_tls_note_write). */
NS_HIDDEN int ns_tls_seen(struct ns_conn *c, int d, const void *buf, ssize_t n);
/* A write of n plaintext bytes from buf on an OpenSSL session whose socket
 * is not known, noted by the last 16 bytes of ciphertext it left in its
 * memory BIO (the library's own SSL_get_wbio, BIO_method_type, BIO_ctrl;
 * nothing noted for another kind of BIO or a function not found). */
NS_HIDDEN void ns_tls_note_write(void *ssl, ns_ssl_wbio_fn wbio_of, ns_bio_type_fn type_of, ns_bio_ctrl_fn ctrl,
				 const void *buf, size_t n);
/* A handshake call on sess whose library names no socket: the socket it
 * sends on inside the call is remembered as sess's (begin, end), and
 * looked up meanwhile (ns_tls_call_conn: else a remembered pair). */
NS_HIDDEN void ns_tls_call_begin(void *sess);
NS_HIDDEN void ns_tls_call_end(void);
NS_HIDDEN struct ns_conn *ns_tls_call_conn(void *sess);
/* The connection a remembered pair for sess names, if it still does. */
NS_HIDDEN struct ns_conn *ns_tls_cached_conn(void *sess);
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

#endif

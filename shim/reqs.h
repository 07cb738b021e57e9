/* reqs.h -- max_requests: a place for each request in flight (reqs.c). */
#ifndef NS_REQS_H
#define NS_REQS_H

#include "conn.h"
#include "config.h"
#include "../policy/h1.h"

/* A send that starts an HTTP/1.x request on c (fd: its socket, -1 when
 * not known here) under max_requests: 0, it may go (a place is its, or
 * the one its connection held serves it; or the total deadline passed
 * while it waited, which the caller's check then tells); -1 with errno:
 * EAGAIN, held (non-blocking: until a place frees, and not writable in the
 * waits meanwhile; blocking: the program's send timeout ran out),
 * ECONNREFUSED when queue_timeout passed (counted throttled). */
NS_HIDDEN int ns_req_start(int fd, struct ns_conn *c, int nonblock);
/* Does the send of buf (n bytes; NULL: not a plain buffer) on c, flags f,
 * start an HTTP/1.x request under max_requests? tls: NS_C_TLS for a TLS
 * connection's plaintext (tls.c), 0 for a socket's bytes. */
static inline int ns_req_starts(const struct ns_conn *c, uint32_t f, uint32_t tls, const char *buf, size_t n)
{
	if (likely(!(f & NS_C_XNEXT)) || likely(!ns_conn_set(c)->max_requests) || (f & NS_C_TLS) != tls)
		return 0;
	if ((f & NS_C_H2) == NS_C_HTTP)
		return 1;
	/* the connection's first bytes: a request line (or the start of one) */
	if ((f & (NS_C_HTTP | NS_C_NOTHTTP)) || !buf)
		return 0;
	int v = ns_h1_looks(buf, n < NS_H1_SNIFF_MAX ? n : NS_H1_SNIFF_MAX);

	return v == 1 || v < 0;
}
/* HTTP/2: a write that opens a new stream on c under max_requests: one
 * place for it, as ns_req_start (nonblock: EAGAIN while held; in a TLS
 * library's write, 0: it waits there; tls: there, a process that holds a
 * place already does not wait, its stream goes over the limit, counted
 * requests_over). ..._streams_done: n of c's streams
 * ended (END_STREAM, a reset, the connection's end), or n that took a
 * place did not go after all: n places back. */
NS_HIDDEN int ns_req_stream(int fd, struct ns_conn *c, int nonblock, int tls);
NS_HIDDEN void ns_req_streams_done(struct ns_conn *c, uint32_t n);
/* The request's answer was read to its end (exchange.c), or it was never
 * sent (refused at its start): its place back, the next waiter woken. Also
 * the record's end (fdtab.c, through ns_req_end_hook). */
NS_HIDDEN void ns_req_done(struct ns_conn *c);

#endif

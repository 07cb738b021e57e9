/* afterio.c -- after a data call on a governed connection that did not
 * simply move bytes on a settled connection (datapath.c's healthy path):
 * what its result says. The first byte of an answer is the exchange's
 * success; an end of stream or a reset before it, its failure (or, on a
 * reused connection, a stale keep-alive); the kernel's EAGAIN on a timeout
 * the shim put there, ETIMEDOUT. */
#include "afterio.h"

#include <errno.h>

#include "connfail.h"
#include "exchange.h"
#include "fault.h"
#include "h2conn.h"
#include "outcome.h"
#include "timeo.h"

/* After a data call that did not simply move bytes on a settled connection:
 * count the outcome, and turn the kernel's EAGAIN into ETIMEDOUT when the
 * timeout it held was the shim's. Kept out of line so the healthy path in
 * the data path stays a handful of loads. */
__attribute__((noinline)) ssize_t ns_after_io(int fd, struct ns_conn *c, int d, ssize_t r, size_t len,
					      int flags, uint32_t gen)
{
	int e = errno;

	/* The connection ended while this call was blocked (another thread
	 * closed it) and the record may now serve another: touch nothing. */
	if (unlikely(__atomic_load_n(&c->gen, __ATOMIC_ACQUIRE) != gen))
		return r;
	if (r > 0) {
		if (LD(c->rd_wait_start)) {
			/* input: a wait for more starts afresh. Output while an
			 * event loop waits for input (another thread sent the
			 * request): the answer is due read_timeout after it. */
			ns_set_rd_wait(c, d == NS_IN ? 0 : ns_now());
		}
		if (__atomic_load_n(&c->flags, __ATOMIC_RELAXED) & NS_C_CONNECTING)
			ns_conn_connected(c);
		if ((LD(c->flags) & NS_C_FAULT) && !(flags & MSG_PEEK))
			ns_fault_post(c, d, r);
		if (!LD(c->outcome) && d == NS_IN && !(LD(c->flags) & (NS_C_PARSE | NS_C_TLS | NS_C_HDRS))) {
			/* the first byte of the answer: the exchange succeeded (a
			 * 429/503's headers decide it: exchange.c) */
			if (unlikely((LD(c->flags) & NS_C_H2) == NS_C_H2)) {
				ns_conn_h2_answered(c); /* (an h2 server's SETTINGS answer nothing: its streams' do) */
			} else {
				ns_first_byte_latency(c);
				ns_conn_outcome(c, NS_OUT_SUCCESS, 0);
			}
		}
		if (LD(c->intr_deadline) && d == NS_IN)
			ns_note_interrupted(fd, c, 0);
		errno = e;
		return r;
	}
	if (d == NS_IN && (e == EINTR || LD(c->intr_deadline)))
		ns_note_interrupted(fd, c, r < 0 ? e : 0);
	if (r == 0) {
		/* HTTP/2: the server's close fails the streams still open */
		if (unlikely(LD(c->h2) != NULL) && d == NS_IN && len > 0)
			ns_h2c_end(c, NS_OUT_FAILURE, 0);
		if (d == NS_IN && len > 0 && !LD(c->outcome)) {
			/* the peer closed: cleanly if nothing was asked, before the
			 * answer if a request is out (err 0: no errno says it) */
			if (ns_exchange_stale(c))
				ns_conn_stale(c, 0);
			else if (LD(c->flags) & NS_C_SENT)
				ns_conn_failed(c, NS_OUT_FAILURE, 0);
			else if ((LD(c->flags) & NS_C_H2) == NS_C_H2)
				ns_conn_h2_answered(c);
			else
				ns_conn_outcome(c, NS_OUT_SUCCESS, 0);
		}
		errno = e;
		return 0;
	}
	if (e == EAGAIN || e == EWOULDBLOCK) {
		if (!(__atomic_load_n(&c->flags, __ATOMIC_RELAXED) & NS_C_NONBLOCK) && !(flags & MSG_DONTWAIT) &&
		    ns_src_fires(LD(c->dir[d].src))) {
			ns_conn_failed(c, NS_OUT_TIMEOUT, ETIMEDOUT);
			errno = ETIMEDOUT;
			return -1;
		}
	} else if (ns_is_failure_errno(e) && !LD(c->outcome)) {
		if ((e == ECONNRESET || e == EPIPE) && ns_exchange_stale(c))
			ns_conn_stale(c, e);
		else
			ns_conn_fail_errno(c, e);
	}
	errno = e;
	return r;
}

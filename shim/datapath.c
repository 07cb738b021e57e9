/* datapath.c -- the data calls on a governed connection (the wrappers have
 * already sent every other descriptor straight to libc): the input calls
 * here, the output calls in dataout.c, what both share in dataio.h.
 *
 * Each call is two functions. The first is the healthy path: a settled
 * connection with nothing pending costs a few loads of its record around
 * the real call, and its frame keeps what ns_after_io would need in memory
 * (struct io_ctx) rather than in six saved registers. The second, out of
 * line, is everything a flag asks for before the call (ns_io_pre: rate's
 * token for a request, deadlines, injected faults, a request to a forward
 * proxy) and after it (io_post: a turn of the exchange, the outcome). A governed connection was made
 * through the bound table, so the real functions are called as ns_real.fn
 * with no check. */
#include "datapath.h"

#include <errno.h>
#include <fcntl.h>

#include "afterio.h"
#include "dataio.h"
#include "exchange.h"
#include "fault.h"
#include "h2conn.h"
#include "proxy.h"
#include "real.h"
#include "reqs.h"
#include "shape.h"
#include "timeo.h"
#include "tlspair.h"
#include "wait.h"

/**** the healthy path (input; dataout.c has the output's) ****/

static __attribute__((noinline)) ssize_t after_io_ctx(struct ns_conn *c, ssize_t r, const struct io_ctx *x)
{
	return ns_after_io(x->fd, c, NS_IN, r, x->len, x->flags, x->gen);
}

/* Bytes read on a settled connection whose outcome is known, with nothing
 * to notice, return as they are; anything else is ns_after_io's. */
static inline __attribute__((always_inline)) ssize_t io_end(struct ns_conn *c, ssize_t r, const struct io_ctx *x)
{
	if (likely(r > 0 && LD(c->outcome) && !(LD(c->flags) & NS_C_POST)))
		return r;
	return after_io_ctx(c, r, x);
}

/**** the flagged path ****/

/* A vector call's turn: each buffer in order, as far as r bytes went. */
static __attribute__((noinline, cold)) void turn_iov(struct ns_conn *c, int d, const struct iovec *iov, size_t cnt,
						     size_t r)
{
	for (size_t i = 0; i < cnt && r > 0; i++) {
		size_t k = iov[i].iov_len < r ? iov[i].iov_len : r;

		if (k)
			ns_exchange_turn(c, d, iov[i].iov_base, k);
		r -= k;
	}
}

#define TLS_TAIL 16
/* The last 16 bytes a send carries (a vector's last piece, if it holds
 * them all), or NULL: what tells a memory-BIO session's ciphertext (tls.c) */
static const void *send_tail(const struct io_req *q)
{
	if (!q->iov)
		return q->buf && q->len >= TLS_TAIL ? (const char *)q->buf + q->len - TLS_TAIL : NULL;
	for (size_t i = q->iovcnt; i-- > 0;)
		if (q->iov[i].iov_len)
			return q->iov[i].iov_len >= TLS_TAIL
				? (const char *)q->iov[i].iov_base + q->iov[i].iov_len - TLS_TAIL
				: NULL;
	return NULL;
}

/* After the real call (or an injected result r): a turn of the exchange
 * (the send that starts one, the reads of an answer whose status is not
 * known yet) is looked at, a TLS socket noted (tls.c), then the outcome. */
ssize_t ns_turn_io(struct ns_conn *c, const struct io_req *q, ssize_t r)
{
	int e = errno;
	uint32_t f;
	const unsigned char *b = q->buf;

	if (__atomic_load_n(&c->gen, __ATOMIC_ACQUIRE) != q->gen || r <= 0 || (q->flags & MSG_PEEK))
		return ns_after_io(q->fd, c, q->d, r, q->len, q->flags, q->gen);
	f = LD(c->flags);
	if (q->d == NS_OUT && !(f & (NS_C_HTTP | NS_C_NOTHTTP | NS_C_TLSWIRE)) && b && r >= 2 && b[0] == 0x16 &&
	    b[1] == 0x03) {
		/* a TLS ClientHello: the handshake is the connection's first
		 * outcome, and what follows is read at the record level (tls.c) */
		__atomic_fetch_or(&c->flags, NS_C_TLSWIRE | NS_C_NOTHTTP, __ATOMIC_RELAXED);
		f = LD(c->flags);
	}
	if (f & NS_C_TLSWIRE) {
		ns_tls_note_fd(q->fd, q->d == NS_OUT && (size_t)r == q->len ? send_tail(q) : NULL);
		f = LD(c->flags);   /* a memory-BIO session may have just taken this socket (tls.c) */
	}
	/* a TLS connection's turns are its plaintext's (tls.c), once the
	 * handshake had its outcome */
	if (!((f & NS_C_TLS) || (q->d == NS_OUT && (f & NS_C_TLSWIRE) && (f & NS_C_HSDONE)))) {
		if (unlikely(q->iov != NULL))
			turn_iov(c, q->d, q->iov, q->iovcnt, (size_t)r);
		else
			ns_exchange_turn(c, q->d, q->buf,
					 q->d == NS_OUT               ? (size_t)r
						 : (size_t)r < q->len ? (size_t)r
								      : q->len);
	}
	errno = e;
	return ns_after_io(q->fd, c, q->d, r, q->len, q->flags, q->gen);
}

/* A write that may be HTTP/2's in clear text (an h2 connection's, or a
 * connection's first bytes, which may begin with its preface): h2conn.c
 * opens the streams it carries before it goes, and paces them under rate;
 * any other write takes rate's token as a request does. 0 go, or -1 with
 * errno (EAGAIN). */
static __attribute__((noinline)) int h2_write(struct ns_conn *c, struct io_req *q)
{
	int nb = (LD(c->flags) & NS_C_NONBLOCK) || (q->flags & MSG_DONTWAIT);
	int r = ns_h2c_before_write(q->fd, c, q->iov ? NULL : q->buf, q->iov, q->iovcnt, &q->len, nb, 0);

	if (r != NS_H2C_NOT)
		return r;
	if (unlikely(ns_shape_wants_token(c, LD(c->flags), 0)))
		return ns_shape_request(q->fd, c, nb);
	return 0;
}

/* A send under max_requests (reqs.c): the request it starts has its place
 * first. A TLS request waiting for its place (asked at the library's write
 * of its plaintext, which then goes on) asks again when its record is
 * written, and goes only with one: inside the record call (that write may
 * come after the tick that held it, the thread descheduled between the
 * two: 3 in flight under max_requests = 2 beside a busy machine) or after
 * it, when the program sends a memory-BIO session's records itself
 * (asyncio: aiohttp had 37 in flight under 3). A memory-BIO session's
 * first record pairs it with its socket here, and its request asks then
 * (tlspair.c; without max_requests it pairs after the send, ns_turn_io).
 * 0 go, or -1 with errno (held, refused). */
static inline int req_place(struct ns_conn *c, struct io_req *q)
{
	uint32_t f = LD(c->flags);
	int nonblock = (f & NS_C_NONBLOCK) || (q->flags & MSG_DONTWAIT);

	if ((f & (NS_C_TLSWIRE | NS_C_TLS)) == NS_C_TLSWIRE && ns_tls_pair_send(q->fd, send_tail(q), nonblock) < 0)
		return -1;
	f = LD(c->flags); /* (a pair just made: NS_C_TLS) */
	if (ns_req_starts(c, f, 0, q->buf, q->iov && q->iovcnt ? q->iov[0].iov_len : q->len) ||
	    ((f & NS_C_TLS) && LD(c->rq_qword)))
		return ns_req_start(q->fd, c, nonblock);
	return 0;
}

/* Before the call, everything a flag asks for (dataio.h). */
int ns_io_pre(struct ns_conn *c, struct io_req *q)
{
	int k;

	/* a connect still held back by the shim: its turn is looked at here
	 * too (a program may learn the result by sending) */
	if (unlikely(LD(c->expired) & NS_ATTN_FAULT) && (LD(c->flags) & NS_C_CONNECTING))
		ns_wait_settle_connect(q->fd, c, !(LD(c->flags) & NS_C_NONBLOCK) && !(q->flags & MSG_DONTWAIT));
	/* a new request on a connection that had its answer, while the
	 * destination cools down (Retry-After): held until then */
	if (q->d == NS_OUT && (LD(c->flags) & (NS_C_XNEXT | NS_C_ANSWERED)) == (NS_C_XNEXT | NS_C_ANSWERED) &&
	    unlikely(ns_shape_cooling(c)) &&
	    ns_shape_cooldown(q->fd, c, (LD(c->flags) & NS_C_NONBLOCK) || (q->flags & MSG_DONTWAIT)) < 0) {
		q->r = -1;
		return IO_DONE;
	}
	/* a request held for rate's token (the wait is not the deadlines': they
	 * are looked at after it); HTTP/2's streams in clear text (h2_write) */
	if (q->d == NS_OUT) {
		/* ...after a place under max_requests (req_place) */
		if (unlikely(__atomic_load_n(&ns_req_any, __ATOMIC_RELAXED)) && req_place(c, q) < 0) {
			q->r = -1;
			return IO_DONE;
		}
		uint32_t f = LD(c->flags);

		/* (an h2c connection's, or one whose protocol is not known yet:
		 * neither HTTP bit, or H2READ, in one compare) */
		uint32_t m = f & (NS_C_H2READ | NS_C_HTTP | NS_C_NOTHTTP);

		if (unlikely(m - 1 >= NS_C_H2READ - 1) ? h2_write(c, q) < 0
						       : unlikely(ns_shape_wants_token(c, f, 0)) &&
				    ns_shape_request(q->fd, c, (f & NS_C_NONBLOCK) || (q->flags & MSG_DONTWAIT)) < 0) {
			q->r = -1;
			return IO_DONE;
		}
	}
	k = ns_deadline_check(q->fd, c, q->d);

	if (k < 0) {
		q->r = -1;
		return IO_DONE;
	}
	if (k > 0)
		return IO_RAW;
	/* inject --existing: a new runtime fault may be this open connection's
	 * (looked for at each request it starts, and when flagged) */
	if (q->d == NS_OUT && (LD(c->flags) & NS_C_XNEXT) && ns_fault_possible())
		ns_fault_rt_poll();
	if (unlikely(LD(c->flags) & NS_C_RTCHECK))
		ns_fault_existing(q->fd, c);
	if (LD(c->expired) & NS_ATTN_FAULT) {
		size_t allow;
		ssize_t r = ns_fault_pre(q->fd, c, q->d, q->flags, q->buf, q->len, &allow);

		if (r != NS_FAULT_GO && !ns_conn_still(q->fd, c))
			return IO_RAW;
		if (r != NS_FAULT_GO) {
			/* counted as if the kernel had said it */
			q->turn = (LD(c->flags) & NS_C_TURN) != 0;
			q->r = q->turn ? ns_turn_io(c, q, r) : ns_after_io(q->fd, c, q->d, r, q->len, q->flags, q->gen);
			return IO_DONE;
		}
		if (q->cap && allow < q->len)
			q->len = allow;
	}
	if (LD(c->flags) & NS_C_TURN) {
		q->turn = 1;
		if (q->d == NS_OUT && (LD(c->flags) & (NS_C_XNEXT | NS_C_NOTHTTP | NS_C_TLS)) == NS_C_XNEXT &&
		    ns_exchange_proxied(c, q->buf, q->iov && q->iovcnt ? q->iov[0].iov_len : q->len) < 0) {
			q->r = -1;   /* a proxied target whose breaker is open */
			return IO_DONE;
		}
	}
	/* a request about to start on a connection that answered before:
	 * refused at its start while the breaker is open or the throttle
	 * refuses, as a connect is (its first request rides on the connect's
	 * admission). HTTP/1 in clear text here (TLS plaintext: tls.c pace; HTTP/2: h2conn.c). After
	 * a proxied request's retarget above, which admits its target itself:
	 * c->slot is then that target's. */
	if (q->d == NS_OUT &&
	    (LD(c->flags) & (NS_C_XNEXT | NS_C_H2 | NS_C_TLS | NS_C_ANSWERED)) ==
		    (NS_C_XNEXT | NS_C_HTTP | NS_C_ANSWERED) &&
	    ns_shape_request_admit(c) < 0) {
		ns_req_done(c); /* (refused before a byte left: its place back) */
		q->r = -1;
		return IO_DONE;
	}
	if (q->d == NS_OUT && unlikely((LD(c->flags) & NS_C_GIVENUP) ||
				       (LD(c->flags) & (NS_C_PLACE | NS_C_XNEXT)) == (NS_C_PLACE | NS_C_XNEXT))) {
		/* a request on an idle connection that holds a place: either
		 * it goes out, or the place was given up first (shape.c) */
		if (ns_shape_outgoing(c) < 0) {
			q->r = -1;
			return IO_DONE;
		}
		q->outgoing = 1;
	}
	return IO_CALL;
}

/**** input ****/

static __attribute__((noinline, cold)) ssize_t recv_flagged(int fd, void *buf, size_t n, int flags, struct ns_conn *c)
{
	struct io_req q;

	io_req_init(&q, c, fd, NS_IN, flags, buf, n, 1);
	switch (ns_io_pre(c, &q)) {
	case IO_DONE:
		return q.r;
	case IO_RAW:
		return ns_real.recv(fd, buf, n, flags);
	}
	return io_post(c, &q, ns_real.recv(fd, buf, q.len, flags));
}

ssize_t ns_recv(int fd, void *buf, size_t n, int flags, struct ns_conn *c)
{
	struct io_ctx x;

	if (io_flagged(c, NS_IN))
		return recv_flagged(fd, buf, n, flags, c);
	io_begin(&x, c, fd, flags, n);
	return io_end(c, ns_real.recv(fd, buf, n, flags), &x);
}

static __attribute__((noinline, cold)) ssize_t recvfrom_flagged(int fd, void *buf, size_t n, int flags,
								 struct sockaddr *sa, socklen_t *len, struct ns_conn *c)
{
	struct io_req q;

	io_req_init(&q, c, fd, NS_IN, flags, buf, n, 1);
	switch (ns_io_pre(c, &q)) {
	case IO_DONE:
		return q.r;
	case IO_RAW:
		return ns_real.recvfrom(fd, buf, n, flags, sa, len);
	}
	return io_post(c, &q, ns_real.recvfrom(fd, buf, q.len, flags, sa, len));
}

ssize_t ns_recvfrom(int fd, void *buf, size_t n, int flags, struct sockaddr *sa, socklen_t *len, struct ns_conn *c)
{
	struct io_ctx x;

	if (io_flagged(c, NS_IN))
		return recvfrom_flagged(fd, buf, n, flags, sa, len, c);
	io_begin(&x, c, fd, flags, n);
	return io_end(c, ns_real.recvfrom(fd, buf, n, flags, sa, len), &x);
}

static __attribute__((noinline, cold)) ssize_t recvmsg_flagged(int fd, struct msghdr *msg, int flags, struct ns_conn *c)
{
	struct io_req q;

	io_req_init(&q, c, fd, NS_IN, flags, msg ? first_buf(msg->msg_iov, msg->msg_iovlen) : NULL,
		    msg ? first_len(msg->msg_iov, msg->msg_iovlen) : 0, 0);
	q.iov = msg ? msg->msg_iov : NULL;
	q.iovcnt = msg ? msg->msg_iovlen : 0;
	switch (ns_io_pre(c, &q)) {
	case IO_DONE:
		return q.r;
	case IO_RAW:
		return ns_real.recvmsg(fd, msg, flags);
	}
	return io_post(c, &q, ns_real.recvmsg(fd, msg, flags));
}

ssize_t ns_recvmsg(int fd, struct msghdr *msg, int flags, struct ns_conn *c)
{
	struct io_ctx x;

	if (io_flagged(c, NS_IN))
		return recvmsg_flagged(fd, msg, flags, c);
	io_begin(&x, c, fd, flags, msg && msg->msg_iovlen ? msg->msg_iov[0].iov_len : 0);
	return io_end(c, ns_real.recvmsg(fd, msg, flags), &x);
}

static __attribute__((noinline, cold)) ssize_t read_flagged(int fd, void *buf, size_t n, struct ns_conn *c)
{
	struct io_req q;

	io_req_init(&q, c, fd, NS_IN, 0, buf, n, 1);
	switch (ns_io_pre(c, &q)) {
	case IO_DONE:
		return q.r;
	case IO_RAW:
		return ns_real.read(fd, buf, n);
	}
	return io_post(c, &q, ns_real.read(fd, buf, q.len));
}

ssize_t ns_read(int fd, void *buf, size_t n, struct ns_conn *c)
{
	struct io_ctx x;

	if (io_flagged(c, NS_IN))
		return read_flagged(fd, buf, n, c);
	io_begin(&x, c, fd, 0, n);
	return io_end(c, ns_real.read(fd, buf, n), &x);
}

static __attribute__((noinline, cold)) ssize_t readv_flagged(int fd, const struct iovec *iov, int cnt, struct ns_conn *c)
{
	struct io_req q;
	size_t k = cnt > 0 ? (size_t)cnt : 0;

	io_req_init(&q, c, fd, NS_IN, 0, first_buf(iov, k), first_len(iov, k), 0);
	q.iov = iov;
	q.iovcnt = k;
	switch (ns_io_pre(c, &q)) {
	case IO_DONE:
		return q.r;
	case IO_RAW:
		return ns_real.readv(fd, iov, cnt);
	}
	return io_post(c, &q, ns_real.readv(fd, iov, cnt));
}

ssize_t ns_readv(int fd, const struct iovec *iov, int cnt, struct ns_conn *c)
{
	struct io_ctx x;

	if (io_flagged(c, NS_IN))
		return readv_flagged(fd, iov, cnt, c);
	io_begin(&x, c, fd, 0, iov && cnt > 0 ? iov[0].iov_len : 0);
	return io_end(c, ns_real.readv(fd, iov, cnt), &x);
}

/* The fortified forms (_FORTIFY_SOURCE): the same, buflen passed on. */
static __attribute__((noinline, cold)) ssize_t recv_chk_flagged(int fd, void *buf, size_t n, size_t buflen, int flags,
								 struct ns_conn *c)
{
	struct io_req q;

	io_req_init(&q, c, fd, NS_IN, flags, buf, n, 1);
	switch (ns_io_pre(c, &q)) {
	case IO_DONE:
		return q.r;
	case IO_RAW:
		return ns_real.recv_chk(fd, buf, n, buflen, flags);
	}
	return io_post(c, &q, ns_real.recv_chk(fd, buf, q.len, buflen, flags));
}

ssize_t ns_recv_chk(int fd, void *buf, size_t n, size_t buflen, int flags, struct ns_conn *c)
{
	struct io_ctx x;

	if (io_flagged(c, NS_IN))
		return recv_chk_flagged(fd, buf, n, buflen, flags, c);
	io_begin(&x, c, fd, flags, n);
	return io_end(c, ns_real.recv_chk(fd, buf, n, buflen, flags), &x);
}

static __attribute__((noinline, cold)) ssize_t recvfrom_chk_flagged(int fd, void *buf, size_t n, size_t buflen,
								     int flags, struct sockaddr *sa, socklen_t *len,
								     struct ns_conn *c)
{
	struct io_req q;

	io_req_init(&q, c, fd, NS_IN, flags, buf, n, 1);
	switch (ns_io_pre(c, &q)) {
	case IO_DONE:
		return q.r;
	case IO_RAW:
		return ns_real.recvfrom_chk(fd, buf, n, buflen, flags, sa, len);
	}
	return io_post(c, &q, ns_real.recvfrom_chk(fd, buf, q.len, buflen, flags, sa, len));
}

ssize_t ns_recvfrom_chk(int fd, void *buf, size_t n, size_t buflen, int flags, struct sockaddr *sa, socklen_t *len,
			struct ns_conn *c)
{
	struct io_ctx x;

	if (io_flagged(c, NS_IN))
		return recvfrom_chk_flagged(fd, buf, n, buflen, flags, sa, len, c);
	io_begin(&x, c, fd, flags, n);
	return io_end(c, ns_real.recvfrom_chk(fd, buf, n, buflen, flags, sa, len), &x);
}

static __attribute__((noinline, cold)) ssize_t read_chk_flagged(int fd, void *buf, size_t n, size_t buflen,
								 struct ns_conn *c)
{
	struct io_req q;

	io_req_init(&q, c, fd, NS_IN, 0, buf, n, 1);
	switch (ns_io_pre(c, &q)) {
	case IO_DONE:
		return q.r;
	case IO_RAW:
		return ns_real.read_chk(fd, buf, n, buflen);
	}
	return io_post(c, &q, ns_real.read_chk(fd, buf, q.len, buflen));
}

ssize_t ns_read_chk(int fd, void *buf, size_t n, size_t buflen, struct ns_conn *c)
{
	struct io_ctx x;

	if (io_flagged(c, NS_IN))
		return read_chk_flagged(fd, buf, n, buflen, c);
	io_begin(&x, c, fd, 0, n);
	return io_end(c, ns_real.read_chk(fd, buf, n, buflen), &x);
}

/* The batch calls count messages, not bytes, under the same rules (a
 * positive count is data moved). recvmmsg's own timeout is checked by the
 * kernel only between messages, so the read deadline is what bounds it. */
static __attribute__((noinline, cold)) int recvmmsg_flagged(int fd, struct mmsghdr *v, unsigned n, int flags,
							     struct timespec *ts, struct ns_conn *c)
{
	struct io_req q;

	io_req_init(&q, c, fd, NS_IN, flags, NULL, n, 0);
	switch (ns_io_pre(c, &q)) {
	case IO_DONE:
		return (int)q.r;
	case IO_RAW:
		return ns_real.recvmmsg(fd, v, n, flags, ts);
	}
	return (int)io_post(c, &q, ns_real.recvmmsg(fd, v, n, flags, ts));
}

int ns_recvmmsg(int fd, struct mmsghdr *v, unsigned n, int flags, struct timespec *ts, struct ns_conn *c)
{
	struct io_ctx x;

	if (io_flagged(c, NS_IN))
		return recvmmsg_flagged(fd, v, n, flags, ts, c);
	io_begin(&x, c, fd, flags, n);
	return (int)io_end(c, ns_real.recvmmsg(fd, v, n, flags, ts), &x);
}

/* datapath.c -- the data calls on a governed connection (the wrappers have
 * already sent every other descriptor straight to libc).
 *
 * Each call is two functions. The first is the healthy path: a settled
 * connection with nothing pending costs a few loads of its record around
 * the real call, and its frame keeps what ns_after_io would need in memory
 * (struct io_ctx) rather than in six saved registers. The second, out of
 * line, is everything a flag asks for before the call (io_pre: rate's
 * token for a request, deadlines, injected faults, a request to a forward
 * proxy) and after it (io_post: a
 * turn of the exchange, the outcome). A governed connection was made
 * through the bound table, so the real functions are called as ns_real.fn
 * with no check. */
#include "datapath.h"

#include <errno.h>
#include <fcntl.h>

#include "afterio.h"
#include "exchange.h"
#include "fault.h"
#include "h2conn.h"
#include "proxy.h"
#include "real.h"
#include "shape.h"
#include "timeo.h"
#include "tls.h"
#include "wait.h"

/**** the healthy path ****/

/* What ns_after_io needs after the call. len: the bytes asked for input
 * (0 for output, which never needs it on this path). */
struct io_ctx {
	int fd;
	int d;
	int flags;
	uint32_t gen;
	size_t len;
};

static __attribute__((noinline)) ssize_t after_io_ctx(struct ns_conn *c, ssize_t r, const struct io_ctx *x)
{
	return ns_after_io(x->fd, c, x->d, r, x->len, x->flags, x->gen);
}

/* Does anything need doing before a call in direction d? */
static inline __attribute__((always_inline)) int io_flagged(const struct ns_conn *c, int d)
{
	return unlikely(LD(c->flags) & NS_C_PRE_DIR(d));
}

static inline __attribute__((always_inline)) void io_begin(struct io_ctx *x, const struct ns_conn *c, int fd, int d,
							   int flags, size_t len)
{
	x->fd = fd;
	x->d = d;
	x->flags = flags;
	x->gen = __atomic_load_n(&c->gen, __ATOMIC_RELAXED);
	x->len = len;
}

/* Bytes moved on a settled connection with nothing to notice return as
 * they are; anything else is ns_after_io's. */
static inline __attribute__((always_inline)) ssize_t io_end(struct ns_conn *c, ssize_t r, const struct io_ctx *x)
{
	if (likely(r > 0 && (x->d == NS_OUT || LD(c->outcome)) && !(LD(c->flags) & NS_C_POST)))
		return r;
	return after_io_ctx(c, r, x);
}

/**** the flagged path ****/

/* A flagged call: its buffer and length (the first buffer of a vector, or
 * NULL when the call has none to look at), which an injected fault may cap
 * (cap: the call has a plain buffer of len bytes) or answer into. */
struct io_req {
	int fd;
	int d;
	int flags;
	int cap;
	int turn;               /* a turn of the exchange (NS_C_TURN when checked) */
	int outgoing;           /* NS_C_OUTGOING set: cleared after the call */
	uint32_t gen;
	void *buf;
	size_t len;
	const struct iovec *iov; /* a vector call's buffers (buf is its first), or NULL */
	size_t iovcnt;
	ssize_t r;              /* IO_DONE: the call's result */
};

enum { IO_CALL, IO_RAW, IO_DONE };

static inline __attribute__((always_inline)) void io_req_init(struct io_req *q, const struct ns_conn *c, int fd,
							      int d, int flags, const void *buf, size_t len, int cap)
{
	q->fd = fd;
	q->d = d;
	q->flags = flags;
	q->cap = cap;
	q->turn = 0;
	q->outgoing = 0;
	q->gen = __atomic_load_n(&c->gen, __ATOMIC_RELAXED);
	q->buf = (void *)buf;
	q->len = len;
	q->iov = NULL;
	q->iovcnt = 0;
	q->r = 0;
}

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

/* After the real call (or an injected result r): a turn of the exchange
 * (the send that starts one, the reads of an answer whose status is not
 * known yet) is looked at, a TLS socket noted (tls.c), then the outcome. */
static ssize_t turn_io(struct ns_conn *c, const struct io_req *q, ssize_t r)
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
		ns_tls_note_fd(q->fd, q->d, r);
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

/* Before the call, everything a flag asks for. IO_CALL: make it (with at
 * most q->len bytes where q->cap); IO_RAW: fd is no longer c's socket (a
 * close the shim did not see), the call is the kernel's alone; IO_DONE:
 * q->r is the call's result, errno set. */
static int io_pre(struct ns_conn *c, struct io_req *q)
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
			q->r = q->turn ? turn_io(c, q, r) : ns_after_io(q->fd, c, q->d, r, q->len, q->flags, q->gen);
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

/* the send that may start a request went to the kernel: its place may be
 * given up again (shape.c) */
static __attribute__((noinline, cold)) void outgoing_done(struct ns_conn *c)
{
	__atomic_fetch_and(&c->flags, ~NS_C_OUTGOING, __ATOMIC_RELEASE);
}

static ssize_t io_post(struct ns_conn *c, const struct io_req *q, ssize_t r)
{
	if (unlikely(q->outgoing))
		outgoing_done(c);   /* (an atomic and: errno untouched) */
	if (q->turn)
		return turn_io(c, q, r);
	if (likely(r > 0 && (q->d == NS_OUT || LD(c->outcome)) && !(LD(c->flags) & NS_C_POST)))
		return r;
	return ns_after_io(q->fd, c, q->d, r, q->len, q->flags, q->gen);
}

/* The first buffer of a vector, when it holds the 8 bytes an HTTP method
 * needs to be told (exchange.c looks at no more). */
static const void *first8(const struct iovec *iov, size_t cnt)
{
	return iov && cnt > 0 && iov[0].iov_len >= 8 ? iov[0].iov_base : NULL;
}

static size_t iov_len(const struct iovec *iov, size_t cnt)
{
	size_t n = 0;

	for (size_t i = 0; iov && i < cnt; i++)
		n += iov[i].iov_len;
	return n;
}

/* The first buffer of a vector read into, and its length. */
static void *first_buf(const struct iovec *iov, size_t cnt)
{
	return iov && cnt > 0 ? iov[0].iov_base : NULL;
}

static size_t first_len(const struct iovec *iov, size_t cnt)
{
	return iov && cnt > 0 ? iov[0].iov_len : 0;
}

/* A vector cut to its first n bytes (an h2 write cut before its second new
 * stream: h2conn.c): the buffers in tmp, how many; or -1 when n is all of it. */
static int iov_cut(const struct iovec *iov, size_t cnt, size_t n, size_t total, struct iovec *tmp)
{
	size_t k = 0;

	if (n >= total)
		return -1;
	for (; k < cnt && k < NS_H2C_IOV_CUT && n > 0; k++) {
		tmp[k] = iov[k];
		if (tmp[k].iov_len > n)
			tmp[k].iov_len = n;
		n -= tmp[k].iov_len;
	}
	return (int)k;
}

/**** input ****/

static __attribute__((noinline, cold)) ssize_t recv_flagged(int fd, void *buf, size_t n, int flags, struct ns_conn *c)
{
	struct io_req q;

	io_req_init(&q, c, fd, NS_IN, flags, buf, n, 1);
	switch (io_pre(c, &q)) {
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
	io_begin(&x, c, fd, NS_IN, flags, n);
	return io_end(c, ns_real.recv(fd, buf, n, flags), &x);
}

static __attribute__((noinline, cold)) ssize_t recvfrom_flagged(int fd, void *buf, size_t n, int flags,
								 struct sockaddr *sa, socklen_t *len, struct ns_conn *c)
{
	struct io_req q;

	io_req_init(&q, c, fd, NS_IN, flags, buf, n, 1);
	switch (io_pre(c, &q)) {
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
	io_begin(&x, c, fd, NS_IN, flags, n);
	return io_end(c, ns_real.recvfrom(fd, buf, n, flags, sa, len), &x);
}

static __attribute__((noinline, cold)) ssize_t recvmsg_flagged(int fd, struct msghdr *msg, int flags, struct ns_conn *c)
{
	struct io_req q;

	io_req_init(&q, c, fd, NS_IN, flags, msg ? first_buf(msg->msg_iov, msg->msg_iovlen) : NULL,
		    msg ? first_len(msg->msg_iov, msg->msg_iovlen) : 0, 0);
	q.iov = msg ? msg->msg_iov : NULL;
	q.iovcnt = msg ? msg->msg_iovlen : 0;
	switch (io_pre(c, &q)) {
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
	io_begin(&x, c, fd, NS_IN, flags, msg && msg->msg_iovlen ? msg->msg_iov[0].iov_len : 0);
	return io_end(c, ns_real.recvmsg(fd, msg, flags), &x);
}

static __attribute__((noinline, cold)) ssize_t read_flagged(int fd, void *buf, size_t n, struct ns_conn *c)
{
	struct io_req q;

	io_req_init(&q, c, fd, NS_IN, 0, buf, n, 1);
	switch (io_pre(c, &q)) {
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
	io_begin(&x, c, fd, NS_IN, 0, n);
	return io_end(c, ns_real.read(fd, buf, n), &x);
}

static __attribute__((noinline, cold)) ssize_t readv_flagged(int fd, const struct iovec *iov, int cnt, struct ns_conn *c)
{
	struct io_req q;
	size_t k = cnt > 0 ? (size_t)cnt : 0;

	io_req_init(&q, c, fd, NS_IN, 0, first_buf(iov, k), first_len(iov, k), 0);
	q.iov = iov;
	q.iovcnt = k;
	switch (io_pre(c, &q)) {
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
	io_begin(&x, c, fd, NS_IN, 0, iov && cnt > 0 ? iov[0].iov_len : 0);
	return io_end(c, ns_real.readv(fd, iov, cnt), &x);
}

/* The fortified forms (_FORTIFY_SOURCE): the same, buflen passed on. */
static __attribute__((noinline, cold)) ssize_t recv_chk_flagged(int fd, void *buf, size_t n, size_t buflen, int flags,
								 struct ns_conn *c)
{
	struct io_req q;

	io_req_init(&q, c, fd, NS_IN, flags, buf, n, 1);
	switch (io_pre(c, &q)) {
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
	io_begin(&x, c, fd, NS_IN, flags, n);
	return io_end(c, ns_real.recv_chk(fd, buf, n, buflen, flags), &x);
}

static __attribute__((noinline, cold)) ssize_t recvfrom_chk_flagged(int fd, void *buf, size_t n, size_t buflen,
								     int flags, struct sockaddr *sa, socklen_t *len,
								     struct ns_conn *c)
{
	struct io_req q;

	io_req_init(&q, c, fd, NS_IN, flags, buf, n, 1);
	switch (io_pre(c, &q)) {
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
	io_begin(&x, c, fd, NS_IN, flags, n);
	return io_end(c, ns_real.recvfrom_chk(fd, buf, n, buflen, flags, sa, len), &x);
}

static __attribute__((noinline, cold)) ssize_t read_chk_flagged(int fd, void *buf, size_t n, size_t buflen,
								 struct ns_conn *c)
{
	struct io_req q;

	io_req_init(&q, c, fd, NS_IN, 0, buf, n, 1);
	switch (io_pre(c, &q)) {
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
	io_begin(&x, c, fd, NS_IN, 0, n);
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
	switch (io_pre(c, &q)) {
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
	io_begin(&x, c, fd, NS_IN, flags, n);
	return (int)io_end(c, ns_real.recvmmsg(fd, v, n, flags, ts), &x);
}

/**** output ****/

static __attribute__((noinline, cold)) ssize_t send_flagged(int fd, const void *buf, size_t n, int flags,
							     struct ns_conn *c)
{
	struct io_req q;

	io_req_init(&q, c, fd, NS_OUT, flags, buf, n, 0);
	switch (io_pre(c, &q)) {
	case IO_DONE:
		return q.r;
	case IO_RAW:
		return ns_real.send(fd, buf, n, flags);
	}
	return io_post(c, &q, ns_real.send(fd, buf, q.len, flags));
}

ssize_t ns_send(int fd, const void *buf, size_t n, int flags, struct ns_conn *c)
{
	struct io_ctx x;

	if (io_flagged(c, NS_OUT))
		return send_flagged(fd, buf, n, flags, c);
	io_begin(&x, c, fd, NS_OUT, flags, 0);
	return io_end(c, ns_real.send(fd, buf, n, flags), &x);
}

static __attribute__((noinline, cold)) ssize_t sendto_flagged(int fd, const void *buf, size_t n, int flags,
							       const struct sockaddr *sa, socklen_t len, struct ns_conn *c)
{
	struct io_req q;

	io_req_init(&q, c, fd, NS_OUT, flags, buf, n, 0);
	switch (io_pre(c, &q)) {
	case IO_DONE:
		return q.r;
	case IO_RAW:
		return ns_real.sendto(fd, buf, n, flags, sa, len);
	}
	return io_post(c, &q, ns_real.sendto(fd, buf, q.len, flags, sa, len));
}

ssize_t ns_sendto(int fd, const void *buf, size_t n, int flags, const struct sockaddr *sa, socklen_t len,
		  struct ns_conn *c)
{
	struct io_ctx x;

	if (io_flagged(c, NS_OUT))
		return sendto_flagged(fd, buf, n, flags, sa, len, c);
	io_begin(&x, c, fd, NS_OUT, flags, 0);
	return io_end(c, ns_real.sendto(fd, buf, n, flags, sa, len), &x);
}

static __attribute__((noinline, cold)) ssize_t sendmsg_flagged(int fd, const struct msghdr *msg, int flags,
								struct ns_conn *c)
{
	struct io_req q;
	struct iovec tmp[NS_H2C_IOV_CUT];
	size_t total;
	int m;

	io_req_init(&q, c, fd, NS_OUT, flags, msg ? first8(msg->msg_iov, msg->msg_iovlen) : NULL,
		    msg ? iov_len(msg->msg_iov, msg->msg_iovlen) : 0, 0);
	total = q.len;
	q.iov = msg ? msg->msg_iov : NULL;
	q.iovcnt = msg ? msg->msg_iovlen : 0;
	switch (io_pre(c, &q)) {
	case IO_DONE:
		return q.r;
	case IO_RAW:
		return ns_real.sendmsg(fd, msg, flags);
	}
	if (unlikely(q.len < total) && (m = iov_cut(q.iov, q.iovcnt, q.len, total, tmp)) >= 0) {
		struct msghdr cut = *msg;

		cut.msg_iov = tmp;
		cut.msg_iovlen = (size_t)m;
		q.iov = tmp;
		q.iovcnt = (size_t)m;
		return io_post(c, &q, ns_real.sendmsg(fd, &cut, flags));
	}
	return io_post(c, &q, ns_real.sendmsg(fd, msg, flags));
}

ssize_t ns_sendmsg(int fd, const struct msghdr *msg, int flags, struct ns_conn *c)
{
	struct io_ctx x;

	if (io_flagged(c, NS_OUT))
		return sendmsg_flagged(fd, msg, flags, c);
	io_begin(&x, c, fd, NS_OUT, flags, 0);
	return io_end(c, ns_real.sendmsg(fd, msg, flags), &x);
}

static __attribute__((noinline, cold)) ssize_t write_flagged(int fd, const void *buf, size_t n, struct ns_conn *c)
{
	struct io_req q;

	io_req_init(&q, c, fd, NS_OUT, 0, buf, n, 0);
	switch (io_pre(c, &q)) {
	case IO_DONE:
		return q.r;
	case IO_RAW:
		return ns_real.write(fd, buf, n);
	}
	return io_post(c, &q, ns_real.write(fd, buf, q.len));
}

ssize_t ns_write(int fd, const void *buf, size_t n, struct ns_conn *c)
{
	struct io_ctx x;

	if (io_flagged(c, NS_OUT))
		return write_flagged(fd, buf, n, c);
	io_begin(&x, c, fd, NS_OUT, 0, 0);
	return io_end(c, ns_real.write(fd, buf, n), &x);
}

static __attribute__((noinline, cold)) ssize_t writev_flagged(int fd, const struct iovec *iov, int cnt,
							       struct ns_conn *c)
{
	struct io_req q;
	size_t k = cnt > 0 ? (size_t)cnt : 0;

	size_t total;
	struct iovec tmp[NS_H2C_IOV_CUT];
	int m;

	io_req_init(&q, c, fd, NS_OUT, 0, first8(iov, k), iov_len(iov, k), 0);
	total = q.len;
	q.iov = iov;
	q.iovcnt = k;
	switch (io_pre(c, &q)) {
	case IO_DONE:
		return q.r;
	case IO_RAW:
		return ns_real.writev(fd, iov, cnt);
	}
	if (unlikely(q.len < total) && (m = iov_cut(iov, k, q.len, total, tmp)) >= 0) {
		q.iov = tmp;
		q.iovcnt = (size_t)m;
		return io_post(c, &q, ns_real.writev(fd, tmp, m));
	}
	return io_post(c, &q, ns_real.writev(fd, iov, cnt));
}

ssize_t ns_writev(int fd, const struct iovec *iov, int cnt, struct ns_conn *c)
{
	struct io_ctx x;

	if (io_flagged(c, NS_OUT))
		return writev_flagged(fd, iov, cnt, c);
	io_begin(&x, c, fd, NS_OUT, 0, 0);
	return io_end(c, ns_real.writev(fd, iov, cnt), &x);
}

static __attribute__((noinline, cold)) int sendmmsg_flagged(int fd, struct mmsghdr *v, unsigned n, int flags,
							     struct ns_conn *c)
{
	struct io_req q;

	io_req_init(&q, c, fd, NS_OUT, flags, NULL, n, 0);
	switch (io_pre(c, &q)) {
	case IO_DONE:
		return (int)q.r;
	case IO_RAW:
		return ns_real.sendmmsg(fd, v, n, flags);
	}
	return (int)io_post(c, &q, ns_real.sendmmsg(fd, v, n, flags));
}

int ns_sendmmsg(int fd, struct mmsghdr *v, unsigned n, int flags, struct ns_conn *c)
{
	struct io_ctx x;

	if (io_flagged(c, NS_OUT))
		return sendmmsg_flagged(fd, v, n, flags, c);
	io_begin(&x, c, fd, NS_OUT, flags, 0);
	return (int)io_end(c, ns_real.sendmmsg(fd, v, n, flags), &x);
}

static __attribute__((noinline, cold)) ssize_t sendfile_flagged(int out, int in, off_t *off, size_t n,
								 struct ns_conn *c)
{
	struct io_req q;

	io_req_init(&q, c, out, NS_OUT, 0, NULL, n, 0);
	switch (io_pre(c, &q)) {
	case IO_DONE:
		return q.r;
	case IO_RAW:
		return ns_real.sendfile(out, in, off, n);
	}
	return io_post(c, &q, ns_real.sendfile(out, in, off, n));
}

ssize_t ns_sendfile(int out, int in, off_t *off, size_t n, struct ns_conn *c)
{
	struct io_ctx x;

	if (io_flagged(c, NS_OUT))
		return sendfile_flagged(out, in, off, n, c);
	io_begin(&x, c, out, NS_OUT, 0, 0);
	return io_end(c, ns_real.sendfile(out, in, off, n), &x);
}

/**** splice ****/

/* splice moves data between a pipe and a socket; the socket side decides
 * the direction. SPLICE_F_NONBLOCK is the call's MSG_DONTWAIT. Rare enough
 * to take the flagged path's shape always. */
static ssize_t splice_on(struct ns_conn *c, int d, int in, loff_t *offin, int out, loff_t *offout, size_t n,
			 unsigned flags)
{
	struct io_req q;

	io_req_init(&q, c, d == NS_IN ? in : out, d, (flags & SPLICE_F_NONBLOCK) ? MSG_DONTWAIT : 0, NULL, n, 0);
	if (io_flagged(c, d)) {
		switch (io_pre(c, &q)) {
		case IO_DONE:
			return q.r;
		case IO_RAW:
			return REAL(splice)(in, offin, out, offout, n, flags);
		}
	}
	return io_post(c, &q, REAL(splice)(in, offin, out, offout, n, flags));
}

ssize_t ns_splice(int in, loff_t *offin, int out, loff_t *offout, size_t n, unsigned flags)
{
	struct ns_conn *c = ns_conn_of(in);

	if (c)
		return splice_on(c, NS_IN, in, offin, out, offout, n, flags);
	c = ns_conn_of(out);
	if (c)
		return splice_on(c, NS_OUT, in, offin, out, offout, n, flags);
	return REAL(splice)(in, offin, out, offout, n, flags);
}

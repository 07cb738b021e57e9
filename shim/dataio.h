/* dataio.h -- what datapath.c (the input calls) and dataout.c (the
 * output calls) share: the healthy path's frame, and the flagged path's
 * request with its steps before and after the real call. */
#ifndef NS_DATAIO_H
#define NS_DATAIO_H

#include <errno.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "afterio.h"
#include "conn.h"
#include "h2conn.h"

/**** the healthy path ****/

/* What ns_after_io needs after the call, kept in the frame rather than in
 * saved registers (volatile: left to itself the compiler keeps each in a
 * register saved across the call, a push and a pop each, and a healthy
 * send costs 35 instructions instead of 30). len: the bytes asked for
 * (input). */
struct io_ctx {
	volatile int fd;
	volatile int flags;
	volatile uint32_t gen;
	size_t len;
};

/* Does anything need doing before a call in direction d? */
static inline __attribute__((always_inline)) int io_flagged(const struct ns_conn *c, int d)
{
	return unlikely(LD(c->flags) & NS_C_PRE_DIR(d));
}

static inline __attribute__((always_inline)) void io_begin(struct io_ctx *x, const struct ns_conn *c, int fd, int flags,
							   size_t len)
{
	x->fd = fd;
	x->flags = flags;
	x->gen = __atomic_load_n(&c->gen, __ATOMIC_RELAXED);
	x->len = len;
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
	int turn;     /* a turn of the exchange (NS_C_TURN when checked) */
	int outgoing; /* NS_C_OUTGOING set: cleared after the call */
	uint32_t gen;
	void *buf;
	size_t len;
	const struct iovec *iov; /* a vector call's buffers (buf is its first), or NULL */
	size_t iovcnt;
	ssize_t r; /* IO_DONE: the call's result */
};

enum { IO_CALL, IO_RAW, IO_DONE };

static inline __attribute__((always_inline)) void io_req_init(struct io_req *q, const struct ns_conn *c, int fd, int d,
							      int flags, const void *buf, size_t len, int cap)
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

/* Before the call, everything a flag asks for (datapath.c). IO_CALL: make
 * it (with at most q->len bytes where q->cap); IO_RAW: fd is no longer c's
 * socket (a close the shim did not see), the call is the kernel's alone;
 * IO_DONE: q->r is the call's result, errno set. */
NS_HIDDEN int ns_io_pre(struct ns_conn *c, struct io_req *q);
/* After the real call (or an injected result r): the exchange's turn, a
 * TLS socket noted, then the outcome. */
NS_HIDDEN ssize_t ns_turn_io(struct ns_conn *c, const struct io_req *q, ssize_t r);

/* the send that may start a request went to the kernel: its place may be
 * given up again (shape.c) */
static __attribute__((noinline, cold, unused)) void outgoing_done(struct ns_conn *c)
{
	__atomic_fetch_and(&c->flags, ~NS_C_OUTGOING, __ATOMIC_RELEASE);
}

static inline ssize_t io_post(struct ns_conn *c, const struct io_req *q, ssize_t r)
{
	if (unlikely(q->outgoing))
		outgoing_done(c); /* (an atomic and: errno untouched) */
	if (q->turn)
		return ns_turn_io(c, q, r);
	if (likely(r > 0 && (q->d == NS_OUT || LD(c->outcome)) && !(LD(c->flags) & NS_C_POST)))
		return r;
	return ns_after_io(q->fd, c, q->d, r, q->len, q->flags, q->gen);
}

/* The first buffer of a vector, when it holds the 8 bytes an HTTP method
 * needs to be told (exchange.c looks at no more). */
static inline const void *first8(const struct iovec *iov, size_t cnt)
{
	return iov && cnt > 0 && iov[0].iov_len >= 8 ? iov[0].iov_base : NULL;
}

static inline size_t iov_len(const struct iovec *iov, size_t cnt)
{
	size_t n = 0;

	for (size_t i = 0; iov && i < cnt; i++)
		n += iov[i].iov_len;
	return n;
}

/* The first buffer of a vector read into, and its length. */
static inline void *first_buf(const struct iovec *iov, size_t cnt)
{
	return iov && cnt > 0 ? iov[0].iov_base : NULL;
}

static inline size_t first_len(const struct iovec *iov, size_t cnt)
{
	return iov && cnt > 0 ? iov[0].iov_len : 0;
}

/* A vector cut to its first n bytes (an h2 write cut before its second new
 * stream: h2conn.c): the buffers in tmp, how many; or -1 when n is all of it. */
static inline int iov_cut(const struct iovec *iov, size_t cnt, size_t n, size_t total, struct iovec *tmp)
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

#endif

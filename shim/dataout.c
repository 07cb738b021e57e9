/* dataout.c -- the output calls on a governed connection: the healthy
 * path and the flagged path of each, as datapath.c has them for input.
 *
 * One thing is output's own. After a blocking connect the kernel may still
 * hold the connect's limit in SO_SNDTIMEO (connect.c leaves it there), so
 * a blocking send that moves nothing for that long comes back short:
 * EAGAIN, or fewer bytes than asked. The healthy path tells that from a
 * whole send by the count it already looks at (all the bytes asked,
 * rather than any), and such a call goes on with its rest (sendrest.c). */
#include "datapath.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/sendfile.h>

#include "dataio.h"
#include "real.h"
#include "sendrest.h"

/**** the rest of a call the kernel cut short (sendrest.c) ****/

/* Through the data path again (its turn of the exchange, faults and
 * pacing as for any call), joined to the r it moved: what the program's
 * one call returns. use_write: write/writev rather than send/sendmsg. */

/* r moved before the cut, then the rest's result: a call that moved
 * bytes reports them, as the kernel does when a later part fails. */
static ssize_t joined(ssize_t r, ssize_t more, int e)
{
	ssize_t done = r > 0 ? r : 0;

	if (more >= 0)
		return done + more;
	if (done)
		errno = e;
	return done ? done : -1;
}

static ssize_t send_again(int fd, const void *buf, size_t n, int flags, int use_write)
{
	struct ns_conn *c = ns_conn_of(fd);

	if (use_write)
		return c ? ns_write(fd, buf, n, c) : REAL(write)(fd, buf, n);
	return c ? ns_send(fd, buf, n, flags, c) : REAL(send)(fd, buf, n, flags);
}

static ssize_t send_rest(int fd, const void *buf, size_t n, int flags, ssize_t r, int use_write)
{
	size_t done = r > 0 ? (size_t)r : 0;
	int e = errno;

	return joined(r, send_again(fd, (const char *)buf + done, n - done, flags, use_write), e);
}

static ssize_t sendmsg_again(int fd, const struct msghdr *msg, int flags, int use_write)
{
	struct ns_conn *c = ns_conn_of(fd);

	if (use_write)
		return c ? ns_writev(fd, msg->msg_iov, (int)msg->msg_iovlen, c)
			 : REAL(writev)(fd, msg->msg_iov, (int)msg->msg_iovlen);
	return c ? ns_sendmsg(fd, msg, flags, c) : REAL(sendmsg)(fd, msg, flags);
}

/* A vector call: nothing moved, the whole again; else the rest of the
 * buffer it stopped in, then the buffers after it (its name and control
 * data went with the first bytes). */
static ssize_t sendmsg_rest(int fd, const struct msghdr *msg, int flags, ssize_t r, int use_write)
{
	struct msghdr rest = { 0 };
	size_t done = r > 0 ? (size_t)r : 0, i = 0;
	ssize_t k, more;
	int e = errno;

	if (!done)
		return joined(r, sendmsg_again(fd, msg, flags, use_write), e);
	while (i < msg->msg_iovlen && done >= msg->msg_iov[i].iov_len)
		done -= msg->msg_iov[i++].iov_len;
	if (i == msg->msg_iovlen)
		return r;
	k = send_again(fd, (const char *)msg->msg_iov[i].iov_base + done, msg->msg_iov[i].iov_len - done, flags,
		       use_write);
	if (k < 0 || (size_t)k < msg->msg_iov[i].iov_len - done || i + 1 == msg->msg_iovlen)
		return joined(r, k, e);
	rest.msg_iov = msg->msg_iov + i + 1;
	rest.msg_iovlen = msg->msg_iovlen - i - 1;
	more = sendmsg_again(fd, &rest, flags, use_write);
	return joined(r + k, more, e);
}

static int sendmmsg_rest(int fd, struct mmsghdr *v, unsigned n, int flags, int r)
{
	struct ns_conn *c = ns_conn_of(fd);
	unsigned done = r > 0 ? (unsigned)r : 0;
	int e = errno;

	return (int)joined(
		r, c ? ns_sendmmsg(fd, v + done, n - done, flags, c) : REAL(sendmmsg)(fd, v + done, n - done, flags),
		e);
}

/* sendfile and splice: the kernel moved the offsets (or the file's
 * position) past what they sent. */
static ssize_t sendfile_rest(int out, int in, off_t *off, size_t n, ssize_t r)
{
	struct ns_conn *c = ns_conn_of(out);
	size_t done = r > 0 ? (size_t)r : 0;
	int e = errno;

	return joined(r, c ? ns_sendfile(out, in, off, n - done, c) : REAL(sendfile)(out, in, off, n - done), e);
}

static ssize_t splice_rest(int in, loff_t *offin, int out, loff_t *offout, size_t n, unsigned flags, ssize_t r)
{
	size_t done = r > 0 ? (size_t)r : 0;
	int e = errno;

	return joined(r, ns_splice(in, offin, out, offout, n - done, flags), e);
}

/**** the healthy path ****/

enum { BY_SEND, BY_WRITE };

static __attribute__((noinline)) ssize_t after_out(struct ns_conn *c, ssize_t r, const struct io_ctx *x, int by)
{
	if (unlikely(ns_out_cut(x->fd, c, r, x->len, x->flags, 0))) {
		if (r > 0)
			ns_after_io(x->fd, c, NS_OUT, r, 0, x->flags, x->gen);
		return send_rest(x->fd, x->buf, x->len, x->flags, r, by == BY_WRITE);
	}
	return ns_after_io(x->fd, c, NS_OUT, r, 0, x->flags, x->gen);
}

/* All the bytes asked moved on a connection with nothing to notice: they
 * return as they are; anything else is after_out's. */
static inline __attribute__((always_inline)) ssize_t io_end_out(struct ns_conn *c, ssize_t r, const struct io_ctx *x,
								int by)
{
	/* len compared where io_begin put it, in the frame: kept in a
	 * register across the call instead, it costs a push and a pop, and
	 * read back into one, a load (x86-64: one cmp with memory) */
#if defined(__x86_64__)
	__asm__ goto("cmpq %1, %0\n\tjne %l[slow]" : : "r"(r), "m"(x->len) : "cc" : slow);
#else
	if ((size_t)r != *(const volatile size_t *)&x->len)
		goto slow;
#endif
	if (likely(!(LD(c->flags) & NS_C_POST)))
		return r;
slow:
	return after_out(c, r, x, by);
}

static inline __attribute__((always_inline)) void io_begin_out(struct io_ctx *x, const struct ns_conn *c, int fd,
							       int flags, const void *buf, size_t len)
{
	io_begin(x, c, fd, flags, len);
	x->buf = buf;
}

/* A vector call: the healthy path takes any count unless the kernel may
 * hold the connect's limit; then its total is added up here. */
static inline __attribute__((always_inline)) int vec_settled(const struct ns_conn *c, ssize_t r)
{
	return likely(r > 0 && !(LD(c->flags) & NS_C_POST) && LD(c->dir[NS_OUT].src) != NS_SRC_SHIM_CONNECT);
}

static __attribute__((noinline)) ssize_t after_vec(struct ns_conn *c, ssize_t r, const struct io_ctx *x,
						   const struct msghdr *msg, int by)
{
	if (unlikely(ns_out_cut(x->fd, c, r, iov_len(msg->msg_iov, msg->msg_iovlen), x->flags, x->t0))) {
		if (r > 0)
			ns_after_io(x->fd, c, NS_OUT, r, 0, x->flags, x->gen);
		return sendmsg_rest(x->fd, msg, x->flags, r, by == BY_WRITE);
	}
	if (r > 0 && !(LD(c->flags) & NS_C_POST))
		return r;
	return ns_after_io(x->fd, c, NS_OUT, r, 0, x->flags, x->gen);
}

/* The flagged path's end: the call counted (its moved part), then the rest
 * of one the kernel cut short. */
#define OUT_POST(c, q, r, n, rest) \
	(unlikely(ns_out_cut((q)->fd, c, r, n, (q)->flags, t0)) ? (io_post(c, q, r), (rest)) : io_post(c, q, r))

/**** the calls ****/

static __attribute__((noinline, cold)) ssize_t send_flagged(int fd, const void *buf, size_t n, int flags,
							    struct ns_conn *c)
{
	struct io_req q;
	monotime t0;
	ssize_t r;

	io_req_init(&q, c, fd, NS_OUT, flags, buf, n, 0);
	switch (ns_io_pre(c, &q)) {
	case IO_DONE:
		return q.r;
	case IO_RAW:
		return ns_real.send(fd, buf, n, flags);
	}
	t0 = ns_out_t0(c);
	r = ns_real.send(fd, buf, q.len, flags);
	return OUT_POST(c, &q, r, q.len, send_rest(fd, buf, q.len, flags, r, 0));
}

ssize_t ns_send(int fd, const void *buf, size_t n, int flags, struct ns_conn *c)
{
	struct io_ctx x;

	if (io_flagged(c, NS_OUT) || unlikely(n >= NS_OUT_TIMED))
		return send_flagged(fd, buf, n, flags, c);
	io_begin_out(&x, c, fd, flags, buf, n);
	return io_end_out(c, ns_real.send(fd, buf, n, flags), &x, BY_SEND);
}

/* (the rest of a cut sendto goes by send: a connected stream socket's
 * address is not looked at) */
static __attribute__((noinline, cold)) ssize_t sendto_flagged(int fd, const void *buf, size_t n, int flags,
							      const struct sockaddr *sa, socklen_t len,
							      struct ns_conn *c)
{
	struct io_req q;
	monotime t0;
	ssize_t r;

	io_req_init(&q, c, fd, NS_OUT, flags, buf, n, 0);
	switch (ns_io_pre(c, &q)) {
	case IO_DONE:
		return q.r;
	case IO_RAW:
		return ns_real.sendto(fd, buf, n, flags, sa, len);
	}
	t0 = ns_out_t0(c);
	r = ns_real.sendto(fd, buf, q.len, flags, sa, len);
	return OUT_POST(c, &q, r, q.len, send_rest(fd, buf, q.len, flags, r, 0));
}

ssize_t ns_sendto(int fd, const void *buf, size_t n, int flags, const struct sockaddr *sa, socklen_t len,
		  struct ns_conn *c)
{
	struct io_ctx x;

	if (io_flagged(c, NS_OUT) || unlikely(n >= NS_OUT_TIMED))
		return sendto_flagged(fd, buf, n, flags, sa, len, c);
	io_begin_out(&x, c, fd, flags, buf, n);
	return io_end_out(c, ns_real.sendto(fd, buf, n, flags, sa, len), &x, BY_SEND);
}

static __attribute__((noinline, cold)) ssize_t sendmsg_flagged(int fd, const struct msghdr *msg, int flags,
							       struct ns_conn *c)
{
	struct io_req q;
	monotime t0;
	struct iovec tmp[NS_H2C_IOV_CUT];
	struct msghdr cut;
	const struct msghdr *m = msg;
	size_t total;
	ssize_t r;
	int k;

	io_req_init(&q, c, fd, NS_OUT, flags, msg ? first8(msg->msg_iov, msg->msg_iovlen) : NULL,
		    msg ? iov_len(msg->msg_iov, msg->msg_iovlen) : 0, 0);
	total = q.len;
	q.iov = msg ? msg->msg_iov : NULL;
	q.iovcnt = msg ? msg->msg_iovlen : 0;
	switch (ns_io_pre(c, &q)) {
	case IO_DONE:
		return q.r;
	case IO_RAW:
		return ns_real.sendmsg(fd, msg, flags);
	}
	if (unlikely(q.len < total) && (k = iov_cut(q.iov, q.iovcnt, q.len, total, tmp)) >= 0) {
		cut = *msg;
		cut.msg_iov = tmp;
		cut.msg_iovlen = (size_t)k;
		q.iov = tmp;
		q.iovcnt = (size_t)k;
		m = &cut;
	}
	t0 = ns_out_t0(c);
	r = ns_real.sendmsg(fd, m, flags);
	return OUT_POST(c, &q, r, q.len, sendmsg_rest(fd, m, flags, r, 0));
}

ssize_t ns_sendmsg(int fd, const struct msghdr *msg, int flags, struct ns_conn *c)
{
	struct io_ctx x;
	ssize_t r;

	if (io_flagged(c, NS_OUT))
		return sendmsg_flagged(fd, msg, flags, c);
	io_begin_out(&x, c, fd, flags, msg, 0);
	x.t0 = ns_out_t0(c);
	r = ns_real.sendmsg(fd, msg, flags);
	if (vec_settled(c, r))
		return r;
	return msg ? after_vec(c, r, &x, msg, BY_SEND) : ns_after_io(fd, c, NS_OUT, r, 0, flags, x.gen);
}

static __attribute__((noinline, cold)) ssize_t write_flagged(int fd, const void *buf, size_t n, struct ns_conn *c)
{
	struct io_req q;
	monotime t0;
	ssize_t r;

	io_req_init(&q, c, fd, NS_OUT, 0, buf, n, 0);
	switch (ns_io_pre(c, &q)) {
	case IO_DONE:
		return q.r;
	case IO_RAW:
		return ns_real.write(fd, buf, n);
	}
	t0 = ns_out_t0(c);
	r = ns_real.write(fd, buf, q.len);
	return OUT_POST(c, &q, r, q.len, send_rest(fd, buf, q.len, 0, r, 1));
}

ssize_t ns_write(int fd, const void *buf, size_t n, struct ns_conn *c)
{
	struct io_ctx x;

	if (io_flagged(c, NS_OUT) || unlikely(n >= NS_OUT_TIMED))
		return write_flagged(fd, buf, n, c);
	io_begin_out(&x, c, fd, 0, buf, n);
	return io_end_out(c, ns_real.write(fd, buf, n), &x, BY_WRITE);
}

static __attribute__((noinline, cold)) ssize_t writev_flagged(int fd, const struct iovec *iov, int cnt,
							      struct ns_conn *c)
{
	struct io_req q;
	monotime t0;
	size_t k = cnt > 0 ? (size_t)cnt : 0;
	size_t total;
	struct iovec tmp[NS_H2C_IOV_CUT];
	struct msghdr m = { 0 };
	ssize_t r;
	int t;

	io_req_init(&q, c, fd, NS_OUT, 0, first8(iov, k), iov_len(iov, k), 0);
	total = q.len;
	q.iov = iov;
	q.iovcnt = k;
	switch (ns_io_pre(c, &q)) {
	case IO_DONE:
		return q.r;
	case IO_RAW:
		return ns_real.writev(fd, iov, cnt);
	}
	m.msg_iov = (struct iovec *)iov;
	m.msg_iovlen = k;
	if (unlikely(q.len < total) && (t = iov_cut(iov, k, q.len, total, tmp)) >= 0) {
		q.iov = tmp;
		q.iovcnt = (size_t)t;
		m.msg_iov = tmp;
		m.msg_iovlen = (size_t)t;
	}
	t0 = ns_out_t0(c);
	r = ns_real.writev(fd, m.msg_iov, (int)m.msg_iovlen);
	return OUT_POST(c, &q, r, q.len, sendmsg_rest(fd, &m, 0, r, 1));
}

ssize_t ns_writev(int fd, const struct iovec *iov, int cnt, struct ns_conn *c)
{
	struct io_ctx x;
	struct msghdr m = { 0 };
	ssize_t r;

	if (io_flagged(c, NS_OUT))
		return writev_flagged(fd, iov, cnt, c);
	io_begin_out(&x, c, fd, 0, iov, 0);
	x.t0 = ns_out_t0(c);
	r = ns_real.writev(fd, iov, cnt);
	if (vec_settled(c, r))
		return r;
	m.msg_iov = (struct iovec *)iov;
	m.msg_iovlen = cnt > 0 ? (size_t)cnt : 0;
	return after_vec(c, r, &x, &m, BY_WRITE);
}

static __attribute__((noinline, cold)) int sendmmsg_flagged(int fd, struct mmsghdr *v, unsigned n, int flags,
							    struct ns_conn *c)
{
	struct io_req q;
	monotime t0;
	int r;

	io_req_init(&q, c, fd, NS_OUT, flags, NULL, n, 0);
	switch (ns_io_pre(c, &q)) {
	case IO_DONE:
		return (int)q.r;
	case IO_RAW:
		return ns_real.sendmmsg(fd, v, n, flags);
	}
	t0 = ns_out_t0(c);
	r = ns_real.sendmmsg(fd, v, n, flags);
	return (int)OUT_POST(c, &q, r, n, sendmmsg_rest(fd, v, n, flags, r));
}

/* (counted in messages: one the kernel cut inside goes on from the next) */
int ns_sendmmsg(int fd, struct mmsghdr *v, unsigned n, int flags, struct ns_conn *c)
{
	struct io_ctx x;
	monotime t0;
	int r;

	if (io_flagged(c, NS_OUT))
		return sendmmsg_flagged(fd, v, n, flags, c);
	io_begin_out(&x, c, fd, flags, v, n);
	t0 = ns_out_t0(c);
	r = ns_real.sendmmsg(fd, v, n, flags);
	if (likely((unsigned)r == n && !(LD(c->flags) & NS_C_POST)))
		return r;
	if (unlikely(ns_out_cut(fd, c, r, n, flags, t0))) {
		if (r > 0)
			ns_after_io(fd, c, NS_OUT, r, 0, flags, x.gen);
		return sendmmsg_rest(fd, v, n, flags, r);
	}
	return (int)ns_after_io(fd, c, NS_OUT, r, 0, flags, x.gen);
}

static __attribute__((noinline, cold)) ssize_t sendfile_flagged(int out, int in, off_t *off, size_t n,
								struct ns_conn *c)
{
	struct io_req q;
	monotime t0;
	ssize_t r;

	io_req_init(&q, c, out, NS_OUT, 0, NULL, n, 0);
	switch (ns_io_pre(c, &q)) {
	case IO_DONE:
		return q.r;
	case IO_RAW:
		return ns_real.sendfile(out, in, off, n);
	}
	t0 = ns_out_t0(c);
	r = ns_real.sendfile(out, in, off, n);
	return OUT_POST(c, &q, r, n, sendfile_rest(out, in, off, n, r));
}

ssize_t ns_sendfile(int out, int in, off_t *off, size_t n, struct ns_conn *c)
{
	struct io_ctx x;
	monotime t0;
	ssize_t r;

	if (io_flagged(c, NS_OUT))
		return sendfile_flagged(out, in, off, n, c);
	io_begin_out(&x, c, out, 0, NULL, n);
	t0 = ns_out_t0(c);
	r = ns_real.sendfile(out, in, off, n);
	if (likely((size_t)r == n && !(LD(c->flags) & NS_C_POST)))
		return r;
	if (unlikely(ns_out_cut(out, c, r, n, 0, t0))) {
		if (r > 0)
			ns_after_io(out, c, NS_OUT, r, 0, 0, x.gen);
		return sendfile_rest(out, in, off, n, r);
	}
	return ns_after_io(out, c, NS_OUT, r, 0, 0, x.gen);
}

/**** splice ****/

/* splice moves data between a pipe and a socket; the socket side decides
 * the direction. SPLICE_F_NONBLOCK is the call's MSG_DONTWAIT. Rare enough
 * to take the flagged path's shape always. */
static ssize_t splice_on(struct ns_conn *c, int d, int in, loff_t *offin, int out, loff_t *offout, size_t n,
			 unsigned flags)
{
	struct io_req q;
	monotime t0;
	ssize_t r;

	io_req_init(&q, c, d == NS_IN ? in : out, d, (flags & SPLICE_F_NONBLOCK) ? MSG_DONTWAIT : 0, NULL, n, 0);
	if (io_flagged(c, d)) {
		switch (ns_io_pre(c, &q)) {
		case IO_DONE:
			return q.r;
		case IO_RAW:
			return REAL(splice)(in, offin, out, offout, n, flags);
		}
	}
	t0 = ns_out_t0(c);
	r = REAL(splice)(in, offin, out, offout, n, flags);
	if (d == NS_OUT)
		return OUT_POST(c, &q, r, n, splice_rest(in, offin, out, offout, n, flags, r));
	return io_post(c, &q, r);
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

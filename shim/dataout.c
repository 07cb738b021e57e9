/* dataout.c -- the output calls on a governed connection: the healthy
 * path and the flagged path of each, as datapath.c has them for input. */
#include "datapath.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/sendfile.h>

#include "dataio.h"
#include "real.h"

/**** the healthy path ****/

/* Bytes moved on a connection with nothing to notice return as they are;
 * anything else (an error, nothing moved, a flag set since) is
 * ns_after_io's. */
static inline __attribute__((always_inline)) ssize_t io_end_out(struct ns_conn *c, ssize_t r, const struct io_ctx *x)
{
	if (likely(r > 0 && !(LD(c->flags) & NS_C_POST)))
		return r;
	return ns_after_io(x->fd, c, NS_OUT, r, 0, x->flags, x->gen);
}

/**** the calls ****/

static __attribute__((noinline, cold)) ssize_t send_flagged(int fd, const void *buf, size_t n, int flags,
							    struct ns_conn *c)
{
	struct io_req q;
	ssize_t r;

	io_req_init(&q, c, fd, NS_OUT, flags, buf, n, 0);
	switch (ns_io_pre(c, &q)) {
	case IO_DONE:
		return q.r;
	case IO_RAW:
		return ns_real.send(fd, buf, n, flags);
	}
	r = ns_real.send(fd, buf, q.len, flags);
	return io_post(c, &q, r);
}

ssize_t ns_send(int fd, const void *buf, size_t n, int flags, struct ns_conn *c)
{
	struct io_ctx x;

	if (io_flagged(c, NS_OUT))
		return send_flagged(fd, buf, n, flags, c);
	io_begin(&x, c, fd, flags, 0);
	return io_end_out(c, ns_real.send(fd, buf, n, flags), &x);
}

static __attribute__((noinline, cold)) ssize_t sendto_flagged(int fd, const void *buf, size_t n, int flags,
							      const struct sockaddr *sa, socklen_t len,
							      struct ns_conn *c)
{
	struct io_req q;
	ssize_t r;

	io_req_init(&q, c, fd, NS_OUT, flags, buf, n, 0);
	switch (ns_io_pre(c, &q)) {
	case IO_DONE:
		return q.r;
	case IO_RAW:
		return ns_real.sendto(fd, buf, n, flags, sa, len);
	}
	r = ns_real.sendto(fd, buf, q.len, flags, sa, len);
	return io_post(c, &q, r);
}

ssize_t ns_sendto(int fd, const void *buf, size_t n, int flags, const struct sockaddr *sa, socklen_t len,
		  struct ns_conn *c)
{
	struct io_ctx x;

	if (io_flagged(c, NS_OUT))
		return sendto_flagged(fd, buf, n, flags, sa, len, c);
	io_begin(&x, c, fd, flags, 0);
	return io_end_out(c, ns_real.sendto(fd, buf, n, flags, sa, len), &x);
}

static __attribute__((noinline, cold)) ssize_t sendmsg_flagged(int fd, const struct msghdr *msg, int flags,
							       struct ns_conn *c)
{
	struct io_req q;
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
	r = ns_real.sendmsg(fd, m, flags);
	return io_post(c, &q, r);
}

ssize_t ns_sendmsg(int fd, const struct msghdr *msg, int flags, struct ns_conn *c)
{
	struct io_ctx x;

	if (io_flagged(c, NS_OUT))
		return sendmsg_flagged(fd, msg, flags, c);
	io_begin(&x, c, fd, flags, 0);
	return io_end_out(c, ns_real.sendmsg(fd, msg, flags), &x);
}

static __attribute__((noinline, cold)) ssize_t write_flagged(int fd, const void *buf, size_t n, struct ns_conn *c)
{
	struct io_req q;
	ssize_t r;

	io_req_init(&q, c, fd, NS_OUT, 0, buf, n, 0);
	switch (ns_io_pre(c, &q)) {
	case IO_DONE:
		return q.r;
	case IO_RAW:
		return ns_real.write(fd, buf, n);
	}
	r = ns_real.write(fd, buf, q.len);
	return io_post(c, &q, r);
}

ssize_t ns_write(int fd, const void *buf, size_t n, struct ns_conn *c)
{
	struct io_ctx x;

	if (io_flagged(c, NS_OUT))
		return write_flagged(fd, buf, n, c);
	io_begin(&x, c, fd, 0, 0);
	return io_end_out(c, ns_real.write(fd, buf, n), &x);
}

static __attribute__((noinline, cold)) ssize_t writev_flagged(int fd, const struct iovec *iov, int cnt,
							      struct ns_conn *c)
{
	struct io_req q;
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
	r = ns_real.writev(fd, m.msg_iov, (int)m.msg_iovlen);
	return io_post(c, &q, r);
}

ssize_t ns_writev(int fd, const struct iovec *iov, int cnt, struct ns_conn *c)
{
	struct io_ctx x;

	if (io_flagged(c, NS_OUT))
		return writev_flagged(fd, iov, cnt, c);
	io_begin(&x, c, fd, 0, 0);
	return io_end_out(c, ns_real.writev(fd, iov, cnt), &x);
}

static __attribute__((noinline, cold)) int sendmmsg_flagged(int fd, struct mmsghdr *v, unsigned n, int flags,
							    struct ns_conn *c)
{
	struct io_req q;
	int r;

	io_req_init(&q, c, fd, NS_OUT, flags, NULL, n, 0);
	switch (ns_io_pre(c, &q)) {
	case IO_DONE:
		return (int)q.r;
	case IO_RAW:
		return ns_real.sendmmsg(fd, v, n, flags);
	}
	r = ns_real.sendmmsg(fd, v, n, flags);
	return (int)io_post(c, &q, r);
}

int ns_sendmmsg(int fd, struct mmsghdr *v, unsigned n, int flags, struct ns_conn *c)
{
	struct io_ctx x;

	if (io_flagged(c, NS_OUT))
		return sendmmsg_flagged(fd, v, n, flags, c);
	io_begin(&x, c, fd, flags, 0);
	return (int)io_end_out(c, ns_real.sendmmsg(fd, v, n, flags), &x);
}

static __attribute__((noinline, cold)) ssize_t sendfile_flagged(int out, int in, off_t *off, size_t n,
								struct ns_conn *c)
{
	struct io_req q;
	ssize_t r;

	io_req_init(&q, c, out, NS_OUT, 0, NULL, n, 0);
	switch (ns_io_pre(c, &q)) {
	case IO_DONE:
		return q.r;
	case IO_RAW:
		return ns_real.sendfile(out, in, off, n);
	}
	r = ns_real.sendfile(out, in, off, n);
	return io_post(c, &q, r);
}

ssize_t ns_sendfile(int out, int in, off_t *off, size_t n, struct ns_conn *c)
{
	struct io_ctx x;

	if (io_flagged(c, NS_OUT))
		return sendfile_flagged(out, in, off, n, c);
	io_begin(&x, c, out, 0, 0);
	return io_end_out(c, ns_real.sendfile(out, in, off, n), &x);
}

/**** splice ****/

/* splice moves data between a pipe and a socket; the socket side decides
 * the direction. SPLICE_F_NONBLOCK is the call's MSG_DONTWAIT. Rare enough
 * to take the flagged path's shape always. */
static ssize_t splice_on(struct ns_conn *c, int d, int in, loff_t *offin, int out, loff_t *offout, size_t n,
			 unsigned flags)
{
	struct io_req q;
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
	r = REAL(splice)(in, offin, out, offout, n, flags);
	if (d == NS_OUT)
		return io_post(c, &q, r);
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

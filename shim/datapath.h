/* datapath.h -- the data calls on a governed connection (datapath.c),
 * and the one lookup every data wrapper makes first. */
#ifndef NS_DATAPATH_H
#define NS_DATAPATH_H

#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "conn.h"
#include "real.h"

/* The one lookup in every data wrapper: a descriptor the shim does not
 * govern goes straight to libc, with no other work and no stack frame. */
#define NS_PASS(fd, fn, args, worker) do { \
	struct ns_conn *c_ = ns_conn_of(fd); \
	if (likely(!c_)) \
		return REAL_CALL(fn, args); \
	return worker; \
} while (0)

NS_HIDDEN ssize_t ns_send(int fd, const void *buf, size_t n, int flags, struct ns_conn *c);
NS_HIDDEN ssize_t ns_sendto(int fd, const void *buf, size_t n, int flags, const struct sockaddr *sa, socklen_t len, struct ns_conn *c);
NS_HIDDEN ssize_t ns_sendmsg(int fd, const struct msghdr *msg, int flags, struct ns_conn *c);
NS_HIDDEN ssize_t ns_recv(int fd, void *buf, size_t n, int flags, struct ns_conn *c);
NS_HIDDEN ssize_t ns_recvfrom(int fd, void *buf, size_t n, int flags, struct sockaddr *sa, socklen_t *len, struct ns_conn *c);
NS_HIDDEN ssize_t ns_recvmsg(int fd, struct msghdr *msg, int flags, struct ns_conn *c);
NS_HIDDEN ssize_t ns_read(int fd, void *buf, size_t n, struct ns_conn *c);
NS_HIDDEN ssize_t ns_write(int fd, const void *buf, size_t n, struct ns_conn *c);
NS_HIDDEN ssize_t ns_readv(int fd, const struct iovec *iov, int cnt, struct ns_conn *c);
NS_HIDDEN ssize_t ns_writev(int fd, const struct iovec *iov, int cnt, struct ns_conn *c);
NS_HIDDEN ssize_t ns_recv_chk(int fd, void *buf, size_t n, size_t buflen, int flags, struct ns_conn *c);
NS_HIDDEN ssize_t ns_recvfrom_chk(int fd, void *buf, size_t n, size_t buflen, int flags, struct sockaddr *sa, socklen_t *len, struct ns_conn *c);
NS_HIDDEN ssize_t ns_read_chk(int fd, void *buf, size_t n, size_t buflen, struct ns_conn *c);
NS_HIDDEN int ns_recvmmsg(int fd, struct mmsghdr *v, unsigned n, int flags, struct timespec *ts, struct ns_conn *c);
NS_HIDDEN int ns_sendmmsg(int fd, struct mmsghdr *v, unsigned n, int flags, struct ns_conn *c);
NS_HIDDEN ssize_t ns_sendfile(int out, int in, off_t *off, size_t n, struct ns_conn *c);
NS_HIDDEN ssize_t ns_splice(int in, loff_t *offin, int out, loff_t *offout, size_t n, unsigned flags);

#endif

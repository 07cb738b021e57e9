/* real.c -- bind the real libc functions once, through pthread_once.
 *
 * Every wrapper and the constructor reach this table, so a call made from
 * another library's constructor, before ours ran, still finds its target. */

#include "real.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <netdb.h>
#include <sys/ioctl.h>
#include <sys/sendfile.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shim.h"

struct ns_real ns_real;

static pthread_once_t bind_once = PTHREAD_ONCE_INIT;

static void *must(const char *name, void *self)
{
	void *p = dlsym(RTLD_NEXT, name);

	/* dlsym handing back our own wrapper would loop forever on the first
	 * call: the one case where there is nothing sane to pass through to. */
	if (p && p == self) {
		static const char msg[] = "netshim: dlsym returned the wrapper itself for ";

		(void)!write(2, msg, sizeof(msg) - 1);
		(void)!write(2, name, strlen(name));
		(void)!write(2, "; aborting\n", 11);
		abort();
	}
	return p;
}

#define BIND(field, sym) ns_real.field = must(#sym, (void *)&sym)
#define BIND_NAMED(field, name, self) ns_real.field = must(name, (void *)self)

static void bind_all(void)
{
	BIND(socket, socket);
	BIND(connect, connect);
	BIND(send, send);
	BIND(sendto, sendto);
	BIND(sendmsg, sendmsg);
	BIND(recv, recv);
	BIND(recvfrom, recvfrom);
	BIND(recvmsg, recvmsg);
	BIND(read, read);
	BIND(write, write);
	BIND(readv, readv);
	BIND(writev, writev);
	BIND(close, close);
	BIND(dup, dup);
	BIND(dup2, dup2);
	BIND(dup3, dup3);
	BIND(fcntl, fcntl);
	BIND(fcntl64, fcntl64);
	BIND(ioctl, ioctl);
	BIND(setsockopt, setsockopt);
	BIND(getsockopt, getsockopt);
	BIND_NAMED(recv_chk, "__recv_chk", &__recv_chk);
	BIND_NAMED(recvfrom_chk, "__recvfrom_chk", &__recvfrom_chk);
	BIND_NAMED(read_chk, "__read_chk", &__read_chk);
	BIND(getaddrinfo, getaddrinfo);
	BIND(gethostbyname, gethostbyname);
	BIND(gethostbyname2, gethostbyname2);
	BIND(gethostbyname_r, gethostbyname_r);
	BIND(gethostbyname2_r, gethostbyname2_r);
	BIND(poll, poll);
	BIND(ppoll, ppoll);
	BIND_NAMED(poll_chk, "__poll_chk", &__poll_chk);
	BIND_NAMED(ppoll_chk, "__ppoll_chk", &__ppoll_chk);
	BIND(select, select);
	BIND(pselect, pselect);
	BIND(epoll_ctl, epoll_ctl);
	BIND(epoll_wait, epoll_wait);
	BIND(epoll_pwait, epoll_pwait);
	BIND(epoll_pwait2, epoll_pwait2);   /* glibc 2.35+; NULL where absent */
	BIND(close_range, close_range);     /* glibc 2.34+ */
	BIND(closefrom, closefrom);         /* glibc 2.34+ */
	BIND(fclose, fclose);
	BIND(accept, accept);
	BIND(accept4, accept4);
	BIND(recvmmsg, recvmmsg);
	BIND(sendmmsg, sendmmsg);
	BIND(sendfile, sendfile);
	BIND(splice, splice);
	if (!ns_real.fcntl64)
		ns_real.fcntl64 = ns_real.fcntl;
	ns_vfork_bind();   /* the exported vfork's target (fdtab.c), bound before any call */
	ns_fd_init();
}

void ns_real_bind(void)
{
	pthread_once(&bind_once, bind_all);
}

/* The shim's own file I/O (see nointercept.h). */
int ns_sys_close(int fd)
{
	return REAL(close)(fd);
}

ssize_t ns_sys_read(int fd, void *buf, size_t n)
{
	return REAL(read)(fd, buf, n);
}

/* See real.h: bind, then call. */
#define UNBOUND(ret, fn, params, args) \
	__attribute__((visibility("hidden"), cold, noinline)) ret ns_unbound_##fn params \
	{ \
		ns_real_bind(); \
		return ns_real.fn args; \
	}

UNBOUND(ssize_t, send, (int fd, const void *b, size_t n, int f), (fd, b, n, f))
UNBOUND(ssize_t, sendto, (int fd, const void *b, size_t n, int f, const struct sockaddr *sa, socklen_t l), (fd, b, n, f, sa, l))
UNBOUND(ssize_t, sendmsg, (int fd, const struct msghdr *m, int f), (fd, m, f))
UNBOUND(ssize_t, recv, (int fd, void *b, size_t n, int f), (fd, b, n, f))
UNBOUND(ssize_t, recvfrom, (int fd, void *b, size_t n, int f, struct sockaddr *sa, socklen_t *l), (fd, b, n, f, sa, l))
UNBOUND(ssize_t, recvmsg, (int fd, struct msghdr *m, int f), (fd, m, f))
UNBOUND(ssize_t, read, (int fd, void *b, size_t n), (fd, b, n))
UNBOUND(ssize_t, write, (int fd, const void *b, size_t n), (fd, b, n))
UNBOUND(ssize_t, readv, (int fd, const struct iovec *v, int c), (fd, v, c))
UNBOUND(ssize_t, writev, (int fd, const struct iovec *v, int c), (fd, v, c))
UNBOUND(ssize_t, recv_chk, (int fd, void *b, size_t n, size_t bl, int f), (fd, b, n, bl, f))
UNBOUND(ssize_t, recvfrom_chk, (int fd, void *b, size_t n, size_t bl, int f, struct sockaddr *sa, socklen_t *l), (fd, b, n, bl, f, sa, l))
UNBOUND(ssize_t, read_chk, (int fd, void *b, size_t n, size_t bl), (fd, b, n, bl))
UNBOUND(int, recvmmsg, (int fd, struct mmsghdr *v, unsigned n, int f, struct timespec *ts), (fd, v, n, f, ts))
UNBOUND(int, sendmmsg, (int fd, struct mmsghdr *v, unsigned n, int f), (fd, v, n, f))
UNBOUND(ssize_t, sendfile, (int out, int in, off_t *off, size_t n), (out, in, off, n))
UNBOUND(int, select, (int n, fd_set *r, fd_set *w, fd_set *e, struct timeval *tv), (n, r, w, e, tv))

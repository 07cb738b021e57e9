/* uring.c -- event loops that would register sockets through io_uring are
 * kept on epoll, where the shim sees their waits.
 *
 * libuv (node with UV_USE_IO_URING=1) batches its epoll_ctl calls through
 * an io_uring (IORING_OP_EPOLL_CTL): the shim's epoll_ctl never learns the
 * sockets are in the set, so no wait is cut at a deadline. The loop asks
 * for its ring through libc's syscall(); while the shim governs the
 * process, io_uring_setup made that way fails with ENOSYS, the answer of a
 * kernel without io_uring, and the loop falls back to plain epoll_ctl
 * before it starts (libuv does). NETSHIM_IO_URING=allow keeps io_uring
 * (and its escape). A ring made by raw system-call instructions (liburing
 * builds its own) is out of reach: its reads, writes and waits are never
 * seen.
 *
 * close and close_range made through syscall() (programs built against a
 * glibc without close_range() call it so) are the shim's close and
 * close_range, so the numbers they free carry no state. Every other
 * number goes to libc's syscall() untouched. */

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>

#include "shim.h"

static long (*real_syscall)(long, ...);
static pthread_once_t once = PTHREAD_ONCE_INIT;
static int allow;

static void bind_syscall(void)
{
	const char *v = getenv("NETSHIM_IO_URING");

	real_syscall = (long (*)(long, ...))dlsym(RTLD_NEXT, "syscall");
	allow = v && strcmp(v, "allow") == 0;
}

long ns_syscall(long n, long a, long b, long c, long d, long e, long f)
{
	if (n == SYS_close)
		return ns_close((int)a);
	if (n == SYS_close_range)
		return ns_close_range((unsigned)a, (unsigned)b, (int)c);
	pthread_once(&once, bind_syscall);
	if (n == SYS_io_uring_setup && !allow && ns_shim_active()) {
		static int told;

		if (!__atomic_exchange_n(&told, 1, __ATOMIC_RELAXED))
			NS_LOG(NS_LOG_INFO, "io_uring_setup refused (ENOSYS) so that the event loop uses epoll, "
			       "where deadlines apply; NETSHIM_IO_URING=allow keeps io_uring");
		errno = ENOSYS;
		return -1;
	}
	if (!real_syscall) {
		errno = ENOSYS;
		return -1;
	}
	return real_syscall(n, a, b, c, d, e, f);
}

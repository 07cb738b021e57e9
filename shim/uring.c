/* uring.c -- event loops that would register sockets through io_uring are
 * kept on epoll, where the shim sees their waits.
 *
 * libuv (node with UV_USE_IO_URING=1) batches its epoll_ctl calls through
 * an io_uring (IORING_OP_EPOLL_CTL): the shim's epoll_ctl never learns the
 * sockets are in the set, so no wait is cut at a deadline. The loop asks
 * for its ring through libc's syscall(), after it made its epoll instance;
 * while the shim governs the process, io_uring_setup made that way by a
 * process that has an epoll instance fails with ENOSYS, the answer of a
 * kernel without io_uring, and the loop falls back to plain epoll_ctl
 * before it starts (libuv does). A process with no epoll instance (a
 * program that wants io_uring for its own file I/O) gets its ring: it has
 * no event loop to escape through. NETSHIM_IO_URING=allow keeps io_uring
 * everywhere (and libuv's escape). A ring made by raw system-call instructions (liburing
 * builds its own) is out of reach: its reads, writes and waits are never
 * seen.
 *
 * close and close_range made through syscall() (programs built against a
 * glibc without close_range() call it so) are the shim's close and
 * close_range, so the numbers they free carry no state. Every other
 * number goes to libc's syscall() untouched. */

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "uring.h"

#include "config.h"
#include "fdops.h"
#include "exec.h"
#include "real.h"

static int allow; /* atomic: 0 unread, 1 refuse io_uring, 2 NETSHIM_IO_URING=allow */

/* Read by the first call to need it; two threads at once read the same
 * (no once: its futex is a system call of its own in every process that
 * calls syscall(), network or not). */
static int io_uring_allowed(void)
{
	int a = __atomic_load_n(&allow, __ATOMIC_ACQUIRE);

	if (unlikely(!a)) {
		const char *v = ns_getenv("NETSHIM_IO_URING");

		a = v && strcmp(v, "allow") == 0 ? 2 : 1;
		__atomic_store_n(&allow, a, __ATOMIC_RELEASE);
	}
	return a == 2;
}

/* Has the process an epoll instance (an event loop)? Read from
 * /proc/self/fd, once per io_uring_setup (rare). Unreadable: yes, as
 * before. */
static int has_epoll(void)
{
	DIR *dir = opendir("/proc/self/fd");
	struct dirent *de;
	char path[300], target[64];
	int found = 0, saved = errno;

	if (!dir) {
		errno = saved;
		return 1;
	}
	while (!found && (de = readdir(dir)) != NULL) {
		ssize_t l;

		if (de->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/self/fd/%s", de->d_name);
		l = readlink(path, target, sizeof(target) - 1);
		if (l > 0) {
			target[l] = '\0';
			found = strcmp(target, "anon_inode:[eventpoll]") == 0;
		}
	}
	closedir(dir);
	errno = saved;
	return found;
}

long ns_syscall(long n, long a, long b, long c, long d, long e, long f)
{
	if (n == SYS_close)
		return ns_close((int)a);
	if (n == SYS_close_range)
		return ns_close_range((unsigned)a, (unsigned)b, (int)c);
	/* an exec the kernel is asked for directly: what it closes unseen
	 * (close-on-exec sockets' places) is settled first, as for libc's */
	if (n == SYS_execve)
		return ns_execve((const char *)a, (char *const *)b, (char *const *)c);
	if (n == SYS_execveat)
		return ns_execveat((int)a, (const char *)b, (char *const *)c, (char *const *)d, (int)e);
	ns_real_bind(); /* ns_real_syscall */
	if (n == SYS_io_uring_setup && !io_uring_allowed() && ns_shim_active() && has_epoll()) {
		static int told;

		if (!__atomic_exchange_n(&told, 1, __ATOMIC_RELAXED))
			NS_LOG(NS_LOG_INFO, "io_uring_setup refused (ENOSYS) so that the event loop uses epoll, "
			       "where deadlines apply; NETSHIM_IO_URING=allow keeps io_uring");
		errno = ENOSYS;
		return -1;
	}
	if (!ns_real_syscall) {
		errno = ENOSYS;
		return -1;
	}
	return ns_real_syscall(n, a, b, c, d, e, f);
}

/* real.c -- bind the real libc functions: at start, or before by a wrapper.
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

#include "conn.h"

struct ns_real ns_real;
long (*ns_real_syscall)(long, ...);

static int bound; /* atomic: every field of ns_real is set */

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

#define BIND(ret, sym, field, params, ...) ns_real.field = must(#sym, (void *)&sym);
#define BIND_NONE(sym)

static void bind_all(void)
{
	NS_EXPORTS(BIND, BIND, BIND, BIND_NONE)
	ns_real_syscall = (long (*)(long, ...))dlsym(RTLD_NEXT, "syscall");
	if (!ns_real.fcntl64)
		ns_real.fcntl64 = ns_real.fcntl;
	ns_vfork_bind(); /* the exported vfork's target (fdtab.c), bound before any call */
}

/* By the constructor, or by a wrapper called before it (from another
 * library's constructor). Every thread that finds the table not yet
 * bound binds it itself: dlsym gives each the same
 * addresses, so two at once store the same words, nobody waits (a fork
 * in the middle leaves nothing half-taken), and no futex is woken. */
void ns_real_bind(void)
{
	if (likely(__atomic_load_n(&bound, __ATOMIC_ACQUIRE)))
		return;
	bind_all();
	__atomic_store_n(&bound, 1, __ATOMIC_RELEASE);
}

/* The shim's own file I/O (see nointercept.h). */
NS_HIDDEN int ns_sys_close(int fd);
NS_HIDDEN ssize_t ns_sys_read(int fd, void *buf, size_t n);

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

#define UNBOUND_DATA(ret, sym, field, params, args) UNBOUND(ret, field, params, args)
#define UNBOUND_NONE(...)
NS_EXPORTS(UNBOUND_DATA, UNBOUND_NONE, UNBOUND_NONE, UNBOUND_NONE)
UNBOUND(int, select, (int n, fd_set *r, fd_set *w, fd_set *e, struct timeval *tv), (n, r, w, e, tv))
UNBOUND(ssize_t, sendto, (int fd, const void *buf, size_t n, int flags, const struct sockaddr *sa, socklen_t len),
	(fd, buf, n, flags, sa, len))
UNBOUND(ssize_t, sendmsg, (int fd, const struct msghdr *msg, int flags), (fd, msg, flags))
UNBOUND(int, sendmmsg, (int fd, struct mmsghdr *v, unsigned n, int flags), (fd, v, n, flags))

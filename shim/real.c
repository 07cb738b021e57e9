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

#include "conn.h"

struct ns_real ns_real;
long (*ns_real_syscall)(long, ...);

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

#define BIND(ret, sym, field, params, ...) ns_real.field = must(#sym, (void *)&sym);
#define BIND_NONE(sym)

static void bind_all(void)
{
	NS_EXPORTS(BIND, BIND, BIND, BIND_NONE)
	ns_real_syscall = (long (*)(long, ...))dlsym(RTLD_NEXT, "syscall");
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

/* fdops.c -- the calls that change what a descriptor number stands for
 * or how it behaves: close (and its ranged and stdio forms), accept, dup,
 * fcntl, ioctl, and the socket options the shim keeps (the timeouts it
 * shares with the kernel, and SO_ERROR for a deadline that fired). */
#include "fdops.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/close_range.h>
#include <string.h>
#include <sys/ioctl.h>

#include "connfail.h"
#include "exchange.h"
#include "fault.h"
#include "outcome.h"
#include "real.h"
#include "timeo.h"
#include "wait.h"

/* fd, the connection's last descriptor, is being closed by the program
 * with its exchange (or connect) unsettled: an error the kernel holds for
 * it (a reset the program saw only as POLLERR or POLLHUP, and never read)
 * is its outcome. One getsockopt, in that case only. */
static __attribute__((noinline, cold)) void conn_closing(int fd, struct ns_conn *c)
{
	uint32_t f = LD(c->flags);
	socklen_t l = sizeof(int);
	int err = 0, saved = errno;

	if ((f & NS_C_FAULT) && ns_fault_so_error(c))
		goto out;   /* an injected reset that was due: counted */
	if (REAL(getsockopt)(fd, SOL_SOCKET, SO_ERROR, &err, &l) < 0 || !ns_is_failure_errno(err))
		goto out;
	if ((err == ECONNRESET || err == EPIPE) && ns_exchange_stale(c))
		ns_conn_stale(c, err);
	else
		ns_conn_fail_errno(c, err);
out:
	errno = saved;
}

int ns_close(int fd)
{
	uintptr_t v = ns_fd_get(fd);

	if (!v)
		ns_fault_keep_own_maybe(fd);   /* (the shim's own sockets have no entry) */
	/* a vfork child shares our memory but not our descriptors: its close
	 * must leave the parent's entry alone */
	if (v && !ns_in_vfork_child()) {
		/* the kernel drops epoll registrations with the last reference */
		int last = (v & NS_TAG) || __atomic_load_n(&((struct ns_conn *)v)->fds, __ATOMIC_RELAXED) == 1;

		if (last)
			ns_wait_forget_fd(fd);
		/* settled, or nothing asked (the usual close): nothing to look at */
		if (last && !(v & NS_TAG) && !LD(((struct ns_conn *)v)->outcome) &&
		    (LD(((struct ns_conn *)v)->flags) & (NS_C_SENT | NS_C_CONNECTING)))
			conn_closing(fd, (struct ns_conn *)v);
		ns_fd_set(fd, 0);
	}
	return REAL(close)(fd);
}

static void copy_entry(int from, int to)
{
	uintptr_t v = ns_fd_get(from);

	if ((v || ns_fd_get(to)) && !ns_in_vfork_child())
		ns_fd_set(to, v);
}

/* The shim's own descriptors in [first, last], ascending: how many. */
static int own_in(unsigned first, unsigned last, int *own, int max)
{
	int n = ns_fault_own_fds(own, max), k = 0;

	for (int i = 0; i < n; i++)
		if ((unsigned)own[i] >= first && (unsigned)own[i] <= last)
			own[k++] = own[i];
	for (int i = 1; i < k; i++)
		for (int j = i; j > 0 && own[j - 1] > own[j]; j--) {
			int x = own[j];

			own[j] = own[j - 1];
			own[j - 1] = x;
		}
	return k;
}

/* close_range over [first, last] less the shim's own descriptors (the
 * hidden sockets that make injected faults real: closefrom(3) in a daemon
 * closed the blackhole listener, and the next blackholed connect was
 * refused at once). Returns 0, or -1 with the first failure's errno. */
static int close_range_around(unsigned first, unsigned last, int flags, const int *own, int n)
{
	int r = 0, e = 0;

	for (int i = 0; i <= n; i++) {
		unsigned hi = i < n ? (unsigned)own[i] - 1 : last;

		if (i < n && (unsigned)own[i] == first) {
			first = (unsigned)own[i] + 1;
			continue;
		}
		if (first <= hi && REAL(close_range)(first, hi, flags) < 0 && !e) {
			e = errno;
			r = -1;
		}
		if (i < n)
			first = (unsigned)own[i] + 1;
	}
	if (r)
		errno = e;
	return r;
}

/* Closes the shim would otherwise not see. Each entry is dropped before the
 * real call, as in close(): once the number is free another thread may get
 * it, and its new entry must not be wiped. */
int ns_close_range(unsigned first, unsigned last, int flags)
{
	int own[8], n;

	if (!(flags & CLOSE_RANGE_CLOEXEC) && first <= last && !ns_in_vfork_child())
		ns_fd_forget_range(first, last);
	n = first <= last ? own_in(first, last, own, 8) : 0;
	if (likely(n == 0))
		return REAL(close_range)(first, last, flags);
	return close_range_around(first, last, flags, own, n);
}

void ns_closefrom(int lowfd)
{
	int own[8], n, saved = errno;

	if (lowfd >= 0 && !ns_in_vfork_child())
		ns_fd_forget_range((unsigned)lowfd, UINT_MAX);
	n = lowfd >= 0 ? own_in((unsigned)lowfd, UINT_MAX, own, 8) : 0;
	if (likely(n == 0)) {
		REAL(closefrom)(lowfd);
		return;
	}
	/* below the highest of ours by ranges; above it, libc's closefrom */
	close_range_around((unsigned)lowfd, (unsigned)own[n - 1] - 1, 0, own, n - 1);
	REAL(closefrom)(own[n - 1] + 1);
	errno = saved;
}

int ns_fclose(FILE *fp)
{
	/* fileno() of a stream without a descriptor (fmemopen) is -1 */
	int fd = fp ? fileno(fp) : -1, saved = errno;

	if (fd >= 0 && ns_fd_get(fd) && !ns_in_vfork_child())
		ns_fd_forget_range((unsigned)fd, (unsigned)fd);
	errno = saved;
	return REAL(fclose)(fp);
}

/* An accepted socket is the program's server side: never governed, and
 * whatever an unseen close left at its number goes. */
static int accepted(int r)
{
	if (r >= 0 && unlikely(ns_fd_get(r)))
		ns_fd_set(r, 0);
	return r;
}

int ns_accept(int fd, struct sockaddr *sa, socklen_t *len)
{
	return accepted(REAL(accept)(fd, sa, len));
}

int ns_accept4(int fd, struct sockaddr *sa, socklen_t *len, int flags)
{
	return accepted(REAL(accept4)(fd, sa, len, flags));
}

int ns_dup(int fd)
{
	int r = REAL(dup)(fd);

	if (r >= 0)
		copy_entry(fd, r);
	return r;
}

int ns_dup2(int fd, int fd2)
{
	int r;

	if (fd != fd2)
		ns_fault_keep_own_maybe(fd2);
	r = REAL(dup2)(fd, fd2);

	if (r >= 0 && fd != fd2) {
		int e = errno;

		copy_entry(fd, r);
		errno = e;
	}
	return r;
}

int ns_dup3(int fd, int fd2, int flags)
{
	int r;

	if (fd != fd2)
		ns_fault_keep_own_maybe(fd2);
	r = REAL(dup3)(fd, fd2, flags);

	if (r >= 0)
		copy_entry(fd, r);
	return r;
}

/* The program changed O_NONBLOCK: remember it wherever the fd's state is. */
static void note_nonblock(int fd, int on)
{
	uintptr_t v = ns_fd_get(fd);

	if (!v)
		return;
	if (v & NS_TAG) {
		uintptr_t nv = on ? (v | NS_TAG_NONBLOCK) : (v & ~(uintptr_t)NS_TAG_NONBLOCK);

		__atomic_compare_exchange_n(&ns_fdtab[fd], &v, nv, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
		return;
	}
	if (on) {
		__atomic_fetch_or(&((struct ns_conn *)v)->flags, NS_C_NONBLOCK, __ATOMIC_RELAXED);
	} else {
		struct ns_conn *c = (struct ns_conn *)v;
		uint32_t old = __atomic_fetch_and(&c->flags, ~(NS_C_NONBLOCK | NS_C_ARM_PENDING), __ATOMIC_RELAXED);

		if (old & NS_C_ARM_PENDING)
			ns_conn_arm(fd, c, ns_now(), 1);
	}
}

int ns_fcntl(int use64, int fd, int cmd, void *arg)
{
	int r = use64 ? REAL(fcntl64)(fd, cmd, arg) : REAL(fcntl)(fd, cmd, arg);
	int e = errno;

	if (r < 0 || (unsigned)fd >= ns_fdmax)
		return r;
	if (cmd == F_SETFL)
		note_nonblock(fd, ((int)(intptr_t)arg & O_NONBLOCK) != 0);
	else if (cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC)
		copy_entry(fd, r);
	errno = e;
	return r;
}

int ns_ioctl(int fd, unsigned long req, void *arg)
{
	int r = REAL(ioctl)(fd, req, arg);
	int e = errno;

	if (r == 0 && req == FIONBIO && arg && ns_fd_get(fd))
		note_nonblock(fd, *(const int *)arg != 0);
	errno = e;
	return r;
}

static int is_timeo(int level, int name, int *d)
{
	if (level != SOL_SOCKET)
		return 0;
	/* x86_64: SO_RCVTIMEO_NEW carries the same two 64-bit fields as timeval */
	if (name == SO_RCVTIMEO_OLD || name == SO_RCVTIMEO_NEW) {
		*d = NS_IN;
		return 1;
	}
	if (name == SO_SNDTIMEO_OLD || name == SO_SNDTIMEO_NEW) {
		*d = NS_OUT;
		return 1;
	}
	return 0;
}

int ns_setsockopt(int fd, int level, int name, const void *val, socklen_t len)
{
	struct ns_conn *c = ns_conn_of(fd);
	struct ns_dir *dir;
	int64_t want = 0;
	uint32_t src = NS_SRC_SHIM_READ;
	int d, r;

	if (likely(!c)) {
		uintptr_t v;

		r = REAL(setsockopt)(fd, level, name, val, len);
		/* before the connect: remember to ask the kernel for it then */
		if (r == 0 && is_timeo(level, name, &d) && ((v = ns_fd_get(fd)) & NS_TAG_STREAM))
			__atomic_compare_exchange_n(&ns_fdtab[fd], &v, v | NS_TAG_TIMEO, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
		return r;
	}
	if (!is_timeo(level, name, &d) || !(LD(c->flags) & NS_C_ENFORCE) ||
	    !val || len < (socklen_t)sizeof(struct timeval))
		return REAL(setsockopt)(fd, level, name, val, len);
	dir = &c->dir[d];
	if (LD(dir->kernel_ns) == 0 && LD(dir->src) == NS_SRC_NONE)
		return REAL(setsockopt)(fd, level, name, val, len);   /* the shim holds nothing here */
	/* let the kernel validate the program's value first */
	r = REAL(setsockopt)(fd, level, name, val, len);
	if (r < 0)
		return r;
	ST(dir->prog_ns, ns_tv_to_ns(val));
	ST(dir->kernel_ns, LD(dir->prog_ns));
	ns_dir_want(c, d, LD(c->total_deadline) ? LD(c->total_deadline) - ns_now() : 0, &want, &src);
	ns_dir_sync(fd, c, d, want, src);
	return 0;
}

/* shutdown: a program (or its watchdog thread) that shuts a connection's
 * reading ends a read an injected fault holds back, as it ends a real read
 * from a silent server: at the end of the stream, blocking or in the
 * waits, whether or not the real peer has closed meanwhile. */
int ns_shutdown(int fd, int how)
{
	int r = REAL(shutdown)(fd, how), e = errno;
	struct ns_conn *c;

	if (r == 0 && (how == SHUT_RD || how == SHUT_RDWR) && (c = ns_conn_of(fd)) != NULL &&
	    (LD(c->expired) & NS_ATTN_FAULT)) {
		__atomic_store_n(&c->fault.shut_rd, 1u, __ATOMIC_RELEASE);
		if (__atomic_load_n(&ns_ep_count, __ATOMIC_RELAXED))
			__atomic_load_n(&ns_fd_watch_note, __ATOMIC_ACQUIRE)(fd);   /* its readiness changed */
	}
	errno = e;
	return r;
}

/* getpeername: how some programs ask whether a connect is done (ENOTCONN
 * until it is): a connect the shim holds back moves on here too. */
int ns_getpeername(int fd, struct sockaddr *sa, socklen_t *len)
{
	struct ns_conn *c = ns_conn_of(fd);

	if (unlikely(c != NULL) && (LD(c->flags) & NS_C_CONNECTING))
		ns_wait_settle_connect(fd, c, 0);
	return REAL(getpeername)(fd, sa, len);
}

int ns_getsockopt(int fd, int level, int name, void *val, socklen_t *len)
{
	struct ns_conn *c = ns_conn_of(fd);
	int d, r, e, so_error;

	if (likely(!c))
		return REAL(getsockopt)(fd, level, name, val, len);
	if (is_timeo(level, name, &d) && val && len && *len >= (socklen_t)sizeof(struct timeval) &&
	    LD(c->dir[d].src) != NS_SRC_NONE) {
		/* report the program's own value, not the one the shim put there */
		struct timeval tv = { 0, 0 };

		if (LD(c->dir[d].prog_ns)) {
			tv.tv_sec = LD(c->dir[d].prog_ns) / 1000000000;
			tv.tv_usec = (LD(c->dir[d].prog_ns) % 1000000000) / 1000;
		}
		memcpy(val, &tv, sizeof(tv));
		*len = sizeof(tv);
		return 0;
	}
	so_error = level == SOL_SOCKET && name == SO_ERROR && val && len && *len >= (socklen_t)sizeof(int);
	if (so_error) {
		uint32_t exp;
		int pending = 0;

		ns_wait_settle_connect(fd, c, 0);   /* a held connect's turn, looked at here too */
		exp = ns_exp_kind(c);

		/* a timed-out connect's error is read once, as the kernel's is;
		 * a read or total deadline stays in force on the connection */
		if (exp && (exp != NS_EXP_CONNECT || ns_take_err_pending(c)))
			pending = ETIMEDOUT;
		/* an injected reset that is due: the pending error, read once */
		else if (unlikely(LD(c->expired) & NS_ATTN_FAULT) && ns_fault_so_error(c))
			pending = ECONNRESET;
		if (pending) {
			*(int *)val = pending;
			*len = sizeof(int);
			return 0;
		}
	}
	r = REAL(getsockopt)(fd, level, name, val, len);
	e = errno;
	if (r == 0 && so_error && !LD(c->outcome)) {
		int err = *(int *)val;

		if (err && ns_is_failure_errno(err))
			ns_conn_fail_errno(c, err);
	}
	errno = e;
	return r;
}


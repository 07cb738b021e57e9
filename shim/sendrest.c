/* sendrest.c -- a blocking connect's limit left in SO_SNDTIMEO after it.
 *
 * A blocking connect is bounded by putting the shim's limit into
 * SO_SNDTIMEO, which the kernel applies to connect (connect.c). Putting the
 * program's value back after the connect is a system call on every
 * connection; left there, the limit also bounds the connection's blocking
 * sends: one that moves nothing for that long returns EAGAIN, or fewer
 * bytes than asked. The shim owns every call that writes to a governed
 * socket, so such a cut is its own to undo: the first one puts the
 * program's value (none) back, once a connection, and the call goes on
 * with its rest (dataout.c), which the kernel now lets block as the
 * program asked.
 * getsockopt(SO_SNDTIMEO) answers the program's value all along
 * (fdops.c), and before an exec or a spawn every such socket a child
 * would inherit gets it back, so no other program meets the limit. */
#include "sendrest.h"

#include <errno.h>

#include "real.h"
#include "timeo.h"

int ns_out_cut(int fd, struct ns_conn *c, ssize_t r, size_t len, int flags, monotime t0)
{
	int e = errno;

	if (likely(LD(c->dir[NS_OUT].src) != NS_SRC_SHIM_CONNECT) || (LD(c->flags) & NS_C_NONBLOCK) ||
	    (flags & MSG_DONTWAIT) || (r < 0 ? e != EAGAIN : (size_t)r >= len))
		return 0;
	/* (the kernel counts the limit over the call's waits: a cut call
	 * lasted at least that; a millisecond of slack for the clocks) */
	if (r >= 0 && (!t0 || ns_now() - t0 < LD(c->dir[NS_OUT].kernel_ns) - 1000000))
		return 0;
	if (!ns_conn_still(fd, c))
		return 0;
	ns_dir_sync(fd, c, NS_OUT, 0, NS_SRC_NONE);
	errno = e;
	return LD(c->dir[NS_OUT].src) != NS_SRC_SHIM_CONNECT;
}

void ns_sndtimeo_for_child(void)
{
	unsigned hi = __atomic_load_n(&ns_fdhi, __ATOMIC_ACQUIRE);
	int saved = errno;

	for (unsigned fd = 0; fd < hi && fd < ns_fdmax; fd++) {
		struct ns_conn *c = ns_conn_of((int)fd);
		int fl;

		if (!c || LD(c->dir[NS_OUT].src) != NS_SRC_SHIM_CONNECT)
			continue;
		fl = REAL(fcntl)((int)fd, F_GETFD);
		if (fl < 0 || !(fl & FD_CLOEXEC))
			ns_dir_sync((int)fd, c, NS_OUT, 0, NS_SRC_NONE);
	}
	errno = saved;
}

/* timeo.h -- the kernel's timeouts (SO_RCVTIMEO, SO_SNDTIMEO) as the
 * shim's deadlines use them, and the conversions of time (timeo.c). */
#ifndef NS_TIMEO_H
#define NS_TIMEO_H

#include <sys/socket.h>
#include <sys/time.h>

#include "conn.h"
#include "real.h"

static inline int64_t ns_tv_to_ns(const struct timeval *tv)
{
	if (tv->tv_sec < 0 || tv->tv_usec < 0)
		return 0;
	return (int64_t)tv->tv_sec * 1000000000 + (int64_t)tv->tv_usec * 1000;
}

static inline struct timeval ns_to_tv(int64_t ns)
{
	struct timeval tv;

	ns = (ns + 999) / 1000;   /* round up: never fire before the deadline */
	tv.tv_sec = ns / 1000000;
	tv.tv_usec = ns % 1000000;
	if (tv.tv_sec == 0 && tv.tv_usec == 0 && ns > 0)
		tv.tv_usec = 1;
	return tv;
}

/* ...of a whole number of milliseconds: the same, with less arithmetic */
static inline struct timeval ns_ms_to_tv(uint64_t ms)
{
	struct timeval tv = { .tv_sec = (time_t)(ms / 1000), .tv_usec = (suseconds_t)(ms % 1000) * 1000 };

	return tv;
}


/* Make the kernel hold the shorter of the program's timeout and want_ns
 * (the shim's, 0 = none; its source want_src) for direction d. */
NS_HIDDEN void ns_dir_sync(int fd, struct ns_conn *c, int d, int64_t want_ns, uint32_t want_src);
/* What the shim wants in direction d given the time left of the total budget. */
NS_HIDDEN void ns_dir_want(const struct ns_conn *c, int d, int64_t left, int64_t *want, uint32_t *src);
/* The program's own timeout opt (SO_RCVTIMEO or SO_SNDTIMEO), asked of the kernel; 0 = none. */
NS_HIDDEN int64_t ns_prog_timeout(int fd, int opt);
/* Before a data call with a deadline of its own: 0, 1 when fd is no longer
 * c's socket, or -1 with errno ETIMEDOUT. */
NS_HIDDEN int ns_deadline_check(int fd, struct ns_conn *c, int d);
/* After a read that a signal interrupted (e: EINTR), or the first that
 * was not: the rest of the interrupted wait, kept. */
NS_HIDDEN void ns_note_interrupted(int fd, struct ns_conn *c, int e);
/* Disconnect and drain: a connect in progress dropped (AF_UNSPEC, no SYN
 * retried, the socket free to connect anew), the error that leaves pending
 * read away. For a connect the shim timed out, and an injected delay that
 * ends. errno is kept. */
NS_HIDDEN void ns_drop_attempt(int fd);
/* The kernel's timeouts back to the program's own. */
NS_HIDDEN void ns_conn_release_kernel(int fd, struct ns_conn *c);
/* Put the shim's read (and total) timeouts into the kernel, beside the
 * program's own. ask: the program may have set its own before connecting. */
NS_HIDDEN void ns_conn_arm_full(int fd, struct ns_conn *c, monotime now, int ask);
static inline __attribute__((always_inline)) void ns_conn_arm(int fd, struct ns_conn *c, monotime now, int ask)
{
	struct timeval tv;

	if (ask || LD(c->total_deadline)) {
		ns_conn_arm_full(fd, c, now, ask);
		return;
	}
	/* the common case: the program set no timeout of its own, no total
	 * budget; the read timeout goes in as it is */
	tv = ns_ms_to_tv(ns_conn_set(c)->read_timeout_ms);   /* read_timeout_ns, exactly */
	ST(c->dir[NS_IN].prog_ns, 0);
	if (REAL(setsockopt)(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) == 0) {
		ST(c->dir[NS_IN].kernel_ns, LD(c->read_timeout_ns));
		ST(c->dir[NS_IN].src, NS_SRC_SHIM_READ);
	} else {
		ST(c->dir[NS_IN].kernel_ns, 0);
		ST(c->dir[NS_IN].src, NS_SRC_NONE);
	}
}


#endif

/* wait.h -- deadlines inside the waits: what poll, select and epoll
 * (wait_poll.c, wait_select.c, wait_epoll.c) share, and the helpers that
 * fire a connection's deadlines there (wait.c). */
#ifndef NS_WAIT_H
#define NS_WAIT_H

#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/select.h>

#include "conn.h"
#include "fault.h"

/**** time ****/

#define NEVER INT64_MAX   /* a wait with no end */

/**** time ****/

static inline monotime end_ms(int ms, monotime now)
{
	return ms < 0 ? NEVER : now + (int64_t)ms * 1000000;
}

static inline int ts_valid(const struct timespec *ts)
{
	return !ts || (ts->tv_sec >= 0 && ts->tv_nsec >= 0 && ts->tv_nsec < 1000000000);
}

static inline monotime end_ts(const struct timespec *ts, monotime now)
{
	/* past 2^62 ns (146 years) from now: never (the monotonic clock
	 * counts from boot, far below 2^62, so the sum cannot overflow) */
	if (!ts || ts->tv_sec >= (time_t)(((int64_t)1 << 62) / 1000000000))
		return NEVER;
	return now + (int64_t)ts->tv_sec * 1000000000 + ts->tv_nsec;
}

/* Milliseconds until `until`, rounded up so a wait never ends early. */
static inline int ms_until(monotime until, monotime now)
{
	int64_t left;

	if (until == NEVER)
		return -1;
	left = until - now;
	if (left <= 0)
		return 0;
	left = (left + 999999) / 1000000;
	return left > INT_MAX ? INT_MAX : (int)left;
}

static inline struct timespec *ts_until(monotime until, monotime now, struct timespec *buf)
{
	int64_t left;

	if (until == NEVER)
		return NULL;
	left = until > now ? until - now : 0;
	buf->tv_sec = left / 1000000000;
	buf->tv_nsec = left - (int64_t)buf->tv_sec * 1000000000;
	return buf;
}

static inline monotime earliest(monotime a, monotime b)
{
	return a < b ? a : b;
}

/**** a connection's deadlines and faults in a wait (wait.c) ****/

/* For the wait wrappers (wait.c): the nearest deadline a wait for these
 * events must honour on c (0 = none; arms the read-wait clock), and firing
 * it. ns_wait_expire returns the NS_EXP_* kind now in force, or 0. */
NS_HIDDEN void ns_wait_start_clock(struct ns_conn *c, monotime now);
static inline __attribute__((always_inline)) monotime ns_wait_deadline(struct ns_conn *c, int want_in, int want_out, monotime now)
{
	uint32_t f = __atomic_load_n(&c->flags, __ATOMIC_RELAXED);
	monotime d = 0;

	/* the common case first, in one test: a connected socket waited on
	 * for input, its read clock running, no total budget */
	if (likely((f & (NS_C_ENFORCE | NS_C_CONNECTING | NS_C_WAITING | NS_C_TOTAL | NS_C_PACED)) ==
		   (NS_C_ENFORCE | NS_C_WAITING)) &&
	    want_in) {
		int64_t rt = LD(c->read_timeout_ns);

		if (likely(rt))
			return LD(c->rd_wait_start) + rt;
	}
	if (!(f & NS_C_ENFORCE))
		return 0;
	if (f & NS_C_CONNECTING) {
		if (want_in || want_out)
			d = LD(c->connect_deadline);
	} else if (want_in && LD(c->read_timeout_ns) && !(f & NS_C_PACED)) {
		/* (a request held for rate's token is not sent yet: its answer's
		 * clock starts when it goes, ns_after_io) */
		if (unlikely(!(f & NS_C_WAITING)))
			ns_wait_start_clock(c, now);   /* the read clock starts with this wait */
		d = LD(c->rd_wait_start) + LD(c->read_timeout_ns);
	}
	if ((f & NS_C_TOTAL) && (want_in || want_out) && (d == 0 || LD(c->total_deadline) < d))
		d = LD(c->total_deadline);
	return d;
}
NS_HIDDEN int ns_wait_expire(struct ns_conn *c, int fd, int want_in, int want_out, monotime now);
/* A wait reported connected c ready for output only: has its wait for
 * input passed its deadline (then it is marked expired, as ns_wait_expire
 * does)? A connecting socket reported writable has its answer. */
static inline int ns_input_expired(struct ns_conn *c, int fd, monotime now)
{
	return !(__atomic_load_n(&c->flags, __ATOMIC_RELAXED) & NS_C_CONNECTING) && ns_wait_expire(c, fd, 1, 0, now) != 0;
}
/* The nearest time a wait must wake for c: its deadlines, and the moments
 * injected faults change what it may see (fault.c). */
NS_HIDDEN monotime ns_wait_interest_faults(struct ns_conn *c, int want_in, int want_out, monotime now);
/* ...given x, the connection's expired word as the wait just read it. */
static inline monotime ns_wait_interest(struct ns_conn *c, uint32_t x, int want_in, int want_out, monotime now)
{
	return unlikely(x & NS_ATTN_GATE) ? ns_wait_interest_faults(c, want_in, want_out, now) :
					     ns_wait_deadline(c, want_in, want_out, now);
}
/* The program saw c ready for input or output: it is no longer waiting. */
NS_HIDDEN void ns_wait_ready(struct ns_conn *c, int in, int out, int err);
/* A connect the shim holds back (queued for a place or a token, or an
 * injected delay) moves on at whatever call the program makes on fd, as
 * the kernel finishes a connect in the background: it connects for real
 * once its turn comes, is refused at queue_timeout, or meets its connect
 * deadline. blocking: the call (on a blocking socket) waits for that. */
#define NS_SETTLE_TICK_NS (5 * 1000000LL)
/* A wait for input an injected stall holds (no end of its own) looks again
 * this often: the program's shutdown of its reading ends it. */
#define NS_STALL_LOOK_NS (50 * 1000000LL)
NS_HIDDEN void ns_wait_settle_connect(int fd, struct ns_conn *c, int blocking);

/* Injected faults on c's input (fault.c): NS_FW_NONE, NS_FW_GATED (the
 * kernel must not report input: it is held back) or NS_FW_READY (report
 * input now, with *ev of NS_FWE_*). Connections without faults: NONE after
 * one load. */
static inline int has_faults(struct ns_conn *c)
{
	return unlikely(LD(c->expired) & NS_ATTN_GATE);
}

static inline int fault_in(struct ns_conn *c, monotime now, int *ev)
{
	monotime until;

	*ev = 0;
	if (!(LD(c->expired) & NS_ATTN_FAULT) || (LD(c->flags) & NS_C_CONNECTING))
		return NS_FW_NONE;
	return ns_fault_wait(c, now, &until, ev);
}

/* Is c's output held back now (a request waiting for rate's token,
 * shape.c)? The kernel must not report it writable until pace_until. */
static inline int out_gated(struct ns_conn *c, monotime now)
{
	return unlikely(LD(c->expired) & NS_ATTN_PACE) && (LD(c->flags) & NS_C_PACED) && now < LD(c->pace_until);
}

/**** the workers (wait_poll.c, wait_select.c, wait_epoll.c) ****/

NS_HIDDEN int ns_poll(struct pollfd *fds, nfds_t n, int timeout_ms);
NS_HIDDEN int ns_ppoll(struct pollfd *fds, nfds_t n, const struct timespec *ts, const sigset_t *mask);
NS_HIDDEN int ns_poll_chk(struct pollfd *fds, nfds_t n, int timeout_ms, size_t fdslen);
NS_HIDDEN int ns_ppoll_chk(struct pollfd *fds, nfds_t n, const struct timespec *ts, const sigset_t *mask, size_t fdslen);
NS_HIDDEN int ns_select(int nfds, fd_set *r, fd_set *w, fd_set *e, struct timeval *tv);
NS_HIDDEN int ns_pselect(int nfds, fd_set *r, fd_set *w, fd_set *e, const struct timespec *ts, const sigset_t *mask);
NS_HIDDEN int ns_epoll_ctl(int epfd, int op, int fd, struct epoll_event *ev);
NS_HIDDEN int ns_epoll_wait(int epfd, struct epoll_event *ev, int max, int timeout_ms);
NS_HIDDEN int ns_epoll_pwait(int epfd, struct epoll_event *ev, int max, int timeout_ms, const sigset_t *mask);
NS_HIDDEN int ns_epoll_pwait2(int epfd, struct epoll_event *ev, int max, const struct timespec *ts, const sigset_t *mask);

/* fd closes (close, close_range...): its epoll registrations (or, an epoll
 * fd, its set's) go. One load when no epoll registration is held. */
NS_HIDDEN void ns_wait_forget_fd_held(int fd);
/* fd now stands for another connection (a connect, a dup onto it): an
 * epoll registration of that number computes its deadline again. */
NS_HIDDEN void ns_wait_note_fd_held(int fd);
static inline void ns_wait_forget_fd(int fd)
{
	if (__atomic_load_n(&ns_ep_count, __ATOMIC_RELAXED))
		ns_wait_forget_fd_held(fd);
}

#endif

/* wait.c -- deadlines inside poll, ppoll, select, pselect and epoll waits.
 *
 * Event-loop programs (curl, wget, node, Python sockets with a timeout)
 * never block in recv: they wait here. A wait that holds a governed socket
 * with a pending connect, read or total deadline is shortened to the nearest
 * one; when it passes, the socket is reported ready with an error (writable
 * for a connect, readable for a read) and the connection then answers
 * ETIMEDOUT. A wait that woke early for nothing goes back to sleep for the
 * rest of the program's own timeout, which still ends the wait with 0 ready
 * exactly as the real call would. A wait with no governed socket pending
 * calls straight through. */
#include "shim.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>
#include <stdlib.h>
#include <string.h>

#include "real.h"

/* uthash must never exit inside a host process: on allocation failure the
 * registration is simply not tracked (and that socket's waits pass through). */
#define HASH_NONFATAL_OOM 1
static int ep_oom;
#define uthash_nonfatal_oom(obj) (ep_oom = 1)
#include <uthash.h>
#include <utlist.h>

#define NEVER INT64_MAX

/**** time ****/

static monotime end_ms(int ms, monotime now)
{
	return ms < 0 ? NEVER : now + (int64_t)ms * 1000000;
}

static int ts_valid(const struct timespec *ts)
{
	return !ts || (ts->tv_sec >= 0 && ts->tv_nsec >= 0 && ts->tv_nsec < 1000000000);
}

static monotime end_ts(const struct timespec *ts, monotime now)
{
	/* past 2^62 ns (146 years) from now: never (the monotonic clock
	 * counts from boot, far below 2^62, so the sum cannot overflow) */
	if (!ts || ts->tv_sec >= (time_t)(((int64_t)1 << 62) / 1000000000))
		return NEVER;
	return now + (int64_t)ts->tv_sec * 1000000000 + ts->tv_nsec;
}

/* Milliseconds until `until`, rounded up so a wait never ends early. */
static int ms_until(monotime until, monotime now)
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

static struct timespec *ts_until(monotime until, monotime now, struct timespec *buf)
{
	int64_t left;

	if (until == NEVER)
		return NULL;
	left = until > now ? until - now : 0;
	buf->tv_sec = left / 1000000000;
	buf->tv_nsec = left - (int64_t)buf->tv_sec * 1000000000;
	return buf;
}

static monotime earliest(monotime a, monotime b)
{
	return a < b ? a : b;
}

/**** poll, ppoll, __poll_chk, __ppoll_chk ****/

enum { W_POLL, W_PPOLL, W_POLL_CHK, W_PPOLL_CHK };

struct pollcall {
	int kind;
	struct pollfd *fds;
	nfds_t n;
	const sigset_t *mask;
	size_t fdslen;
	int faults;             /* a governed socket here has injected faults */
};

static inline __attribute__((always_inline)) int real_poll(const struct pollcall *p, monotime until, monotime now)
{
	struct timespec ts, *tsp;

	switch (p->kind) {
	case W_POLL:
		return ns_real.poll(p->fds, p->n, ms_until(until, now));   /* bound: a governed socket connected */
	case W_POLL_CHK:
		return REAL(poll_chk)(p->fds, p->n, ms_until(until, now), p->fdslen);
	case W_PPOLL:
		tsp = ts_until(until, now, &ts);
		return REAL(ppoll)(p->fds, p->n, tsp, p->mask);
	default:
		tsp = ts_until(until, now, &ts);
		return REAL(ppoll_chk)(p->fds, p->n, tsp, p->mask, p->fdslen);
	}
}

#define P_IN (POLLIN | POLLPRI | POLLRDNORM | POLLRDBAND)
#define P_OUT (POLLOUT | POLLWRNORM | POLLWRBAND)

/* Injected faults on c's input (fault.c): NS_FW_NONE, NS_FW_GATED (the
 * kernel must not report input: it is held back) or NS_FW_READY (report
 * input now, with *ev of NS_FWE_*). Connections without faults: NONE after
 * one load. */
static inline int has_faults(struct ns_conn *c)
{
	return unlikely(LD(c->expired) & NS_ATTN_FAULT);
}

static int fault_in(struct ns_conn *c, monotime now, int *ev)
{
	monotime until;

	*ev = 0;
	if (!has_faults(c) || (LD(c->flags) & NS_C_CONNECTING))
		return NS_FW_NONE;
	return ns_fault_wait(c, now, &until, ev);
}

/* Input held back by a fault is taken out of what poll asks the kernel,
 * and put back after. At most HOLD_MAX entries per call are held. */
#define HOLD_MAX 64
struct held {
	int n;
	nfds_t idx[HOLD_MAX];
	short ev[HOLD_MAX];
};

static int poll_governed(const struct pollcall *p)
{
	for (nfds_t i = 0; i < p->n; i++)
		if (ns_conn_of(p->fds[i].fd))
			return 1;
	return 0;
}

/* The nearest deadline among the governed sockets (now if one already
 * fired), or 0 when none is pending. */
static monotime poll_nearest(struct pollcall *p, monotime now)
{
	monotime nearest = 0;

	p->faults = 0;
	for (nfds_t i = 0; i < p->n; i++) {
		struct ns_conn *c = ns_conn_of(p->fds[i].fd);
		monotime d;
		uint32_t x;

		if (!c)
			continue;
		x = __atomic_load_n(&c->expired, __ATOMIC_ACQUIRE);
		if (x & NS_EXP_MASK)
			return now;
		if (unlikely(x & NS_ATTN_FAULT))
			p->faults = 1;
		d = ns_wait_interest(c, x, p->fds[i].events & P_IN, p->fds[i].events & P_OUT, now);
		if (d && (!nearest || d < nearest))
			nearest = d;
	}
	return nearest;
}

/* After the real wait: note the sockets that became ready, report the ones
 * whose deadline passed. Returns how many more entries have revents. */
static int poll_mark(const struct pollcall *p, monotime now)
{
	int added = 0;

	for (nfds_t i = 0; i < p->n; i++) {
		struct pollfd *f = &p->fds[i];
		struct ns_conn *c = ns_conn_of(f->fd);
		short rv = f->revents;

		int ev;

		if (!c)
			continue;
		if (p->faults && has_faults(c) && (f->events & P_IN) && !ns_exp_kind(c) &&
		    fault_in(c, now, &ev) == NS_FW_READY) {
			/* an injected end or answer: input to read now */
			f->revents |= (short)((f->events & (POLLIN | POLLRDNORM)) | ((ev & NS_FWE_ERR) ? POLLERR : 0) |
					      ((ev & NS_FWE_HUP) ? POLLHUP : 0) |
					      ((ev & NS_FWE_RDHUP) ? (f->events & POLLRDHUP) : 0));
			if (!rv)
				added++;
			continue;
		}
		if (rv && !ns_exp_kind(c)) {
			ns_wait_ready(c, rv & (P_IN | POLLHUP), rv & P_OUT, rv & (POLLERR | POLLHUP));
			/* output alone does not answer a wait for input */
			if ((f->events & P_IN) && !(rv & (P_IN | POLLHUP | POLLERR)) && ns_input_expired(c, f->fd, now))
				f->revents |= (short)((f->events & P_IN) | POLLERR);
			continue;
		}
		if (!ns_wait_expire(c, f->fd, f->events & P_IN, f->events & P_OUT, now))
			continue;
		f->revents = (short)((f->events & (P_IN | P_OUT)) | POLLERR);
		if (!rv)
			added++;
	}
	return added;
}

static void poll_connected(const struct pollcall *p)
{
	for (nfds_t i = 0; i < p->n; i++) {
		short rv = p->fds[i].revents;
		struct ns_conn *c;

		if ((rv & P_OUT) && (c = ns_conn_of(p->fds[i].fd)) != NULL &&
		    (LD(c->flags) & NS_C_CONNECTING))
			ns_wait_ready(c, 0, 1, rv & (POLLERR | POLLHUP));
	}
}

static void poll_hold(const struct pollcall *p, monotime now, struct held *h)
{
	h->n = 0;
	for (nfds_t i = 0; i < p->n && h->n < HOLD_MAX; i++) {
		struct ns_conn *c = ns_conn_of(p->fds[i].fd);
		int ev;

		if (c && (p->fds[i].events & P_IN) && fault_in(c, now, &ev) == NS_FW_GATED) {
			h->idx[h->n] = i;
			h->ev[h->n++] = p->fds[i].events;
			p->fds[i].events &= (short)~P_IN;
		}
	}
}

static void poll_unhold(const struct pollcall *p, const struct held *h)
{
	for (int k = 0; k < h->n; k++)
		p->fds[h->idx[k]].events = h->ev[k];
}

static int poll_common(struct pollcall *p, monotime until, monotime now)
{

	for (;;) {
		monotime nearest = poll_nearest(p, now);
		struct held h;
		int r, added, e;

		if (!nearest)
			return real_poll(p, until, now);
		h.n = 0;
		if (unlikely(p->faults))
			poll_hold(p, now, &h);
		r = real_poll(p, earliest(until, nearest), now);
		if (unlikely(h.n)) {
			e = errno;
			poll_unhold(p, &h);
			errno = e;
		}
		if (r < 0)
			return r;   /* EINTR and the rest pass through */
		if (earliest(until, nearest) > now)
			now = ns_now();   /* else it returned at once: the clock is where it was */
		if (r > 0 && now < nearest && !p->faults) {
			/* ready before any deadline: nothing can have expired, and
			 * the program's read restarts the read clocks itself; only
			 * a connect the wait saw complete is noted */
			poll_connected(p);
			return r;
		}
		added = poll_mark(p, now);
		if (r + added > 0 || now >= until)
			return r + added;
		/* woke for a deadline that did not fire: sleep on */
	}
}

/* poll or ppoll on one governed socket, the way most clients wait (curl,
 * Python's sockets, the fortified C client): the general path's passes over
 * the set reduced to straight-line code, the call described by scalars (a
 * constant kind) so that nothing is built in memory. Anything out of the
 * ordinary (a deadline already fired, injected faults, a wait that ended
 * without an answer) goes on in poll_common. */
static __attribute__((noinline, cold)) int poll_one_more(int kind, struct pollfd *f, const sigset_t *mask,
							   size_t fdslen, int r, monotime until, monotime now)
{
	struct pollcall p = { kind, f, 1, mask, fdslen, 0 };
	int added;

	if (r < 0)
		return poll_common(&p, until, now);   /* not waited yet */
	added = poll_mark(&p, now);
	if (r + added > 0 || now >= until)
		return r + added;
	return poll_common(&p, until, now);   /* woke for a deadline that did not fire: sleep on */
}

static inline __attribute__((always_inline)) int poll_one(int kind, struct pollfd *f, const sigset_t *mask,
							    size_t fdslen, struct ns_conn *c, monotime until,
							    monotime now, int ms0, const struct timespec *ts0)
{
	uint32_t x = __atomic_load_n(&c->expired, __ATOMIC_ACQUIRE);
	monotime nearest, limit;
	struct timespec ts;
	int r;

	if (unlikely(x & (NS_EXP_MASK | NS_ATTN_FAULT)))
		return poll_one_more(kind, f, mask, fdslen, -1, until, now);
	nearest = ns_wait_deadline(c, f->events & P_IN, f->events & P_OUT, now);
	limit = nearest ? earliest(until, nearest) : until;
	/* the real calls through the bound table: a governed socket connected */
	/* the program's own timeout when no deadline comes first */
	switch (kind) {
	case W_POLL:
		r = ns_real.poll(f, 1, limit == until ? ms0 : ms_until(limit, now));
		break;
	case W_POLL_CHK:
		r = ns_real.poll_chk(f, 1, limit == until ? ms0 : ms_until(limit, now), fdslen);
		break;
	case W_PPOLL:
		r = ns_real.ppoll(f, 1, limit == until ? ts0 : ts_until(limit, now, &ts), mask);
		break;
	default:
		r = ns_real.ppoll_chk(f, 1, limit == until ? ts0 : ts_until(limit, now, &ts), mask, fdslen);
		break;
	}
	if (r < 0 || !nearest)
		return r;
	if (limit > now)
		now = ns_now();
	if (likely(r > 0 && now < nearest)) {
		if ((f->revents & P_OUT) && (LD(c->flags) & NS_C_CONNECTING))
			ns_wait_ready(c, 0, 1, f->revents & (POLLERR | POLLHUP));
		return r;
	}
	return poll_one_more(kind, f, mask, fdslen, r, until, now);
}

static __attribute__((noinline)) int poll_many(struct pollfd *fds, nfds_t n, int timeout_ms)
{
	struct pollcall p = { W_POLL, fds, n, NULL, 0, 0 };
	monotime now;

	if (likely(!poll_governed(&p)))
		return REAL(poll)(fds, n, timeout_ms);
	now = ns_now();
	return poll_common(&p, end_ms(timeout_ms, now), now);
}

int ns_poll(struct pollfd *fds, nfds_t n, int timeout_ms)
{
	struct ns_conn *c;

	if (n != 1)
		return poll_many(fds, n, timeout_ms);
	c = ns_conn_of(fds[0].fd);
	if (likely(!c))
		return REAL(poll)(fds, n, timeout_ms);
	{
		monotime now = ns_now();

		return poll_one(W_POLL, fds, NULL, 0, c, end_ms(timeout_ms, now), now, timeout_ms, NULL);
	}
}

int ns_poll_chk(struct pollfd *fds, nfds_t n, int timeout_ms, size_t fdslen)
{
	struct pollcall p = { W_POLL_CHK, fds, n, NULL, fdslen, 0 };
	monotime now;

	if (likely(fdslen / sizeof(*fds) < n || !poll_governed(&p)))
		return REAL(poll_chk)(fds, n, timeout_ms, fdslen);
	now = ns_now();
	if (n == 1)
		return poll_one(W_POLL_CHK, fds, NULL, fdslen, ns_conn_of(fds[0].fd), end_ms(timeout_ms, now), now,
				timeout_ms, NULL);
	return poll_common(&p, end_ms(timeout_ms, now), now);
}

static __attribute__((noinline)) int ppoll_many(struct pollfd *fds, nfds_t n, const struct timespec *ts,
						  const sigset_t *mask)
{
	struct pollcall p = { W_PPOLL, fds, n, mask, 0, 0 };
	monotime now;

	if (likely(!poll_governed(&p)))
		return REAL(ppoll)(fds, n, ts, mask);
	now = ns_now();
	return poll_common(&p, end_ts(ts, now), now);
}

int ns_ppoll(struct pollfd *fds, nfds_t n, const struct timespec *ts, const sigset_t *mask)
{
	struct ns_conn *c;
	monotime now;

	if (unlikely(!ts_valid(ts)))
		return REAL(ppoll)(fds, n, ts, mask);
	if (n != 1)
		return ppoll_many(fds, n, ts, mask);
	c = ns_conn_of(fds[0].fd);
	if (likely(!c))
		return REAL(ppoll)(fds, n, ts, mask);
	now = ns_now();
	return poll_one(W_PPOLL, fds, mask, 0, c, end_ts(ts, now), now, 0, ts);
}

int ns_ppoll_chk(struct pollfd *fds, nfds_t n, const struct timespec *ts, const sigset_t *mask, size_t fdslen)
{
	struct pollcall p = { W_PPOLL_CHK, fds, n, mask, fdslen, 0 };
	monotime now;

	if (likely(!ts_valid(ts) || fdslen / sizeof(*fds) < n || !poll_governed(&p)))
		return REAL(ppoll_chk)(fds, n, ts, mask, fdslen);
	now = ns_now();
	return poll_common(&p, end_ts(ts, now), now);
}

/**** select, pselect ****/

#define NWORDS (FD_SETSIZE / (8 * sizeof(unsigned long)))
#define BITS (8 * sizeof(unsigned long))

static unsigned long *words(fd_set *s)
{
	return (unsigned long *)(void *)s;
}

static inline int isset(const fd_set *s, int fd)
{
	return s && (((const unsigned long *)(const void *)s)[(unsigned)fd / BITS] >> ((unsigned)fd % BITS) & 1);
}

static void setbit(fd_set *s, int fd)
{
	words(s)[(unsigned)fd / BITS] |= 1UL << ((unsigned)fd % BITS);
}

struct selcall {
	int nfds;
	fd_set *set[3];          /* the program's read, write, except sets (may be NULL) */
	fd_set in[3];            /* what it asked for */
	int pselect;
	const sigset_t *mask;
	int faults;              /* a governed socket here has injected faults */
};

/* Describe a select or pselect call; s->in is filled by sel_common (only
 * the words below nfds, so it is not cleared here). */
static void sel_init(struct selcall *s, int nfds, fd_set *r, fd_set *w, fd_set *e, int pselect,
		     const sigset_t *mask)
{
	s->nfds = nfds;
	s->set[0] = r;
	s->set[1] = w;
	s->set[2] = e;
	s->pselect = pselect;
	s->mask = mask;
	s->faults = 0;
}

/* Call fn on each governed fd asked for in the read or write set. */
#define FOR_GOVERNED(s, fd, c) \
	for (int w_ = 0, fd = 0; w_ < (int)NWORDS && w_ * (int)BITS < (s)->nfds; w_++) \
		for (unsigned long b_ = (((s)->set[0] ? words(&(s)->in[0])[w_] : 0) | \
					 ((s)->set[1] ? words(&(s)->in[1])[w_] : 0)); \
		     b_ && ((fd = w_ * (int)BITS + __builtin_ctzl(b_)), 1); b_ &= b_ - 1) \
			for (struct ns_conn *c = fd < (s)->nfds ? ns_conn_of(fd) : NULL; c; c = NULL)

/* Words of a set that hold fds below nfds: all a call copies or scans. */
static int sel_words(int nfds)
{
	return (int)((nfds + (int)BITS - 1) / (int)BITS);
}

/* Is a governed socket asked for in the program's read or write set? */
static int sel_governed(int nfds, fd_set *r, fd_set *w)
{
	for (int i = 0, nw = sel_words(nfds); i < nw; i++) {
		unsigned long b = (r ? words(r)[i] : 0) | (w ? words(w)[i] : 0);

		for (; b; b &= b - 1) {
			int fd = i * (int)BITS + __builtin_ctzl(b);

			if (fd < nfds && ns_conn_of(fd))
				return 1;
		}
	}
	return 0;
}

/* Copy the first words of each given set into s->in (what was asked). */
static void sel_save(struct selcall *s)
{
	int nw = sel_words(s->nfds);

	for (int i = 0; i < 3; i++)
		if (s->set[i])
			for (int k = 0; k < nw; k++)
				words(&s->in[i])[k] = words(s->set[i])[k];
}

static monotime sel_nearest(struct selcall *s, monotime now)
{
	monotime nearest = 0;

	s->faults = 0;
	FOR_GOVERNED(s, fd, c) {
		monotime d;
		uint32_t x;

		x = __atomic_load_n(&c->expired, __ATOMIC_ACQUIRE);
		if (x & NS_EXP_MASK)
			return now;
		s->faults |= (x & NS_ATTN_FAULT) != 0;
		d = ns_wait_interest(c, x, isset(s->set[0] ? &s->in[0] : NULL, fd),
				     isset(s->set[1] ? &s->in[1] : NULL, fd), now);
		if (d && (!nearest || d < nearest))
			nearest = d;
	}
	return nearest;
}

static int sel_mark(struct selcall *s, monotime now)
{
	int added = 0;

	FOR_GOVERNED(s, fd, c) {
		int want_in = isset(s->set[0] ? &s->in[0] : NULL, fd);
		int want_out = isset(s->set[1] ? &s->in[1] : NULL, fd);
		int got_in = isset(s->set[0], fd), got_out = isset(s->set[1], fd);

		int ev;

		if (s->faults && has_faults(c) && want_in && !ns_exp_kind(c) && fault_in(c, now, &ev) == NS_FW_READY) {
			if (!got_in) {
				setbit(s->set[0], fd);
				added++;
			}
			continue;
		}
		if ((got_in || got_out) && !ns_exp_kind(c)) {
			/* select cannot say whether a writable connect failed: leave
			 * that to SO_ERROR or the first send */
			ns_wait_ready(c, got_in, got_out, 1);
			/* output alone does not answer a wait for input */
			if (want_in && !got_in && ns_input_expired(c, fd, now)) {
				setbit(s->set[0], fd);
				added++;
			}
			continue;
		}
		if (!ns_wait_expire(c, fd, want_in, want_out, now))
			continue;
		if (want_in && !got_in) {
			setbit(s->set[0], fd);
			added++;
		}
		if (want_out && !got_out) {
			setbit(s->set[1], fd);
			added++;
		}
	}
	return added;
}

static int real_select(struct selcall *s, monotime until, monotime now)
{
	struct timespec ts, *tsp = ts_until(until, now, &ts);
	struct timeval tv, *tvp = NULL;

	for (int i = 0, nw = sel_words(s->nfds); i < 3; i++)
		if (s->set[i])
			for (int k = 0; k < nw; k++)
				words(s->set[i])[k] = words(&s->in[i])[k];
	if (s->set[0] && unlikely(s->faults)) {
		/* input held back by a fault is not asked of the kernel */
		FOR_GOVERNED(s, fd, c) {
			int ev;

			if (has_faults(c) && isset(&s->in[0], fd) && fault_in(c, now, &ev) == NS_FW_GATED)
				words(s->set[0])[fd / BITS] &= ~(1UL << (fd % BITS));
		}
	}
	if (s->pselect)
		return REAL(pselect)(s->nfds, s->set[0], s->set[1], s->set[2], tsp, s->mask);
	if (tsp) {
		/* round up: a select must not end before the deadline it serves */
		tv.tv_sec = tsp->tv_sec;
		tv.tv_usec = (tsp->tv_nsec + 999) / 1000;
		if (tv.tv_usec == 1000000) {
			tv.tv_sec++;
			tv.tv_usec = 0;
		}
		tvp = &tv;
	}
	return REAL(select)(s->nfds, s->set[0], s->set[1], s->set[2], tvp);
}

/* *nowp: the clock when it returns (0 when it was not read after the wait). */
static int sel_common(struct selcall *s, monotime until, monotime now, monotime *nowp)
{
	*nowp = 0;
	sel_save(s);
	for (;;) {
		monotime nearest = sel_nearest(s, now), limit = nearest ? earliest(until, nearest) : until;
		int r, added;

		r = real_select(s, limit, now);
		if (r < 0 || !nearest)
			return r;
		if (limit > now)
			now = ns_now();   /* else it returned at once: the clock is where it was */
		*nowp = now;
		added = sel_mark(s, now);
		if (r + added > 0 || now >= until)
			return r + added;
	}
}

/* The one fd asked for in any of the sets, -1 when none, -2 when more;
 * *in: which sets ask for it (1 read, 2 write, 4 except). */
static inline int sel_single(int nfds, fd_set *r, fd_set *w, fd_set *e, unsigned *in)
{
	int found = -1;

	for (int i = 0, nw = sel_words(nfds); i < nw; i++) {
		unsigned long br = r ? words(r)[i] : 0, bw = w ? words(w)[i] : 0, be = e ? words(e)[i] : 0;
		unsigned long b = br | bw | be;

		if (!b)
			continue;
		if (found >= 0 || (b & (b - 1)))
			return -2;
		found = i * (int)BITS + __builtin_ctzl(b);
		*in = (br ? 1u : 0) | (bw ? 2u : 0) | (be ? 4u : 0);
	}
	return found < nfds ? found : -2;
}

static void tv_left(struct timeval *tv, monotime until, monotime now)
{
	monotime left = until - now;

	if (left < 0)
		left = 0;
	tv->tv_sec = left / 1000000000;
	tv->tv_usec = (left % 1000000000) / 1000;
}

/* The general select: any number of sockets asked for. */
static __attribute__((noinline)) int sel_many(int nfds, fd_set *r, fd_set *w, fd_set *e, struct timeval *tv,
					      monotime start, monotime until)
{
	struct selcall s;
	monotime end;
	int res;

	sel_init(&s, nfds, r, w, e, 0, NULL);
	res = sel_common(&s, until, start, &end);
	if (tv) {
		/* Linux's select leaves the time not slept in the timeout */
		int saved = errno;

		tv_left(tv, until, end ? end : ns_now());
		errno = saved;
	}
	return res;
}

/* No answer before the deadline: the sets as asked, and the general path
 * decides (kernel_tv: the kernel counted the program's own timeout down). */
static __attribute__((noinline, cold)) int sel_one_more(int nfds, fd_set *r, fd_set *w, fd_set *e,
							  struct timeval *tv, int fd, unsigned in, int kernel_tv,
							  monotime until, monotime now)
{
	if (in & 1)
		setbit(r, fd);
	if (in & 2)
		setbit(w, fd);
	if (in & 4)
		setbit(e, fd);
	if (tv && kernel_tv)
		tv_left(tv, until, now);
	return sel_many(nfds, r, w, e, tv, now, until);
}

/* Several fds asked for: governed ones go the general way. */
static __attribute__((noinline)) int sel_multi(int nfds, fd_set *r, fd_set *w, fd_set *e, struct timeval *tv)
{
	monotime now;

	if (likely(!sel_governed(nfds, r, w)))
		return REAL(select)(nfds, r, w, e, tv);
	now = ns_now();
	return sel_many(nfds, r, w, e, tv, now, tv ? now + (int64_t)tv->tv_sec * 1000000000 +
				 (int64_t)tv->tv_usec * 1000 : NEVER);
}

/* select of one governed fd c: straight-line code; anything out of the
 * ordinary goes on in sel_many. nfds_fd: nfds | fd << 16 (both at most
 * FD_SETSIZE), so that the call takes six arguments, all in registers, and
 * ns_select reaches it by a jump. */
static __attribute__((noinline)) int sel_one(int nfds_fd, fd_set *r, fd_set *w, fd_set *e, struct timeval *tv,
					     struct ns_conn *c)
{
	int nfds = nfds_fd & 0xffff, fd = nfds_fd >> 16, res;
	unsigned in = (unsigned)isset(r, fd) | (unsigned)isset(w, fd) << 1 | (unsigned)isset(e, fd) << 2;
	uint32_t x = __atomic_load_n(&c->expired, __ATOMIC_ACQUIRE);
	monotime now, nearest, limit, until;
	struct timeval mine;

	if (unlikely(tv && (tv->tv_sec < 0 || (unsigned long)tv->tv_usec >= 1000000)))
		return ns_real.select(nfds, r, w, e, tv);   /* the kernel's EINVAL */
	now = ns_now();
	until = tv ? now + (int64_t)tv->tv_sec * 1000000000 + (int64_t)tv->tv_usec * 1000 : NEVER;
	if (unlikely(x & (NS_EXP_MASK | NS_ATTN_FAULT)))
		return sel_many(nfds, r, w, e, tv, now, until);
	nearest = ns_wait_deadline(c, in & 1, in & 2, now);
	if (!nearest)
		return ns_real.select(nfds, r, w, e, tv);
	limit = earliest(until, nearest);
	if (limit == until) {
		res = ns_real.select(nfds, r, w, e, tv);   /* the program's own timeout, counted down by the kernel */
	} else {
		struct timespec ts;

		ts_until(limit, now, &ts);
		mine.tv_sec = ts.tv_sec;
		mine.tv_usec = (ts.tv_nsec + 999) / 1000;   /* round up: never end before the deadline */
		if (mine.tv_usec == 1000000) {
			mine.tv_sec++;
			mine.tv_usec = 0;
		}
		res = ns_real.select(nfds, r, w, e, &mine);
	}
	if (res < 0)
		return res;
	if (limit > now)
		now = ns_now();
	/* an answer before the deadline, or the program's own timeout ending
	 * first: as the kernel said */
	if (unlikely(now >= nearest || (res == 0 && limit != until)))
		return sel_one_more(nfds, r, w, e, tv, fd, in, limit == until, until, now);
	if (tv && limit != until)
		tv_left(tv, until, now);
	/* input restarts the read clock; select cannot say whether a writable
	 * connect failed, so output is left to SO_ERROR */
	if (res > 0 && (in & 1) && (LD(c->flags) & NS_C_WAITING) && isset(r, fd))
		ns_wait_ready(c, 1, 0, 1);
	return res;
}

/* libc's select, as a jump (before anything was bound: see real.c) */
#define SEL_REAL(...) (likely(ns_real.select != NULL) ? ns_real.select(__VA_ARGS__) : ns_unbound_select(__VA_ARGS__))

int ns_select(int nfds, fd_set *r, fd_set *w, fd_set *e, struct timeval *tv)
{
	struct ns_conn *c;
	unsigned in = 0;
	int fd;

	if (likely((unsigned)(nfds - 1) < BITS)) {
		/* every fd asked for is in the sets' first word (most select
		 * clients): one word each, no loop; the kernel reads no
		 * further than nfds */
		unsigned long br = r ? words(r)[0] : 0, bw = w ? words(w)[0] : 0, be = e ? words(e)[0] : 0;
		unsigned long b = (br | bw | be) & (~0UL >> (BITS - (unsigned)nfds));

		if (unlikely(b & (b - 1)))
			return sel_multi(nfds, r, w, e, tv);
		fd = b ? __builtin_ctzl(b) : 0;
		c = b ? ns_conn_of(fd) : NULL;
		if (likely(!c) || !((br | bw) & b))
			return SEL_REAL(nfds, r, w, e, tv);
		if (tv && !(tv->tv_sec | tv->tv_usec) &&
		    likely(!(__atomic_load_n(&c->expired, __ATOMIC_ACQUIRE) & (NS_EXP_MASK | NS_ATTN_FAULT)))) {
			/* a zero timeout (a look at the socket's state, which a
			 * busy loop makes over and over) never sleeps: the
			 * deadline is judged before the call, which is then
			 * libc's own. Input it reports restarts the read clock
			 * when the program reads it (or, if it never does, when
			 * the deadline comes due and the general way sees the
			 * input); a deadline reached during the call is seen by
			 * the next one. */
			monotime now = ns_now(), nearest = ns_wait_deadline(c, (br & b) != 0, (bw & b) != 0, now);

			if (likely(!nearest || now < nearest))
				return SEL_REAL(nfds, r, w, e, tv);
		}
		return sel_one(nfds | fd << 16, r, w, e, tv, c);
	}
	/* sets larger than FD_SETSIZE, or a bad timeout: the kernel's business */
	if (nfds <= 0 || nfds > FD_SETSIZE || (!r && !w) ||
	    (tv && (tv->tv_sec < 0 || tv->tv_usec < 0 || tv->tv_usec >= 1000000)))
		return SEL_REAL(nfds, r, w, e, tv);
	fd = sel_single(nfds, r, w, e, &in);
	if (fd == -2)
		return sel_multi(nfds, r, w, e, tv);
	/* one fd asked for */
	c = fd >= 0 ? ns_conn_of(fd) : NULL;
	if (likely(!c || !(in & 3)))
		return SEL_REAL(nfds, r, w, e, tv);
	return sel_one(nfds | fd << 16, r, w, e, tv, c);
}

int ns_pselect(int nfds, fd_set *r, fd_set *w, fd_set *e, const struct timespec *ts, const sigset_t *mask)
{
	struct selcall s;
	monotime now, end;

	if (likely(nfds <= 0 || nfds > FD_SETSIZE || (!r && !w) || !ts_valid(ts)))
		return REAL(pselect)(nfds, r, w, e, ts, mask);
	if (likely(!sel_governed(nfds, r, w)))
		return REAL(pselect)(nfds, r, w, e, ts, mask);
	sel_init(&s, nfds, r, w, e, 1, mask);
	now = ns_now();
	return sel_common(&s, end_ts(ts, now), now, &end);
}

/**** epoll ****/

/* What the kernel holds for a governed socket in an epoll set: the program's
 * events and data, so a deadline can be reported as the program's own event.
 *
 * A wait must cost the same with ten registrations as with ten thousand.
 * Each set keeps a min-heap of the registrations that have a pending
 * deadline, keyed on it, and a list of registrations whose deadline must be
 * computed again before the next wait: the ones just registered or
 * modified, the ones the kernel reported last time (the program read them,
 * which restarts the read clock), the ones whose deadline was reached, and
 * the ones with injected faults. A wait takes the heap's top as its
 * nearest deadline: O(1) plus O(log n) for each registration that changed.
 * A key can be early (the program read a socket without being told it was
 * ready, so its clock restarted unseen): the wait then wakes at that key,
 * finds the deadline has moved, and sleeps on; it is never late. */
struct ep_reg {
	int fd;
	struct ns_conn *conn;   /* held: the kernel keeps the registration while any dup is open */
	uint32_t events;
	epoll_data_t data;
	uint32_t disabled;      /* EPOLLONESHOT delivered; re-armed by EPOLL_CTL_MOD */
	uint32_t et_done;       /* EPOLLET: the deadline's event was delivered once */
	uint32_t gated;         /* EPOLLIN taken out in the kernel: input held by a fault */
	uint32_t faulted;       /* its connection has injected faults (counted in the set) */
	uint32_t connecting;    /* its connection was connecting when last computed (ep_nconnecting) */
	uint32_t dirty;         /* on the set's list to compute again */
	int32_t hidx;           /* index in the set's heap, -1 = not in it */
	monotime key;           /* the deadline it is in the heap for */
	uint64_t seen;          /* the wait round in which the kernel reported it */
	int slot;               /* ...at this index of that round's events */
	uint32_t indata;        /* in the set's by-data hash (its data is not its fd) */
	struct ep_reg *dnext, *dprev;   /* the dirty list */
	UT_hash_handle hd;      /* by data.u64: the kernel's events name it so */
};

/* Registrations are found by fd in an array (most programs, libuv and
 * Python's selectors among them, give the fd as the event's data, so the
 * kernel's events find theirs there too); the others by a hash on data. */
struct ep_set {
	int epfd;
	struct ep_reg **byfd;
	unsigned fdcap, nregs;
	struct ep_reg *bydata;
	struct ep_reg **heap;
	unsigned nheap, cap;
	struct ep_reg *dirty;
	unsigned nfault;
	monotime top;           /* atomic: the heap's top key (0 = none), for waits that need no lock */
	unsigned dirty_any;     /* atomic: the dirty list is not empty */
	struct ep_set *next;
};

/* Guards the registry: a spin lock (the work under it is a few loads and
 * stores, never a system call; a pthread mutex cost more than the work).
 * A fork while another thread held it would leave it held in the child,
 * hence the atfork handlers. */
static int ep_lk;
static pthread_once_t ep_once = PTHREAD_ONCE_INIT;
static struct ep_set *ep_sets;  /* every set, listed */
/* and by its epoll fd: reserved once at the fd table's size and never
 * moved, and a set once made is kept (emptied when its fd closes) so that
 * a wait may read its nearest deadline without the lock */
static struct ep_set **ep_byfd;
static unsigned ep_bycap;
unsigned ns_ep_count;           /* atomic: registrations held; 0 = nothing to do */
static unsigned ep_nconnecting; /* atomic: registrations whose connect is in progress */
static uint64_t ep_round;

static void ep_lock(void)
{
	for (unsigned spins = 0; __atomic_exchange_n(&ep_lk, 1, __ATOMIC_ACQUIRE); spins++) {
		while (__atomic_load_n(&ep_lk, __ATOMIC_RELAXED)) {
			__builtin_ia32_pause();
			if (++spins > 1000) {
				sched_yield();   /* the holder was preempted */
				spins = 0;
			}
		}
	}
}

static void ep_unlock(void)
{
	__atomic_store_n(&ep_lk, 0, __ATOMIC_RELEASE);
}

static void ep_prepare(void) { ep_lock(); }
static void ep_parent(void) { ep_unlock(); }
static void ep_child(void) { __atomic_store_n(&ep_lk, 0, __ATOMIC_RELAXED); }

static void ep_init(void)
{
	pthread_atfork(ep_prepare, ep_parent, ep_child);
}

/* -- the heap of pending deadlines -- */

static void heap_set(struct ep_set *s, unsigned i, struct ep_reg *g)
{
	s->heap[i] = g;
	g->hidx = (int32_t)i;
}

static void heap_up(struct ep_set *s, unsigned i)
{
	struct ep_reg *g = s->heap[i];

	while (i > 0) {
		unsigned up = (i - 1) / 2;

		if (s->heap[up]->key <= g->key)
			break;
		heap_set(s, i, s->heap[up]);
		i = up;
	}
	heap_set(s, i, g);
}

static void heap_down(struct ep_set *s, unsigned i)
{
	struct ep_reg *g = s->heap[i];

	for (;;) {
		unsigned l = 2 * i + 1, m = i;
		monotime km = g->key;

		if (l < s->nheap && s->heap[l]->key < km)
			m = l, km = s->heap[l]->key;
		if (l + 1 < s->nheap && s->heap[l + 1]->key < km)
			m = l + 1;
		if (m == i)
			break;
		heap_set(s, i, s->heap[m]);
		i = m;
	}
	heap_set(s, i, g);
}

static void heap_remove(struct ep_set *s, struct ep_reg *g)
{
	unsigned i = (unsigned)g->hidx;
	struct ep_reg *last;

	if (g->hidx < 0)
		return;
	g->hidx = -1;
	last = s->heap[--s->nheap];
	if (i == s->nheap)
		return;
	heap_set(s, i, last);
	heap_up(s, i);
	heap_down(s, (unsigned)last->hidx);
}

static void top_sync(struct ep_set *s)
{
	__atomic_store_n(&s->top, s->nheap ? s->heap[0]->key : 0, __ATOMIC_RELEASE);
}

/* g's deadline is key (0 = none): in the heap at its place, or out of it.
 * The heap has room for every registration (ep_remember), so this never
 * allocates. */
static void heap_key(struct ep_set *s, struct ep_reg *g, monotime key)
{
	if (!key) {
		heap_remove(s, g);
	} else if (g->hidx < 0) {
		if (s->nheap >= s->cap)
			return;   /* cannot happen: room is made at registration */
		g->key = key;
		heap_set(s, s->nheap++, g);
		heap_up(s, (unsigned)g->hidx);
	} else {
		g->key = key;
		heap_up(s, (unsigned)g->hidx);
		heap_down(s, (unsigned)g->hidx);
	}
	top_sync(s);
}

/* -- registrations -- */

static void mark_dirty(struct ep_set *s, struct ep_reg *g)
{
	if (!g->dirty) {
		g->dirty = 1;
		DL_APPEND2(s->dirty, g, dprev, dnext);
		__atomic_store_n(&s->dirty_any, 1, __ATOMIC_RELEASE);
	}
}

static void ep_drop(struct ep_set *s, struct ep_reg *g)
{
	if (g->conn)
		ns_conn_unref(g->conn);
	heap_remove(s, g);
	top_sync(s);
	if (g->dirty)
		DL_DELETE2(s->dirty, g, dprev, dnext);
	if (g->faulted)
		s->nfault--;
	if (g->connecting)
		__atomic_fetch_sub(&ep_nconnecting, 1, __ATOMIC_RELAXED);
	if (g->indata)
		HASH_DELETE(hd, s->bydata, g);
	s->byfd[g->fd] = NULL;
	s->nregs--;
	free(g);
	__atomic_fetch_sub(&ns_ep_count, 1, __ATOMIC_RELAXED);
}

/* The connection behind a registration: the fd's own, or, once that number
 * is closed while a dup keeps the socket (and the registration) alive, the
 * one it had. A reconnect on the same fd replaces it. */
static struct ns_conn *reg_conn(struct ep_reg *g)
{
	struct ns_conn *cur = ns_conn_of(g->fd);

	if (cur && cur != g->conn && (!g->conn || !__atomic_load_n(&g->conn->fds, __ATOMIC_RELAXED))) {
		ns_conn_ref(cur);
		if (g->conn)
			ns_conn_unref(g->conn);
		g->conn = cur;
	}
	return g->conn;
}

/* Grow *arr (of *cap pointers) to hold index i. 0, or -1 out of memory. */
static int grow(void *arr, unsigned *cap, unsigned i)
{
	void ***a = arr;
	unsigned n = *cap ? *cap : 64;
	void **p;

	while (n <= i)
		n *= 2;
	if (n == *cap)
		return 0;
	p = realloc(*a, n * sizeof(void *));
	if (!p)
		return -1;
	memset(p + *cap, 0, (n - *cap) * sizeof(void *));
	*a = p;
	*cap = n;
	return 0;
}

static struct ep_set *set_of(int epfd)
{
	return (unsigned)epfd < __atomic_load_n(&ep_bycap, __ATOMIC_ACQUIRE) ?
		__atomic_load_n(&ep_byfd[epfd], __ATOMIC_ACQUIRE) : NULL;
}

static struct ep_reg *reg_of(const struct ep_set *s, int fd)
{
	return (unsigned)fd < s->fdcap ? s->byfd[fd] : NULL;
}

static void set_data(struct ep_set *s, struct ep_reg *g, epoll_data_t data)
{
	if (g->indata) {
		HASH_DELETE(hd, s->bydata, g);
		g->indata = 0;
	}
	g->data = data;
	if (data.u64 == (uint64_t)(unsigned)g->fd)
		return;
	ep_oom = 0;
	HASH_ADD(hd, s->bydata, data.u64, sizeof(g->data.u64), g);
	g->indata = !ep_oom;   /* else not findable by data: its deadline still fires from the heap */
}

static void ep_remember(int epfd, int fd, const struct epoll_event *ev)
{
	struct ep_set *s;
	struct ep_reg *g;

	if (epfd < 0 || fd < 0)
		return;
	pthread_once(&ep_once, ep_init);
	ep_lock();
	if (!ep_byfd) {
		void *m = mmap(NULL, (size_t)ns_fdmax * sizeof(*ep_byfd), PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);

		if (m == MAP_FAILED)
			goto out_unlock;
		ep_byfd = m;
		__atomic_store_n(&ep_bycap, ns_fdmax, __ATOMIC_RELEASE);
	}
	s = set_of(epfd);
	if (!s) {
		if ((unsigned)epfd >= ep_bycap || !(s = calloc(1, sizeof(*s))))
			goto out_unlock;
		s->epfd = epfd;
		s->next = ep_sets;
		ep_sets = s;
		__atomic_store_n(&ep_byfd[epfd], s, __ATOMIC_RELEASE);
	}
	g = reg_of(s, fd);
	if (!g) {
		if (grow(&s->byfd, &s->fdcap, (unsigned)fd) < 0)
			goto out_unlock;
		if (s->cap <= s->nregs) {
			unsigned cap = s->cap ? s->cap * 2 : 16;
			struct ep_reg **h = realloc(s->heap, cap * sizeof(*h));

			if (!h)
				goto out_unlock;
			s->heap = h;
			s->cap = cap;
		}
		g = calloc(1, sizeof(*g));
		if (!g)
			goto out_unlock;
		g->fd = fd;
		g->hidx = -1;
		s->byfd[fd] = g;
		s->nregs++;
		__atomic_fetch_add(&ns_ep_count, 1, __ATOMIC_RELAXED);
	}
	g->events = ev->events;
	set_data(s, g, ev->data);
	g->disabled = 0;
	g->et_done = 0;
	g->gated = 0;
	reg_conn(g);
	mark_dirty(s, g);
out_unlock:
	ep_unlock();
}

/* The epoll fd closed: its registrations go; the set itself stays, empty,
 * for the next epoll fd of that number (a wait may be reading it). */
static void set_free(struct ep_set *s)
{
	for (unsigned fd = 0; fd < s->fdcap; fd++)
		if (s->byfd[fd])
			ep_drop(s, s->byfd[fd]);
	s->dirty = NULL;
	__atomic_store_n(&s->dirty_any, 0, __ATOMIC_RELAXED);
	top_sync(s);
}

void ns_wait_note_fd_held(int fd)
{
	struct ep_reg *g;

	ep_lock();
	for (struct ep_set *s = ep_sets; s; s = s->next)
		if ((g = reg_of(s, fd)) != NULL)
			mark_dirty(s, g);
	ep_unlock();
}

static void ep_forget(int epfd, int fd)
{
	struct ep_set *s;
	struct ep_reg *g;

	ep_lock();
	s = set_of(epfd);
	if (s && (g = reg_of(s, fd)) != NULL)
		ep_drop(s, g);
	ep_unlock();
}

void ns_wait_forget_fd_held(int fd)
{
	struct ep_set *s, *next;
	struct ep_reg *g;

	ep_lock();
	for (s = ep_sets; s; s = next) {
		next = s->next;
		if (s->epfd == fd)
			set_free(s);
		else if ((g = reg_of(s, fd)) != NULL)
			ep_drop(s, g);
	}
	ep_unlock();
}

int ns_epoll_ctl(int epfd, int op, int fd, struct epoll_event *ev)
{
	int r = REAL(epoll_ctl)(epfd, op, fd, ev), e = errno;
	uintptr_t v;

	if (r < 0)
		return r;
	v = ns_fd_get(fd);
	if (op == EPOLL_CTL_DEL) {
		if (__atomic_load_n(&ns_ep_count, __ATOMIC_RELAXED))
			ep_forget(epfd, fd);
	} else if (ev && v && (!(v & NS_TAG) || (v & NS_TAG_STREAM))) {
		if (!ns_fd_get(epfd))
			ns_fd_set(epfd, NS_TAG | NS_TAG_EPOLL);
		ep_remember(epfd, fd, ev);
	}
	errno = e;
	return r;
}

enum { W_EPOLL_WAIT, W_EPOLL_PWAIT, W_EPOLL_PWAIT2 };

struct epcall {
	int kind;
	int epfd;
	struct epoll_event *ev;
	int max;
	const sigset_t *mask;
};

static inline int real_epoll(const struct epcall *p, monotime until, monotime now)
{
	struct timespec ts;

	switch (p->kind) {
	case W_EPOLL_WAIT:
		return REAL(epoll_wait)(p->epfd, p->ev, p->max, ms_until(until, now));
	case W_EPOLL_PWAIT:
		return REAL(epoll_pwait)(p->epfd, p->ev, p->max, ms_until(until, now), p->mask);
	default:
		return REAL(epoll_pwait2)(p->epfd, p->ev, p->max, ts_until(until, now, &ts), p->mask);
	}
}

/* Registrations whose input a fault holds back, or no longer holds: their
 * EPOLLIN is taken out of (put back into) the kernel's registration after
 * the lock is dropped, so that a level-triggered wait does not spin on
 * data the program may not see yet, and an edge-triggered one is told
 * again when it may (EPOLL_CTL_MOD re-checks readiness). */
#define GATE_OPS 32
struct gate_ops {
	int n;
	struct { int fd; struct epoll_event ev; } op[GATE_OPS];
};

static __attribute__((noinline, cold)) void ep_gate(struct ep_reg *g, struct ns_conn *c, monotime now,
						   struct gate_ops *ops)
{
	int ev, want;

	if (!(g->events & EPOLLIN) || ops->n == GATE_OPS)
		return;
	want = fault_in(c, now, &ev) == NS_FW_GATED;
	if (want == (int)g->gated)
		return;
	g->gated = (uint32_t)want;
	ops->op[ops->n].fd = g->fd;
	ops->op[ops->n].ev.events = want ? g->events & ~(uint32_t)EPOLLIN : g->events;
	ops->op[ops->n].ev.data = g->data;
	ops->n++;
}

static __attribute__((noinline, cold)) void ep_apply_gates(int epfd, struct gate_ops *ops)
{
	int e = errno;

	for (int i = 0; i < ops->n; i++)
		REAL(epoll_ctl)(epfd, EPOLL_CTL_MOD, ops->op[i].fd, &ops->op[i].ev);
	errno = e;
}

/* Compute g's deadline again and put it in its place. A connection with
 * injected faults stays on the list: what it may see changes with time. */
static void ep_refresh(struct ep_set *s, struct ep_reg *g, monotime now, struct gate_ops *ops)
{
	struct ns_conn *c = reg_conn(g);
	monotime d = 0;
	uint32_t x = 0, f, conn;

	if (c)
		x = __atomic_load_n(&c->expired, __ATOMIC_ACQUIRE);
	f = c && (x & NS_ATTN_FAULT);
	if (f != g->faulted) {
		g->faulted = f;
		if (f)
			s->nfault++;
		else
			s->nfault--;
	}
	conn = c && (LD(c->flags) & NS_C_CONNECTING);
	if (conn != g->connecting) {
		g->connecting = conn;
		if (conn)
			__atomic_fetch_add(&ep_nconnecting, 1, __ATOMIC_RELAXED);
		else
			__atomic_fetch_sub(&ep_nconnecting, 1, __ATOMIC_RELAXED);
	}
	if (c && !g->disabled) {
		if (unlikely(f))
			ep_gate(g, c, now, ops);
		if (!((g->events & EPOLLET) && g->et_done))
			d = (x & NS_EXP_MASK) ? now :
				ns_wait_interest(c, x, g->events & (EPOLLIN | EPOLLPRI), g->events & EPOLLOUT, now);
	}
	heap_key(s, g, d);
}

static __attribute__((noinline)) monotime ep_nearest_dirty(struct ep_set *s, int epfd, monotime now)
{
	monotime nearest = 0;
	struct ep_reg *g, *keep = NULL;
	struct gate_ops ops;

	ops.n = 0;
	ep_lock();
	while ((g = s->dirty) != NULL) {
		DL_DELETE2(s->dirty, g, dprev, dnext);
		g->dirty = 0;
		ep_refresh(s, g, now, &ops);
		if (g->faulted)
			DL_APPEND2(keep, g, dprev, dnext);
	}
	for (g = keep; g; g = g->dnext)
		g->dirty = 1;
	s->dirty = keep;
	__atomic_store_n(&s->dirty_any, keep != NULL, __ATOMIC_RELEASE);
	if (s->nheap)
		nearest = s->heap[0]->key;
	ep_unlock();
	if (unlikely(ops.n))
		ep_apply_gates(epfd, &ops);
	return nearest;
}

/* The nearest deadline of the set's registrations (0 = none): the heap's
 * top, read without the lock when no registration changed since. */
static inline monotime ep_nearest(int epfd, monotime now)
{
	struct ep_set *s = set_of(epfd);

	if (!s)
		return 0;
	if (likely(!__atomic_load_n(&s->dirty_any, __ATOMIC_ACQUIRE)))
		return __atomic_load_n(&s->top, __ATOMIC_ACQUIRE);
	return ep_nearest_dirty(s, epfd, now);
}

/* A registration the deadline pass looks at: report it (an injected
 * answer, or the deadline's event) if it is due. Returns 1 if an event was
 * added. */
static int ep_report(const struct epcall *p, struct ep_reg *g, int slot, monotime now)
{
	struct ns_conn *c = reg_conn(g);
	struct epoll_event *out = &p->ev[slot];
	int fev;

	if (!c || g->disabled || ((g->events & EPOLLET) && g->et_done))
		return 0;
	if (has_faults(c) && (g->events & EPOLLIN) && !ns_exp_kind(c) && fault_in(c, now, &fev) == NS_FW_READY) {
		/* an injected end or answer: the program's own event */
		out->events = EPOLLIN | ((fev & NS_FWE_ERR) ? EPOLLERR : 0) | ((fev & NS_FWE_HUP) ? EPOLLHUP : 0) |
			      ((fev & NS_FWE_RDHUP) ? (g->events & EPOLLRDHUP) : 0);
	} else if (ns_wait_expire(c, g->fd, g->events & (EPOLLIN | EPOLLPRI), g->events & EPOLLOUT, now)) {
		out->events = (g->events & (EPOLLIN | EPOLLOUT)) | EPOLLERR;
	} else {
		return 0;
	}
	out->data = g->data;
	if (g->events & EPOLLET)
		g->et_done = 1;
	if (g->events & EPOLLONESHOT)
		g->disabled = 1;
	return 1;
}

/* After the real wait: the kernel's events first (each found by its data,
 * its read clock to restart), then one event carrying the program's own
 * data for each registration whose deadline passed, honouring its mask,
 * EPOLLET and EPOLLONESHOT. Only the heap's due entries and the connections
 * with faults are looked at. Returns events added. */
static int ep_mark(const struct epcall *p, int r, monotime now)
{
	struct ep_set *s;
	struct ep_reg *g;
	uint64_t round;
	int added = 0;

	ep_lock();
	round = ++ep_round;
	s = set_of(p->epfd);
	if (!s)
		goto out_unlock;
	for (int i = 0; i < r; i++) {
		uint32_t rv = p->ev[i].events;
		uint64_t key = p->ev[i].data.u64;
		struct ns_conn *c;

		g = key < s->fdcap ? s->byfd[key] : NULL;
		if (!g || g->data.u64 != key)
			HASH_FIND(hd, s->bydata, &key, sizeof(key), g);
		if (!g)
			continue;
		g->seen = round;
		g->slot = i;
		c = reg_conn(g);
		if (c)
			ns_wait_ready(c, rv & (EPOLLIN | EPOLLHUP | EPOLLRDHUP), rv & EPOLLOUT, rv & (EPOLLERR | EPOLLHUP));
		if (rv & (EPOLLIN | EPOLLPRI | EPOLLHUP | EPOLLRDHUP | EPOLLERR))
			mark_dirty(s, g);   /* its read clock restarts: computed again before the next wait */
	}
	/* due deadlines: taken off the heap to look at, computed again next wait */
	while (s->nheap && s->heap[0]->key <= now) {
		g = s->heap[0];
		heap_remove(s, g);
		mark_dirty(s, g);
		if (g->seen != round) {
			if (r + added < p->max)
				added += ep_report(p, g, r + added, now);
		} else if ((g->events & EPOLLIN) && reg_conn(g) && g->slot < r &&
			   !(p->ev[g->slot].events & (EPOLLIN | EPOLLHUP | EPOLLRDHUP | EPOLLERR)) &&
			   ns_input_expired(reg_conn(g), g->fd, now)) {
			/* reported for output alone: that does not answer its
			 * wait for input, whose deadline passed */
			p->ev[g->slot].events |= EPOLLIN | EPOLLERR;
		}
	}
	top_sync(s);
	if (unlikely(s->nfault)) {
		for (unsigned fd = 0; fd < s->fdcap; fd++) {
			g = s->byfd[fd];
			if (g && g->faulted && g->seen != round && g->hidx >= 0 && r + added < p->max &&
			    has_faults(g->conn) && (g->events & EPOLLIN) && !ns_exp_kind(g->conn))
				added += ep_report(p, g, r + added, now);
		}
	}
out_unlock:
	ep_unlock();
	return added;
}

/* Did any of the kernel's events tell input (or an end): the reports that
 * restart a read clock, and so must reach the registry? */
static int ep_any_input(const struct epcall *p, int r)
{
	for (int i = 0; i < r; i++)
		if (p->ev[i].events & (EPOLLIN | EPOLLPRI | EPOLLHUP | EPOLLRDHUP | EPOLLERR))
			return 1;
	return 0;
}

static int ep_common(const struct epcall *p, monotime until, monotime now)
{
	for (;;) {
		monotime nearest = ep_nearest(p->epfd, now), limit;
		int r, added;

		if (!nearest)
			return real_epoll(p, until, now);
		limit = earliest(until, nearest);
		r = real_epoll(p, limit, now);
		if (r < 0)
			return r;
		/* a wait that could not sleep returned at once: the clock is
		 * where it was (within the system call); otherwise read it */
		if (limit > now)
			now = ns_now();
		/* ready before any deadline, and nothing the registry must
		 * see: no input (whose read restarts a clock), no connect in
		 * progress (whose completion the wait reports) */
		if (r > 0 && now < nearest && !ep_any_input(p, r) && !__atomic_load_n(&ep_nconnecting, __ATOMIC_RELAXED))
			return r;
		added = ep_mark(p, r, now);
		if (r + added > 0 || now >= until)
			return r + added;
	}
}

static int ep_tracked(int epfd, int max)
{
	return __atomic_load_n(&ns_ep_count, __ATOMIC_RELAXED) && max > 0 && (ns_fd_get(epfd) & NS_TAG_EPOLL);
}

int ns_epoll_wait(int epfd, struct epoll_event *ev, int max, int timeout_ms)
{
	struct epcall p = { W_EPOLL_WAIT, epfd, ev, max, NULL };
	monotime now;

	if (likely(!ep_tracked(epfd, max)))
		return REAL(epoll_wait)(epfd, ev, max, timeout_ms);
	now = ns_now();
	return ep_common(&p, end_ms(timeout_ms, now), now);
}

int ns_epoll_pwait(int epfd, struct epoll_event *ev, int max, int timeout_ms, const sigset_t *mask)
{
	struct epcall p = { W_EPOLL_PWAIT, epfd, ev, max, mask };
	monotime now;

	if (likely(!ep_tracked(epfd, max)))
		return REAL(epoll_pwait)(epfd, ev, max, timeout_ms, mask);
	now = ns_now();
	return ep_common(&p, end_ms(timeout_ms, now), now);
}

int ns_epoll_pwait2(int epfd, struct epoll_event *ev, int max, const struct timespec *ts, const sigset_t *mask)
{
	struct epcall p = { W_EPOLL_PWAIT2, epfd, ev, max, mask };
	monotime now;

	if (!REAL(epoll_pwait2)) {
		errno = ENOSYS;
		return -1;
	}
	if (likely(!ep_tracked(epfd, max) || !ts_valid(ts)))
		return REAL(epoll_pwait2)(epfd, ev, max, ts, mask);
	now = ns_now();
	return ep_common(&p, end_ts(ts, now), now);
}

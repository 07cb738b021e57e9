/* wait_poll.c -- deadlines inside poll, ppoll, __poll_chk and __ppoll_chk.
 *
 * Event-loop programs (curl, wget, node, Python sockets with a timeout)
 * never block in recv: they wait here. A wait that holds a governed socket
 * with a pending connect, read or total deadline is shortened to the nearest
 * one; when it passes, the socket is reported ready with an error (writable
 * for a connect, readable for a read) and the connection then answers
 * ETIMEDOUT. A wait that woke early for nothing goes back to sleep for the
 * rest of the program's own timeout, which still ends the wait with 0 ready
 * exactly as the real call would. A wait with no governed socket pending
 * calls straight through. The same holds for select (wait_select.c) and
 * epoll (wait_epoll.c). */
#include "wait.h"

#include <errno.h>

#include "real.h"

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
		if (unlikely(x & NS_ATTN_GATE))
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

		short hold = 0;

		if (!c)
			continue;
		if ((p->fds[i].events & P_IN) && fault_in(c, now, &ev) == NS_FW_GATED)
			hold |= P_IN;
		if ((p->fds[i].events & P_OUT) && out_gated(c, now))
			hold |= P_OUT;   /* a request held for rate's token */
		if (hold) {
			h->idx[h->n] = i;
			h->ev[h->n++] = p->fds[i].events;
			p->fds[i].events &= (short)~hold;
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

	if (unlikely(x & (NS_EXP_MASK | NS_ATTN_GATE)))
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


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
#include <stdlib.h>
#include <string.h>

#include "real.h"

/* uthash must never exit inside a host process: on allocation failure the
 * registration is simply not tracked (and that socket's waits pass through). */
#define HASH_NONFATAL_OOM 1
static int ep_oom;
#define uthash_nonfatal_oom(obj) (ep_oom = 1)
#include <uthash.h>

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
	if (!ts || ts->tv_sec > (NEVER - now) / 1000000000 - 1)
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
	buf->tv_nsec = left % 1000000000;
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

static int real_poll(const struct pollcall *p, monotime until, monotime now)
{
	struct timespec ts, *tsp;

	switch (p->kind) {
	case W_POLL:
		return REAL(poll)(p->fds, p->n, ms_until(until, now));
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

static int poll_common(struct pollcall *p, monotime until)
{
	monotime now = ns_now();

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
		now = ns_now();
		added = poll_mark(p, now);
		if (r + added > 0 || now >= until)
			return r + added;
		/* woke for a deadline that did not fire: sleep on */
	}
}

int ns_poll(struct pollfd *fds, nfds_t n, int timeout_ms)
{
	struct pollcall p = { W_POLL, fds, n, NULL, 0, 0 };

	if (likely(!poll_governed(&p)))
		return REAL(poll)(fds, n, timeout_ms);
	return poll_common(&p, end_ms(timeout_ms, ns_now()));
}

int ns_poll_chk(struct pollfd *fds, nfds_t n, int timeout_ms, size_t fdslen)
{
	struct pollcall p = { W_POLL_CHK, fds, n, NULL, fdslen, 0 };

	if (likely(fdslen / sizeof(*fds) < n || !poll_governed(&p)))
		return REAL(poll_chk)(fds, n, timeout_ms, fdslen);
	return poll_common(&p, end_ms(timeout_ms, ns_now()));
}

int ns_ppoll(struct pollfd *fds, nfds_t n, const struct timespec *ts, const sigset_t *mask)
{
	struct pollcall p = { W_PPOLL, fds, n, mask, 0, 0 };

	if (likely(!ts_valid(ts) || !poll_governed(&p)))
		return REAL(ppoll)(fds, n, ts, mask);
	return poll_common(&p, end_ts(ts, ns_now()));
}

int ns_ppoll_chk(struct pollfd *fds, nfds_t n, const struct timespec *ts, const sigset_t *mask, size_t fdslen)
{
	struct pollcall p = { W_PPOLL_CHK, fds, n, mask, fdslen, 0 };

	if (likely(!ts_valid(ts) || fdslen / sizeof(*fds) < n || !poll_governed(&p)))
		return REAL(ppoll_chk)(fds, n, ts, mask, fdslen);
	return poll_common(&p, end_ts(ts, ns_now()));
}

/**** select, pselect ****/

#define NWORDS (FD_SETSIZE / (8 * sizeof(unsigned long)))
#define BITS (8 * sizeof(unsigned long))

static unsigned long *words(fd_set *s)
{
	return (unsigned long *)(void *)s;
}

static int isset(const fd_set *s, int fd)
{
	return s && ((const unsigned long *)(const void *)s)[fd / BITS] & (1UL << (fd % BITS));
}

static void setbit(fd_set *s, int fd)
{
	words(s)[fd / BITS] |= 1UL << (fd % BITS);
}

struct selcall {
	int nfds;
	fd_set *set[3];          /* the program's read, write, except sets (may be NULL) */
	fd_set in[3];            /* what it asked for */
	int pselect;
	const sigset_t *mask;
	int faults;              /* a governed socket here has injected faults */
};

/* Call fn on each governed fd asked for in the read or write set. */
#define FOR_GOVERNED(s, fd, c) \
	for (int w_ = 0, fd = 0; w_ < (int)NWORDS && w_ * (int)BITS < (s)->nfds; w_++) \
		for (unsigned long b_ = (((s)->set[0] ? words(&(s)->in[0])[w_] : 0) | \
					 ((s)->set[1] ? words(&(s)->in[1])[w_] : 0)); \
		     b_ && ((fd = w_ * (int)BITS + __builtin_ctzl(b_)), 1); b_ &= b_ - 1) \
			for (struct ns_conn *c = fd < (s)->nfds ? ns_conn_of(fd) : NULL; c; c = NULL)

static int sel_governed(struct selcall *s)
{
	FOR_GOVERNED(s, fd, c)
		return 1;
	return 0;
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

	for (int i = 0; i < 3; i++)
		if (s->set[i])
			*s->set[i] = s->in[i];
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

static int sel_common(struct selcall *s, monotime until)
{
	monotime now = ns_now();

	for (int i = 0; i < 3; i++)
		if (s->set[i])
			s->in[i] = *s->set[i];
	for (;;) {
		monotime nearest = sel_nearest(s, now);
		int r, added;

		r = real_select(s, nearest ? earliest(until, nearest) : until, now);
		if (r < 0 || !nearest)
			return r;
		now = ns_now();
		added = sel_mark(s, now);
		if (r + added > 0 || now >= until)
			return r + added;
	}
}

int ns_select(int nfds, fd_set *r, fd_set *w, fd_set *e, struct timeval *tv)
{
	struct selcall s = { nfds, { r, w, e }, { { { 0 } } }, 0, NULL, 0 };
	monotime start, until;
	int res;

	/* sets larger than FD_SETSIZE, or a bad timeout: the kernel's business */
	if (likely(nfds <= 0 || nfds > FD_SETSIZE || (!r && !w) ||
		   (tv && (tv->tv_sec < 0 || tv->tv_usec < 0 || tv->tv_usec >= 1000000))))
		return REAL(select)(nfds, r, w, e, tv);
	if (r)
		s.in[0] = *r;
	if (w)
		s.in[1] = *w;
	if (likely(!sel_governed(&s)))
		return REAL(select)(nfds, r, w, e, tv);
	start = ns_now();
	until = tv ? start + (int64_t)tv->tv_sec * 1000000000 + (int64_t)tv->tv_usec * 1000 : NEVER;
	res = sel_common(&s, until);
	if (tv) {
		/* Linux's select leaves the time not slept in the timeout */
		int saved = errno;
		monotime left = until - ns_now();

		if (left < 0)
			left = 0;
		tv->tv_sec = left / 1000000000;
		tv->tv_usec = (left % 1000000000) / 1000;
		errno = saved;
	}
	return res;
}

int ns_pselect(int nfds, fd_set *r, fd_set *w, fd_set *e, const struct timespec *ts, const sigset_t *mask)
{
	struct selcall s = { nfds, { r, w, e }, { { { 0 } } }, 1, mask, 0 };

	if (likely(nfds <= 0 || nfds > FD_SETSIZE || (!r && !w) || !ts_valid(ts)))
		return REAL(pselect)(nfds, r, w, e, ts, mask);
	if (r)
		s.in[0] = *r;
	if (w)
		s.in[1] = *w;
	if (likely(!sel_governed(&s)))
		return REAL(pselect)(nfds, r, w, e, ts, mask);
	return sel_common(&s, end_ts(ts, ns_now()));
}

/**** epoll ****/

/* What the kernel holds for a governed socket in an epoll set: the program's
 * events and data, so a deadline can be reported as the program's own event. */
struct ep_reg {
	int fd;
	struct ns_conn *conn;   /* held: the kernel keeps the registration while any dup is open */
	uint32_t events;
	epoll_data_t data;
	uint32_t disabled;      /* EPOLLONESHOT delivered; re-armed by EPOLL_CTL_MOD */
	uint32_t et_done;       /* EPOLLET: the deadline's event was delivered once */
	uint32_t gated;         /* EPOLLIN taken out in the kernel: input held by a fault */
	uint64_t seen;          /* the wait round in which the kernel reported it */
	UT_hash_handle hh;
};

struct ep_set {
	int epfd;
	struct ep_reg *regs;
	UT_hash_handle hh;
};

/* Guards the registry: held for hash lookups and field updates, never across
 * a system call. A fork while another thread held it would leave it locked
 * in the child, hence the atfork handlers. */
static pthread_mutex_t ep_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t ep_once = PTHREAD_ONCE_INIT;
static struct ep_set *ep_sets;
static unsigned ep_count;       /* atomic: registrations held; 0 = nothing to do */
static uint64_t ep_round;

static void ep_prepare(void) { pthread_mutex_lock(&ep_lock); }
static void ep_parent(void) { pthread_mutex_unlock(&ep_lock); }
static void ep_child(void) { pthread_mutex_init(&ep_lock, NULL); }

static void ep_init(void)
{
	pthread_atfork(ep_prepare, ep_parent, ep_child);
}

static void ep_drop(struct ep_set *s, struct ep_reg *g)
{
	if (g->conn)
		ns_conn_unref(g->conn);
	HASH_DEL(s->regs, g);
	free(g);
	__atomic_fetch_sub(&ep_count, 1, __ATOMIC_RELAXED);
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

static void ep_remember(int epfd, int fd, const struct epoll_event *ev)
{
	struct ep_set *s;
	struct ep_reg *g;

	pthread_once(&ep_once, ep_init);
	pthread_mutex_lock(&ep_lock);
	HASH_FIND_INT(ep_sets, &epfd, s);
	if (!s) {
		s = calloc(1, sizeof(*s));
		if (!s)
			goto out_unlock;
		s->epfd = epfd;
		ep_oom = 0;
		HASH_ADD_INT(ep_sets, epfd, s);
		if (ep_oom) {
			free(s);
			goto out_unlock;
		}
	}
	HASH_FIND_INT(s->regs, &fd, g);
	if (!g) {
		g = calloc(1, sizeof(*g));
		if (!g)
			goto out_unlock;
		g->fd = fd;
		ep_oom = 0;
		HASH_ADD_INT(s->regs, fd, g);
		if (ep_oom) {
			free(g);
			goto out_unlock;
		}
		__atomic_fetch_add(&ep_count, 1, __ATOMIC_RELAXED);
	}
	g->events = ev->events;
	g->data = ev->data;
	g->disabled = 0;
	g->et_done = 0;
	g->gated = 0;
	reg_conn(g);
out_unlock:
	pthread_mutex_unlock(&ep_lock);
}

static void ep_forget(int epfd, int fd)
{
	struct ep_set *s;
	struct ep_reg *g;

	pthread_mutex_lock(&ep_lock);
	HASH_FIND_INT(ep_sets, &epfd, s);
	if (s) {
		HASH_FIND_INT(s->regs, &fd, g);
		if (g)
			ep_drop(s, g);
	}
	pthread_mutex_unlock(&ep_lock);
}

void ns_wait_forget_fd(int fd)
{
	struct ep_set *s, *stmp;
	struct ep_reg *g, *gtmp;

	if (!__atomic_load_n(&ep_count, __ATOMIC_RELAXED))
		return;
	pthread_mutex_lock(&ep_lock);
	HASH_ITER(hh, ep_sets, s, stmp) {
		if (s->epfd == fd) {
			HASH_ITER(hh, s->regs, g, gtmp)
				ep_drop(s, g);
			HASH_DEL(ep_sets, s);
			free(s);
			continue;
		}
		HASH_FIND_INT(s->regs, &fd, g);
		if (g)
			ep_drop(s, g);
	}
	pthread_mutex_unlock(&ep_lock);
}

int ns_epoll_ctl(int epfd, int op, int fd, struct epoll_event *ev)
{
	int r = REAL(epoll_ctl)(epfd, op, fd, ev), e = errno;
	uintptr_t v;

	if (r < 0)
		return r;
	v = ns_fd_get(fd);
	if (op == EPOLL_CTL_DEL) {
		if (__atomic_load_n(&ep_count, __ATOMIC_RELAXED))
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

static int real_epoll(const struct epcall *p, monotime until, monotime now)
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

static inline monotime ep_nearest(int epfd, monotime now)
{
	monotime nearest = 0;
	struct ep_set *s;
	struct ep_reg *g, *tmp;
	struct gate_ops ops;

	ops.n = 0;
	pthread_mutex_lock(&ep_lock);
	HASH_FIND_INT(ep_sets, &epfd, s);
	if (s) {
		HASH_ITER(hh, s->regs, g, tmp) {
			struct ns_conn *c = reg_conn(g);
			monotime d;
			uint32_t x;

			if (!c || g->disabled)
				continue;
			x = __atomic_load_n(&c->expired, __ATOMIC_ACQUIRE);
			if (unlikely(x & NS_ATTN_FAULT))
				ep_gate(g, c, now, &ops);
			if ((g->events & EPOLLET) && g->et_done)
				continue;
			if (x & NS_EXP_MASK) {
				nearest = now;
				break;
			}
			d = ns_wait_interest(c, x, g->events & (EPOLLIN | EPOLLPRI), g->events & EPOLLOUT, now);
			if (d && (!nearest || d < nearest))
				nearest = d;
		}
	}
	pthread_mutex_unlock(&ep_lock);
	if (unlikely(ops.n))
		ep_apply_gates(epfd, &ops);
	return nearest;
}

/* After the real wait: the kernel's events first, then one event carrying
 * the program's own data for each registration whose deadline passed,
 * honouring its mask, EPOLLET and EPOLLONESHOT. Returns events added. */
static int ep_mark(const struct epcall *p, int r, monotime now)
{
	struct ep_set *s;
	struct ep_reg *g, *tmp;
	uint64_t round;
	int added = 0;

	pthread_mutex_lock(&ep_lock);
	round = ++ep_round;
	HASH_FIND_INT(ep_sets, &p->epfd, s);
	if (!s)
		goto out_unlock;
	for (int i = 0; i < r; i++) {
		HASH_ITER(hh, s->regs, g, tmp) {
			struct ns_conn *c;
			uint32_t rv = p->ev[i].events;

			if (g->data.u64 != p->ev[i].data.u64)
				continue;
			g->seen = round;
			c = reg_conn(g);
			if (c)
				ns_wait_ready(c, rv & (EPOLLIN | EPOLLHUP | EPOLLRDHUP), rv & EPOLLOUT,
					      rv & (EPOLLERR | EPOLLHUP));
		}
	}
	HASH_ITER(hh, s->regs, g, tmp) {
		struct ns_conn *c = reg_conn(g);
		struct epoll_event *out;
		int fev;

		if (!c || g->seen == round || g->disabled || r + added >= p->max)
			continue;
		if ((g->events & EPOLLET) && g->et_done)
			continue;
		if (has_faults(c) && (g->events & EPOLLIN) && !ns_exp_kind(c) && fault_in(c, now, &fev) == NS_FW_READY) {
			/* an injected end or answer: the program's own event */
			out = &p->ev[r + added++];
			out->events = EPOLLIN | ((fev & NS_FWE_ERR) ? EPOLLERR : 0) | ((fev & NS_FWE_HUP) ? EPOLLHUP : 0) |
				      ((fev & NS_FWE_RDHUP) ? (g->events & EPOLLRDHUP) : 0);
			out->data = g->data;
			if (g->events & EPOLLET)
				g->et_done = 1;
			if (g->events & EPOLLONESHOT)
				g->disabled = 1;
			continue;
		}
		if (!ns_wait_expire(c, g->fd, g->events & (EPOLLIN | EPOLLPRI), g->events & EPOLLOUT, now))
			continue;
		out = &p->ev[r + added++];
		out->events = (g->events & (EPOLLIN | EPOLLOUT)) | EPOLLERR;
		out->data = g->data;
		if (g->events & EPOLLET)
			g->et_done = 1;
		if (g->events & EPOLLONESHOT)
			g->disabled = 1;
	}
out_unlock:
	pthread_mutex_unlock(&ep_lock);
	return added;
}

static int ep_common(const struct epcall *p, monotime until)
{
	monotime now = ns_now();

	for (;;) {
		monotime nearest = ep_nearest(p->epfd, now);
		int r, added;

		if (!nearest)
			return real_epoll(p, until, now);
		r = real_epoll(p, earliest(until, nearest), now);
		if (r < 0)
			return r;
		now = ns_now();
		/* Ready events before any deadline: the program will read, and a
		 * read resets the wait clock; no need to take the lock again. */
		if (r > 0 && now < nearest)
			return r;
		added = ep_mark(p, r, now);
		if (r + added > 0 || now >= until)
			return r + added;
	}
}

static int ep_tracked(int epfd, int max)
{
	return __atomic_load_n(&ep_count, __ATOMIC_RELAXED) && max > 0 && (ns_fd_get(epfd) & NS_TAG_EPOLL);
}

int ns_epoll_wait(int epfd, struct epoll_event *ev, int max, int timeout_ms)
{
	struct epcall p = { W_EPOLL_WAIT, epfd, ev, max, NULL };

	if (likely(!ep_tracked(epfd, max)))
		return REAL(epoll_wait)(epfd, ev, max, timeout_ms);
	return ep_common(&p, end_ms(timeout_ms, ns_now()));
}

int ns_epoll_pwait(int epfd, struct epoll_event *ev, int max, int timeout_ms, const sigset_t *mask)
{
	struct epcall p = { W_EPOLL_PWAIT, epfd, ev, max, mask };

	if (likely(!ep_tracked(epfd, max)))
		return REAL(epoll_pwait)(epfd, ev, max, timeout_ms, mask);
	return ep_common(&p, end_ms(timeout_ms, ns_now()));
}

int ns_epoll_pwait2(int epfd, struct epoll_event *ev, int max, const struct timespec *ts, const sigset_t *mask)
{
	struct epcall p = { W_EPOLL_PWAIT2, epfd, ev, max, mask };

	if (!REAL(epoll_pwait2)) {
		errno = ENOSYS;
		return -1;
	}
	if (likely(!ep_tracked(epfd, max) || !ts_valid(ts)))
		return REAL(epoll_pwait2)(epfd, ev, max, ts, mask);
	return ep_common(&p, end_ts(ts, ns_now()));
}

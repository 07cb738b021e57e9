/* wait_epoll.c -- deadlines inside epoll waits: the registry of what each
 * epoll set watches (by fd number, kept from epoll_ctl), its deadlines in
 * a heap, and epoll_wait, epoll_pwait and epoll_pwait2 shortened to the
 * nearest, as in poll (wait_poll.c). */
#include "lock.h"
#include "wait.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "real.h"


/* on allocation failure a registration is simply not tracked (and that
 * socket's waits pass through) */
static int ep_oom;
#define uthash_nonfatal_oom(obj) (ep_oom = 1)
#include "../policy/hash.h"
#include <utlist.h>

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
	uint32_t gated;         /* events taken out in the kernel: EPOLLIN (input held by a fault),
				 * EPOLLOUT (a request held for rate's token) */
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
static uint64_t ep_once;        /* lock.h: a handler inside its own thread's set-up does without */
static struct ep_set *ep_sets;  /* every set, listed */
/* and by its epoll fd: reserved once at the fd table's size and never
 * moved, and a set once made is kept (emptied when its fd closes) so that
 * a wait may read its nearest deadline without the lock */
static struct ep_set **ep_byfd;
static unsigned ep_bycap;
static unsigned ep_nconnecting; /* atomic: registrations whose connect is in progress */
static uint64_t ep_round;

/* 1: taken; 0: this thread holds it already (a signal handler that closed,
 * connected or waited inside its own thread's hold, lock.h): the caller
 * does without it. */
static int ep_lock(void)
{
	if (!ns_lock_mine(NS_LOCK_EPOLL))
		return 0;
	for (unsigned spins = 0; __atomic_exchange_n(&ep_lk, 1, __ATOMIC_ACQUIRE); spins++) {
		while (__atomic_load_n(&ep_lk, __ATOMIC_RELAXED)) {
			__builtin_ia32_pause();
			if (++spins > 1000) {
				sched_yield();   /* the holder was preempted */
				spins = 0;
			}
		}
	}
	return 1;
}

static void ep_unlock(void)
{
	__atomic_store_n(&ep_lk, 0, __ATOMIC_RELEASE);
	ns_lock_done(NS_LOCK_EPOLL);
}

static int ep_fork_took;   /* the forking thread took the lock for the fork (not inside its own hold) */
static void ep_prepare(void) { ep_fork_took = ep_lock(); }
static void ep_parent(void)
{
	if (ep_fork_took)
		ep_unlock();
}
static void ep_child(void)
{
	__atomic_store_n(&ep_lk, 0, __ATOMIC_RELAXED);
	if (ep_fork_took)
		ns_lock_done(NS_LOCK_EPOLL);
}

static void ep_init(void)
{
	(void)ns_fork_hook(ep_prepare, ep_parent, ep_child);
	/* the fd table tells the registry of numbers that change hands
	 * (conn.h), once there are registrations (ns_ep_count, counted here) */
	__atomic_store_n(&ns_fd_watch_note, ns_wait_note_fd_held, __ATOMIC_RELEASE);
	__atomic_store_n(&ns_fd_watch_forget, ns_wait_forget_fd_held, __ATOMIC_RELEASE);
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
	ns_once(&ep_once, ep_init);
	if (!ep_lock())
		return;   /* (not remembered: its deadlines are the kernel's) */
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

	if (!ep_lock())
		return;
	for (struct ep_set *s = ep_sets; s; s = s->next)
		if ((g = reg_of(s, fd)) != NULL)
			mark_dirty(s, g);
	ep_unlock();
}

static void ep_forget(int epfd, int fd)
{
	struct ep_set *s;
	struct ep_reg *g;

	if (!ep_lock())
		return;
	s = set_of(epfd);
	if (s && (g = reg_of(s, fd)) != NULL)
		ep_drop(s, g);
	ep_unlock();
}

void ns_wait_forget_fd_held(int fd)
{
	struct ep_set *s, *next;
	struct ep_reg *g;

	if (!ep_lock())
		return;
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

/* Registrations whose input a fault holds back (or whose output rate
 * holds back), or no longer holds: their EPOLLIN (EPOLLOUT) is taken out
 * of (put back into) the kernel's registration after the lock is dropped,
 * so that a level-triggered wait does not spin on data the program may not
 * see yet, and an edge-triggered one is told again when it may
 * (EPOLL_CTL_MOD re-checks readiness). */
#define GATE_OPS 32
struct gate_ops {
	int n;
	struct { int fd; struct epoll_event ev; } op[GATE_OPS];
};

static __attribute__((noinline, cold)) void ep_gate(struct ep_reg *g, struct ns_conn *c, monotime now,
						   struct gate_ops *ops)
{
	int ev;
	uint32_t want = 0;

	if (ops->n == GATE_OPS)
		return;
	if ((g->events & EPOLLIN) && fault_in(c, now, &ev) == NS_FW_GATED)
		want |= EPOLLIN;
	if ((g->events & EPOLLOUT) && out_gated(c, now))
		want |= EPOLLOUT;
	if (want == g->gated)
		return;
	g->gated = want;
	ops->op[ops->n].fd = g->fd;
	ops->op[ops->n].ev.events = g->events & ~want;
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
	f = c && (x & NS_ATTN_GATE);
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
		if (unlikely(f || g->gated))
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
	if (!ep_lock())
		return __atomic_load_n(&s->top, __ATOMIC_ACQUIRE);   /* a handler's wait inside its thread's */
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

	if (!ep_lock())
		return 0;   /* a handler's wait inside its own thread's hold: the kernel's events as they are */
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
		/* its read clock restarts, or its connect completed (the key
		 * was the connect's deadline; a registration for input and
		 * output, as gRPC's, would keep it and start the read clock
		 * only when it came): computed again before the next wait */
		if ((rv & (EPOLLIN | EPOLLPRI | EPOLLHUP | EPOLLRDHUP | EPOLLERR)) || g->connecting)
			mark_dirty(s, g);
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


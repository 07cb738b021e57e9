/* wait_select.c -- deadlines inside select and pselect, as in poll
 * (wait_poll.c): the wait is shortened to the nearest deadline of the
 * governed sockets in its sets, which are then reported ready. */
#include "wait.h"

#include <errno.h>
#include <string.h>

#include "real.h"

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

/* A loop over the governed fds asked for in the read or write set: fd,
 * and c its connection, in the body. */
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
		s->faults |= (x & NS_ATTN_GATE) != 0;
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
	if (unlikely(s->faults)) {
		/* input held back by a fault, output by rate (a request
		 * waiting for its token), is not asked of the kernel */
		FOR_GOVERNED(s, fd, c) {
			int ev;

			if (s->set[0] && has_faults(c) && isset(&s->in[0], fd) && fault_in(c, now, &ev) == NS_FW_GATED)
				words(s->set[0])[fd / BITS] &= ~(1UL << (fd % BITS));
			if (s->set[1] && isset(&s->in[1], fd) && out_gated(c, now))
				words(s->set[1])[fd / BITS] &= ~(1UL << (fd % BITS));
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
	if (unlikely(x & (NS_EXP_MASK | NS_ATTN_GATE)))
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
			return REAL_CALL(select, (nfds, r, w, e, tv));
		if (tv && !(tv->tv_sec | tv->tv_usec) &&
		    likely(!(__atomic_load_n(&c->expired, __ATOMIC_ACQUIRE) & (NS_EXP_MASK | NS_ATTN_GATE)))) {
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
				return REAL_CALL(select, (nfds, r, w, e, tv));
		}
		return sel_one(nfds | fd << 16, r, w, e, tv, c);
	}
	/* sets larger than FD_SETSIZE, or a bad timeout: the kernel's business */
	if (nfds <= 0 || nfds > FD_SETSIZE || (!r && !w) ||
	    (tv && (tv->tv_sec < 0 || tv->tv_usec < 0 || tv->tv_usec >= 1000000)))
		return REAL_CALL(select, (nfds, r, w, e, tv));
	fd = sel_single(nfds, r, w, e, &in);
	if (fd == -2)
		return sel_multi(nfds, r, w, e, tv);
	/* one fd asked for */
	c = fd >= 0 ? ns_conn_of(fd) : NULL;
	if (likely(!c || !(in & 3)))
		return REAL_CALL(select, (nfds, r, w, e, tv));
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


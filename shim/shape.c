/* shape.c -- shaping traffic machine-wide: connection caps with a queue
 * (max_connections, queue_timeout) and pacing (rate, burst, rate_jitter).
 *
 * A destination's places are words of its table slot: 0 free, else the
 * holder, this process's pid with a tag of its start time. A connect takes
 * one of the first max_connections with one compare-and-swap, and the
 * connection gives it back when its record ends (its last descriptor
 * closed): nothing is counted that a process killed at any instruction
 * could leave wrong. The connect that finds every place held asks whether
 * their holders still live (kill 0, and /proc for a reused pid) and frees
 * the places of the dead.
 *
 * A blocking connect over the cap waits here, on the slot's futex word,
 * which a release bumps (and wakes, when someone waits); it looks again at
 * least every 50 ms, for holders that died. A non-blocking one is held as
 * an injected delay is (fault.c): connected to the local target that never
 * answers, so the program sees EINPROGRESS and a socket that is not yet
 * writable, and the waits look again every few milliseconds until a place
 * frees or queue_timeout passes (a process's own, oldest first:
 * queued.c). A connect turned away is throttled:
 * ECONNREFUSED, never a failure of the destination.
 *
 * rate's bucket is one word of the slot (GCRA: the time the bucket is next
 * full), so a token is one compare-and-swap and a process killed while
 * waiting holds nothing. A new connection takes a token (held like a
 * connect over the cap while none is due), and so does each HTTP/1.x
 * request after a connection's first (the first rides on the connect's).
 * A blocking call sleeps until the token is due and asks again; a
 * non-blocking send gets EAGAIN and its socket is not writable in the
 * waits until then (NS_C_PACED). Waits for a token never fail, except
 * where the program's own send timeout or the total deadline ends them. */
#include "shape.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/ioctl.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "../policy/admit.h"
#include "../policy/breaker.h"

#include "config.h"
#include "queued.h"
#include "real.h"

#define BLOCKED_LOOK_NS (50 * 1000000LL) /* a blocked waiter looks for dead holders this often */

/* This process's own state for the core's questions (policy/admit.h):
 * its last failures (retry_budget), its lines once a minute. */
struct ns_admitter ns_admitter_here; /* the process's own state for the core's questions */

uint32_t ns_shape_self;   /* atomic: this process's holder word, 0 until first needed */
static uint64_t atfork_once; /* lock.h: a handler inside its own thread's set-up does without */

static void forget_holder(void)
{
	__atomic_store_n(&ns_shape_self, 0, __ATOMIC_RELAXED);   /* a forked child is another holder */
	ns_queued_forget(); /* (the parent's queued connects are not this process's) */
}

static void set_atfork(void)
{
	(void)ns_fork_hook(NULL, NULL, forget_holder);
}

static __attribute__((noinline)) uint32_t place_self_slow(void)
{
	unsigned pid;
	uint32_t h;

	ns_once(&atfork_once, set_atfork);
	pid = (unsigned)getpid();
	if (pid > NS_PLACE_PID_MAX)
		return 0;   /* a pid past 22 bits: no places (never with Linux's pid_max) */
	h = ns_place_holder(pid, ns_proc_start_time(pid, NULL));
	/* the hook that gives places back goes in before the holder word is
	 * seen: a place taken with it (shape.h's fast try) is always given back */
	if (!__atomic_load_n(&ns_conn_end_hook, __ATOMIC_RELAXED))
		__atomic_store_n(&ns_conn_end_hook, ns_shape_release, __ATOMIC_RELEASE);
	__atomic_store_n(&ns_shape_self, h, __ATOMIC_RELEASE);
	return h;
}

static inline uint32_t place_self(void)
{
	uint32_t h = __atomic_load_n(&ns_shape_self, __ATOMIC_RELAXED);

	return likely(h) ? h : place_self_slow();
}

uint32_t ns_shape_holder(void)
{
	return place_self();
}

/* max_connections now (ns_shape_exec_failed): all of it, or the adaptive
 * limit, under slow_start its share so far */
static inline uint32_t cap_now(const struct ns_settings *set, int slot)
{
	if (likely(!(set->slow_start_ms | set->adaptive | (set->fleet & NS_FLEET_CONN))))
		return set->max_connections;
	return ns_table_cap_for(&ns_breakers, slot, set, (uint64_t)(ns_now() / 1000000));
}

/* The engine's own part of the place question: one of this process's idle
 * keep-alive connections gives its place up (giveup.c). */
static int own_idle(void *ctx, int slot, uint32_t span, uint32_t holder)
{
	return ns_shape_give_up_idle(slot, span, holder, *(const int *)ctx);
}

/* A place for c: 1, or 0 when every one of the limit in force is held by
 * the living (policy/admit.c asks). published: c is in the fd table (its
 * flags change bit by bit); else the caller writes NS_C_PLACE into them
 * itself. loop: the connect is an event loop's (non-blocking). */
static int take(struct ns_conn *c, int slot, const struct ns_settings *set, uint32_t holder, int published, int loop)
{
	int p = ns_admit_place(&ns_engine, &ns_admitter_here, &ns_breakers, slot, set, holder,
			       (uint64_t)(ns_now() / 1000000), own_idle, &loop);

	if (p < 0)
		return 0;
	if (unlikely(!__atomic_load_n(&ns_conn_end_hook, __ATOMIC_RELAXED)))
		__atomic_store_n(&ns_conn_end_hook, ns_shape_release, __ATOMIC_RELEASE);
	ST(c->place_slot, slot);
	ST(c->place_holder, holder);
	__atomic_store_n(&c->place, p, __ATOMIC_RELEASE);
	if (published)
		__atomic_fetch_or(&c->flags, NS_C_PLACE, __ATOMIC_RELEASE);
	return 1;
}

void ns_shape_futex_wait(uint32_t *word, uint32_t seen, int64_t ns)
{
	struct timespec ts = { .tv_sec = (time_t)(ns / 1000000000), .tv_nsec = (long)(ns % 1000000000) };
	int saved = errno;

	/* EINTR (a signal: the connect waits on), EAGAIN (the word moved),
	 * ETIMEDOUT: each is a reason to look again */
	ns_real_syscall(SYS_futex, word, FUTEX_WAIT, seen, &ts, NULL, 0);
	errno = saved;
}

void ns_shape_futex_wake(uint32_t *word)
{
	int saved = errno;

	ns_real_syscall(SYS_futex, word, FUTEX_WAKE, INT32_MAX, NULL, NULL, 0);
	errno = saved;
}

/* A blocking connect waits for a place until deadline: 1 taken, 0 not. */
static int wait_blocking(struct ns_conn *c, int slot, const struct ns_settings *set, uint32_t holder,
			 monotime deadline)
{
	uint32_t *wake = ns_table_place_wake(&ns_breakers, slot);
	int got = 0;

	if (!wake)
		return 0;
	ns_table_place_waiting(&ns_breakers, slot, 1);
	for (;;) {
		uint32_t seen = __atomic_load_n(wake, __ATOMIC_ACQUIRE);
		monotime now;

		if (take(c, slot, set, holder, 0, 0)) {
			got = 1;
			break;
		}
		now = ns_now();
		if (now >= deadline)
			break;
		ns_shape_futex_wait(wake, seen, deadline - now < BLOCKED_LOOK_NS ? deadline - now : BLOCKED_LOOK_NS);
	}
	ns_table_place_waiting(&ns_breakers, slot, -1);
	return got;
}

static void note_waited(int slot, monotime from, monotime now)
{
	ns_table_waited(&ns_breakers, slot, (uint64_t)(now - from) / 1000000);
}

/* A forked child's lines are its own: said anew (the pid the lines were
 * kept for differs). */
static void lines_mine(void)
{
	static int said_pid;
	int me = ns_own_pid, was = __atomic_load_n(&said_pid, __ATOMIC_RELAXED);

	if (was != me && __atomic_compare_exchange_n(&said_pid, &was, me, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
		ns_admit_forked(&ns_admitter_here);
}

void ns_shape_throttled(int slot, const char *key, const struct ns_settings *set)
{
	lines_mine();
	NS_LOG(NS_LOG_DEBUG, "%s: every place held (max_connections), connect turned away", key);
	ns_admit_turned_away(&ns_engine, &ns_admitter_here, &ns_breakers, slot, set, key,
			     (uint64_t)(ns_now() / 1000000), (uint32_t)ns_own_pid);
}

/**** rate ****/

/* Sleep until due (CLOCK_MONOTONIC ns); a signal ends it early (the caller
 * asks again). */
static void sleep_until(monotime due)
{
	struct timespec ts = { .tv_sec = (time_t)(due / 1000000000), .tv_nsec = (long)(due % 1000000000) };
	int saved = errno;

	clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
	errno = saved;
}

/* A token of slot's bucket at now (policy/admit.c): 0 taken, else the
 * time one is due. c: a connect's (kept, for its first bytes out), or
 * NULL. */
static inline __attribute__((always_inline)) monotime token_for(struct ns_conn *c, int slot,
								 const struct ns_settings *set, monotime now)
{
	static __thread uint64_t rng __attribute__((tls_model("initial-exec")));
	uint64_t tat, base, due;

	due = ns_admit_token_fast(&ns_breakers, slot, set, (uint64_t)now / 1000, &rng, &tat, &base);
	if (due)
		return (monotime)due * 1000;
	if (c && tat) {
		ST(c->tok_tat, tat);
		ST(c->tok_base, base);
	}
	return 0;
}

static __attribute__((noinline)) monotime token(int slot, const struct ns_settings *set, monotime now)
{
	return token_for(NULL, slot, set, now);
}

/* A connect's token was taken before the connection could send: counted
 * from its first bytes out, so that the destination never sees two closer
 * than the interval (a client builds its first request after connecting). */
static void first_bytes(struct ns_conn *c, int slot)
{
	__atomic_fetch_and(&c->flags, ~NS_C_TOKEN, __ATOMIC_RELAXED);
	ns_table_token_later(&ns_breakers, slot, LD(c->tok_tat), LD(c->tok_base), (uint64_t)ns_now() / 1000);
}

/* A blocking connect's token: sleeps until it has one. 1: it waited. */
static int token_blocking(struct ns_conn *c, int slot, const struct ns_settings *set, monotime now)
{
	monotime due = token_for(c, slot, set, now);

	if (!due)
		return 0;
	ns_table_paced(&ns_breakers, slot);
	while (due) {
		sleep_until(due);
		due = token_for(c, slot, set, ns_now());
	}
	return 1;
}

/* A non-blocking send held back (for a token, or a cooldown's end): the
 * waits hold its output back until pace_until (an epoll set watching fd
 * computes it again). -1 with EAGAIN. */
int ns_shape_hold_output(int fd, struct ns_conn *c)
{
	__atomic_fetch_or(&c->flags, NS_C_PACED, __ATOMIC_RELEASE);
	__atomic_fetch_or(&c->expired, NS_ATTN_PACE, __ATOMIC_RELEASE);
	if (fd >= 0 && __atomic_load_n(&ns_ep_count, __ATOMIC_RELAXED))
		__atomic_load_n(&ns_fd_watch_note, __ATOMIC_ACQUIRE)(fd);
	errno = EAGAIN;
	return -1;
}

/* A blocking send held back: the program's send timeout (counted from
 * from) and the total budget still bound the call (the wait is the
 * send's). 0: none. */
monotime ns_shape_send_limit(const struct ns_conn *c, monotime from)
{
	monotime limit = LD(c->dir[NS_OUT].prog_ns) ? from + LD(c->dir[NS_OUT].prog_ns) : 0;

	if (LD(c->total_deadline) && (!limit || LD(c->total_deadline) < limit))
		limit = LD(c->total_deadline);
	return limit;
}

/* ns_shape_request past its common case: a connection's first bytes, a
 * request held, or none due */
static __attribute__((noinline)) int request_held(int fd, struct ns_conn *c, int nonblock)
{
	const struct ns_settings *set = ns_conn_set(c);
	int slot = LD(c->slot);
	uint32_t f = LD(c->flags);
	monotime now = ns_now(), due, limit = 0;

	if ((f & NS_C_PACED) && now < LD(c->pace_until) && nonblock) {
		if (fd >= 0 && __atomic_load_n(&ns_ep_count, __ATOMIC_RELAXED))
			__atomic_load_n(&ns_fd_watch_note, __ATOMIC_ACQUIRE)(fd);
		errno = EAGAIN;   /* asked again before its time (a token's, or a cooldown's end) */
		return -1;
	}
	if (unlikely(!set->rate_interval_us || slot < 0 || !ns_tbl_on()))
		goto go;
	if (f & NS_C_TOKEN) {
		first_bytes(c, slot);
		if (!(f & (NS_C_PACED | NS_C_ANSWERED)))
			return 0;   /* the connection's first request: it rides on the connect's token */
	}
	due = token(slot, set, now);
	if (!due)
		goto go;
	if (!(f & NS_C_PACED)) {
		ns_table_paced(&ns_breakers, slot);
		ST(c->queue_start, now);
	}
	ST(c->pace_until, due);
	if (nonblock)
		return ns_shape_hold_output(fd, c);
	limit = ns_shape_send_limit(c, LD(c->queue_start));
	while (due) {
		if (limit && due > limit) {
			sleep_until(limit);
			__atomic_fetch_and(&c->flags, ~NS_C_PACED, __ATOMIC_RELEASE);
			if (LD(c->total_deadline) && ns_now() >= LD(c->total_deadline))
				return 0;   /* the caller's deadline check fails the call */
			errno = EAGAIN;   /* as the send itself would end */
			return -1;
		}
		sleep_until(due);
		due = token(slot, set, ns_now());
	}
	f |= NS_C_PACED;
go:
	if (f & NS_C_PACED) {
		note_waited(slot, LD(c->queue_start), ns_now());
		__atomic_fetch_and(&c->flags, ~NS_C_PACED, __ATOMIC_RELEASE);
		__atomic_fetch_and(&c->expired, ~NS_ATTN_PACE, __ATOMIC_RELEASE);
	}
	return 0;
}

/* A request on an open connection while its destination cools down
 * (Retry-After): held until the cooldown ends, as a paced request is held
 * for its token (blocking: sleeps, within the program's send timeout and
 * the total deadline; non-blocking: EAGAIN, and not writable in the waits
 * until then). 0: go; -1 with errno. */
int ns_shape_cooldown(int fd, struct ns_conn *c, int nonblock)
{
	int slot = LD(c->slot);
	uint64_t until_ms = slot >= 0 && ns_tbl_on() ? ns_table_cooldown_until(&ns_breakers, slot) : 0;
	monotime now, until, limit;

	if (likely(!until_ms))
		return 0;   /* no cooldown: no clock read */
	now = ns_now();
	if ((uint64_t)(now / 1000000) >= until_ms) {
		ns_table_cooldown_over(&ns_breakers, slot, until_ms);   /* (the next requests read no clock) */
		return 0;
	}
	until = (monotime)until_ms * 1000000;
	if (!(LD(c->flags) & NS_C_PACED))
		ST(c->queue_start, now);
	ST(c->pace_until, until);
	if (nonblock)
		return ns_shape_hold_output(fd, c);
	limit = ns_shape_send_limit(c, now);
	sleep_until(limit && limit < until ? limit : until);
	if (limit && limit < until && ns_now() < until) {
		if (LD(c->total_deadline) && ns_now() >= LD(c->total_deadline))
			return 0;   /* the caller's deadline check fails the call */
		errno = EAGAIN;   /* the program's own send timeout ended it */
		return -1;
	}
	return ns_shape_cooldown(fd, c, nonblock);   /* a later Retry-After may have moved it */
}

int ns_shape_request(int fd, struct ns_conn *c, int nonblock)
{
	const struct ns_settings *set = ns_conn_set(c);
	int slot = LD(c->slot);

	/* a request on a reused connection, a token there: one clock (the
	 * request's start too: exchange.c) and one compare-and-swap */
	if (likely(!(LD(c->flags) & (NS_C_PACED | NS_C_TOKEN)) && set->rate_interval_us && slot >= 0 && ns_tbl_on())) {
		monotime now = ns_now();

		if (likely(!token_for(NULL, slot, set, now))) {
			ST(c->pre_now, now);
			return 0;
		}
	}
	return request_held(fd, c, nonblock);
}

/**** connects ****/

int ns_shape_connect(struct ns_conn *c, const struct ns_settings *set, int slot, int nonblock, monotime now)
{
	uint32_t holder;
	int waited = 0;

	ST(c->place, -1);
	ST(c->pace_until, 0);
	ST(c->tok_tat, 0);
	if (unlikely(!ns_tbl_on()))
		return NS_SHAPE_GO;   /* no table: nothing is kept */
	if (set->max_connections) {
		holder = place_self();
		if (unlikely(!holder)) {
			/* no way to count places: the cap is not kept */
		} else if ((nonblock && set->queue_timeout_ms && __atomic_load_n(&ns_shape_queued, __ATOMIC_ACQUIRE) &&
			    ns_queued_before(c, slot, now, now, 0)) ||
			   !take(c, slot, set, holder, 0, nonblock)) {
			/* (a place that frees goes to those queued first) */
			if (!set->queue_timeout_ms)
				return NS_SHAPE_REFUSE;
			if (nonblock) {
				ST(c->queue_deadline, now + (int64_t)set->queue_timeout_ms * 1000000);
				ST(c->queue_start, now);
				ST(c->queue_seen, now);
				ns_queued_add(c);
				return NS_SHAPE_QUEUED;
			}
			if (!wait_blocking(c, slot, set, holder, now + (int64_t)set->queue_timeout_ms * 1000000))
				return NS_SHAPE_REFUSE;
			note_waited(slot, now, ns_now());
			waited = 1;
		}
	}
	/* (under max_requests a connection's requests take rate's tokens, its
	 * first too, when it has a place: reqs.c; a connect takes none) */
	if (set->rate_interval_us && !set->max_requests) {
		monotime due;

		if (nonblock && (due = token_for(c, slot, set, now)) != 0) {
			ns_table_paced(&ns_breakers, slot);
			ST(c->queue_start, now);
			ST(c->pace_until, due);
			return NS_SHAPE_QUEUED;
		}
		if (!nonblock && token_blocking(c, slot, set, waited ? ns_now() : now)) {
			note_waited(slot, now, ns_now());
			waited = 1;
		}
	}
	return waited ? NS_SHAPE_WAITED : NS_SHAPE_GO;
}

int ns_shape_due(struct ns_conn *c, monotime now, monotime *next)
{
	const struct ns_settings *set = ns_conn_set(c);
	int slot = LD(c->slot);

	*next = now + NS_SHAPE_TICK_NS;
	if (set->max_connections && LD(c->place) < 0 && place_self()) {
		ST(c->queue_seen, now);
		if (ns_queued_before(c, slot, LD(c->queue_start), now, 0) || !take(c, slot, set, place_self(), 1, 1)) {
			if (now < LD(c->queue_deadline))
				return 0;
			ns_queued_before(c, slot, 0, now, 1);
			return -1;
		}
		ns_queued_before(c, slot, 0, now, 1);
	}
	if (set->rate_interval_us && !set->max_requests) {
		monotime due = token_for(c, slot, set, now);

		if (due) {
			ST(c->pace_until, due);
			*next = due;
			return 0;
		}
	}
	note_waited(slot, LD(c->queue_start), now);
	if (LD(c->tok_tat))
		__atomic_fetch_or(&c->flags, NS_C_TOKEN, __ATOMIC_RELAXED);
	__atomic_fetch_and(&c->flags, ~NS_C_QUEUED, __ATOMIC_RELEASE);
	ST(c->pace_until, 0);
	/* its turn: the connection's clock and deadlines start now */
	ST(c->start, now);
	if ((LD(c->flags) & NS_C_ENFORCE) && set->connect_timeout_ms)
		ST(c->connect_deadline, now + (int64_t)set->connect_timeout_ms * 1000000);
	if ((LD(c->flags) & NS_C_ENFORCE) && set->total_timeout_ms) {
		ST(c->total_deadline, now + (int64_t)set->total_timeout_ms * 1000000);
		__atomic_fetch_or(&c->flags, NS_C_TOTAL, __ATOMIC_RELEASE);
	}
	return 1;
}

void ns_shape_release(struct ns_conn *c)
{
	int p = __atomic_exchange_n(&c->place, -1, __ATOMIC_ACQ_REL);
	uint32_t *wake;

	/* a forked child's copy of its parent's record is not the holder (and
	 * its own holder word is not even made here: this runs inside close) */
	if (!(LD(c->flags) & NS_C_PLACE) || p < 0 || !ns_breakers_ok ||
	    LD(c->place_holder) != __atomic_load_n(&ns_shape_self, __ATOMIC_RELAXED))
		return;
	if ((wake = ns_admit_release(&ns_breakers, LD(c->place_slot), p, LD(c->place_holder))) != NULL)
		ns_shape_futex_wake(wake);
}

/**** exec ****/

/* Before an exec the kernel will close every close-on-exec descriptor
 * behind the shim's back: a place held only by such sockets would outlive
 * its connection for as long as the new program runs (it has the same pid
 * and start time, so no one could tell it from a live holder). They are
 * given back here; a failed exec takes them again. A socket one of whose
 * descriptors survives the exec keeps its place (its connection goes on
 * in the new program). */
#define EXEC_MAX 256

int ns_shape_exec_release(struct ns_conn **out, int max)
{
	unsigned hi = __atomic_load_n(&ns_fdhi, __ATOMIC_ACQUIRE);
	uint32_t self = __atomic_load_n(&ns_shape_self, __ATOMIC_RELAXED);
	struct ns_conn *seen[EXEC_MAX];
	uint8_t keeps[EXEC_MAX];
	int n = 0, out_n = 0, saved = errno;

	if (!self || !ns_breakers_ok || ns_in_vfork_child())
		return 0;   /* (a vfork child's exec closes nothing of its parent's) */
	for (unsigned fd = 0; fd < hi && fd < ns_fdmax; fd++) {
		struct ns_conn *c = ns_conn_of((int)fd);
		long fl;
		int i;

		/* (a request's place under max_requests too: reqs.c's, through its hook) */
		if (!c ||
		    ((!(LD(c->flags) & NS_C_PLACE) || LD(c->place) < 0 || LD(c->place_holder) != self) &&
		     (!LD(c->rq) || LD(c->rq_holder) != self)))
			continue;
		fl = ns_real_syscall(SYS_fcntl, (int)fd, F_GETFD, 0);
		for (i = 0; i < n && seen[i] != c; i++)
			;
		if (i == n) {
			if (n == EXEC_MAX)
				continue;   /* (past that many, a place is kept: freed when the process ends) */
			seen[n] = c;
			keeps[n++] = 0;
		}
		if (fl < 0 || !(fl & FD_CLOEXEC))
			keeps[i] = 1;   /* this descriptor, and so the connection, lives on */
	}
	for (int i = 0; i < n && out_n < max; i++) {
		void (*req)(struct ns_conn *) = __atomic_load_n(&ns_req_end_hook, __ATOMIC_ACQUIRE);

		if (keeps[i])
			continue;
		if (req)
			req(seen[i]);
		if (!(LD(seen[i]->flags) & NS_C_PLACE) || LD(seen[i]->place) < 0)
			continue;
		ns_shape_release(seen[i]);
		out[out_n++] = seen[i];
	}
	errno = saved;
	return out_n;
}

void ns_shape_exec_failed(struct ns_conn **list, int n)
{
	uint32_t self = __atomic_load_n(&ns_shape_self, __ATOMIC_RELAXED);

	for (int i = 0; i < n; i++) {
		struct ns_conn *c = list[i];
		int slot = LD(c->place_slot), p;

		/* within the destination's own cap: a place past it would hold
		 * the connection over max_connections unseen by every connect */
		p = ns_table_place_take(&ns_breakers, slot, cap_now(ns_conn_set(c), slot), self);
		if (p < 0) {
			NS_LOG(NS_LOG_WARN, "an exec failed after its connections gave their places back, and no place is "
			       "free for one: it goes on over max_connections until it closes");
			continue;
		}
		__atomic_store_n(&c->place, p, __ATOMIC_RELEASE);
	}
}

/**** retry_budget, throttle ****/

void ns_shape_note_failure(int slot, monotime now)
{
	ns_admit_note_failure(&ns_admitter_here, slot, (uint64_t)(now / 1000000));
}

int ns_shape_throttle(int slot, const char *key, const struct ns_settings *set, monotime now)
{
	static __thread uint64_t rng __attribute__((tls_model("initial-exec")));

	if (!ns_tbl_on())
		return 0;
	if (unlikely(!rng))
		rng = (uint64_t)now ^
			(uint64_t)getpid(); /* (seeded per thread; a forked child's draws go on from its parent's) */
	lines_mine();
	return ns_admit_throttle(&ns_engine, &ns_admitter_here, &ns_breakers, slot, set, key, (uint64_t)(now / 1000000),
				 &rng, (uint32_t)ns_own_pid);
}

int ns_shape_request_admit(struct ns_conn *c)
{
	const struct ns_settings *set = ns_conn_set(c);
	int slot = LD(c->slot), enforce = set->mode == NS_MODE_ENFORCE, thr;
	monotime now;

	if (slot < 0 || !ns_tbl_on() || (uint32_t)slot >= ns_breakers.nslots)
		return 0;
	/* the throttle asked only where the destination refuses some of what
	 * it is sent (as at a connect: connect.c throttle_healthy) */
	thr = enforce && set->throttle && !ns_throttle_healthy(&ns_breakers.slots[slot], set);
	/* the common case, no clock: closed, the fleet holding nothing, no throttle */
	if (((__atomic_load_n(&ns_breakers.slots[slot].word, __ATOMIC_RELAXED) >> NS_BRK_SH_STATE) & 3) == NS_CLOSED &&
	    !__atomic_load_n(&ns_breakers.slots[slot].fleet_until_ms, __ATOMIC_RELAXED) && !thr)
		return 0;
	now = ns_now();
	if (ns_table_request_admit(&ns_breakers, slot, enforce, (uint64_t)(now / 1000000)) == NS_REJECT) {
		NS_LOG(NS_LOG_INFO, "a request on an open connection refused: its destination's breaker is open");
		errno = ECONNREFUSED;
		return -1;
	}
	if (thr) {
		char key[NS_KEY_MAX];

		ns_conn_key(c, key);
		if (ns_shape_throttle(slot, key, set, now)) {
			errno = ECONNREFUSED;
			return -1;
		}
	}
	return 0;
}

int ns_shape_retry(int slot, const struct ns_settings *set, monotime now)
{
	if (!ns_tbl_on())
		return 0;
	return ns_admit_retry(&ns_admitter_here, &ns_breakers, slot, set, (uint64_t)(now / 1000000));
}

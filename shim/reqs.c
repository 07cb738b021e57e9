/* reqs.c -- max_requests: at most N requests in flight to a destination
 * from every process of the machine together (policy/reqq.h keeps the
 * places and the queue in the table).
 *
 * A request is an HTTP/1.x exchange, from its request's first byte out to
 * its answer read to its framed end (exchange.c follows it: Content-Length,
 * chunked, no body), in clear text (datapath.c) or as the plaintext of a
 * TLS library the shim reads (tls.c). Its place is taken before its first
 * byte leaves, with one compare-and-swap while no one waits, and given
 * back at that end; an answer whose end cannot be told (ended by the
 * connection's close, bytes the program took unseen) keeps its place until
 * the connection's next request (which it then serves) or its end. A
 * request that finds none is held there: a blocking send sleeps on the
 * slot's futex word (within queue_timeout, the program's send timeout and
 * the total deadline), a non-blocking one gets EAGAIN and its socket is not
 * writable in the waits for a tick, then looks again. Places go to those
 * that waited longest, across processes: each waiter has an entry in the
 * slot's queue. After queue_timeout the request fails at its start,
 * ECONNREFUSED, counted throttled, never a failure of the destination.
 * Connections are not capped by it and never given up for it.
 *
 * A waiter whose process died, and a place whose holder died, are freed by
 * the next look that finds them in its way (kill 0; /proc for a reused pid
 * once a second). */
#include "reqs.h"

#include <errno.h>

#include "../policy/account.h"
#include "../policy/admit.h"
#include "../policy/reqq.h"
#include "shape.h"

#define LOOK_NS (50 * 1000000LL) /* a blocked waiter looks for the dead this often */
#define TICK_NS (2 * 1000000LL)  /* a held non-blocking send is not writable this long */

/* c's: its record's end gives back what it holds (fdtab.c) */
static void mine(struct ns_conn *c, int slot, uint32_t self)
{
	if (unlikely(!__atomic_load_n(&ns_req_end_hook, __ATOMIC_RELAXED)))
		__atomic_store_n(&ns_req_end_hook, ns_req_done, __ATOMIC_RELEASE);
	ST(c->rq_slot, slot);
	ST(c->rq_holder, self);
}

static void got(struct ns_conn *c, int slot, uint32_t self, int p)
{
	mine(c, slot, self);
	__atomic_fetch_or(&c->rq, 1u << (p & 31), __ATOMIC_RELEASE);
}

/* A place of the limit in force (policy/admit.h), or -1. now: 0 when
 * not read yet (the common case reads no clock: only auto and a fleet
 * share, whose lease ends, want one). */
static int take(struct ns_reqq *q, int slot, const struct ns_settings *set, uint32_t self, monotime now)
{
	if (unlikely(set->req_adaptive | (set->fleet & NS_FLEET_REQ)) && !now)
		now = ns_now();
	return ns_admit_request_now(&ns_breakers, slot, q, set, self, (uint64_t)(now / 1000000));
}

/* c's wait is over (a place, or not): its entry leaves the queue. */
static void unqueue(struct ns_conn *c, struct ns_reqq *q)
{
	uint64_t w = __atomic_exchange_n(&c->rq_qword, 0, __ATOMIC_ACQ_REL);
	int qi = (int)LD(c->rq_qi) - 1;

	ST(c->rq_qi, 0u);
	if (w && qi >= 0 && ns_reqq_leave(q, qi, w))
		ns_shape_futex_wake(&q->wake);
}

/* The request has its place. Under rate it takes a token now, a
 * connection's first request too (under max_requests a connect takes none:
 * Scrapy opened 32 connections, each with a token, then sent 26 requests in
 * a second under rate = 10/s, and the connects' tokens made its crawl 3 s
 * longer): it is left held (NS_C_PACED) for the rate step after this one,
 * which counts its wait from since. */
static void rate_next(struct ns_conn *c, const struct ns_settings *set, monotime since)
{
	if (!set->rate_interval_us || (LD(c->flags) & (NS_C_ANSWERED | NS_C_PACED)) == NS_C_ANSWERED)
		return; /* (one after the first: the rate step knows it) */
	__atomic_fetch_and(&c->flags, ~NS_C_TOKEN, __ATOMIC_RELAXED);
	if (!(LD(c->flags) & NS_C_PACED))
		ST(c->queue_start, since);
	ST(c->pace_until, 0);
	__atomic_fetch_or(&c->flags, NS_C_PACED, __ATOMIC_RELEASE);
}

/* The request waited for its place, and goes (h1: an HTTP/1 request, whose
 * rate step follows; else an h2 stream, whose writer paces it itself). */
static void waited(struct ns_conn *c, int slot, const struct ns_settings *set, monotime now, int h1)
{
	if (h1 && set->rate_interval_us) {
		ST(c->queue_start, LD(c->rq_since));
		rate_next(c, set, LD(c->rq_since));
		return;
	}
	ns_table_waited(&ns_breakers, slot, (uint64_t)(now - LD(c->rq_since)) / 1000000);
	if (LD(c->flags) & NS_C_PACED) {
		__atomic_fetch_and(&c->flags, ~NS_C_PACED, __ATOMIC_RELEASE);
		__atomic_fetch_and(&c->expired, ~NS_ATTN_PACE, __ATOMIC_RELEASE);
	}
}

/* queue_timeout passed: the request fails at its start. */
static int turned_away(struct ns_conn *c, int slot, const struct ns_settings *set, monotime now)
{
	char key[NS_KEY_MAX];

	ns_conn_key(c, key);
	ns_admit_request_turned_away(&ns_engine, &ns_admitter_here, &ns_breakers, slot, set, key,
				     (uint64_t)(now / 1000000), (uint32_t)ns_own_pid);
	errno = ECONNREFUSED;
	return -1;
}

/* ns_req_start past its common case: none free, or others wait. */
static __attribute__((noinline)) int held(int fd, struct ns_conn *c, struct ns_reqq *q, int slot,
					  const struct ns_settings *set, uint32_t self, int nonblock, int h1)
{
	monotime now = ns_now(), deadline, limit = 0;

	if (!LD(c->rq_qword) || (uint32_t)(LD(c->rq_qword) >> 32) != self) {
		/* its wait begins (a forked child's copy of its parent's is not its) */
		uint64_t w = (uint64_t)self << 32 | (uint32_t)(now / 1000);

		mine(c, slot, self);
		ST(c->rq_since, now);
		ST(c->rq_qi, (uint32_t)(ns_reqq_enqueue(q, w) + 1));
		__atomic_store_n(&c->rq_qword, w, __ATOMIC_RELEASE);
		__atomic_fetch_add(&q->held, 1, __ATOMIC_RELAXED);
	}
	deadline = LD(c->rq_since) + (monotime)set->queue_timeout_ms * 1000000;
	if (!nonblock)
		limit = ns_shape_send_limit(c, LD(c->rq_since));
	for (;;) {
		uint32_t seen;
		int p;
		monotime end;

		/* a blocked waiter is counted before it looks: a place that frees
		 * after the look moves the word (reqq.c woke) */
		if (!nonblock)
			__atomic_fetch_add(&q->waiters, 1, __ATOMIC_SEQ_CST);
		seen = __atomic_load_n(&q->wake, __ATOMIC_SEQ_CST);
		p = ns_admit_request(&ns_admitter_here, &ns_breakers, slot, set, self, (int)LD(c->rq_qi) - 1,
				     LD(c->rq_qword), (uint64_t)now);
		if (!nonblock && (p >= 0 || now >= deadline || (limit && now >= limit)))
			__atomic_fetch_sub(&q->waiters, 1, __ATOMIC_SEQ_CST);
		if (p >= 0) {
			got(c, slot, self, p);
			unqueue(c, q);
			waited(c, slot, set, now, h1);
			return 0;
		}
		if (now >= deadline) {
			unqueue(c, q);
			return turned_away(c, slot, set, now);
		}
		if (nonblock) {
			ST(c->pace_until, now + TICK_NS < deadline ? now + TICK_NS : deadline);
			return ns_shape_hold_output(fd, c);
		}
		if (limit && now >= limit) {
			unqueue(c, q);
			if (LD(c->total_deadline) && now >= LD(c->total_deadline))
				return 0; /* the caller's deadline check fails the call */
			errno = EAGAIN;   /* the program's own send timeout ended it */
			return -1;
		}
		end = limit && limit < deadline ? limit : deadline;
		ns_shape_futex_wait(&q->wake, seen, end - now < LOOK_NS ? end - now : LOOK_NS);
		__atomic_fetch_sub(&q->waiters, 1, __ATOMIC_SEQ_CST);
		now = ns_now();
	}
}

/* Does this process hold a place of q (a stream or request in flight)? */
static int holds_one(const struct ns_reqq *q, uint32_t self)
{
	for (uint32_t p = 0; p < NS_PLACES; p++)
		if (__atomic_load_n(&q->place[p], __ATOMIC_RELAXED) == self)
			return 1;
	return 0;
}

/* What asks for a place: an HTTP/1 request, an h2 stream in clear text,
 * one inside a TLS library's write. */
enum { FOR_H1, FOR_STREAM, FOR_STREAM_TLS };

static int place_for(int fd, struct ns_conn *c, int nonblock, int what)
{
	const struct ns_settings *set = ns_conn_set(c);
	int slot = LD(c->slot), p;
	struct ns_reqq *q;
	uint32_t self;

	if (slot < 0 || !ns_tbl_on() || !(q = ns_reqq_of(&ns_breakers, slot)) || !(self = ns_shape_holder()))
		return 0; /* nothing to count with: not kept */
	if (what == FOR_H1 && LD(c->rq) && LD(c->rq_holder) == self)
		return 0; /* the place its last request kept (its end unseen) serves this one */
	if (likely(!__atomic_load_n(&q->queued, __ATOMIC_ACQUIRE)) && !LD(c->rq_qword) &&
	    (p = take(q, slot, set, self, 0)) >= 0) {
		got(c, slot, self, p);
		if (what == FOR_H1 && unlikely(set->rate_interval_us))
			rate_next(c, set, ns_now());
		return 0;
	}
	if (what == FOR_STREAM_TLS && holds_one(q, self)) {
		/* inside a TLS library's write the wait blocks the thread, which
		 * may be the one that would read the answers that free this
		 * process's places (curl's one loop): the stream goes, over the
		 * limit, in a place past it (counted in flight: the others wait
		 * for it), or uncounted when none is free */
		if ((p = ns_reqq_take(q, NS_PLACES, self)) >= 0)
			got(c, slot, self, p);
		__atomic_fetch_add(&q->over, 1, __ATOMIC_RELAXED);
		return 0;
	}
	return held(fd, c, q, slot, set, self, nonblock, what == FOR_H1);
}

int ns_req_start(int fd, struct ns_conn *c, int nonblock)
{
	return place_for(fd, c, nonblock, FOR_H1);
}

int ns_req_stream(int fd, struct ns_conn *c, int nonblock, int tls)
{
	return place_for(fd, c, nonblock, tls ? FOR_STREAM_TLS : FOR_STREAM);
}

/* Up to n of c's places back (mask: every one), the waiters woken. */
static void give_back(struct ns_conn *c, uint32_t n)
{
	uint32_t self = __atomic_load_n(&ns_shape_self, __ATOMIC_RELAXED), wake = 0, m;
	struct ns_reqq *q;

	/* a forked child's copy of its parent's record is not the holder */
	if (!ns_breakers_ok || LD(c->rq_holder) != self || !(q = ns_reqq_of(&ns_breakers, LD(c->rq_slot))))
		return;
	if (n == UINT32_MAX && LD(c->rq_qword) && (uint32_t)(LD(c->rq_qword) >> 32) == self)
		unqueue(c, q); /* (the record ends while it waits) */
	if (n == UINT32_MAX) {
		for (m = __atomic_exchange_n(&c->rq, 0u, __ATOMIC_ACQ_REL); m; m &= m - 1)
			wake |= (uint32_t)ns_reqq_release(q, __builtin_ctz(m), self);
		n = 0;
	}
	for (m = LD(c->rq); m && n; n--) {
		uint32_t bit = m & -m;

		if (!__atomic_compare_exchange_n(&c->rq, &m, m & ~bit, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
			n++; /* (m is what it is now: again) */
			continue;
		}
		wake |= (uint32_t)ns_reqq_release(q, __builtin_ctz(bit), self);
		m &= ~bit;
	}
	if (wake)
		ns_shape_futex_wake(&q->wake);
}

void ns_req_done(struct ns_conn *c)
{
	give_back(c, UINT32_MAX);
}

void ns_req_streams_done(struct ns_conn *c, uint32_t n)
{
	if (n && LD(c->rq))
		give_back(c, n);
}

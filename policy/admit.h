/* admit.h -- "may this go now", written once for both engines
 * (docs/design.md, "One core for both engines").
 *
 * A connect (and, from a request's start, a request) is asked, in this
 * order: the breaker (open, half-open's probe, the fleet's hold, a
 * cooldown: ns_table_attempt, with account.c saying a half-open step and
 * recording a refusal); the fail-fast rules (a retry beyond retry_budget,
 * the adaptive throttle: ns_admit_retry, ns_admit_throttle); a place under
 * max_connections, fixed or auto (ns_admit_place); a token under rate
 * (ns_admit_token). A place or a token not there now is waited for; a
 * place still not there after queue_timeout turns the connect away
 * (ns_admit_turned_away). Everything those decide, count and say is here;
 * an engine keeps how it sees the call, how it waits (a futex in the
 * program, shimrun's notification loop) and how it cuts a connection, and
 * one thing of its own in the place question: its idle connections that
 * may give their places up (the library's keep-alive pool; shimrun's
 * connections the program closed). */
#ifndef NS_POLICY_ADMIT_H
#define NS_POLICY_ADMIT_H

#include <stdint.h>

#include "account.h"
#include "places.h"
#include "reqq.h"
#include "table.h"

#define NS_RECENT 256u /* retry_budget: the last failure per destination (a few share an entry) */

/* One engine's own state for the questions (a process's, shimrun's). */
struct ns_admitter {
	uint64_t recent[NS_RECENT];      /* atomic: slot << 32 | CLOCK_MONOTONIC ms of its last failure here */
	uint64_t said[NS_SAID_WAYS];     /* its lines, once a minute per destination (ns_said_here) */
	uint64_t req_said[NS_SAID_WAYS]; /* ...max_requests' */
	uint64_t deep_ms;                /* atomic: its last look at /proc for a holder whose pid was reused */
	uint64_t req_looked_ms;          /* atomic: its last look for dead request waiters and holders */
	uint64_t req_deep_ms;            /* ...the last of those that looked for reused pids too */
};

/* The breaker's answer to a connect to slot (key) from process pid:
 * NS_ALLOW (a half-open step said and written as an event) or NS_REJECT
 * (open, the fleet's hold, a cooldown: the history's record of it).
 * enforce: 0 in monitor mode (counted, never refused). */
int ns_admit_breaker(const struct ns_engine *e, struct ns_table *t, int slot, const struct ns_settings *set,
		     const char *key, int enforce, uint64_t now_us, uint32_t pid);

/* In a forked child: its lines are its own (said anew). */
void ns_admit_forked(struct ns_admitter *a);
/* A failure of slot's destination counted here at now_ms: a connect to it
 * within a second is a retry. */
void ns_admit_note_failure(struct ns_admitter *a, int slot, uint64_t now_ms);
/* retry_budget: 0, or -1 when this connect is a retry the budget has no
 * room for (counted retry_throttled by the table). */
int ns_admit_retry(struct ns_admitter *a, struct ns_table *t, int slot, const struct ns_settings *set, uint64_t now_ms);
/* throttle = adaptive: 1 when this connect (or request) is refused here,
 * counted throttled, said once a minute per engine, the machine's first an
 * event (pid: the process it came from); 0 to go on. rng: the caller's
 * ns_rng_next state. */
void ns_admit_throttled(const struct ns_engine *e, struct ns_admitter *a, struct ns_table *t, int slot, const char *key,
			uint64_t now_ms, uint32_t pid);
static inline int ns_admit_throttle(const struct ns_engine *e, struct ns_admitter *a, struct ns_table *t, int slot,
				    const struct ns_settings *set, const char *key, uint64_t now_ms, uint64_t *rng,
				    uint32_t pid)
{
	if (__builtin_expect(!ns_table_throttle(t, slot, set, now_ms, rng), 1))
		return 0;
	ns_admit_throttled(e, a, t, slot, key, now_ms, pid); /* (out of line: said, an event) */
	return 1;
}

/* An engine's idle connections of slot held by holder among the places
 * [0, span): the place of one given up for this connect (it stays the
 * holder's), NS_ADMIT_OWN_AGAIN when some gave theirs back (ask again), or
 * -1. */
#define NS_ADMIT_OWN_AGAIN (-2)
typedef int ns_admit_own_fn(void *ctx, int slot, uint32_t span, uint32_t holder);

/* max_connections: a place of slot for holder now (its index), or -1 when
 * every one of the limit in force (fixed; auto's; slow_start's share) is
 * held by the living. Places of dead holders are freed on the way (said
 * at info), then the engine's own idle connections are asked (own, may be
 * NULL). Under auto a place taken with half the limit or more in flight
 * grows it. */
int ns_admit_place(const struct ns_engine *e, struct ns_admitter *a, struct ns_table *t, int slot,
		   const struct ns_settings *set, uint32_t holder, uint64_t now_ms, ns_admit_own_fn *own, void *ctx);
/* ...its first try, inline for a connect's fast path: a place of the
 * limit in force without slow_start (the caller asks ns_admit_place for
 * that, and when this finds none), or -1. */
static inline int ns_admit_place_now(struct ns_table *t, int slot, const struct ns_settings *set, uint32_t holder,
				     uint64_t now_ms)
{
	if (__builtin_expect(!(set->adaptive | (set->fleet & NS_FLEET_CONN)), 1))
		return ns_table_place_take(t, slot, set->max_connections, holder);
	if (!(set->fleet & NS_FLEET_CONN))
		return ns_places_take_adaptive(t, slot, set, holder, now_ms);
	return ns_table_place_take_auto(t, slot, set, holder, now_ms, 0);
}
/* A place given back by its holder: the futex word to wake when someone
 * waits for one (the engine wakes it: a system call of its own), else NULL. */
static inline uint32_t *ns_admit_release(struct ns_table *t, int slot, int place, uint32_t holder)
{
	uint32_t waiters;

	if (place < 0 || !ns_table_place_release(t, slot, place, holder, &waiters) || !waiters)
		return NULL;
	return ns_table_place_wake(t, slot);
}
/* A connect that waited queue_timeout for a place and found none: counted
 * throttled, said once a minute per engine with the limit in force, the
 * machine's first an event (pid: the process it came from). */
void ns_admit_turned_away(const struct ns_engine *e, struct ns_admitter *a, struct ns_table *t, int slot,
			  const struct ns_settings *set, const char *key, uint64_t now_ms, uint32_t pid);

/* max_requests: a request's place of slot for holder now, of the limit
 * in force (fixed, or auto's: a place taken with half of it or more in
 * flight grows it), or -1. The fast path's try: no queue, no look (q:
 * slot's, ns_reqq_of). */
static inline int ns_admit_request_now(struct ns_table *t, int slot, struct ns_reqq *q, const struct ns_settings *set,
				       uint32_t holder, uint64_t now_ms)
{
	if (__builtin_expect(!(set->req_adaptive | (set->fleet & NS_FLEET_REQ)), 1))
		return ns_reqq_take(q, set->max_requests, holder);
	return ns_table_place_take_auto(t, slot, set, holder, now_ms, 1);
}
/* ...a waiting request's turn: a place if no one waited longer (qi, word:
 * its queue entry, qi -1 when it has none; a waiter that died does not
 * count) and one is free (a holder that died frees its). The dead are
 * looked for at most every 50 ms per engine (reused pids once a second).
 * Its index, or -1. */
int ns_admit_request(struct ns_admitter *a, struct ns_table *t, int slot, const struct ns_settings *set,
		     uint32_t holder, int qi, uint64_t word, uint64_t now_ns);
/* A place given back by its holder (and its wait's entry, qi/word, when it
 * still had one): the futex word to wake when someone waits, else NULL. */
uint32_t *ns_admit_request_release(struct ns_table *t, int slot, int place, uint32_t holder, int qi, uint64_t word);
/* A request (the seccomp engine: a connect) that waited queue_timeout for
 * a place and found none: counted requests_throttled, said and an event as
 * ns_admit_turned_away says a connect's. */
void ns_admit_request_turned_away(const struct ns_engine *e, struct ns_admitter *a, struct ns_table *t, int slot,
				  const struct ns_settings *set, const char *key, uint64_t now_ms, uint32_t pid);

/* rate: a token of slot's bucket at now_us: 0 taken, else when one is due
 * (us). rng: the caller's state (slow_start, rate_jitter draw their step;
 * the clock is stirred into it first, so a forked child draws its own).
 * *tat, *base: the bucket's time the token left and the time it was counted
 * from (a connect's token is counted again from its first bytes out:
 * ns_table_token_later); *tat 0 when none was taken. */
uint64_t ns_admit_token(struct ns_table *t, int slot, const struct ns_settings *set, uint64_t now_us, uint64_t *rng,
			uint64_t *tat, uint64_t *base);
/* ...a token of a step_us bucket (burst's tolerance): ns_admit_token's
 * last step, and all of it for a plain rate (no slow start, no jitter, no
 * fleet share), inline where a request asks (shape.c: a call and its
 * registers were a third of rate's cost per request). */
static inline uint64_t ns_admit_token_step(struct ns_table *t, int slot, const struct ns_settings *set, uint64_t step,
					   uint64_t now_us, uint64_t *tat, uint64_t *base)
{
	int64_t due = ns_table_token(
		t, slot, step, set->burst > 1 ? (uint64_t)(set->burst - 1) * set->rate_interval_us : 0, now_us, tat);

	if (due > 0)
		return (uint64_t)due;
	*base = *tat > step ? *tat - step : 0;
	return 0;
}
static inline uint64_t ns_admit_token_fast(struct ns_table *t, int slot, const struct ns_settings *set, uint64_t now_us,
					   uint64_t *rng, uint64_t *tat, uint64_t *base)
{
	if (__builtin_expect(set->slow_start_ms | set->rate_jitter_bp | (set->fleet & NS_FLEET_RATE), 0))
		return ns_admit_token(t, slot, set, now_us, rng, tat, base);
	return ns_admit_token_step(t, slot, set, set->rate_interval_us, now_us, tat, base);
}

#endif

/* admit.c -- "may this go now", for both engines (admit.h). */
#include "admit.h"

#include <stdio.h>

#include "breaker.h"

enum { SAY_WARN = 2, SAY_INFO = 3 }; /* the engines' levels (account.c) */

int ns_admit_breaker(const struct ns_engine *e, struct ns_table *t, int slot, const struct ns_settings *set,
		     const char *key, int enforce, uint64_t now_us, uint32_t pid)
{
	struct ns_step st;

	if (ns_table_attempt(t, slot, enforce, now_us / 1000, set, &st) == NS_REJECT) {
		ns_account_rejected(e, t, slot, now_us, pid);
		return NS_REJECT;
	}
	ns_account_attempt(e, t, slot, key, &st, pid, NULL);
	return NS_ALLOW;
}

void ns_admit_forked(struct ns_admitter *a)
{
	for (int i = 0; i < NS_SAID_WAYS; i++) {
		__atomic_store_n(&a->said[i], 0, __ATOMIC_RELAXED);
		__atomic_store_n(&a->req_said[i], 0, __ATOMIC_RELAXED);
	}
}

static int says(const struct ns_engine *e, int level)
{
	return e->say && e->log_level && *e->log_level >= level;
}

void ns_admit_note_failure(struct ns_admitter *a, int slot, uint64_t now_ms)
{
	uint32_t ms = (uint32_t)now_ms;

	__atomic_store_n(&a->recent[(uint32_t)slot % NS_RECENT], (uint64_t)(uint32_t)slot << 32 | (ms ? ms : 1),
			 __ATOMIC_RELAXED);
}

int ns_admit_retry(struct ns_admitter *a, struct ns_table *t, int slot, const struct ns_settings *set, uint64_t now_ms)
{
	uint64_t e = __atomic_load_n(&a->recent[(uint32_t)slot % NS_RECENT], __ATOMIC_RELAXED);
	uint32_t ms = (uint32_t)now_ms;
	/* a retry: a connect within a second of a failure to it from here */
	int retry = e && (uint32_t)(e >> 32) == (uint32_t)slot && (uint32_t)(ms - (uint32_t)e) <= 1000;

	return ns_table_retry_budget(t, slot, retry, set->retry_budget_bp, set->retry_budget_min_mps, now_ms);
}

void ns_admit_throttled(const struct ns_engine *e, struct ns_admitter *a, struct ns_table *t, int slot, const char *key,
			uint64_t now_ms, uint32_t pid)
{
	if (ns_table_throttled(t, slot, now_ms))
		ns_event_write(e, t, NS_E_THROTTLING, slot, key, NULL, 0, "throttle = adaptive: connects refused here",
			       pid, NULL, 0);
	if (says(e, SAY_WARN) && ns_said_here(a->said, slot, now_ms)) {
		char line[NS_KEY_MAX + 160];

		snprintf(line, sizeof(line),
			 "%s: the server accepts too few of the requests sent: connects refused here "
			 "(throttle = adaptive), counted throttled (said at most once a minute)",
			 key);
		e->say(SAY_WARN, line);
	}
}

/* Free the places of [0, span) whose holders died: how many. Another
 * holder is seen gone by kill() at once; one whose pid was reused (three
 * more system calls each) at most once a second per engine. */
static int reclaim(const struct ns_engine *e, struct ns_admitter *a, struct ns_table *t, int slot, uint32_t span,
		   uint32_t self, uint64_t now_ms)
{
	uint64_t last = __atomic_load_n(&a->deep_ms, __ATOMIC_RELAXED);
	int deep = now_ms >= last + 1000 &&
		__atomic_compare_exchange_n(&a->deep_ms, &last, now_ms, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
	int freed = 0;

	for (uint32_t p = 0; p < span && p < NS_PLACES; p++) {
		uint32_t h = ns_table_place_holder(t, slot, (int)p), waiters;

		if (!h || h == self)
			continue; /* free, or the engine's own: alive, no system call */
		if (!ns_place_holder_lives(h, deep) && ns_table_place_release(t, slot, (int)p, h, &waiters)) {
			freed++;
			if (says(e, SAY_INFO)) {
				char line[96];

				snprintf(line, sizeof(line), "a place held by pid %u (no longer running) freed",
					 h >> NS_PLACE_TAG_BITS);
				e->say(SAY_INFO, line);
			}
		}
	}
	return freed;
}

/* One of the places: below cap, or under max_connections = auto while
 * fewer than cap of the span are held (*held: how many). */
static int take(struct ns_table *t, int slot, const struct ns_settings *set, uint32_t cap, uint32_t holder,
		uint32_t *held)
{
	*held = 0;
	if (!(set->adaptive | (set->fleet & NS_FLEET_CONN)))
		return ns_table_place_take(t, slot, cap, holder);
	return ns_table_place_take_under(t, slot, cap, set->max_connections, holder, held);
}

int ns_admit_place(const struct ns_engine *e, struct ns_admitter *a, struct ns_table *t, int slot,
		   const struct ns_settings *set, uint32_t holder, uint64_t now_ms, ns_admit_own_fn *own, void *ctx)
{
	/* max_connections now: all of it, or the adaptive limit, under
	 * slow_start its share so far; under auto the places held may be any
	 * of max_connections' (a limit that shrank leaves them above it) */
	int dyn = set->adaptive | (set->fleet & NS_FLEET_CONN); /* a limit the table holds */
	uint32_t cap = !(set->slow_start_ms | dyn) ? set->max_connections : ns_table_cap_for(t, slot, set, now_ms);
	uint32_t span = dyn ? set->max_connections : cap, held;
	int p = take(t, slot, set, cap, holder, &held);

	if (p < 0 && reclaim(e, a, t, slot, span, holder, now_ms) > 0)
		p = take(t, slot, set, cap, holder, &held);
	if (p < 0 && own && (p = own(ctx, slot, span, holder)) == NS_ADMIT_OWN_AGAIN)
		p = take(t, slot, set, cap, holder, &held);
	if (p >= 0 && set->adaptive) /* in flight at half the limit or more grows it */
		ns_table_limit_event(t, slot, set, NS_ADAPT_PLACE, (int)held, now_ms);
	if (p < 0 && (set->fleet & NS_FLEET_CONN))
		ns_table_fleet_denied(t, slot, NS_FLEET_K_CONN); /* (the agent asks the fleet for more) */
	return p;
}

/* A connect's or (requests) a request's wait for a place found none. */
static void turned_away(const struct ns_engine *e, struct ns_admitter *a, struct ns_table *t, int slot,
			const struct ns_settings *set, const char *key, uint64_t now_ms, uint32_t pid, int requests)
{
	int machine = requests ? ns_reqq_throttled(t, slot, now_ms) : ns_table_throttled(t, slot, now_ms);

	if (says(e, SAY_WARN) && ns_said_here(requests ? a->req_said : a->said, slot, now_ms)) {
		/* each process's first of a minute is said where its operator
		 * looks: a connect refused for a cap is no network failure. The
		 * limit named is the one in force (auto's now, slow_start's) */
		char limit[48], line[NS_KEY_MAX + 200];

		if (requests)
			snprintf(limit, sizeof(limit), "%u", ns_table_req_limit(t, slot, set, now_ms));
		else
			ns_cap_text(t, slot, set, now_ms, limit, sizeof(limit));
		snprintf(
			line, sizeof(line),
			requests
				? "%s: max_requests (%s) reached: requests failed at their start after queue_timeout "
				  "(%llu ms), counted throttled (said at most once a minute)"
				: "%s: max_connections (%s) reached: connects turned away after queue_timeout (%llu ms), "
				  "counted throttled (said at most once a minute)",
			key, limit, (unsigned long long)set->queue_timeout_ms);
		e->say(SAY_WARN, line);
	}
	if (machine)
		ns_event_write(e, t, NS_E_THROTTLING, slot, key, NULL, 0,
			       requests ? "max_requests reached: requests failed at their start"
					: "max_connections reached: connects turned away",
			       pid, NULL, 0);
}

void ns_admit_turned_away(const struct ns_engine *e, struct ns_admitter *a, struct ns_table *t, int slot,
			  const struct ns_settings *set, const char *key, uint64_t now_ms, uint32_t pid)
{
	turned_away(e, a, t, slot, set, key, now_ms, pid, 0);
}

void ns_admit_request_turned_away(const struct ns_engine *e, struct ns_admitter *a, struct ns_table *t, int slot,
				  const struct ns_settings *set, const char *key, uint64_t now_ms, uint32_t pid)
{
	turned_away(e, a, t, slot, set, key, now_ms, pid, 1);
}

/* May this engine look for dead request waiters and holders now (deep: a
 * reused pid too)? One look per 50 ms, not per waiter. */
static int req_look_due(struct ns_admitter *a, uint64_t ms, int *deep)
{
	uint64_t last = __atomic_load_n(&a->req_looked_ms, __ATOMIC_RELAXED);

	if (ms < last + 50 ||
	    !__atomic_compare_exchange_n(&a->req_looked_ms, &last, ms, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
		return 0;
	last = __atomic_load_n(&a->req_deep_ms, __ATOMIC_RELAXED);
	*deep = ms >= last + 1000 &&
		__atomic_compare_exchange_n(&a->req_deep_ms, &last, ms, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
	return 1;
}

int ns_admit_request(struct ns_admitter *a, struct ns_table *t, int slot, const struct ns_settings *set,
		     uint32_t holder, int qi, uint64_t word, uint64_t now_ns)
{
	struct ns_reqq *q = ns_reqq_of(t, slot);
	/* no wait lasts past queue_timeout (and a second): an entry older is a
	 * waiter that is gone */
	uint64_t stale = set->queue_timeout_ms * 1000 + 1000000, ms = now_ns / 1000000;
	uint32_t stale_us = stale > 1800000000u ? 1800000000u : (uint32_t)stale, now_us = (uint32_t)(now_ns / 1000);
	int deep = 0, look = 0, o, p;

	if (!q)
		return -1;
	if ((o = ns_reqq_before(q, qi, word, now_us, stale_us)) >= 0) {
		if (!(look = req_look_due(a, ms, &deep)) || !ns_reqq_drop_dead(q, o, holder, deep) ||
		    ns_reqq_before(q, qi, word, now_us, stale_us) >= 0)
			return -1;
	}
	p = ns_admit_request_now(t, slot, q, set, holder, ms);
	if (p < 0 && (look || req_look_due(a, ms, &deep)) && ns_reqq_reclaim(q, set->max_requests, holder, deep) > 0)
		p = ns_admit_request_now(t, slot, q, set, holder, ms);
	return p;
}

uint32_t *ns_admit_request_release(struct ns_table *t, int slot, int place, uint32_t holder, int qi, uint64_t word)
{
	struct ns_reqq *q = ns_reqq_of(t, slot);
	int wake = 0;

	if (!q)
		return NULL;
	if (word && qi >= 0)
		wake |= ns_reqq_leave(q, qi, word);
	if (place >= 0)
		wake |= ns_reqq_release(q, place, holder);
	return wake ? &q->wake : NULL;
}

uint64_t ns_admit_token(struct ns_table *t, int slot, const struct ns_settings *set, uint64_t now_us, uint64_t *rng,
			uint64_t *tat, uint64_t *base)
{
	uint64_t step = set->rate_interval_us;
	int64_t due;

	if (set->slow_start_ms | set->rate_jitter_bp) {
		*rng ^= now_us; /* (a forked child draws its own) */
		step = ns_table_rate_step(t, slot, set, now_us / 1000, ns_rng_next(rng));
	}
	if (set->fleet & NS_FLEET_RATE) { /* this machine's share of fleet_rate, when slower */
		uint64_t mph = ns_table_fleet_share(t, slot, NS_FLEET_K_RATE, set->fleet_rate_mph, now_us / 1000);
		uint64_t fstep = mph ? 3600000000000ULL / mph : 0;

		if (!mph) {
			ns_table_fleet_denied(t, slot, NS_FLEET_K_RATE);
			return now_us + 100000; /* no share here now: look again in 100 ms */
		}
		if (fstep > step)
			step = fstep;
	}
	due = (int64_t)ns_admit_token_step(t, slot, set, step, now_us, tat, base);
	if (due > 0) {
		if (!(set->fleet & NS_FLEET_RATE))
			return (uint64_t)due;
		ns_table_fleet_denied(t, slot, NS_FLEET_K_RATE);
		/* the share may grow at any lease: a wait under a small one
		 * (0.05/s: a token 20 s on) asks again within 100 ms, and the
		 * bucket then holds it one step of the new share at most */
		return (uint64_t)due < now_us + 100000 ? (uint64_t)due : now_us + 100000;
	}
	if (set->fleet & NS_FLEET_RATE)
		ns_table_fleet_token(t, slot);
	return 0;
}

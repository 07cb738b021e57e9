/* shaping.c -- the table's side of shaping traffic (DESIGN part 3):
 * connects turned away by max_connections and its ramp after a close
 * (slow_start), rate's token bucket, Retry-After's cooldown, retry_budget's
 * tokens, and the waits. The places themselves are inline in table.h (a
 * connect takes one on its fast path). Like table.c: no system call, the
 * clock from the caller. */
#include "table.h"
#include "slot.h"

/* A connect the breaker admitted (and counted a call) that never went out. */
static void uncount_call(struct ns_slot *s)
{
	ADD(&s->calls, (uint64_t)-1);
}

/**** max_connections ****/

int ns_table_throttled(struct ns_table *t, int idx, uint64_t now_ms)
{
	struct ns_slot *s = slot_at(t, idx);
	uint64_t last;

	if (!s)
		return 0;
	ADD(&s->throttled, 1);
	uncount_call(s);
	last = LOAD(&s->throttle_event_ms);
	return (last == 0 || now_ms >= last + 60000) && CAS(&s->throttle_event_ms, &last, now_ms ? now_ms : 1);
}

void ns_table_cooldown(struct ns_table *t, int idx, uint64_t until_ms)
{
	struct ns_slot *s = slot_at(t, idx);
	uint64_t cur;

	if (!s)
		return;
	cur = LOAD(&s->cooldown_until_ms);
	while (cur < until_ms && !CAS(&s->cooldown_until_ms, &cur, until_ms))
		;
}

void ns_table_cooldown_over(struct ns_table *t, int idx, uint64_t seen)
{
	struct ns_slot *s = slot_at(t, idx);

	if (s)
		CAS(&s->cooldown_until_ms, &seen, 0);   /* a later Retry-After that moved it stays */
}

uint64_t ns_table_cooldown_until(const struct ns_table *t, int idx)
{
	struct ns_slot *s = slot_at(t, idx);

	return s ? LOAD(&s->cooldown_until_ms) : 0;
}

uint32_t ns_table_share_now(const struct ns_table *t, int idx, uint64_t slow_start_ms, uint64_t now_ms)
{
	struct ns_slot *s = slot_at(t, idx);
	uint64_t closed, gone;

	if (!s || !slow_start_ms || !(closed = LOAD(&s->closed_ms)) || now_ms < closed ||
	    (gone = now_ms - closed) >= slow_start_ms)
		return 1000;
	/* 10 % + 90 % of the way */
	return (uint32_t)(100 + 900 * gone / slow_start_ms);
}

uint32_t ns_table_cap_now(const struct ns_table *t, int idx, uint32_t cap, uint64_t slow_start_ms, uint64_t now_ms)
{
	uint32_t share = ns_table_share_now(t, idx, slow_start_ms, now_ms);
	uint64_t c;

	if (share >= 1000)
		return cap;
	c = ((uint64_t)cap * share + 999) / 1000;   /* rounded up */
	return c < 1 ? 1 : c > cap ? cap : (uint32_t)c;
}

/**** rate ****/

uint64_t ns_table_rate_step(const struct ns_table *t, int idx, const struct ns_settings *set, uint64_t now_ms,
			    uint64_t draw)
{
	uint64_t step = set->rate_interval_us;

	if (set->slow_start_ms)
		step = step * 1000 / ns_table_share_now(t, idx, set->slow_start_ms, now_ms); /* (share: 100 to 1000) */
	if (set->rate_jitter_bp) {
		uint64_t u = draw % (2 * (uint64_t)set->rate_jitter_bp + 1); /* ten-thousandths */

		step = step * (10000 - set->rate_jitter_bp + u) / 10000;
	}
	return step;
}

void ns_table_token_later(struct ns_table *t, int idx, uint64_t tat, uint64_t base_us, uint64_t now_us)
{
	struct ns_slot *s = slot_at(t, idx);
	uint64_t cur = tat;

	if (s && tat && now_us > base_us)
		CAS(&s->rate_tat, &cur, tat + (now_us - base_us));
}

void ns_table_paced(struct ns_table *t, int idx)
{
	struct ns_slot *s = slot_at(t, idx);

	if (s)
		ADD(&s->paced, 1);
}

/**** retry_budget ****/

int ns_table_retry_budget(struct ns_table *t, int idx, int retry, uint32_t budget_bp, uint32_t min_mps,
			  uint64_t now_ms)
{
	struct ns_slot *s = slot_at(t, idx);
	uint64_t old, nw, tokens, cap = 1000 + (uint64_t)min_mps;
	uint32_t now32 = (uint32_t)now_ms, last;
	int ok;

	if (!s)
		return 0;
	old = LOAD(&s->retry_bucket);
	do {
		tokens = old >> 32;
		last = (uint32_t)old;
		if (old == 0)
			tokens = cap;   /* a fresh slot: a full bucket */
		else
			tokens += (uint64_t)(uint32_t)(now32 - last) * min_mps / 1000;
		if (tokens > cap)
			tokens = cap;
		ok = !retry || tokens >= 1000;
		if (retry && ok)
			tokens -= 1000;
		if (ok)
			tokens += budget_bp / 10;   /* a call earns its share of a retry */
		if (tokens > cap)
			tokens = cap;
		nw = tokens << 32 | (now32 ? now32 : 1);
	} while (!CAS(&s->retry_bucket, &old, nw));
	if (!ok) {
		ADD(&s->retry_throttled, 1);
		uncount_call(s);
	}
	return ok ? 0 : -1;
}

/**** every wait ****/

void ns_table_waited(struct ns_table *t, int idx, uint64_t ms)
{
	struct ns_slot *s = slot_at(t, idx);
	uint32_t b = 0;

	if (!s)
		return;
	while (b + 1 < NS_WAIT_BUCKETS && ms >= (1ull << b))
		b++;
	ADD(&s->waited[b], 1);
}


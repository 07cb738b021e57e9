/* shaping.c -- the table's side of shaping traffic (docs/design.md, "What
 * each rule promises"):
 * connects turned away by max_connections and its ramp after a close
 * (slow_start), rate's token bucket, Retry-After's cooldown, retry_budget's
 * tokens, and the waits. The places themselves are inline in table.h (a
 * connect takes one on its fast path). Like table.c: no system call, the
 * clock from the caller. */
#include "table.h"
#include "places.h"
#include "slot.h"
#include "reqq.h"

#ifdef __SSE2__
#include <cpuid.h>

/* The CPU counts bits in one instruction (POPCNT: every x86-64 since 2008,
 * but not in the baseline the library is built for): asked once at load;
 * until then (a wrapper called from a constructor before this one) the
 * count is made by shifts and masks, the same figure (ns_places_held). */
int ns_have_popcnt;

__attribute__((constructor)) static void popcnt_probe(void)
{
	unsigned a, b, c, d;

	ns_have_popcnt = __get_cpuid(1, &a, &b, &c, &d) && (c & bit_POPCNT);
}
#endif

int ns_places_popcnt(int on)
{
#ifdef __SSE2__
	int was = ns_have_popcnt;

	if (on >= 0)
		ns_have_popcnt = on;
	return was;
#else
	(void)on;
	return 0;
#endif
}

/* A connect the breaker admitted (and counted a call) that never went out. */
static void uncount_call(struct ns_slot *s)
{
	ADD(&s->calls, (uint64_t)-1);
}

void ns_table_uncall(struct ns_table *t, int idx)
{
	struct ns_slot *s = slot_at(t, idx);

	if (s)
		uncount_call(s);
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

int ns_said_here(uint64_t said[NS_SAID_WAYS], int idx, uint64_t now_ms)
{
	uint64_t *w = &said[(uint32_t)idx % NS_SAID_WAYS], v = __atomic_load_n(w, __ATOMIC_RELAXED);
	uint32_t at = (uint32_t)now_ms ? (uint32_t)now_ms : 1;

	if (v && (uint32_t)(v >> 32) == (uint32_t)idx + 1 && (uint32_t)(at - (uint32_t)v) < 60000)
		return 0;
	return __atomic_compare_exchange_n(w, &v, (uint64_t)((uint32_t)idx + 1) << 32 | at, 0, __ATOMIC_RELAXED,
					   __ATOMIC_RELAXED);
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

/**** max_connections = auto ****/

#define AD_FAILED            NS_AD_FAILED
#define AD_BUSY              NS_AD_BUSY
#define AD_OK                1ull
#define AD_IV_MASK           NS_AD_IV_MASK
#define AD_IV(w)             NS_AD_IV(w)
#define AD_MAKE(lim, iv, fl) ((uint64_t)(lim) << 44 | ((iv)&AD_IV_MASK) << 3 | (fl))

/* What a limit that adapts is of: its word, its bounds (a count). */
struct ad {
	uint64_t *word;
	uint32_t min, max;
};

/* a limit (thousandths) within the bounds; 0, none yet: the minimum */
static inline __attribute__((always_inline)) uint32_t ad_bound(uint32_t milli, const struct ad *a)
{
	return ns_ad_bound(milli, a->min, a->max);
}

/* max_connections' (req 0) or max_requests' (req 1) limit of slot s */
static inline __attribute__((always_inline)) struct ad ad_of(struct ns_slot *s, const struct ns_settings *set, int req)
{
	struct ad a = { NULL, 0, 0 };

	if (s && !req)
		a = (struct ad){ &s->adapt, set->max_connections_min, set->max_connections_max };
	else if (s)
		a = (struct ad){ &s->req.adapt, set->max_requests_min, set->max_requests_max };
	return a;
}

static inline __attribute__((always_inline)) uint32_t ad_limit(const struct ad *a)
{
	uint32_t m = ad_bound(a->word ? NS_ADAPT_LIMIT(LOAD(a->word)) : 0, a) / 1000;

	return m ? m : 1;
}

uint32_t ns_table_limit(const struct ns_table *t, int idx, const struct ns_settings *set)
{
	struct ad a = ad_of(slot_at(t, idx), set, 0);

	return ad_limit(&a);
}

static inline __attribute__((always_inline)) void ad_event(const struct ad *a, const struct ns_settings *set, int ev,
							   int place, uint64_t now_ms)
{
	uint64_t iv = now_ms / (set->adaptive_interval_ms ? set->adaptive_interval_ms : 1000), old, nw;

	if (!a->word)
		return;
	old = LOAD(a->word);
	/* the common cases, a success in an interval that has one, a connect
	 * in one already busy (or either after a failure), a connect that
	 * finds less than half the limit in flight: nothing to write */
	if (ev != NS_ADAPT_FAILURE && AD_IV(old) == (iv & AD_IV_MASK) && old >> 44 &&
	    ((old & (AD_FAILED | (ev == NS_ADAPT_SUCCESS ? AD_OK : AD_BUSY))) ||
	     (ev == NS_ADAPT_PLACE && (uint32_t)(place + 1) * 2000 < ad_bound(NS_ADAPT_LIMIT(old), a))))
		return;
	do {
		uint32_t lim = ad_bound(NS_ADAPT_LIMIT(old), a);
		uint64_t fl = AD_IV(old) == (iv & AD_IV_MASK) ? old & 7 : 0;

		/* a new interval: the one before grows it if it earned that */
		if (AD_IV(old) != (iv & AD_IV_MASK) && (old & 7) == (AD_BUSY | AD_OK))
			lim = ad_bound(lim + 1000, a);
		if (ev == NS_ADAPT_FAILURE) {
			/* by adaptive_backoff, and by one connection at least: a
			 * limit that grew past the server's capacity by one is back
			 * under it after that one's failure, not after two or three
			 * (5.7 x 0.9 is still 5) */
			uint32_t by = (uint32_t)((uint64_t)lim * set->adaptive_backoff_milli / 1000);

			lim = ad_bound(by < lim - 1000 ? by : lim > 1000 ? lim - 1000 : 0, a);
			fl = AD_FAILED;
		} else if (ev == NS_ADAPT_SUCCESS && !(fl & AD_FAILED)) {
			fl |= AD_OK;
		} else if (ev == NS_ADAPT_PLACE && !(fl & AD_FAILED) && (uint32_t)(place + 1) * 2000 >= lim) {
			fl |= AD_BUSY;
		}
		nw = AD_MAKE(lim, iv, fl);
	} while (nw != old && !CAS(a->word, &old, nw));
}

void ns_table_limit_event(struct ns_table *t, int idx, const struct ns_settings *set, int ev, int place,
			  uint64_t now_ms)
{
	struct ad a = ad_of(slot_at(t, idx), set, 0);

	ad_event(&a, set, ev, place, now_ms);
}

void ns_table_req_limit_event(struct ns_table *t, int idx, const struct ns_settings *set, int ev, int held,
			      uint64_t now_ms)
{
	struct ad a = ad_of(slot_at(t, idx), set, 1);

	ad_event(&a, set, ev, held, now_ms);
}

/* Limits that adapt (shaping.c): an outcome moves the limit, and is the
 * throttle's request (a success its accept). */
static void th_add(struct ns_slot *s, uint64_t now_ms, uint64_t width, uint32_t req, uint32_t acc);

void ns_table_adapt_outcome(struct ns_table *t, int idx, const struct ns_settings *set, int failed, uint64_t now_ms)
{
	struct ns_slot *s;

	if (set->adaptive)
		ns_table_limit_event(t, idx, set, failed ? NS_ADAPT_FAILURE : NS_ADAPT_SUCCESS, 0, now_ms);
	if (set->req_adaptive)
		ns_table_req_limit_event(t, idx, set, failed ? NS_ADAPT_FAILURE : NS_ADAPT_SUCCESS, 0, now_ms);
	/* (the throttle's count inline: it is on every outcome of its
	 * destinations) */
	if (set->throttle && (s = slot_at(t, idx)) != NULL)
		th_add(s, now_ms, set->throttle_window_ms ? set->throttle_window_ms : 120000, 1, !failed);
}

static inline __attribute__((always_inline)) int take_under(uint32_t *place, uint32_t cap, uint32_t span,
							    uint32_t holder, uint32_t *held)
{
	*held = 0;
	if (!holder)
		return -1;
	if (span > NS_PLACES)
		span = NS_PLACES;
	for (int tries = 0; tries < 4; tries++) {
		uint32_t free_ = 0;
		int p;

		*held = ns_places_held(place, span, &p);
		if (*held >= cap || p < 0)
			return -1;
		if (CAS(&place[p], &free_, holder))
			return p;
	}
	return -1;
}

/* The limit of places in force (connections: req 0; requests: 1): auto's,
 * else the key's, and under a fleet limit at most the fleet's share. */
static inline __attribute__((always_inline)) uint32_t limit_now(const struct ns_table *t, int idx,
								const struct ns_settings *set, const struct ad *a,
								int req, uint64_t now_ms)
{
	uint32_t lim = (req ? set->req_adaptive : set->adaptive) ? ad_limit(a)
		: req                                            ? set->max_requests
								 : set->max_connections;
	int k = req ? NS_FLEET_K_REQ : NS_FLEET_K_CONN;

	if (set->fleet & NS_FLEET_BIT(k)) {
		uint64_t f = ns_table_fleet_share(t, idx, k, ns_fleet_limit(set, k), now_ms);

		if (f < lim)
			lim = (uint32_t)f;
	}
	return lim;
}

uint32_t ns_table_req_limit(const struct ns_table *t, int idx, const struct ns_settings *set, uint64_t now_ms)
{
	struct ad a = ad_of(slot_at(t, idx), set, 1);

	return limit_now(t, idx, set, &a, 1, now_ms);
}

int ns_table_place_take_auto(struct ns_table *t, int idx, const struct ns_settings *set, uint32_t holder,
			     uint64_t now_ms, int req)
{
	struct ns_slot *s = slot_at(t, idx);
	struct ad a = ad_of(s, set, req);
	uint32_t held;
	int p;

	if (!s)
		return -1;
	p = take_under(req ? s->req.place : s->place, limit_now(t, idx, set, &a, req, now_ms),
		       req ? set->max_requests : set->max_connections, holder, &held);
	if (p >= 0 && (req ? set->req_adaptive : set->adaptive)) /* in flight at half the limit or more grows it */
		ad_event(&a, set, NS_ADAPT_PLACE, (int)held, now_ms);
	return p;
}

int ns_table_place_take_under(struct ns_table *t, int idx, uint32_t cap, uint32_t span, uint32_t holder, uint32_t *held)
{
	struct ns_slot *s = slot_at(t, idx);

	*held = 0;
	return s ? take_under(s->place, cap, span, holder, held) : -1;
}

uint32_t ns_table_cap_for(const struct ns_table *t, int idx, const struct ns_settings *set, uint64_t now_ms)
{
	struct ad a = ad_of(slot_at(t, idx), set, 0);
	uint32_t cap = limit_now(t, idx, set, &a, 0, now_ms);

	return set->slow_start_ms ? ns_table_cap_now(t, idx, cap, set->slow_start_ms, now_ms) : cap;
}

/**** throttle = adaptive ****/

/* (a window's word: table.h, NS_TH_*) */
#define TH_NUM(w)        NS_TH_NUM(w)
#define TH_REQ(w)        NS_TH_REQ(w)
#define TH_ACC(w)        NS_TH_ACC(w)
#define TH_MAKE(n, r, a) ((uint64_t)((n)&0xffffu) << 48 | (uint64_t)(r) << 24 | (uint64_t)(a))

/* The window's counts, estimated over the last window: this one's, and the
 * one before's share of the window not yet gone (a sliding window of two). */
static void th_counts(struct ns_slot *s, uint64_t now_ms, uint64_t width, uint64_t *req, uint64_t *acc)
{
	uint64_t n = now_ms / width, gone = now_ms % width;

	*req = *acc = 0;
	for (int i = 0; i < 2; i++) {
		uint64_t w = LOAD(&s->thr[i]);

		if (TH_NUM(w) == (n & 0xffff)) {
			*req += TH_REQ(w);
			*acc += TH_ACC(w);
		} else if (TH_NUM(w) == ((n - 1) & 0xffff)) {
			*req += (uint64_t)TH_REQ(w) * (width - gone) / width;
			*acc += (uint64_t)TH_ACC(w) * (width - gone) / width;
		}
	}
}

/* Count requests and accepts in this window's word (of the two, the one
 * that is not the window just before becomes it when it has none yet). */
static inline __attribute__((always_inline)) void th_add(struct ns_slot *s, uint64_t now_ms, uint64_t width,
							 uint32_t req, uint32_t acc)
{
	uint32_t n = (uint32_t)(now_ms / width) & 0xffff;

	for (;;) {
		uint64_t w0 = LOAD(&s->thr[0]), w1 = LOAD(&s->thr[1]), old, nw;
		int i = TH_NUM(w0) == n ? 0 : TH_NUM(w1) == n ? 1 : -1;

		if (i < 0) {
			i = TH_NUM(w0) == ((n - 1) & 0xffff) ? 1 : 0;
			old = i ? w1 : w0;
			nw = TH_MAKE(n, req, acc);
		} else {
			old = i ? w1 : w0;
			/* (req and acc are 0 or 1: below the ceiling each is one add) */
			if (__builtin_expect(TH_REQ(old) < 0xfffffeu && TH_ACC(old) < 0xfffffeu, 1))
				nw = old + ((uint64_t)req << 24) + acc;
			else
				nw = TH_MAKE(n, TH_REQ(old) + req < 0xffffffu ? TH_REQ(old) + req : 0xffffffu,
					     TH_ACC(old) + acc < 0xffffffu ? TH_ACC(old) + acc : 0xffffffu);
		}
		if (CAS(&s->thr[i], &old, nw))
			return;
	}
}

int ns_table_throttle(struct ns_table *t, int idx, const struct ns_settings *set, uint64_t now_ms, uint64_t *rng)
{
	struct ns_slot *s = slot_at(t, idx);
	uint64_t req, acc, ppm;

	if (!s)
		return 0;
	if (ns_throttle_healthy(s, set))
		return 0;
	th_counts(s, now_ms, set->throttle_window_ms ? set->throttle_window_ms : 120000, &req, &acc);
	ppm = ns_throttle_ppm(req, acc, set->throttle_k_milli);
	/* (a healthy destination draws nothing) */
	return ppm && ns_rng_next(rng) % 1000000 < ppm;
}

uint64_t ns_throttle_ppm(uint64_t req, uint64_t acc, uint32_t k_milli)
{
	uint64_t ka = acc * k_milli / 1000;

	return req > ka ? (req - ka) * 1000000 / (req + 1) : 0;
}

void ns_table_throttle_count(struct ns_table *t, int idx, const struct ns_settings *set, int accepted, uint64_t now_ms)
{
	struct ns_slot *s = slot_at(t, idx);

	if (s)
		th_add(s, now_ms, set->throttle_window_ms ? set->throttle_window_ms : 120000, 1, accepted != 0);
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


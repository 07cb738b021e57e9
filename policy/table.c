/* table.c -- the shared breaker table: slot lookup and atomic updates.
 *
 * No system calls here: the clock comes from the caller, so the unit tests
 * drive it with a fake one. Mapping the file is in tablefile.c. */
#include "table.h"

#include <stddef.h>
#include "slot.h"
#include "ocring.h"
#include "reqq.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

/* tag: state 2 | hash 30 | claim time 32 (ms, low bits) */
/* A claim not finished after this long belongs to a dead process. */
#define CLAIM_STALE_MS 2000u
#define CLAIM_SPINS 4096

static uint64_t hash_key(const char *s)
{
	uint64_t h = 1469598103934665603ULL;   /* FNV-1a */

	for (; *s; s++) {
		h ^= (unsigned char)*s;
		h *= 1099511628211ULL;
	}
	return h;
}

uint64_t ns_bucket_width(uint64_t window_ms)
{
	uint64_t w = (window_ms + NS_BUCKETS - 1) / NS_BUCKETS;

	return w ? w : 1;
}

static void slot_init_key(struct ns_slot *s, const char *key, size_t n)
{
	memset(s->key, 0, sizeof(s->key));
	memcpy(s->key, key, n);
}

static int key_equal(const struct ns_slot *s, const char *key, size_t n)
{
	/* n < NS_KEY_MAX, so key[n] is inside the slot whatever the slot holds */
	return memcmp(s->key, key, n) == 0 && s->key[n] == '\0';
}

int ns_table_find(struct ns_table *t, const char *key, int create, uint64_t now_ms)
{
	size_t n = strlen(key);
	uint64_t h, h30;
	uint32_t start;

	if (!t->slots || t->nslots == 0 || n == 0 || n >= NS_KEY_MAX)
		return NS_SLOT_MISSING;
	h = hash_key(key);
	h30 = h & 0x3fffffffULL;
	start = (uint32_t)(h % t->nslots);
	for (uint32_t i = 0; i < t->nslots; i++) {
		uint32_t idx = (start + i) % t->nslots;
		struct ns_slot *s = &t->slots[idx];
		uint64_t tag = LOAD(&s->tag);
		int spins = 0;

	again:
		if (tag == 0) {
			uint64_t mine = TAG_MAKE(TAG_CLAIMING, h30, now_ms);

			if (!create)
				return NS_SLOT_MISSING;
			if (!CAS(&s->tag, &tag, mine))
				goto again;
			slot_init_key(s, key, n);
			STORE(&s->tag, TAG_MAKE(TAG_READY, h30, now_ms));
			ADD(&t->hdr->used, 1);
			return (int)idx;
		}
		if (TAG_HASH(tag) != h30)
			continue;
		if (TAG_STATE(tag) == TAG_READY) {
			if (key_equal(s, key, n))
				return (int)idx;
			continue;
		}
		/* Another process is writing this slot's key: wait a little. */
		if (spins++ < CLAIM_SPINS) {
			__builtin_ia32_pause();
			tag = LOAD(&s->tag);
			goto again;
		}
		if ((uint32_t)now_ms - TAG_TIME(tag) > CLAIM_STALE_MS && create) {
			uint64_t mine = TAG_MAKE(TAG_CLAIMING, h30, now_ms);

			if (!CAS(&s->tag, &tag, mine))
				goto again;
			slot_init_key(s, key, n);
			STORE(&s->tag, TAG_MAKE(TAG_READY, h30, now_ms));
			return (int)idx;
		}
		return NS_SLOT_BUSY;
	}
	if (create)
		ADD(&t->hdr->full_count, 1);
	return NS_SLOT_FULL;
}

/* An attempt's verdict, counted: the slot's mode noted, a refusal that
 * is not enforced let through, then a call or a rejection. Returns the
 * verdict the caller acts on. */
static inline int count_attempt(struct ns_slot *s, int enforce, int verdict)
{
	if (LOAD(&s->monitor) != (uint64_t)!enforce)
		STORE(&s->monitor, (uint64_t)!enforce);
	if (!enforce && verdict == NS_REJECT)
		verdict = NS_ALLOW;
	if (verdict == NS_REJECT)
		ADD(&s->rejected, 1);
	else
		ADD(&s->calls, 1);
	return verdict;
}

/* ns_brk_attempt_quick on the slot, and a closed breaker the fleet holds
 * open refuses as an open one does. Half-open probing stays local. */
static inline int slot_attempt_quick(const struct ns_slot *s, uint64_t w, uint64_t now_ms)
{
	int v = ns_brk_attempt_quick(w, now_ms);

	/* closed here, but the fleet holds it open or a Retry-After asked to wait */
	if (v == NS_ALLOW && (LOAD(&s->fleet_until_ms) > now_ms || LOAD(&s->cooldown_until_ms) > now_ms))
		return NS_REJECT;
	return v;
}

int ns_table_request_admit(struct ns_table *t, int idx, int enforce, uint64_t now_ms)
{
	struct ns_slot *s = slot_at(t, idx);
	int v;

	if (!s)
		return NS_ALLOW;
	v = ns_brk_attempt_quick(LOAD(&s->word), now_ms);
	if (v == NS_ALLOW && LOAD(&s->fleet_until_ms) > now_ms)
		v = NS_REJECT;
	if (v != NS_REJECT || !enforce)
		return NS_ALLOW; /* (due a probe: the request may be it) */
	ADD(&s->rejected, 1);
	return NS_REJECT;
}

int ns_table_attempt_quick(struct ns_table *t, int idx, int enforce, uint64_t now_ms)
{
	struct ns_slot *s = slot_at(t, idx);
	int v;

	if (!s || (v = slot_attempt_quick(s, LOAD(&s->word), now_ms)) < 0)
		return -1;
	return count_attempt(s, enforce, v);
}

/**** sliding window ****/

/* A bucket is one word: epoch 24 | failures 20 | outcomes 20. Counts stop
 * at 2^20 - 1 per bucket (a 32nd of the window); the epoch wraps after 2^24
 * bucket widths (half a year for the default 30 s window), and a bucket
 * left untouched exactly that long would read as current: the price of one
 * atomic word. */
#define EPOCH_MASK 0xffffffu
#define COUNT_MAX 0xfffffu
#define B_EPOCH(v) ((uint32_t)((v) >> 40) & EPOCH_MASK)
#define B_FAIL(v) ((uint32_t)((v) >> 20) & COUNT_MAX)
#define B_OUT(v) ((uint32_t)(v) & COUNT_MAX)

/* Add a and b to the two counts of the current bucket of arr. */
static void bucket_add(uint64_t *arr, uint64_t now_ms, uint64_t width, int a, int b_inc)
{
	uint32_t epoch = (uint32_t)(now_ms / width) & EPOCH_MASK;
	uint64_t *b = &arr[epoch % NS_BUCKETS];
	uint64_t old = LOAD(b), nw;

	do {
		uint32_t e = B_EPOCH(old), f = B_FAIL(old), o = B_OUT(old);

		if (e != epoch) {
			/* 24-bit epochs compare modulo 2^24: a newer period already
			 * owns the bucket if it is ahead by less than half the range */
			if (old != 0 && ((e - epoch) & EPOCH_MASK) != 0 && ((e - epoch) & EPOCH_MASK) < (EPOCH_MASK >> 1))
				return;   /* this event is out of the window */
			f = 0;
			o = 0;
		}
		if (a && f < COUNT_MAX)
			f++;
		if (b_inc && o < COUNT_MAX)
			o++;
		nw = ((uint64_t)epoch << 40) | ((uint64_t)f << 20) | o;
	} while (!CAS(b, &old, nw));
}

/* The latency generations: g = now / window; a sample goes to g % 2,
 * reset when it held an older generation. The p99 is read over g and g - 1,
 * so it covers between one and two windows of samples. A reset racing an
 * add may lose that one sample: the figure is the upper bound of a
 * histogram bucket anyway (within a factor of 2 to 2.5). */
static void lat_add(struct ns_slot *s, uint64_t now_ms, uint64_t window_ms, uint64_t us)
{
	uint64_t g = now_ms / (window_ms ? window_ms : 1), old;
	uint32_t i = (uint32_t)(g % 2), b = 0;

	old = LOAD(&s->lat_gen[i]);
	if (old != g && CAS(&s->lat_gen[i], &old, g))
		for (uint32_t k = 0; k < NS_HIST_BUCKETS; k++)
			STORE(&s->lat[i][k], 0);
	while (b < NS_HIST_BUCKETS - 1 && us > ns_hist_bounds_us[b])
		b++;
	ADD(&s->lat[i][b], 1);
}

static uint64_t lat_p99(const struct ns_slot *s, uint64_t now_ms, uint64_t window_ms)
{
	uint64_t g = now_ms / (window_ms ? window_ms : 1);
	struct ns_hist h;
	int64_t p;

	memset(&h, 0, sizeof(h));
	for (uint32_t i = 0; i < 2; i++) {
		uint64_t held = LOAD(&s->lat_gen[i]);

		if (held != g && held + 1 != g)
			continue;
		for (uint32_t k = 0; k < NS_HIST_BUCKETS; k++)
			h.count[k] += LOAD(&s->lat[i][k]);
	}
	p = ns_hist_percentile(&h, 99);
	return p < 0 ? 0 : (uint64_t)p;
}

/* with_p99: also the latency p99 (a histogram walk), for latency_p99 and
 * for display; the other rules need only the counts. */
static struct ns_window window_count(const struct ns_slot *s, uint64_t now_ms, uint64_t window_ms, int with_p99)
{
	struct ns_window w = { 0, 0, 0, 0, 0, 0, 5000 };
	uint64_t width = ns_bucket_width(window_ms);
	uint32_t cur = (uint32_t)(now_ms / width) & EPOCH_MASK;

	for (uint32_t i = 0; i < NS_BUCKETS; i++) {
		uint64_t v = LOAD(&s->bucket[i]), v2 = LOAD(&s->bucket2[i]);

		if (v && ((cur - B_EPOCH(v)) & EPOCH_MASK) < NS_BUCKETS) {
			w.failures += B_FAIL(v);
			w.outcomes += B_OUT(v);
		}
		if (v2 && ((cur - B_EPOCH(v2)) & EPOCH_MASK) < NS_BUCKETS) {
			w.slow += B_FAIL(v2);
			w.timeouts += B_OUT(v2);
		}
	}
	if (with_p99)
		w.p99_us = lat_p99(s, now_ms, window_ms);
	return w;
}

static void window_clear(struct ns_slot *s)
{
	for (uint32_t i = 0; i < NS_BUCKETS; i++) {
		STORE(&s->bucket[i], 0);
		STORE(&s->bucket2[i], 0);
	}
	STORE(&s->lat_gen[0], 0);
	STORE(&s->lat_gen[1], 0);
}

/**** transitions ****/

/* A draw from 0 to 10000 for an open period's jitter: a mix of the clock
 * and the slot, so processes and destinations that open together spread. */
static uint32_t jitter_draw(const struct ns_slot *s, uint64_t now_ms)
{
	uint64_t x = now_ms * 0x9e3779b97f4a7c15ULL ^ (uint64_t)(uintptr_t)s;

	x ^= x >> 31;
	x *= 0xbf58476d1ce4e5b9ULL;
	x ^= x >> 29;
	return (uint32_t)(x % 10001);
}

static void note_open(struct ns_slot *s, const struct ns_step *st, uint64_t now_ms, uint64_t wall_ms)
{
	STORE(&s->opened_wall_ms, wall_ms);
	if (st->next.manual || st->next.state == NS_FORCED_OPEN)
		STORE(&s->half_open_wall_ms, 0);
	else
		STORE(&s->half_open_wall_ms, wall_ms + (st->next.t_ms - now_ms));
}

/* Apply one event with a compare-and-swap loop on the state word. */
static struct ns_step apply(struct ns_slot *s, int event, const struct ns_window *w,
			    uint64_t now_ms, const struct ns_settings *set)
{
	uint64_t old = LOAD(&s->word), nw;
	struct ns_step st;
	struct ns_brk cur;

	if (event == NS_EV_ATTEMPT && (st.verdict = slot_attempt_quick(s, old, now_ms)) >= 0) {
		/* the common cases, a connect through a closed breaker and one
		 * refused by an open one, change nothing: no step, no write (and
		 * no transition for the caller to read the next state of) */
		memset(&st.next, 0, sizeof(st.next));
		st.transition = NS_TR_NONE;
		st.rule = NS_RULE_NONE;
		return st;
	}
	do {
		ns_brk_unpack(old, &cur);
		st = ns_brk_step(&cur, event, w, now_ms, set);
		nw = ns_brk_pack(&st.next);
		if (nw == old)
			break;
	} while (!CAS(&s->word, &old, nw));
	return st;
}

int ns_table_attempt(struct ns_table *t, int idx, int enforce, uint64_t now_ms,
		     const struct ns_settings *set, struct ns_step *out)
{
	struct ns_slot *s = slot_at(t, idx);
	struct ns_step st;

	if (!s)
		return NS_ALLOW;
	st = apply(s, NS_EV_ATTEMPT, NULL, now_ms, set);
	st.verdict = count_attempt(s, enforce, st.verdict);
	if (out)
		*out = st;
	return st.verdict;
}

void ns_table_outcome(struct ns_table *t, int idx, int outcome, int err, uint64_t now_ms,
		      uint64_t wall_ms, const struct ns_settings *set, struct ns_step *out)
{
	ns_table_outcome_at(t, idx, outcome, err, 0, now_ms, wall_ms, set, out);
}

void ns_table_outcome_at(struct ns_table *t, int idx, int outcome, int err, uint64_t latency_us, uint64_t now_ms,
			 uint64_t wall_ms, const struct ns_settings *set, struct ns_step *out)
{
	struct ns_slot *s = slot_at(t, idx);
	uint64_t width = ns_bucket_width(set->window_ms);
	struct ns_window w;
	struct ns_step st;
	int failed = outcome != NS_OUT_SUCCESS;
	int slow = !failed && set->slow_call_ms && latency_us >= set->slow_call_ms * 1000;

	if (!s)
		return;
	if (failed) {
		ADD(&s->failures, 1);
		if (outcome == NS_OUT_TIMEOUT)
			ADD(&s->timeouts, 1);
		STORE(&s->last_error, (uint32_t)err);
	} else {
		ADD(&s->successes, 1);
	}
	STORE(&s->window_ms, (uint32_t)(set->window_ms > UINT32_MAX ? UINT32_MAX : set->window_ms));
	bucket_add(s->bucket, now_ms, width, failed, 1);
	if (slow || outcome == NS_OUT_TIMEOUT)
		bucket_add(s->bucket2, now_ms, width, slow, outcome == NS_OUT_TIMEOUT);
	if (slow)
		ADD(&s->slow_calls, 1);
	if (!failed && latency_us)
		lat_add(s, now_ms, set->window_ms, latency_us);
	if (__builtin_expect(set->adaptive | set->req_adaptive | set->throttle, 0))
		ns_table_adapt_outcome(t, idx, set, failed, now_ms);
	if (failed || set->slow_call_ms || set->latency_p99_ms) {
		w = window_count(s, now_ms, set->window_ms, set->latency_p99_ms != 0);
		w.reopens = LOAD(&s->open_level);
		if (w.reopens > 64)
			w.reopens = 64; /* (shared memory: bounded before use) */
		w.jitter = jitter_draw(s, now_ms);
		st = apply(s, failed ? NS_EV_FAILURE : NS_EV_SUCCESS, &w, now_ms, set);
	} else {
		/* a success opens nothing but by the slow-call rules: the window
		 * is not counted (its 32 buckets cost more the more traffic had
		 * filled them; a keep-alive loop's outcome cost 18 % more once
		 * the destination had steady traffic) */
		st = apply(s, NS_EV_SUCCESS, NULL, now_ms, set);
	}
	if (st.transition == NS_TR_OPENED || st.transition == NS_TR_REOPENED) {
		/* the open period's growth: one more failed probe in a row, or a first open */
		STORE(&s->open_level, st.transition == NS_TR_REOPENED ? w.reopens + 1 : 0);
		note_open(s, &st, now_ms, wall_ms);
	}
	if (st.transition == NS_TR_CLOSED) {
		STORE(&s->open_level, 0);
		STORE(&s->closed_ms, now_ms ? now_ms : 1);   /* slow_start ramps from here */
		window_clear(s);
		STORE(&s->opened_wall_ms, 0);
		STORE(&s->half_open_wall_ms, 0);
	}
	if (out)
		*out = st;
}

void ns_table_add_injected(struct ns_table *t, int idx)
{
	struct ns_slot *s = slot_at(t, idx);

	if (s)
		ADD(&s->injected, 1);
}

void ns_table_exchange(struct ns_table *t, int idx)
{
	struct ns_slot *s = slot_at(t, idx);

	if (s)
		ADD(&s->exchanges, 1);
}

void ns_table_exchange_undo(struct ns_table *t, int idx)
{
	struct ns_slot *s = slot_at(t, idx);

	if (s)
		__atomic_fetch_sub(&s->exchanges, 1, __ATOMIC_RELAXED);
}

/* Take one back from a count, never below 0. */
static void take_back(uint32_t *w)
{
	uint32_t v = LOAD(w);

	while (v && !CAS(w, &v, v - 1))
		;
}

static void take_back64(uint64_t *w, uint64_t by)
{
	uint64_t v = LOAD(w);

	while (v && !CAS(w, &v, v >= by ? v - by : 0))
		;
}

void ns_table_first_byte_undo(struct ns_table *t, int idx, uint64_t us, uint64_t now_ms, uint64_t window_ms)
{
	struct ns_slot *s = slot_at(t, idx);
	uint64_t g = now_ms / (window_ms ? window_ms : 1);
	uint32_t b = 0;

	if (!s)
		return;
	while (b < NS_HIST_BUCKETS - 1 && us > ns_hist_bounds_us[b])
		b++;
	if (LOAD(&s->first_byte_hist.count[b])) {
		take_back64(&s->first_byte_hist.count[b], 1);
		take_back64(&s->first_byte_hist.sum_us, us);
	}
	for (uint32_t i = 0; i < 2; i++)
		if (LOAD(&s->lat_gen[i]) == g || LOAD(&s->lat_gen[i]) + 1 == g) {
			if (LOAD(&s->lat[i][b])) {
				take_back(&s->lat[i][b]);
				break;
			}
		}
}

void ns_table_success_undo(struct ns_table *t, int idx, uint64_t at_ms, uint64_t window_ms)
{
	struct ns_slot *s = slot_at(t, idx);
	uint64_t width = ns_bucket_width(window_ms);
	uint32_t epoch = (uint32_t)(at_ms / width) & EPOCH_MASK;
	uint64_t *b, old;

	if (!s)
		return;
	take_back64(&s->successes, 1);
	b = &s->bucket[epoch % NS_BUCKETS];
	old = LOAD(b);
	/* a success: one outcome, no failure; never below what failed */
	while (B_EPOCH(old) == epoch && B_OUT(old) > B_FAIL(old) && !CAS(b, &old, old - 1))
		;
}

void ns_table_stale_reuse(struct ns_table *t, int idx)
{
	struct ns_slot *s = slot_at(t, idx);

	if (s)
		ADD(&s->stale_reuses, 1);
}

void ns_table_seccomp_call(struct ns_table *t, int idx)
{
	struct ns_slot *s = slot_at(t, idx);

	if (s)
		ADD(&s->seccomp_calls, 1);
}

void ns_table_h2_count(struct ns_table *t, int idx, int what)
{
	struct ns_slot *s = slot_at(t, idx);

	if (s)
		ADD(what == NS_H2_COUNT_BLIND ? &s->h2_blind : &s->h2_unprocessed, 1);
}

void ns_table_grpc(struct ns_table *t, int idx, unsigned code, int failed)
{
	struct ns_slot *s = slot_at(t, idx);

	if (!s)
		return;
	STORE(&s->last_grpc_status, code + 1);
	if (failed)
		ADD(&s->grpc_failures, 1);
}

void ns_table_http(struct ns_table *t, int idx, unsigned code, int failed)
{
	struct ns_slot *s = slot_at(t, idx);

	if (!s)
		return;
	STORE(&s->last_status, (uint32_t)code);
	if (failed)
		ADD(&s->http_failures, 1);
}

void ns_table_add_retry(struct ns_table *t, int idx)
{
	struct ns_slot *s = slot_at(t, idx);

	if (s)
		ADD(&s->retries, 1);
}

void ns_table_reset(struct ns_table *t, int idx)
{
	struct ns_slot *s = slot_at(t, idx);

	if (!s)
		return;
	apply(s, NS_EV_RESET, NULL, 0, &ns_builtin_settings);
	STORE(&s->open_level, 0);
	STORE(&s->cooldown_until_ms, 0);
	STORE(&s->fleet_until_ms, 0);
	window_clear(s);
	STORE(&s->opened_wall_ms, 0);
	STORE(&s->half_open_wall_ms, 0);
}

void ns_table_force_open(struct ns_table *t, int idx, uint64_t now_ms, uint64_t wall_ms)
{
	struct ns_slot *s = slot_at(t, idx);
	struct ns_step st;

	if (!s)
		return;
	st = apply(s, NS_EV_FORCE_OPEN, NULL, now_ms, &ns_builtin_settings);
	note_open(s, &st, now_ms, wall_ms);
}

void ns_table_fleet_set(struct ns_table *t, int idx, uint64_t until_ms, const char *nodes, uint32_t count)
{
	struct ns_slot *s = slot_at(t, idx);
	uint64_t odd;

	if (!s)
		return;
	if (!until_ms) {
		STORE(&s->fleet_until_ms, 0);
		return;
	}
	/* one writer (the agent); readers copy between two equal even values
	 * (a writer killed half-way leaves it odd until the next write) */
	odd = LOAD(&s->fleet_seq) | 1;
	STORE(&s->fleet_seq, odd);
	__atomic_thread_fence(__ATOMIC_RELEASE);
	if (nodes)
		strncpy(s->fleet_nodes, nodes, sizeof(s->fleet_nodes) - 1);
	s->fleet_nodes[sizeof(s->fleet_nodes) - 1] = '\0';
	STORE(&s->fleet_count, count);
	STORE(&s->fleet_seq, odd + 1);
	STORE(&s->fleet_until_ms, until_ms);
}

int ns_table_state(const struct ns_table *t, int idx, char *key, size_t keylen, struct ns_brk *b,
		   uint64_t *fleet_until_ms)
{
	struct ns_slot *s = slot_at(t, idx);
	size_t n;

	if (!s || TAG_STATE(LOAD(&s->tag)) != TAG_READY || keylen == 0)
		return -1;
	n = strnlen(s->key, sizeof(s->key) - 1);
	if (n >= keylen)
		n = keylen - 1;
	memcpy(key, s->key, n);
	key[n] = '\0';
	if (ns_key_is_addr(key))
		return -1; /* an address's state (addrs.c), no destination */
	ns_brk_unpack(LOAD(&s->word), b);
	*fleet_until_ms = LOAD(&s->fleet_until_ms);
	return 0;
}

uint64_t ns_table_attempts(const struct ns_table *t, int idx)
{
	const struct ns_slot *s = slot_at(t, idx);

	return s ? LOAD(&s->calls) + LOAD(&s->rejected) : 0;
}

/* The fleet fields of s for display; the nodes "" when they could not be
 * read whole (a writer kept changing them). */
static void fleet_read(const struct ns_slot *s, uint64_t now_ms, struct ns_entry *e)
{
	e->fleet_open = LOAD(&s->fleet_until_ms) > now_ms;
	e->fleet_nodes[0] = '\0';
	e->fleet_count = 0;
	if (!e->fleet_open)
		return;
	for (int tries = 0; tries < 8; tries++) {
		uint64_t q = LOAD(&s->fleet_seq);

		if (q & 1)
			continue;
		memcpy(e->fleet_nodes, s->fleet_nodes, sizeof(e->fleet_nodes));
		e->fleet_count = LOAD(&s->fleet_count);
		__atomic_thread_fence(__ATOMIC_ACQUIRE);
		if (LOAD(&s->fleet_seq) == q) {
			e->fleet_nodes[sizeof(e->fleet_nodes) - 1] = '\0';
			return;
		}
	}
	e->fleet_nodes[0] = '\0';
}

int ns_table_read(const struct ns_table *t, int idx, uint64_t now_ms, struct ns_entry *e)
{
	struct ns_slot *s = slot_at(t, idx);
	uint64_t window_ms;
	struct ns_window w;

	if (!s || TAG_STATE(LOAD(&s->tag)) != TAG_READY)
		return -1;
	memcpy(e->key, s->key, sizeof(e->key));
	e->key[sizeof(e->key) - 1] = '\0';
	if (ns_key_is_addr(e->key))
		return -1; /* an address's state (addrs.c, ns_table_addr_read), no destination */
	ns_brk_unpack(LOAD(&s->word), &e->brk);
	e->calls = LOAD(&s->calls);
	e->successes = LOAD(&s->successes);
	e->failures = LOAD(&s->failures);
	e->timeouts = LOAD(&s->timeouts);
	e->rejected = LOAD(&s->rejected);
	e->retries = LOAD(&s->retries);
	e->last_error = LOAD(&s->last_error);
	e->monitor = LOAD(&s->monitor) != 0;
	e->injected = LOAD(&s->injected);
	e->exchanges = LOAD(&s->exchanges);
	e->http_failures = LOAD(&s->http_failures);
	e->stale_reuses = LOAD(&s->stale_reuses);
	e->h2_unprocessed = LOAD(&s->h2_unprocessed);
	e->h2_blind = LOAD(&s->h2_blind);
	e->grpc_failures = LOAD(&s->grpc_failures);
	e->seccomp_calls = LOAD(&s->seccomp_calls);
	e->limit = NS_ADAPT_LIMIT(LOAD(&s->adapt));
	{
		/* the throttle's two windows as they stand (their width is the
		 * policy's, not known here) */
		uint64_t w0 = LOAD(&s->thr[0]), w1 = LOAD(&s->thr[1]);

		e->thr_requests = (uint32_t)(w0 >> 24 & 0xffffff) + (uint32_t)(w1 >> 24 & 0xffffff);
		e->thr_accepts = (uint32_t)(w0 & 0xffffff) + (uint32_t)(w1 & 0xffffff);
	}
	{
		uint32_t g = LOAD(&s->last_grpc_status);

		e->last_grpc_status = g >= 1 && g <= 64 ? (int32_t)g - 1 : -1; /* (shared memory: bounded) */
	}
	e->inflight = 0;
	for (uint32_t p = 0; p < NS_PLACES; p++)
		e->inflight += LOAD(&s->place[p]) != 0;
	e->throttled = LOAD(&s->throttled);
	ns_reqq_read(&s->req, e);
	e->retry_throttled = LOAD(&s->retry_throttled);
	e->paced = LOAD(&s->paced);
	{
		uint64_t cd = LOAD(&s->cooldown_until_ms);

		e->cooldown_left_ms = cd > now_ms ? cd - now_ms : 0;
	}
	for (int k = 0; k < 3; k++) {
		uint64_t exp;

		e->fleet_share[k] = ns_table_fleet_read(t, idx, k, &e->fleet_whole[k], &exp, &e->fleet_live);
		e->fleet_left_ms = exp > now_ms ? exp - now_ms : 0;
		e->fleet_largest[k] = LOAD(&s->fleet.largest[k]);
	}
	{
		uint64_t n = 0, seen = 0, wb[NS_WAIT_BUCKETS];

		for (uint32_t b = 0; b < NS_WAIT_BUCKETS; b++)
			n += wb[b] = LOAD(&s->waited[b]);
		e->waited_ms_p99 = 0;
		for (uint32_t b = 0; n && b < NS_WAIT_BUCKETS; b++) {
			seen += wb[b];
			if (seen * 100 >= n * 99) {
				e->waited_ms_p99 = 1ull << b;   /* the bucket's upper bound */
				break;
			}
		}
	}
	e->last_status = LOAD(&s->last_status);
	e->opened_wall_ms = LOAD(&s->opened_wall_ms);
	for (uint32_t b = 0; b < NS_HIST_BUCKETS; b++) {
		e->connect_hist.count[b] = LOAD(&s->connect_hist.count[b]);
		e->first_byte_hist.count[b] = LOAD(&s->first_byte_hist.count[b]);
	}
	e->connect_hist.sum_us = LOAD(&s->connect_hist.sum_us);
	e->first_byte_hist.sum_us = LOAD(&s->first_byte_hist.sum_us);
	e->half_open_wall_ms = LOAD(&s->half_open_wall_ms);
	window_ms = LOAD(&s->window_ms);
	if (window_ms == 0)
		window_ms = ns_builtin_settings.window_ms;
	w = window_count(s, now_ms, window_ms, 1);
	e->failures_in_window = w.failures;
	e->outcomes_in_window = w.outcomes;
	e->slow_in_window = w.slow;
	e->timeouts_in_window = w.timeouts;
	e->p99_in_window_us = w.p99_us;
	e->slow_calls = LOAD(&s->slow_calls);
	fleet_read(s, now_ms, e);
	return 0;
}

/**** latency ****/

/* Upper bounds, 1-2.5-5 steps from 250 us to 5 min: a percentile is known
 * to within its bucket, so within a factor of 2 to 2.5. */
const uint64_t ns_hist_bounds_us[NS_HIST_BUCKETS] = {
	250, 500, 1000, 2500, 5000, 10000, 25000, 50000, 100000, 250000,
	500000, 1000000, 2500000, 5000000, 10000000, 25000000, 50000000, 100000000, 300000000,
	UINT64_MAX,
};

void ns_table_latency(struct ns_table *t, int idx, int first_byte, uint64_t us)
{
	struct ns_slot *s = slot_at(t, idx);
	struct ns_hist *h;
	uint32_t b = 0;

	if (!s)
		return;
	h = first_byte ? &s->first_byte_hist : &s->connect_hist;
	while (b < NS_HIST_BUCKETS - 1 && us > ns_hist_bounds_us[b])
		b++;
	ADD(&h->count[b], 1);
	ADD(&h->sum_us, us);
}

int64_t ns_hist_percentile(const struct ns_hist *h, unsigned p)
{
	uint64_t total = 0, want, seen = 0;

	for (uint32_t b = 0; b < NS_HIST_BUCKETS; b++)
		total += h->count[b];
	if (!total)
		return -1;
	/* the rank of the p-th percentile, rounded up, at least 1 */
	want = (total * p + 99) / 100;
	if (want == 0)
		want = 1;
	for (uint32_t b = 0; b < NS_HIST_BUCKETS; b++) {
		seen += h->count[b];
		if (seen >= want)
			return b == NS_HIST_BUCKETS - 1 ? (int64_t)ns_hist_bounds_us[b - 1] : (int64_t)ns_hist_bounds_us[b];
	}
	return (int64_t)ns_hist_bounds_us[NS_HIST_BUCKETS - 2];
}

int ns_table_reject_kind(const struct ns_table *t, int idx, uint64_t now_ms)
{
	const struct ns_slot *s = slot_at(t, idx);

	if (!s || ns_brk_attempt_quick(LOAD(&s->word), now_ms) == NS_REJECT)
		return NS_OC_REJECTED;
	return LOAD(&s->fleet_until_ms) > now_ms ? NS_OC_REJECTED_FLEET : NS_OC_REJECTED_COOLDOWN;
}

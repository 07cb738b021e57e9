/* places.h -- the places of max_connections and max_requests counted, and
 * the limit of `auto` read, inline: a connect under max_connections = auto
 * asks both on its fast path (admit.h), the table's own code the same way
 * (shaping.c). */
#ifndef NS_POLICY_PLACES_H
#define NS_POLICY_PLACES_H

#include <stdint.h>

#include "table.h"

#ifdef __SSE2__
#include <emmintrin.h>
#endif

/* (shaping.c: the CPU has POPCNT, asked once at load) */
extern int ns_have_popcnt;

/* The places of [0, span) held, and the first free one (-1: none). A
 * connect under max_connections = auto counts them all, so this is its
 * cost: where SSE2 is there (x86-64 always) the 32 words are read eight
 * vectors at once into a mask of the free ones, no loop and no branch.
 * Each word is read whole (aligned; only its being 0 matters, as LOAD). */
static inline __attribute__((always_inline)) uint32_t ns_places_held(const uint32_t *place, uint32_t span,
								     int *first_free)
{
	uint32_t n = 0;

	*first_free = -1;
#if defined(__SSE2__) && NS_PLACES == 32
	{
		const __m128i zero = _mm_setzero_si128();
		const __m128i *v = (const __m128i *)(const void *)place;
		uint32_t freem;

		__atomic_thread_fence(__ATOMIC_ACQUIRE);
		/* each free word's -1 packed down to a byte, then a bit */
#define FREE4(i) _mm_cmpeq_epi32(_mm_load_si128(&v[i]), zero)
#define FREE16(i)                     \
	(uint32_t) _mm_movemask_epi8( \
		_mm_packs_epi16(_mm_packs_epi32(FREE4(i), FREE4(i + 1)), _mm_packs_epi32(FREE4(i + 2), FREE4(i + 3))))
		freem = FREE16(0) | FREE16(4) << 16;
#undef FREE16
#undef FREE4
		if (span < 32)
			freem &= (1u << span) - 1;
		else
			span = 32;
		if (freem)
			*first_free = __builtin_ctz(freem);
		if (__builtin_expect(ns_have_popcnt, 1)) {
			__asm__("popcnt %1, %0" : "=r"(n) : "r"(freem) : "cc");
			return span - n;
		}
		freem -= (freem >> 1) & 0x55555555u; /* (a popcount of the free ones) */
		freem = (freem & 0x33333333u) + ((freem >> 2) & 0x33333333u);
		freem = (((freem + (freem >> 4)) & 0x0f0f0f0fu) * 0x01010101u) >> 24;
		return span - freem;
	}
#endif
	for (uint32_t i = 0; i < span; i++) {
		if (__atomic_load_n(&place[i], __ATOMIC_RELAXED))
			n++;
		else if (*first_free < 0)
			*first_free = (int)i;
	}
	return n;
}

/* The adapt word (an `auto` limit's): the limit in thousandths (bits 44
 * up), the interval it was last moved in (3 to 43), and flags: the
 * interval had a failure, had half the limit or more in flight, had a
 * success (bits 2, 1, 0). */
#define NS_AD_FAILED  4ull
#define NS_AD_BUSY    2ull
#define NS_AD_IV_MASK ((1ull << 41) - 1)
#define NS_AD_IV(w)   (((w) >> 3) & NS_AD_IV_MASK)

/* a limit (thousandths) within the bounds min..max (counts, and at most
 * the places); 0, none yet: the minimum */
static inline __attribute__((always_inline)) uint32_t ns_ad_bound(uint32_t milli, uint32_t min, uint32_t max)
{
	uint32_t lo = min * 1000, hi = max * 1000;

	if (hi > NS_PLACES * 1000)
		hi = NS_PLACES * 1000;
	if (lo > hi)
		lo = hi;
	return milli < lo ? lo : milli > hi ? hi : milli;
}

/* max_connections = auto's first try (no fleet key), inline for a
 * connect's fast path: the limit read from the adapt word, the places held
 * counted, one taken under the limit, and the taking counted where it
 * moves the word (half the limit or more in flight in an interval not yet
 * marked busy: out of line, ns_table_limit_event); the same as
 * ns_table_place_take_auto's, without its call and its branches for
 * requests and the fleet. Its index, or -1 (the caller asks the rest). */
static inline __attribute__((always_inline)) int ns_places_take_adaptive(struct ns_table *t, int idx,
									 const struct ns_settings *set, uint32_t holder,
									 uint64_t now_ms)
{
	struct ns_slot *s = ns_table_slot_(t, idx);
	uint32_t lim, held, free_ = 0;
	uint64_t w;
	int p;

	if (!s || !holder)
		return -1;
	w = __atomic_load_n(&s->adapt, __ATOMIC_RELAXED);
	lim = ns_ad_bound(NS_ADAPT_LIMIT(w), set->max_connections_min, set->max_connections_max);
	held = ns_places_held(s->place, set->max_connections < NS_PLACES ? set->max_connections : NS_PLACES, &p);
	if (held >= (lim >= 1000 ? lim / 1000 : 1) || p < 0 ||
	    !__atomic_compare_exchange_n(&s->place[p], &free_, holder, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
		return -1;
	if (!(NS_AD_IV(w) ==
		      ((now_ms / (set->adaptive_interval_ms ? set->adaptive_interval_ms : 1000)) & NS_AD_IV_MASK) &&
	      w >> 44 && ((w & (NS_AD_FAILED | NS_AD_BUSY)) || (held + 1) * 2000 < lim)))
		ns_table_limit_event(t, idx, set, NS_ADAPT_PLACE, (int)held, now_ms);
	return p;
}

#endif

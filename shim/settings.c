/* settings.c -- each distinct settings value, kept once.
 *
 * A connection used to carry its own copy of what the policy said about its
 * destination: 184 bytes copied at every connect, 288 held in every
 * record. Distinct values are few (one per combination of the policy's
 * sections that some destination matched, per policy loaded), so each is
 * kept once, immutable and never freed, and the connection records and the
 * destination cache hold a pointer to it. A record read by a thread that
 * raced its reuse therefore always points at some whole, valid value.
 *
 * Lock-free and async-signal-safe, as connect() is: values come from an
 * arena by an atomic counter and are published in an open-addressing
 * table by compare-and-swap. Two threads interning the same new value at
 * once may both take an arena entry; one is wasted, nothing else. The fault
 * list is not part of a kept value (faults are chosen per connection from
 * the full settings at connect). */

#include <string.h>
#include <sys/mman.h>

#include "settings.h"

#define ST_CAP NS_SETTINGS_KEPT_MAX  /* distinct values per process */
#define ST_CHUNK 1024u               /* values per mapped chunk */
#define ST_CHUNKS (ST_CAP / ST_CHUNK)
#define ST_TAB (2 * ST_CAP)        /* a power of two, at most half full */
#define ST_WORDS (offsetof(struct ns_settings, fault) / 8)
_Static_assert((ST_TAB & (ST_TAB - 1)) == 0, "table size a power of two");
_Static_assert(ST_CAP % ST_CHUNK == 0, "whole chunks");
_Static_assert(offsetof(struct ns_settings, fault) % 8 == 0, "compared in words up to the faults");

/* The values and the table live in anonymous mappings made on first use
 * (pages touched as used), not in the library's .bss: a conservative
 * garbage collector in the host (Boehm in w3m, Guile, Mono) scans every
 * loaded object's data on each collection, and megabytes of it cost each
 * collection that much. One mapping of the table, one per chunk of values,
 * each published by compare-and-swap (a thread that loses unmaps its own). */
static struct ns_settings *st_chunk[ST_CHUNKS];   /* atomic pointers */
static unsigned st_used;                          /* atomic: arena entries taken */
static const struct ns_settings **st_tab;         /* atomic pointer to ST_TAB atomic pointers */

void *ns_lazy_map(void **pp, size_t len)
{
	void *p = __atomic_load_n(pp, __ATOMIC_ACQUIRE), *none = NULL;

	if (p)
		return p;
	p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return NULL;
	if (__atomic_compare_exchange_n(pp, &none, p, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
		return p;
	munmap(p, len);
	return none;
}

static uint64_t st_hash(const uint64_t *w)
{
	uint64_t h = 0x9e3779b97f4a7c15ULL;

	for (size_t i = 0; i < ST_WORDS; i++)
		h = (h ^ w[i]) * 0x100000001b3ULL;
	return h ^ (h >> 29);
}

/* A fresh arena entry holding w, or NULL when the arena is used up (the
 * last NS_SETTINGS_RESERVE entries are for reserve callers only). */
static struct ns_settings *st_take(const uint64_t *w, int reserve)
{
	unsigned k = __atomic_load_n(&st_used, __ATOMIC_RELAXED), cap = reserve ? ST_CAP : ST_CAP - NS_SETTINGS_RESERVE;
	struct ns_settings *chunk;

	do {
		if (k >= cap)
			return NULL;
	} while (!__atomic_compare_exchange_n(&st_used, &k, k + 1, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
	chunk = ns_lazy_map((void **)&st_chunk[k / ST_CHUNK], ST_CHUNK * sizeof(struct ns_settings));
	if (!chunk)
		return NULL;   /* (the entry is lost; the mapping may work next time) */
	memcpy(&chunk[k % ST_CHUNK], w, ST_WORDS * 8);   /* the fault list stays empty (mapped zero) */
	return &chunk[k % ST_CHUNK];
}

static const struct ns_settings *intern(const struct ns_settings *s, int reserve)
{
	const struct ns_settings **tab;
	uint64_t w[ST_WORDS];
	uint64_t h;
	struct ns_settings *mine = NULL;

	/* ns_policy_resolve starts every value from a copy of the built-in
	 * one, so padding bytes compare equal too */
	memcpy(w, s, sizeof(w));
	if (memcmp(w, &ns_builtin_settings, sizeof(w)) == 0)
		return &ns_builtin_settings;   /* kept for good already (and no page of the table touched) */
	tab = ns_lazy_map((void **)&st_tab, ST_TAB * sizeof(*st_tab));
	if (!tab)
		return NULL;
	h = st_hash(w);
	for (unsigned i = 0; i < ST_TAB; i++) {
		const struct ns_settings **slot = &tab[(h + i) & (ST_TAB - 1)];
		const struct ns_settings *p = __atomic_load_n(slot, __ATOMIC_ACQUIRE);

		if (!p) {
			if (!mine && !(mine = st_take(w, reserve)))
				break;
			if (__atomic_compare_exchange_n(slot, &p, mine, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
				return mine;
			/* another thread filled the slot first: p is its value */
		}
		if (memcmp(p, w, sizeof(w)) == 0)
			return p;   /* (an arena entry taken above is left unused) */
	}
	return NULL;
}

const struct ns_settings *ns_settings_intern(const struct ns_settings *s)
{
	return intern(s, 0);
}

const struct ns_settings *ns_settings_keep(const struct ns_settings *s, const struct ns_settings *(*fallback)(void),
					   int *full)
{
	const struct ns_settings *k = intern(s, 0), *f;

	*full = k == NULL;
	if (k)
		return k;
	f = fallback();
	return f ? f : &ns_builtin_settings;
}

const struct ns_settings *ns_settings_intern_reserve(const struct ns_settings *s)
{
	return intern(s, 1);
}

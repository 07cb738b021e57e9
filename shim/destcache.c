/* destcache.c -- what the policy and the table said about a destination,
 * remembered per process.
 *
 * A scraper connects to the same few destinations over and over; matching
 * the policy's sections, formatting the key and probing the shared table
 * each time was most of the connect path. An entry holds the settings (a
 * pointer to the kept value, see settings.c), the key and the table slot
 * for one (address, port, name, policy), the policy
 * being the one in force: a reload brings a new policy object (old ones are
 * never freed, so a pointer is never reused), which misses every entry.
 * A slot, once the table gave it a key, keeps that key for the table's
 * life (only a claim that never finished is taken over), so the slot
 * remembered is used without looking at the key again. A connect that
 * its breaker refuses needs no more than the slot (ns_destcache_find); the
 * key is copied only for a connection that goes out.
 *
 * Entries are read without a lock: a sequence word, odd while an entry is
 * written, is read before and after the copy, and a copy that raced a
 * writer is discarded (a seqlock; its plain copies are hidden from
 * ThreadSanitizer, which cannot know the discarded reads are never used).
 * A writer that finds an entry being written skips caching. */

#include <string.h>

#include "destcache.h"

#include "settings.h"

#define DC_SIZE 128   /* entries, a power of two: ~40 KiB, touched as used */

__thread struct ns_conn_memo ns_memo __attribute__((tls_model("initial-exec")));

struct dc_entry {
	uint32_t seq;           /* atomic: odd while written */
	uint32_t klen;          /* key length; 0 = empty */
	uintptr_t pol;          /* the policy this was resolved under */
	uint64_t addr[2];
	uint64_t meta;          /* family << 48 | port << 32 | the name's length (the key's head; 0 = none) */
	int32_t slot;           /* the table slot found for the key (it keeps it for good), or -1 */
	uint32_t mode;          /* the settings' mode, read before they are copied */
	const struct ns_settings *set;   /* kept for good (settings.c) */
	union { char key[NS_KEY_MAX]; uint64_t key_w[NS_KEY_MAX / 8]; };
};

static struct dc_entry *dc;   /* atomic pointer: DC_SIZE entries, mapped on first use */

static inline uint32_t dc_hash(const struct ns_dest *d, size_t nlen, const uint64_t a[2])
{
	uint64_t h = (a[0] * 0x9e3779b97f4a7c15ULL) ^ (a[1] + ((uint64_t)d->family << 32 | d->port));

	/* the name eight bytes at a time, the last word's bytes past the
	 * name masked off (d->name holds NS_HOST_MAX + 1 bytes) */
	for (size_t i = 0; i < nlen; i += 8) {
		uint64_t w = 0;

		if (i + 8 <= sizeof(d->name)) {
			memcpy(&w, d->name + i, 8);   /* inside the buffer; masked below */
			if (nlen - i < 8)
				w &= ((uint64_t)1 << (8 * (nlen - i))) - 1;
		} else {
			for (size_t j = i; j < nlen; j++)
				w |= (uint64_t)(unsigned char)d->name[j] << (8 * (j - i));
		}
		h = (h ^ w) * 0x100000001b3ULL;
		h ^= h >> 31;
	}
	h ^= h >> 29;
	h *= 0xbf58476d1ce4e5b9ULL;
	return (uint32_t)(h >> 32);
}

static inline uint64_t dc_meta(const struct ns_dest *d, size_t nlen)
{
	return (uint64_t)(uint16_t)d->family << 48 | (uint64_t)d->port << 32 | (uint32_t)nlen;
}

/* d's entry (where it is, or would be, remembered), its name's length and
 * its address as two words. */
static inline struct dc_entry *dc_entry_of(const struct ns_dest *d, size_t *nlen, uint64_t a[2])
{
	struct dc_entry *all = __atomic_load_n(&dc, __ATOMIC_ACQUIRE);

	if (unlikely(!all) && !(all = ns_lazy_map((void **)&dc, DC_SIZE * sizeof(*dc))))
		return NULL;   /* no memory: nothing remembered */
	*nlen = d->name[0] ? strnlen(d->name, sizeof(d->name)) : 0;
	memcpy(a, d->addr, 16);
	return &all[dc_hash(d, *nlen, a) & (DC_SIZE - 1)];
}

__attribute__((no_sanitize_thread)) int ns_destcache_find(const void *pol, const struct ns_dest *d,
							   struct ns_dcref *ref)
{
	size_t nlen;
	uint64_t a[2];
	struct dc_entry *e = dc_entry_of(d, &nlen, a);
	uint32_t s, klen;
	int slot;

	if (!e)
		return -1;
	s = __atomic_load_n(&e->seq, __ATOMIC_ACQUIRE);
	if (s & 1)
		return -1;
	if (LD(e->pol) != (uintptr_t)pol || LD(e->addr[0]) != a[0] || LD(e->addr[1]) != a[1] ||
	    LD(e->meta) != dc_meta(d, nlen))
		return -1;
	klen = LD(e->klen);
	if (nlen && memcmp(e->key, d->name, nlen) != 0)
		return -1;
	slot = LD(e->slot);
	ref->mode = LD(e->mode);
	__atomic_thread_fence(__ATOMIC_ACQUIRE);
	if (__atomic_load_n(&e->seq, __ATOMIC_RELAXED) != s)
		return -1;
	ref->e = e;
	ref->seq = s;
	ref->klen = klen;
	ref->slot = slot;
	return 0;
}

__attribute__((no_sanitize_thread)) int ns_destcache_copy(const struct ns_dcref *ref,
							  const struct ns_settings **set, char *key)
{
	const struct dc_entry *e = ref->e;

	if (!ref->klen || ref->klen >= NS_KEY_MAX)
		return -1;   /* read while the entry was being written: the seq check would fail too */
	memcpy(key, e->key, ref->klen);
	*set = LD(e->set);
	__atomic_thread_fence(__ATOMIC_ACQUIRE);
	if (__atomic_load_n(&e->seq, __ATOMIC_RELAXED) != ref->seq)
		return -1;
	key[ref->klen] = '\0';
	return 0;
}

__attribute__((no_sanitize_thread)) void ns_destcache_put(const void *pol, const struct ns_dest *d,
							  const struct ns_settings *set, const char *key, size_t klen,
							  int slot)
{
	size_t nlen;
	uint64_t a[2];
	struct dc_entry *e;
	uint32_t s;

	if (!set || klen == 0 || klen >= NS_KEY_MAX)
		return;
	e = dc_entry_of(d, &nlen, a);
	if (!e)
		return;
	s = __atomic_load_n(&e->seq, __ATOMIC_RELAXED);
	if ((s & 1) || !__atomic_compare_exchange_n(&e->seq, &s, s + 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
		return;
	__atomic_thread_fence(__ATOMIC_RELEASE);
	ST(e->klen, (uint32_t)klen);
	ST(e->pol, (uintptr_t)pol);
	ST(e->addr[0], a[0]);
	ST(e->addr[1], a[1]);
	ST(e->meta, dc_meta(d, nlen));
	ST(e->slot, slot);
	ST(e->mode, set->mode);
	ST(e->set, set);
	memcpy(e->key, key, klen);
	__atomic_store_n(&e->seq, s + 2, __ATOMIC_RELEASE);
}

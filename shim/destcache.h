/* destcache.h -- what the policy and the table said about a destination, per process (destcache.c). */
#ifndef NS_DESTCACHE_H
#define NS_DESTCACHE_H

#include <stddef.h>
#include <string.h>
#include "../policy/policy.h"
#include "base.h"
#include "names.h"

/* destcache.c: what the policy pol and the table said about d, per
 * process. find: 0 and *ref (the table slot, the mode) when d is
 * remembered, else -1; copy: the settings (a kept value) and the key
 * (NS_KEY_MAX bytes) of a found entry, 0, or -1 when the entry changed
 * meanwhile. put: remember them (set: a kept value, or NULL not to: the
 * settings have faults to inject, chosen per connection). Lock-free; a
 * racing writer skips. */
struct ns_dcref {
	const void *e;
	uint32_t seq, klen, mode;
	int slot;
};
NS_HIDDEN int ns_destcache_find(const void *pol, const struct ns_dest *d, struct ns_dcref *ref);
NS_HIDDEN int ns_destcache_copy(const struct ns_dcref *ref, const struct ns_settings **set, char *key);
NS_HIDDEN void ns_destcache_put(const void *pol, const struct ns_dest *d, const struct ns_settings *set,
				const char *key, size_t klen, int slot);

/* This thread's last destination found in the destination cache. The
 * same address, port and policy, with no name remembered by the process
 * since and within a second (the name map's own answer may expire), is
 * the same destination and the same entry: a scraper's repeated connect,
 * and the fail-fast one above all, skips the name lookup and the cache's
 * hash. The entry itself is still checked unchanged when it is copied;
 * the slot and mode hold whatever became of it (a slot keeps its key; the
 * mode is the policy's). */
struct ns_conn_memo {
	uint32_t seq; /* odd while written: a signal handler's connect in the middle sees it */
	const void *pol;
	uint64_t gen;
	monotime until;
	uint64_t a[2];
	uint32_t fp; /* family << 16 | port */
	struct ns_dcref ref;
};
extern __thread struct ns_conn_memo ns_memo NS_HIDDEN __attribute__((tls_model("initial-exec")));

/* 1 with *ref when d is the memo's destination (d's name not looked up). */
static inline int ns_memo_find(const void *pol, const struct ns_dest *d, monotime now, struct ns_dcref *ref)
{
	uint32_t s = ns_memo.seq;
	uint64_t a[2];

	/* connect is async-signal-safe: a handler's connect may run between
	 * any two of these reads, so the memo is read as a seqlock against
	 * the same thread (signal fences, no hardware ordering needed) */
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	memcpy(a, d->addr, 16);
	if ((s & 1) || ns_memo.pol != pol || now >= ns_memo.until || ns_memo.a[0] != a[0] || ns_memo.a[1] != a[1] ||
	    ns_memo.fp != ((uint32_t)d->family << 16 | d->port) ||
	    ns_memo.gen != __atomic_load_n(&ns_names_gen, __ATOMIC_ACQUIRE))
		return 0;
	*ref = ns_memo.ref;
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	return ns_memo.seq == s;
}

/* gen: ns_names_gen read before d's name was looked up, so a name
 * remembered meanwhile makes the memo miss, never hold the older answer */
static inline void ns_memo_put(const void *pol, const struct ns_dest *d, uint64_t gen, monotime now,
			       const struct ns_dcref *ref)
{
	uint32_t s = ns_memo.seq;

	if (s & 1)
		return; /* a handler's connect inside our own write: leave it to us */
	ns_memo.seq = s + 1;
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	ns_memo.gen = gen;
	ns_memo.pol = pol;
	ns_memo.until = now + 1000000000;
	memcpy(ns_memo.a, d->addr, 16);
	ns_memo.fp = (uint32_t)d->family << 16 | d->port;
	ns_memo.ref = *ref;
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	ns_memo.seq = s + 2;
}

#endif

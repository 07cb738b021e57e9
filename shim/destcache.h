/* destcache.h -- what the policy and the table said about a destination, per process (destcache.c). */
#ifndef NS_DESTCACHE_H
#define NS_DESTCACHE_H

#include <stddef.h>
#include "../policy/policy.h"
#include "base.h"

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

#endif

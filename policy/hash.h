/* hash.h -- uthash as netshim uses it. Include instead of <uthash.h>.
 * Code that runs inside a host process defines uthash_nonfatal_oom(obj)
 * first: an allocation failure there must never exit the process (the
 * caller's flag says the item was not added); the agent, our own process,
 * keeps uthash's exit. Keys are hashed with FNV-1a: uthash's default (Jenkins') is a
 * switch of fall-throughs that clang's -Wimplicit-fallthrough rejects at
 * every use. */
#ifndef NS_HASH_H
#define NS_HASH_H

#include <stddef.h>
#include <stdint.h>

static inline unsigned ns_hash_fnv1a(const void *key, size_t n)
{
	const unsigned char *p = key;
	uint32_t h = 2166136261u;

	for (size_t i = 0; i < n; i++) {
		h ^= p[i];
		h *= 16777619u;
	}
	return h;
}

#ifdef uthash_nonfatal_oom
#define HASH_NONFATAL_OOM 1
#endif
#define HASH_FUNCTION(keyptr, keylen, hashv) ((hashv) = ns_hash_fnv1a((keyptr), (size_t)(keylen)))
#include <uthash.h>

#endif

/* namemap.h -- which host name an address came from, bounded in memory. */
#ifndef NS_NAMEMAP_H
#define NS_NAMEMAP_H

#include <stddef.h>
#include <stdint.h>

/* A map from an address (AF_INET or AF_INET6, 4 or 16 bytes) to the host
 * name the program resolved it from. At most max_entries are kept: adding
 * one more evicts the least recently resolved. An entry older than ttl_ms is
 * forgotten. Not synchronised: the caller holds its own lock. No system
 * calls; the clock comes from the caller. */
struct ns_namemap;

struct ns_namemap *ns_namemap_new(unsigned max_entries, uint64_t ttl_ms);
void ns_namemap_free(struct ns_namemap *m);

/* Remember addr -> name (lower-cased, trailing dot dropped). Returns 0, or
 * -1 when the name is not a host name or memory ran out (nothing changes). */
int ns_namemap_put(struct ns_namemap *m, int family, const void *addr, const char *name, uint64_t now_ms);

/* The name for addr into out (len bytes). Returns 0, or -1 if unknown or expired. */
int ns_namemap_get(struct ns_namemap *m, int family, const void *addr, char *out, size_t len, uint64_t now_ms);

unsigned ns_namemap_count(const struct ns_namemap *m);
/* Bytes the map holds on the heap: entries, names and hash buckets. */
size_t ns_namemap_bytes(const struct ns_namemap *m);

#endif

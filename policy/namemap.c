/* namemap.c -- which host name an address came from, bounded in memory.
 *
 * The bound: max_entries entries, each a fixed header plus its name's bytes
 * (at most 254), plus uthash's bucket array. With the shim's 4096 entries
 * that is under 4096 * (80 + 254) + 64 KiB = 1.4 MiB at the very worst, and
 * about 0.5 MiB for typical names. Eviction is least recently resolved
 * first: uthash keeps insertion order, and a name resolved again is moved to
 * the end. */
#include "namemap.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

/* uthash must never exit inside a host process */
#define uthash_nonfatal_oom(obj) (oom_ = 1)
static __thread int oom_;
#include "hash.h"

struct addr_key {
	uint8_t family;
	uint8_t addr[16];
};

struct entry {
	struct addr_key key;
	uint64_t at_ms;
	UT_hash_handle hh;
	char name[];
};

struct ns_namemap {
	struct entry *head;
	unsigned max, count;
	uint64_t ttl_ms;
	size_t bytes;
};

struct ns_namemap *ns_namemap_new(unsigned max_entries, uint64_t ttl_ms)
{
	struct ns_namemap *m = calloc(1, sizeof(*m));

	if (m) {
		m->max = max_entries ? max_entries : 1;
		m->ttl_ms = ttl_ms;
	}
	return m;
}

static void drop(struct ns_namemap *m, struct entry *e)
{
	HASH_DEL(m->head, e);
	m->bytes -= sizeof(*e) + strlen(e->name) + 1;
	m->count--;
	free(e);
}

void ns_namemap_free(struct ns_namemap *m)
{
	struct entry *e, *tmp;

	if (!m)
		return;
	HASH_ITER(hh, m->head, e, tmp)
		drop(m, e);
	free(m);
}

static int make_key(struct addr_key *k, int family, const void *addr)
{
	memset(k, 0, sizeof(*k));
	if (family == AF_INET)
		memcpy(k->addr, addr, 4);
	else if (family == AF_INET6)
		memcpy(k->addr, addr, 16);
	else
		return -1;
	k->family = (uint8_t)family;
	return 0;
}

static int normalise(const char *in, char *out)
{
	size_t n = strlen(in);

	if (n > 0 && in[n - 1] == '.')
		n--;
	if (n == 0 || n > 253)
		return -1;
	for (size_t i = 0; i < n; i++) {
		unsigned char ch = (unsigned char)in[i];

		if (!isalnum(ch) && ch != '-' && ch != '.' && ch != '_')
			return -1;
		out[i] = (char)tolower(ch);
	}
	out[n] = '\0';
	return 0;
}

int ns_namemap_put(struct ns_namemap *m, int family, const void *addr, const char *name, uint64_t now_ms)
{
	char norm[254];
	struct addr_key k;
	struct entry *e;
	size_t n;

	if (!m || make_key(&k, family, addr) < 0 || normalise(name, norm) < 0)
		return -1;
	HASH_FIND(hh, m->head, &k, sizeof(k), e);
	if (e)
		drop(m, e);   /* re-added below, at the young end */
	else if (m->count >= m->max)
		drop(m, m->head);   /* the least recently resolved */
	n = strlen(norm) + 1;
	e = malloc(sizeof(*e) + n);
	if (!e)
		return -1;
	memset(e, 0, sizeof(*e));
	e->key = k;
	e->at_ms = now_ms;
	memcpy(e->name, norm, n);
	oom_ = 0;
	HASH_ADD(hh, m->head, key, sizeof(k), e);
	if (oom_) {
		free(e);
		return -1;
	}
	m->count++;
	m->bytes += sizeof(*e) + n;
	return 0;
}

int ns_namemap_get(struct ns_namemap *m, int family, const void *addr, char *out, size_t len, uint64_t now_ms)
{
	struct addr_key k;
	struct entry *e;

	if (!m || !m->count || make_key(&k, family, addr) < 0)
		return -1;
	HASH_FIND(hh, m->head, &k, sizeof(k), e);
	if (!e)
		return -1;
	if (m->ttl_ms && now_ms - e->at_ms > m->ttl_ms) {
		drop(m, e);
		return -1;
	}
	if (strlen(e->name) >= len)
		return -1;
	memcpy(out, e->name, strlen(e->name) + 1);
	return 0;
}

unsigned ns_namemap_count(const struct ns_namemap *m)
{
	return m ? m->count : 0;
}

size_t ns_namemap_bytes(const struct ns_namemap *m)
{
	if (!m)
		return 0;
	return sizeof(*m) + m->bytes + (m->head ? HASH_OVERHEAD(hh, m->head) : 0);
}

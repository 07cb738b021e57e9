/* multiaddr.c -- a name with several addresses. address_choice =
 * healthy-first: a connect's outcome noted for its address (the table's
 * side is policy/addrs.c), and getaddrinfo's answer for a governed name
 * reordered by it, healthy addresses first. connect_total_timeout: one
 * budget for a program's loop over the addresses (below).
 *
 * Nothing is ever dropped from an answer: a program that tries each
 * address in turn still reaches one whatever the table says. The reorder
 * moves whole list nodes (glibc frees them one by one), so freeaddrinfo is
 * unchanged; the canonical name stays on the first node, where programs
 * read it. */
#include "multiaddr.h"

#include <arpa/inet.h>
#include <errno.h>
#include <string.h>

#include "config.h"
#include "conn.h"
#include "real.h"

#define ORDER_MAX 64u /* nodes of one answer reordered; a longer one keeps its tail as resolved */

/* Is the key's host an address the program gave (no name to choose for)? */
static int literal_key(const char *key)
{
	if (key[0] == '[')
		return 1;
	for (; *key && *key != ':'; key++)
		if ((*key < '0' || *key > '9') && *key != '.')
			return 0;
	return 1;
}

void ns_addr_connect_outcome(struct ns_conn *c, int ok, int err)
{
	char key[NS_KEY_MAX], akey[NS_KEY_MAX];
	uint64_t a[2];
	int idx, saved = errno;

	if (!ns_breakers_ok)
		return;
	ns_conn_key(c, key);
	a[0] = LD(c->peer_a[0]);
	a[1] = LD(c->peer_a[1]);
	if (!key[0] || literal_key(key) || ns_addr_key(key, (int)(LD(c->peer_fp) >> 16), a, akey, sizeof(akey)) < 0)
		goto out;
	idx = ns_table_find(&ns_breakers, akey, 1, (uint64_t)(ns_now() / 1000000));
	if (idx >= 0)
		ns_table_addr_outcome(&ns_breakers, idx, ok, err, (uint64_t)(ns_now() / 1000000),
				      ns_conn_set(c)->open_duration_ms);
out:
	errno = saved;
}

/* The address of one answer node, its family and port; NULL when it is not inet. */
static const void *node_addr(const struct addrinfo *ai, int *family, uint16_t *port)
{
	if (ai->ai_family == AF_INET && ai->ai_addr && ai->ai_addrlen >= sizeof(struct sockaddr_in)) {
		const struct sockaddr_in *s = (const struct sockaddr_in *)ai->ai_addr;

		*family = AF_INET;
		*port = ntohs(s->sin_port);
		return &s->sin_addr;
	}
	if (ai->ai_family == AF_INET6 && ai->ai_addr && ai->ai_addrlen >= sizeof(struct sockaddr_in6)) {
		const struct sockaddr_in6 *s = (const struct sockaddr_in6 *)ai->ai_addr;

		*family = AF_INET6;
		*port = ntohs(s->sin6_port);
		return &s->sin6_addr;
	}
	return NULL;
}

/* name as a destination (lower case, no trailing dot) at the answer's
 * first address: 0, or -1 when it is no name. */
static int dest_of(const char *name, int family, const void *addr, uint16_t port, struct ns_dest *d)
{
	size_t n = strlen(name);

	if (n == 0 || n >= sizeof(d->name))
		return -1;
	memset(d, 0, sizeof(*d));
	for (size_t i = 0; i < n; i++)
		d->name[i] = (char)((name[i] >= 'A' && name[i] <= 'Z') ? name[i] - 'A' + 'a' : name[i]);
	if (d->name[n - 1] == '.')
		d->name[n - 1] = '\0';
	d->family = family;
	memcpy(d->addr, addr, family == AF_INET6 ? 16 : 4);
	d->port = port;
	return d->name[0] ? 0 : -1;
}

/* Where each node of the answer goes (last[i]: 1 after the healthy ones),
 * for the first n nodes; returns how many go last. */
static unsigned ranks(struct addrinfo *const *nodes, unsigned n, const char *name_key, uint64_t open_ms, uint8_t *last)
{
	char akey[NS_KEY_MAX];
	uint64_t now_ms = (uint64_t)(ns_now() / 1000000);
	unsigned moved = 0;

	for (unsigned i = 0; i < n; i++) {
		int f, pf, idx;
		uint16_t p;
		const void *a = node_addr(nodes[i], &f, &p), *pa = i ? node_addr(nodes[i - 1], &pf, &p) : NULL;

		last[i] = 0;
		if (!a)
			;
		else if (pa && pf == f && memcmp(pa, a, f == AF_INET6 ? 16 : 4) == 0)
			last[i] = last[i - 1]; /* the same address (its other socket types): the same place */
		else if (ns_addr_key(name_key, f, a, akey, sizeof(akey)) >= 0 &&
			 (idx = ns_table_find(&ns_breakers, akey, 0, now_ms)) >= 0)
			last[i] = (uint8_t)ns_table_addr_rank(&ns_breakers, idx, now_ms, open_ms);
		moved += last[i];
	}
	return moved;
}

void ns_addr_reorder(const char *node, struct addrinfo **res)
{
	struct addrinfo *nodes[ORDER_MAX], *rest, **tail;
	char *canon;
	uint8_t last[ORDER_MAX];
	char name_key[NS_KEY_MAX];
	struct ns_dest d;
	struct ns_settings set;
	const struct ns_policy *pol;
	unsigned n = 0, moved;
	int family;
	uint16_t port;
	const void *addr;

	if (!*res || !(pol = ns_cfg_get(ns_now())) || !pol->has_addr_choice || !ns_tbl_on())
		return;
	addr = node_addr(*res, &family, &port);
	/* getaddrinfo without a service: no port, no key to look the addresses up by */
	if (!addr || port == 0 || dest_of(node, family, addr, port, &d) < 0)
		return;
	ns_policy_resolve(pol, &d, &set, NULL);
	if (set.address_choice != NS_ADDR_HEALTHY_FIRST || set.mode == NS_MODE_BYPASS ||
	    ns_dest_key(&d, name_key, sizeof(name_key)) < 0)
		return;
	for (rest = *res; rest && n < ORDER_MAX; rest = rest->ai_next)
		nodes[n++] = rest;
	moved = ranks(nodes, n, name_key, set.open_duration_ms, last);
	if (!moved || moved == n)
		return;
	/* a stable partition: the healthy in resolver order, then the others */
	canon = (*res)->ai_canonname;
	(*res)->ai_canonname = NULL;
	tail = res;
	for (int pass = 0; pass < 2; pass++)
		for (unsigned i = 0; i < n; i++)
			if (last[i] == pass) {
				*tail = nodes[i];
				tail = &nodes[i]->ai_next;
			}
	*tail = rest;
	(*res)->ai_canonname = canon;
	NS_LOG(NS_LOG_DEBUG, "%s: %u of %u answers listed last (address_choice = healthy-first)", name_key, moved, n);
}

/**** connect_total_timeout ****/

/* One attempt of the program at a name is its connects, one to each
 * address in turn (the loop of curl, of python's create_connection, of a
 * resolver's list), from one thread. It begins with a connect to the name
 * when none is under way, and goes on while each next connect goes to an
 * address not yet tried, within its length and a second past its end (curl
 * waits a second before the next address after some failures); a connect
 * back to an address tried, or one after a connect to the name succeeded
 * (its slot counts them), begins the next. Its connects share its budget
 * (each still bounded by connect_timeout); one that comes when the budget
 * is spent fails at once, ETIMEDOUT, counted nowhere (no address was
 * tried). Per thread: no lock, no system call. */
#define BUDGET_ADDRS    16u
#define BUDGET_GRACE_NS 1000000000LL
struct conn_budget {
	int slot;
	uint32_t n;
	monotime end; /* 0: no attempt under way */
	uint64_t ok;  /* the name's connects that succeeded (its slot's count) at the last one */
	uint64_t tried[BUDGET_ADDRS];
};
static __thread struct conn_budget budget_now __attribute__((tls_model("initial-exec")));

int ns_budget_enter(int slot, const struct ns_dest *d, uint64_t total_ms, monotime now)
{
	struct conn_budget *b = &budget_now;
	uint64_t h, w[2], ok = ns_table_connected(&ns_breakers, slot);
	int seen = 0;

	memcpy(w, d->addr, sizeof(w));
	h = (w[0] * 0x9e3779b97f4a7c15ULL ^ w[1]) * 0xff51afd7ed558ccdULL ^ ((uint64_t)d->family << 16 | d->port);
	for (uint32_t i = 0; i < b->n && i < BUDGET_ADDRS; i++)
		seen |= b->tried[i] == h;
	if (!b->end || b->slot != slot || seen || ok != b->ok ||
	    now >= b->end + (int64_t)total_ms * 1000000 + BUDGET_GRACE_NS) {
		b->slot = slot;
		b->end = now + (int64_t)total_ms * 1000000;
		b->n = 0;
	}
	if (b->n < BUDGET_ADDRS)
		b->tried[b->n++] = h;
	b->ok = ok;
	return now >= b->end ? -1 : 0;
}

void ns_budget_forget(void)
{
	budget_now.end = 0;
}

/* connect_bounded's limit lim within this thread's attempt at the name
 * (connect_total_timeout): lim, or the attempt's share when that is less. */
int64_t ns_budget_share(const struct ns_conn *c, int64_t lim)
{
	monotime end = budget_now.end;

	if (!end || (lim && end - LD(c->start) >= lim))
		return lim;
	return end > LD(c->start) ? end - LD(c->start) : 1;
}

/* A connect retry (connect_retries) within the attempt: none once its
 * budget is spent (connect_bounded bounds the others by its end). */
int ns_budget_spent(void)
{
	monotime end = budget_now.end;

	return end && ns_now() >= end;
}

/* The record of a connect in the attempt: its connect deadline no later
 * than the attempt's end (the waits keep a non-blocking connect's). */
void ns_budget_deadline(struct ns_conn *c)
{
	monotime end = budget_now.end;

	if (end && (!LD(c->connect_deadline) || end < LD(c->connect_deadline)))
		ST(c->connect_deadline, end);
}

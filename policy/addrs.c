/* addrs.c -- each address of a name, beside the name in the table
 * (address_choice = healthy-first): its own slot, keyed "name:port@addr",
 * holds whether its connects fail, for getaddrinfo in every process to list
 * the failing ones after the healthy ones.
 *
 * The slot's breaker word holds the address's state instead (no breaker
 * steps on a slot no connect is keyed by): failed connects in a row 16 | a
 * probe is out 1 | CLOCK_MONOTONIC ms until its next probe 47. 0 is
 * healthy. A failed connect puts the address last until open_duration
 * has passed; then the first lookup to ask takes the probe (it lists the
 * address in its place, and its program's connect to it decides), every
 * other one still lists it last until the probe's outcome or the next
 * open_duration. Every change is one compare-and-swap of the word: a
 * process killed anywhere leaves a whole state. */
#include "slot.h"

#include <arpa/inet.h>
#include <string.h>

#define A_FAILS(w)                  ((uint32_t)((w) >> 48))
#define A_PROBE                     (1ULL << 47)
#define A_UNTIL(w)                  ((w) & (A_PROBE - 1))
#define A_MAKE(fails, probe, until) ((uint64_t)(fails) << 48 | ((probe) ? A_PROBE : 0) | ((until) & (A_PROBE - 1)))

int ns_addr_key(const char *name_key, int family, const void *addr, char *out, size_t len)
{
	char text[INET6_ADDRSTRLEN];
	size_t n = strlen(name_key), m;

	if ((family != AF_INET && family != AF_INET6) || !inet_ntop(family, addr, text, sizeof(text)))
		return -1;
	m = strlen(text);
	if (n == 0 || n + 1 + m + 1 > len || n + 1 + m + 1 > NS_KEY_MAX)
		return -1;
	memcpy(out, name_key, n);
	out[n] = '@';
	memcpy(out + n + 1, text, m + 1);
	return (int)(n + 1 + m);
}

int ns_key_is_addr(const char *key)
{
	return strchr(key, '@') != NULL;
}

void ns_table_addr_outcome(struct ns_table *t, int idx, int ok, int err, uint64_t now_ms, uint64_t open_ms)
{
	struct ns_slot *s = slot_at(t, idx);
	uint64_t w, nw;

	if (!s)
		return;
	ADD(&s->calls, 1);
	if (ok) {
		ADD(&s->successes, 1);
		STORE(&s->word, 0);
		return;
	}
	ADD(&s->failures, 1);
	STORE(&s->last_error, (uint32_t)err);
	w = LOAD(&s->word);
	do {
		uint32_t f = A_FAILS(w);

		nw = A_MAKE(f < 0xffff ? f + 1 : f, 0, now_ms + open_ms);
	} while (!CAS(&s->word, &w, nw));
}

void ns_table_addr_reset(struct ns_table *t, int idx)
{
	struct ns_slot *s = slot_at(t, idx);

	if (s)
		STORE(&s->word, 0);
}

int ns_table_addr_rank(struct ns_table *t, int idx, uint64_t now_ms, uint64_t open_ms)
{
	struct ns_slot *s = slot_at(t, idx);
	uint64_t w;

	if (!s)
		return 0;
	w = LOAD(&s->word);
	for (;;) {
		if (A_FAILS(w) == 0)
			return 0;
		if (now_ms < A_UNTIL(w))
			return 1;
		/* due: this lookup takes the probe, the others wait for its outcome */
		if (CAS(&s->word, &w, A_MAKE(A_FAILS(w), 1, now_ms + open_ms)))
			return 0;
	}
}

int ns_table_addr_read(const struct ns_table *t, int idx, uint64_t now_ms, struct ns_addr_entry *e)
{
	struct ns_slot *s = slot_at(t, idx);
	uint64_t w, tag;
	const char *at;

	if (!s)
		return -1;
	tag = LOAD(&s->tag);
	if (TAG_STATE(tag) != TAG_READY)
		return -1;
	memcpy(e->key, s->key, sizeof(e->key));
	e->key[sizeof(e->key) - 1] = '\0';
	at = strrchr(e->key, '@');
	if (!at)
		return -1;
	e->name_len = (uint32_t)(at - e->key);
	w = LOAD(&s->word);
	e->fails_in_a_row = A_FAILS(w);
	e->state = !e->fails_in_a_row                   ? NS_ADDR_HEALTHY
		: (w & A_PROBE) || now_ms >= A_UNTIL(w) ? NS_ADDR_PROBING
							: NS_ADDR_DOWN;
	e->next_probe_ms = e->state == NS_ADDR_DOWN ? A_UNTIL(w) - now_ms : 0;
	e->calls = LOAD(&s->calls);
	e->successes = LOAD(&s->successes);
	e->failures = LOAD(&s->failures);
	e->last_error = LOAD(&s->last_error);
	return 0;
}

const char *ns_addr_state_name(int state)
{
	return state == NS_ADDR_HEALTHY ? "healthy" : state == NS_ADDR_PROBING ? "half-open" : "open";
}

uint64_t ns_table_connected(const struct ns_table *t, int idx)
{
	const struct ns_slot *s = slot_at(t, idx);
	uint64_t n = 0;

	for (uint32_t b = 0; s && b < NS_HIST_BUCKETS; b++)
		n += LOAD(&s->connect_hist.count[b]);
	return n;
}

/* fleetshare.c -- a machine's share of the fleet's limits, in its table
 * (docs/fleet.md, "Limits for the fleet"). netshim-agent leases the share
 * from the other machines' agents through Redis (tools/agent/lease.c) and
 * writes it here with the lease's end; both engines read it as the limit
 * in force (shaping.c, admit.c). No program waits on the network: a share
 * is one load, and a lapsed lease (the agent gone, its share handed back
 * to the others) is the limit 0 until an agent renews it. */
#include <string.h>
#include <time.h>

#include "reqq.h"
#include "slot.h"
#include "table.h"

uint64_t ns_table_fleet_share(const struct ns_table *t, int idx, int kind, uint64_t whole, uint64_t now_ms)
{
	struct ns_slot *s = slot_at(t, idx);
	uint64_t w;

	if (!s || kind < 0 || kind > NS_FLEET_K_RATE)
		return whole;
	if (!(w = LOAD(&s->fleet.share[kind]))) {
		/* none written yet: while an agent of a fleet runs, the first
		 * lease is asked of it and waited for (its next tick); else no
		 * agent shares it and the whole limit is this machine's */
		struct ns_table_hdr *h = t->hdr;

		if (!h || !LOAD(&h->agent_pid) || (LOAD(&h->agent_flags) & NS_AGENT_NOFLEET))
			return whole;
		__atomic_fetch_add(&h->fleet_asked, 1, __ATOMIC_RELAXED); /* (the agent leases at its next tick) */
		return 0;
	}
	if (now_ms >= LOAD(&s->fleet.expires_ms))
		return 0; /* lapsed: the share went back to the others */
	return w - 1 < whole ? w - 1 : whole;
}

void ns_table_fleet_token(struct ns_table *t, int idx)
{
	struct ns_slot *s = slot_at(t, idx);

	if (s)
		__atomic_fetch_add(&s->fleet.tokens, 1, __ATOMIC_RELAXED);
}

void ns_table_fleet_denied(struct ns_table *t, int idx, int kind)
{
	struct ns_slot *s = slot_at(t, idx);

	if (s && kind >= 0 && kind <= NS_FLEET_K_RATE)
		__atomic_fetch_add(&s->fleet.denied[kind], 1, __ATOMIC_RELAXED);
}

void ns_table_fleet_demand(const struct ns_table *t, int idx, struct ns_fleet_demand *d)
{
	struct ns_slot *s = slot_at(t, idx);

	memset(d, 0, sizeof(*d));
	if (!s)
		return;
	d->req_inflight = ns_reqq_inflight(&s->req);
	for (uint32_t i = 0; i < NS_PLACES; i++)
		d->conn_inflight += LOAD(&s->place[i]) != 0;
	d->req_waiting = LOAD(&s->req.queued);
	d->conn_waiting = LOAD(&s->place_waiters);
	d->tokens = LOAD(&s->fleet.tokens);
	d->paced = LOAD(&s->paced);
	for (uint32_t b = 0; b < NS_WAIT_BUCKETS; b++)
		d->conn_waits += LOAD(&s->waited[b]);
	d->conn_waits += LOAD(&s->throttled);
	for (int k = 0; k < 3; k++)
		d->denied[k] = LOAD(&s->fleet.denied[k]);
}

int ns_table_fleet_write(struct ns_table *t, int idx, int kind, uint64_t share, uint64_t whole, uint64_t expires_ms,
			 uint32_t live, uint32_t **wake)
{
	struct ns_slot *s = slot_at(t, idx);
	uint64_t was;

	*wake = NULL;
	if (!s || kind < 0 || kind > NS_FLEET_K_RATE)
		return -1;
	was = LOAD(&s->fleet.share[kind]);
	/* (the expiry first: a share never stands with an older lease's end) */
	__atomic_store_n(&s->fleet.expires_ms, expires_ms, __ATOMIC_RELEASE);
	__atomic_store_n(&s->fleet.share[kind], share + 1, __ATOMIC_RELEASE);
	__atomic_store_n(&s->fleet.live, live, __ATOMIC_RELAXED);
	__atomic_store_n(&s->fleet.whole[kind], whole, __ATOMIC_RELAXED);
	if (share + 1 > was && kind == NS_FLEET_K_RATE && share) {
		/* a faster rate: a token taken at the slower one's pace (its
		 * bucket's time far ahead) does not hold the next back longer
		 * than the new pace would */
		struct timespec ts;
		uint64_t now_us, tat = LOAD(&s->rate_tat), step = 3600000000000ULL / share;

		clock_gettime(CLOCK_MONOTONIC, &ts);
		now_us = (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
		while (tat > now_us + step &&
		       !__atomic_compare_exchange_n(&s->rate_tat, &tat, now_us + step, 0, __ATOMIC_ACQ_REL,
						    __ATOMIC_ACQUIRE))
			;
	}
	if (share + 1 > was && kind != NS_FLEET_K_RATE) {
		/* more places: the waiters look now, not at their next look */
		uint32_t *w = kind == NS_FLEET_K_REQ ? &s->req.wake : &s->place_wake;

		__atomic_fetch_add(w, 1, __ATOMIC_SEQ_CST);
		if (LOAD(kind == NS_FLEET_K_REQ ? &s->req.waiters : &s->place_waiters))
			*wake = w;
	}
	return 0;
}

void ns_table_fleet_largest(struct ns_table *t, int idx, int kind, uint64_t largest)
{
	struct ns_slot *s = slot_at(t, idx);

	if (s && kind >= 0 && kind <= NS_FLEET_K_RATE)
		__atomic_store_n(&s->fleet.largest[kind], largest, __ATOMIC_RELAXED);
}

int64_t ns_table_fleet_read(const struct ns_table *t, int idx, int kind, uint64_t *whole, uint64_t *expires_ms,
			    uint32_t *live)
{
	struct ns_slot *s = slot_at(t, idx);
	uint64_t w;

	*whole = 0;
	*expires_ms = 0;
	*live = 0;
	if (!s || kind < 0 || kind > NS_FLEET_K_RATE)
		return -1;
	w = LOAD(&s->fleet.share[kind]);
	*expires_ms = LOAD(&s->fleet.expires_ms);
	*live = LOAD(&s->fleet.live);
	*whole = LOAD(&s->fleet.whole[kind]);
	return w ? (int64_t)(w - 1) : -1;
}

/* reqq.h -- max_requests: the requests in flight to a destination from
 * every process of the machine, and the order in which those that wait
 * get a place (a slot's struct ns_reqq, table.h).
 *
 * A request takes a place with one compare-and-swap while no one waits,
 * and gives it back when its answer was read to its end (or its
 * connection ends). One that finds none waits in the queue: its entry says
 * who waits (the holder word) and since when; a place that frees goes to
 * the entry that waited longest, whatever its process, and the others look
 * again. A waiter that died is taken out by the next look that finds it
 * first (its process gone), or once it is older than any wait may be
 * (stale); a holder that died has its place freed as max_connections'
 * are. Nothing here makes a system call but the liveness looks. */
#ifndef NS_REQQ_H
#define NS_REQQ_H

#include <stdint.h>

#include "table.h"

static inline struct ns_reqq *ns_reqq_of(struct ns_table *t, int idx)
{
	struct ns_slot *s = ns_table_slot_(t, idx);

	return s ? &s->req : NULL;
}

/* One of places [0, cap) for holder (never 0): its number, or -1. */
static inline int ns_reqq_take(struct ns_reqq *q, uint32_t cap, uint32_t holder)
{
	return ns_places_take(q->place, cap, holder);
}

/* (under max_requests = auto: ns_table_place_take_auto, table.h) */
/* Place p freed if holder holds it: 1 when a waiter is blocked on q->wake
 * (the caller wakes it), else 0. */
int ns_reqq_release(struct ns_reqq *q, int p, uint32_t holder);
/* A queue entry for word (holder << 32 | since_us): its index, or -1 when
 * every entry is taken (the request then waits unordered, behind them). */
int ns_reqq_enqueue(struct ns_reqq *q, uint64_t word);
/* Entry i (holding word) leaves the queue: 1 when a waiter is blocked on
 * q->wake (the caller wakes it: the next may now go), else 0. */
int ns_reqq_leave(struct ns_reqq *q, int i, uint64_t word);
/* Is the request of entry i (word; i -1: one with no entry, behind every
 * entry) the one that waited longest? -1 when it is, else the index of the
 * entry that waited longest before it. Entries older than stale_us are taken
 * out on the way. */
int ns_reqq_before(struct ns_reqq *q, int i, uint64_t word, uint32_t now_us, uint32_t stale_us);
/* Entry i taken out if its process is gone (not self's): 1, else 0.
 * deep: a reused pid is seen too (ns_place_holder_lives). */
int ns_reqq_drop_dead(struct ns_reqq *q, int i, uint32_t self, int deep);
/* Places of [0, span) whose holders are gone freed: how many. */
int ns_reqq_reclaim(struct ns_reqq *q, uint32_t span, uint32_t self, int deep);
/* A request of slot idx failed at its start after queue_timeout: counted;
 * 1 when the throttling event is due (once a minute per destination, as a
 * connect's). */
int ns_reqq_throttled(struct ns_table *t, int idx, uint64_t now_ms);
/* Places held, entries queued (for a report: no system call). */
uint32_t ns_reqq_inflight(const struct ns_reqq *q);
uint32_t ns_reqq_queued(const struct ns_reqq *q);
/* Its part of a report's entry (ns_table_read). */
void ns_reqq_read(const struct ns_reqq *q, struct ns_entry *e);
/* ...the places whose holders run (system calls: for shimctl) */
uint32_t ns_reqq_inflight_live(const struct ns_reqq *q);

#endif

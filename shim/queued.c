/* queued.c -- this process's queued non-blocking connects, served oldest
 * first (shape.c asks before it gives one a place). */
#include "queued.h"

#define QUEUED_MAX     64                /* served oldest first (more: the rest in no order) */
#define QUEUED_SEEN_NS (500 * 1000000LL) /* a queued connect no wait looked at for this long is passed over */

/* This process's queued non-blocking connects waiting for a place. The
 * waits look at them in the program's order, the same at every wake, so
 * the first looked at would take every place that frees while one queued
 * earlier times out (a crawler's connects, starved in turn): a place goes
 * to the one that has waited longest, of those a wait still looks at. An
 * entry is a record's address; the record is pooled, never unmapped, so
 * a stale one reads as what it now is (closed, or not queued: cleared). */
static struct ns_conn *queued[QUEUED_MAX];
int ns_shape_queued; /* atomic: entries in use (0: a connect looks at none) */

void ns_queued_add(struct ns_conn *c)
{
	for (int i = 0; i < QUEUED_MAX; i++) {
		struct ns_conn *e = NULL;

		if (__atomic_compare_exchange_n(&queued[i], &e, c, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
			__atomic_fetch_add(&ns_shape_queued, 1, __ATOMIC_RELEASE);
			return;
		}
	}
}

static void queued_clear(int i, struct ns_conn *e)
{
	if (__atomic_compare_exchange_n(&queued[i], &e, NULL, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
		__atomic_fetch_sub(&ns_shape_queued, 1, __ATOMIC_RELEASE);
}

/* 1 when another of this process's connects to slot, queued before
 * `since` and looked at lately, still waits for a place. c (queued or
 * about to be) is passed over, and its entry cleared once it is served
 * (gone); entries of connects served or closed are cleared on the way. */
int ns_queued_before(struct ns_conn *c, int slot, monotime since, monotime now, int gone)
{
	for (int i = 0; i < QUEUED_MAX; i++) {
		struct ns_conn *e = __atomic_load_n(&queued[i], __ATOMIC_ACQUIRE);

		if (!e)
			continue;
		if (e == c ? gone : !(LD(e->flags) & NS_C_QUEUED) || !LD(e->refs)) {
			queued_clear(i, e);
			continue;
		}
		if (!gone && e != c && LD(e->slot) == slot && LD(e->place) < 0 && LD(e->queue_start) < since &&
		    now - LD(e->queue_seen) < QUEUED_SEEN_NS)
			return 1;
	}
	return 0;
}

void ns_queued_forget(void)
{
	for (int i = 0; i < QUEUED_MAX; i++)
		__atomic_store_n(&queued[i], NULL, __ATOMIC_RELAXED);
	__atomic_store_n(&ns_shape_queued, 0, __ATOMIC_RELAXED);
}

/* history.h -- outcomes handed to the history recorder (history.c). */
#ifndef NS_HISTORY_H
#define NS_HISTORY_H

#include "config.h"
#include "conn.h"

/* Is a recorder reading (netshim-agent --history)? One load of the
 * table's header: all an outcome pays when none is. */
static inline __attribute__((always_inline)) int ns_hist_on(uint64_t now_ms)
{
	return unlikely(ns_breakers_ok && __atomic_load_n(&ns_breakers.hdr->hist_until_ms, __ATOMIC_RELAXED) > now_ms);
}

/* The exchange's outcome (NS_OUT_*), as ns_conn_outcome counted it at now
 * (wall_ms on the wall clock), begun at from; status: its HTTP status, 0 =
 * none. */
NS_HIDDEN void ns_hist_outcome(const struct ns_conn *c, int slot, int kind, int err, uint64_t latency_us,
			       monotime now, monotime from, uint64_t wall_ms, unsigned status);
/* A connect to slot's destination turned away at now. */
NS_HIDDEN void ns_hist_rejected(int slot, monotime now);

#endif

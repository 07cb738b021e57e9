/* benchkit.h -- what the fleet's two benchmarks share (fleetbench.c on one
 * Redis, fleetscale.c on a cluster): the clock, the data set, the real
 * agent they time and the reading of its table. */
#ifndef NS_BENCHKIT_H
#define NS_BENCHKIT_H

#include <stdint.h>
#include <sys/types.h>

#include "../agent/agent.h"

uint64_t bk_now_us(void);
/* dests destinations ("site-N.example:443"), one vote each by "sim-N % nodes". */
void bk_dataset(struct fl_conn *c, int dests, int nodes);
/* A fresh table for the real agent, and the agent on it (its log to
 * /dev/null: a line per fleet open would bury the figures); extra: more
 * arguments, NULL-terminated. */
pid_t bk_agent(const char *agent, const char *url, const char *fleet, int poll_ms, struct ns_table *t, char *table,
	       size_t tlen, char *const *extra);
/* The fleet holds key open in t. */
int bk_held(struct ns_table *t, const char *key);
int bk_cmp_u64(const void *a, const void *b);

#endif

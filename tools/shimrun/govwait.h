/* govwait.h -- what one of the seccomp engine's connections holds in the
 * table for the program (govwait.c): max_connections' place, and
 * max_requests' place, which this engine, seeing no requests, takes for
 * the whole connection (a connection is one request to it), with the
 * connect's entry in the requests' queue while it waits for one. */
#ifndef NS_GOVWAIT_H
#define NS_GOVWAIT_H

#include <stdint.h>

#include "../../policy/admit.h"

struct ns_gwait {
	int place;      /* max_connections' place held, or -1 */
	int rq;         /* max_requests' place held, or -1 */
	int qi;         /* its entry in the requests' queue while it waits, or -1 */
	uint64_t qword; /* ...what the entry holds (0: none) */
};

/* Nothing held, no entry. */
void ns_gw_init(struct ns_gwait *w);
/* max_requests' place for the connect now, of slot for holder (its turn
 * in the machine's queue: an entry the first time it waits): 1 taken, 0
 * not yet. now_us: CLOCK_MONOTONIC. */
int ns_gw_request(struct ns_gwait *w, struct ns_admitter *a, struct ns_table *t, int slot,
		  const struct ns_settings *set, uint32_t holder, uint64_t now_us);
/* Everything w holds given back (its queue entry too), the waiters woken. */
void ns_gw_release(struct ns_gwait *w, struct ns_table *t, int slot, uint32_t holder);
/* Does anyone wait for a place w holds (a preloaded process, or shimrun)? */
int ns_gw_wanted(const struct ns_gwait *w, struct ns_table *t, int slot);

#endif

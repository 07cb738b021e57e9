/* engine.h -- this engine as the core borrows it (engine.c): the history
 * recorder's ring mapped in this process, and the engine's description. */
#ifndef NS_ENGINE_H
#define NS_ENGINE_H

#include "../policy/ocring.h"
#include "config.h"

/* Is a recorder reading (netshim-agent --history)? One load of the
 * table's header: all an outcome pays when none is. */
static inline __attribute__((always_inline)) int ns_hist_on(uint64_t now_ms)
{
	return unlikely(ns_breakers_ok && __atomic_load_n(&ns_breakers.hdr->hist_until_ms, __ATOMIC_RELAXED) > now_ms);
}

/* The ring mapped for the table's recorder (its generation), or NULL:
 * the core (policy/account.c) writes the records. */
NS_HIDDEN struct ns_ocring *ns_hist_ring(void);

#endif

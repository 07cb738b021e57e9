/* config.h -- the policy in force and the shared breaker table: loaded
 * once (the first call that needs them, or the constructor), the policy
 * looked at again at most once a second (config.c). The checks a connect
 * makes are inline here: a load and a comparison each once set up. */
#ifndef NS_CONFIG_H
#define NS_CONFIG_H

#include <pthread.h>

#include "../policy/account.h"
#include "../policy/policy.h"
#include "../policy/table.h"
#include "base.h"
#include "lock.h"

/* The policy in force: a reload swaps the pointer (NULL: a bad policy, pass
 * through). The rest is the state of its one-time loading and reloading. */
extern struct ns_policy *ns_cfg_cur NS_HIDDEN;
extern int ns_cfg_disabled NS_HIDDEN;             /* NETSHIM_DISABLE=1 */
extern monotime ns_cfg_next_ns NS_HIDDEN;         /* atomic: no look at the file before then */
/* its one-time loading (lock.h: a signal handler's connect inside its own
 * thread's loading passes through rather than wait for ever on itself) */
extern uint64_t ns_cfg_once NS_HIDDEN;
NS_HIDDEN void ns_cfg_load_once(void);
NS_HIDDEN void ns_cfg_maybe_reload(monotime now);

/* The shared breaker table, mapped on first use; ns_breakers_ok: mapped
 * and whole (the breakers are off otherwise). */
extern struct ns_table ns_breakers NS_HIDDEN;
extern int ns_breakers_ok NS_HIDDEN;
extern uint64_t ns_tbl_once NS_HIDDEN;
NS_HIDDEN void ns_tbl_load_once(void);
/* The table shrank under us: said once, the breakers off from then on. */
NS_HIDDEN void ns_tbl_broke(void);

/* 0 once the policy is loaded, -1 inside its loading on this thread */
static inline int ns_cfg_init(void)
{
	return ns_once(&ns_cfg_once, ns_cfg_load_once) ? 0 : -1;
}

/* The policy in force, or NULL to pass the call through. */
static inline __attribute__((always_inline)) struct ns_policy *ns_cfg_get(monotime now)
{
	if (unlikely(ns_cfg_init() < 0) || ns_cfg_disabled)
		return NULL;
	if (unlikely(now >= __atomic_load_n(&ns_cfg_next_ns, __ATOMIC_RELAXED)))
		ns_cfg_maybe_reload(now);   /* once a second at most: one comparison otherwise */
	return __atomic_load_n(&ns_cfg_cur, __ATOMIC_ACQUIRE);
}

/* Is the table in use (mapped and whole)? Maps it on first use. */
static inline __attribute__((always_inline)) int ns_tbl_on(void)
{
	if (unlikely(!ns_once(&ns_tbl_once, ns_tbl_load_once)))
		return 0; /* a handler inside our own set-up: uncounted */
	if (unlikely(ns_breakers_ok && ns_table_broken(&ns_breakers)))
		ns_tbl_broke();
	return ns_breakers_ok;
}


/* The fallback settings for a destination past the kept values' limit
 * (settings.c): the policy's [defaults], kept when first needed. */
NS_HIDDEN const struct ns_settings *ns_cfg_fallback(void);
/* The policy's faults for d (none when the shim is off or d is bypassed):
 * for the lookup faults. */
NS_HIDDEN void ns_policy_faults_for(const struct ns_dest *d, struct ns_settings *set);
/* Is the shim governing this process (not NETSHIM_DISABLE=1, a policy
 * loaded)? Loads the policy on first use. */
NS_HIDDEN int ns_shim_active(void);
/* The table, or NULL when the shim is off or the table is not in use. */
NS_HIDDEN struct ns_table *ns_tbl(void);

/* NETSHIM_TRACE=1: every failure's event carries the calling code's frames. */
extern int ns_trace_env NS_HIDDEN;
/* Per process, reseeded in a forked child: the jitter of connect retries. */
extern uint64_t ns_rng_state NS_HIDDEN;

/* Write one event into the shared ring: a transition, a traced failure, or
 * a process-wide happening (key may then be ""; slot -1; st NULL). */
/* This engine, as the core (policy/account.h) borrows it. */
extern int ns_req_any NS_HIDDEN; /* atomic: a policy loaded here set max_requests (sticky) */
extern const struct ns_engine ns_engine NS_HIDDEN;
NS_HIDDEN void ns_emit(int type, int slot, const char *key, const struct ns_step *st, int err,
		       const char *detail, int trace);
/* ...when the table is in use: for code that has no key of a connection. */
NS_HIDDEN void ns_note_event(int type, int slot, const char *key, const char *detail);

#endif

/* govacct.h -- the seccomp engine as the core's accounting sees it
 * (govacct.c): what shimrun lends policy/account.c (its lines, its mapping
 * of the history ring, its wake of the agent), and the shadow policy judged
 * on the program's connects and outcomes as the library judges its own. */
#ifndef NS_GOVACCT_H
#define NS_GOVACCT_H

#include <stdint.h>
#include <sys/types.h>

#include "../../policy/account.h"
#include "../../policy/policy.h"
#include "gostat.h"

struct ns_gacct {
	struct ns_table *t;    /* the live table */
	struct ns_ocring ring; /* the history ring, mapped for ring_gen */
	int ring_state;        /* 0 none, 1 mapped, -1 failed for ring_gen */
	uint32_t ring_gen;
	struct ns_policy shadow; /* the shadow policy, when shadow_on */
	struct ns_table stbl;    /* its breakers' table */
	int shadow_on;
	pid_t comm_pid; /* the process whose name comm holds */
	char comm[16];
};

/* The accounting of a seccomp engine on table t under the live policy
 * live: the shadow policy (NETSHIM_SHADOW_POLICY, else live's
 * shadow_policy) loaded and its table opened; errors said, never fatal. */
void ns_gacct_init(struct ns_gacct *a, struct ns_table *t, const struct ns_policy *live);

/* A connect to d (key) that the live breaker let through (admitted) or
 * turned away, asked of the shadow's breaker too: *set and the slot its
 * outcomes are judged on (-1: none). */
int ns_gacct_shadow_attempt(struct ns_gacct *a, const struct ns_dest *d, const char *key, uint64_t now_ms,
			    struct ns_settings *set);

/* One outcome through the core: o filled by the caller but for the
 * engine's fields (pid, program, shadow: shadow_slot under shadow_set). */
void ns_gacct_outcome(struct ns_gacct *a, int slot, const struct ns_settings *set, struct ns_outcome *o, pid_t pid,
		      const struct ns_settings *shadow_set, int shadow_slot, struct ns_step *st);
/* An answer a hooked Go program (pid) read from d, with its HTTP status,
 * its time to the answer (latency_us, 0: not known; a success's feeds the
 * slow-call and p99 rules) and a 429's or 503's Retry-After (retry_after:
 * its value, "" none, NULL its headers unread), counted on d's entry as
 * the library counts an exchange's (go: the own successes its first
 * answer takes back, or NULL): a Retry-After honoured is a cooldown, not
 * also a failure. The slot when it was a failure, else -1. */
int ns_gacct_status(struct ns_gacct *a, const struct ns_policy *pol, const struct ns_dest *d, pid_t pid,
		    unsigned status, uint64_t latency_us, const char *retry_after, uint64_t now_ms,
		    struct ns_gostat *go);
/* NETSHIM_LOG's level as shimrun reads it (after ns_gacct_init) */
int ns_gacct_level(void);
extern const struct ns_engine ns_seccomp_engine;

#endif

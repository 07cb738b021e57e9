/* faultcfg.h -- the faults this process may inject, and their random
 * source (faultcfg.c). */
#ifndef NS_FAULTCFG_H
#define NS_FAULTCFG_H

#include "../policy/policy.h"
#include "base.h"

/* The policy in force changed (or was loaded): what faults keep of it. */
NS_HIDDEN void ns_fault_config(const struct ns_policy *pol);
/* Could any fault act in this process? The policy or NETSHIM_INJECT names
 * one (ns_fault_local), or the table's fault generation ever moved (someone
 * ran shimctl inject). Two loads and a test: the whole cost of fault
 * injection to a connect or a lookup when nobody injects anything. */
extern int ns_fault_local NS_HIDDEN;
extern const uint64_t *ns_fault_genp NS_HIDDEN;
#define NS_FL_FAULTS 1          /* ns_fault_local: the policy or the environment names a fault */
#define NS_FL_SHADOW 2          /* ...a shadow policy is asked for (config.c, shadow.c) */
static inline int ns_fault_possible(void)
{
	const uint64_t *g = __atomic_load_n(&ns_fault_genp, __ATOMIC_ACQUIRE);

	return (__atomic_load_n(&ns_fault_local, __ATOMIC_RELAXED) & NS_FL_FAULTS) ||
	       (g && __atomic_load_n(g, __ATOMIC_RELAXED));
}
/* ...or a shadow policy: the connect's one test for both. */
static inline int ns_fault_or_shadow(void)
{
	const uint64_t *g = __atomic_load_n(&ns_fault_genp, __ATOMIC_ACQUIRE);

	return __atomic_load_n(&ns_fault_local, __ATOMIC_RELAXED) || (g && __atomic_load_n(g, __ATOMIC_RELAXED));
}
/* Draw which of f's faults of a phase (NS_FP_*) act, from the shared
 * random source: a mask of f's entries. */
NS_HIDDEN uint32_t ns_fault_choose(const struct ns_faults *f, int phase);
/* first N / every N: the faults of f this connection to slot gets by its
 * number in this process (a mask; all bits for faults without either). */
NS_HIDDEN uint32_t ns_fault_sched(const struct ns_faults *f, int slot);
/* for D every P alone (lookups are not counted): the faults of f in force now. */
static inline uint32_t ns_fault_windows(const struct ns_faults *f)
{
	uint32_t keep = ~0u;

	for (uint32_t i = 0; i < f->n && i < NS_FAULTS_MAX; i++)
		if (f->f[i].period_ms && ns_wall_ms() % f->f[i].period_ms >= f->f[i].for_ms)
			keep &= ~(1u << i);
	return keep;
}
/* latency's jitter: a draw of mean 0 and standard deviation sd (ns), from
 * the same source (a seeded run draws the same sequence). */
NS_HIDDEN int64_t ns_fault_jitter(int64_t sd);
/* The faults for d (runtime, this run's, then the policy's: policy is the
 * destination's list): 1 and *out, or 0. *rt: the runtime record, or -1.
 * (faultrt.c) */
NS_HIDDEN int ns_fault_list_for(const struct ns_dest *d, const struct ns_faults *policy, monotime now,
				struct ns_faults *out, int *rt);
/* inject --existing: the runtime faults for an open connection to d that
 * began at start, set with --existing after it began: the record index
 * (*out, *order), or -1. */
NS_HIDDEN int ns_fault_rt_existing(const struct ns_dest *d, monotime start, monotime now, struct ns_faults *out,
				   uint32_t *order);
/* The table's faults changed since this process last looked: look now
 * (the send that starts an HTTP request asks; connects and lookups look
 * anyway). An --existing record new to this process flags its open
 * connections. */
NS_HIDDEN void ns_fault_rt_poll(void);
/* The order of the --existing record at idx as this process saw it (0:
 * none): a connection that got it at connect is not given it again. */
NS_HIDDEN uint32_t ns_fault_rt_order_of(int idx);
/* shimrun --inject (NETSHIM_INJECT): the faults of its first line that
 * matches d, 1; or 0. */
NS_HIDDEN int ns_fault_env_match(const struct ns_dest *d, struct ns_faults *out);

#endif

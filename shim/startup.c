/* startup.c -- NETSHIM_STARTUP=1 (make bench): the one-time steps of a
 * process's first socket and connect timed (the fd table, which fdtab.c
 * times itself; the policy, the breaker table), and said in one line once
 * the table is in. Off, a step costs the test of one word. */
#include "base.h"

#include <string.h>

static int on = -1; /* atomic: -1 not looked at yet */
static monotime took[NS_SU_N];
static const char *policy_how = "";

monotime ns_startup_begin(void)
{
	int o = __atomic_load_n(&on, __ATOMIC_RELAXED);

	if (o < 0) {
		const char *e = ns_getenv("NETSHIM_STARTUP");

		o = e && strcmp(e, "1") == 0;
		__atomic_store_n(&on, o, __ATOMIC_RELAXED);
	}
	return o ? ns_now() : 0;
}

void ns_startup_end(int step, monotime t0, const char *how)
{
	if (!t0 || step < 0 || step >= NS_SU_N)
		return;
	took[step] = ns_now() - t0;
	if (how)
		policy_how = how;
	if (step == NS_SU_TABLE)
		ns_log(NS_LOG_WARN, "startup: fd table %llu us, policy %llu us (%s), table %llu us",
		       (unsigned long long)ns_fdtab_made_ns / 1000, (unsigned long long)took[NS_SU_POLICY] / 1000,
		       policy_how, (unsigned long long)took[NS_SU_TABLE] / 1000);
}

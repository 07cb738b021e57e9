/* faultcfg.c -- which faults this process may inject, and the random
 * source that picks the connections they act on: NETSHIM_INJECT (shimrun
 * --inject), NETSHIM_FAULT_SEED or the policy's fault_seed, read when the
 * policy is loaded (config.c). What they then do is fault.c's. */
#include "faultcfg.h"

#include "../policy/breaker.h"
#include "lock.h"
#include "settings.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../policy/faultspec.h"
#include "../policy/scenario.h"

struct inj {
	struct ns_section pat;
	struct ns_faults f;
};

static struct inj *env_inj;       /* NETSHIM_INJECT, parsed once */
static int env_n;
static struct ns_scenario scen;   /* NETSHIM_SCENARIO (shimrun --scenario), parsed once */
static monotime scen_t0;          /* NETSHIM_SCENARIO_T0: the run's start, CLOCK_MONOTONIC ns */
int ns_fault_local;               /* atomic: the policy or NETSHIM_INJECT names a fault */
const uint64_t *ns_fault_genp;    /* atomic: the table's flt_gen, once it is mapped */
static uint64_t frng;             /* atomic: the fault random source */
static int seeded;                /* a seed was given: a forked child goes on from it */
static uint64_t env_once;         /* lock.h: a handler inside its own thread's set-up does without */

static void fault_reseed(void)
{
	if (!seeded)
		__atomic_store_n(&frng, (uint64_t)ns_now() ^ ((uint64_t)getpid() << 32) ^ 0x5bd1e995ULL,
				 __ATOMIC_RELAXED);
}

/* shimrun checked the file; a scenario that reads badly here was not
 * written by it, and is reported once and ignored. */
static void scenario_load(void)
{
	const char *v = ns_getenv("NETSHIM_SCENARIO"), *t0 = ns_getenv("NETSHIM_SCENARIO_T0");
	char errs[600], *end = NULL;
	unsigned long long t;

	if (!v || !*v)
		return;
	t = t0 ? strtoull(t0, &end, 10) : 0;
	if (!t || !end || *end || t > (unsigned long long)ns_now()) {
		ns_log(NS_LOG_ERROR, "NETSHIM_SCENARIO_T0 is missing or not a start time; the scenario is ignored");
		return;
	}
	if (ns_scenario_parse(v, "NETSHIM_SCENARIO", &scen, errs, sizeof(errs)) > 0) {
		errs[strcspn(errs, "\n")] = '\0';
		ns_log(NS_LOG_ERROR, "%s; the scenario is ignored", errs);
		return;
	}
	scen_t0 = (monotime)t;
	/* shimrun said so once for the run; each process of it says so at info */
	if (scen.n)
		ns_log(NS_LOG_INFO, "injecting faults in this run: a scenario of %d lines over %llu ms", scen.n,
		       (unsigned long long)ns_scenario_end(&scen));
}

static void env_load(void)
{
	const char *v = ns_getenv("NETSHIM_INJECT");
	char *copy, *line, *save = NULL;
	int cap = 0;

	scenario_load();
	if (!v || !*v)
		return;
	copy = strdup(v);
	if (!copy)
		return;
	for (const char *p = v; *p; p++)
		cap += *p == '\n';
	env_inj = calloc((size_t)cap + 1, sizeof(*env_inj));
	if (!env_inj) {
		free(copy);
		return;
	}
	for (line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char why[300];

		if (env_n > cap)
			break;
		if (ns_inject_parse(line, &env_inj[env_n].pat, &env_inj[env_n].f, why, sizeof(why)) < 0) {
			ns_log(NS_LOG_ERROR, "NETSHIM_INJECT: %s; ignored", why);
			continue;
		}
		/* never by accident: a run with injected faults says so */
		ns_log(NS_LOG_WARN, "injecting faults in this run: %s", line);
		env_n++;
	}
	free(copy);
}

void ns_fault_config(const struct ns_policy *pol)
{
	const char *seed = ns_getenv("NETSHIM_FAULT_SEED");
	uint64_t s = 0;

	ns_once(&env_once, env_load);
	if (seed && *seed) {
		s = strtoull(seed, NULL, 10);
		if (!s)
			ns_log(NS_LOG_ERROR, "NETSHIM_FAULT_SEED=%s is not a whole number from 1; ignored", seed);
	}
	if (!s && pol && pol->nsections > 0)
		s = pol->sec[0].v.fault_seed;
	if (s && !seeded) {
		seeded = 1;
		__atomic_store_n(&frng, s, __ATOMIC_RELAXED);
	} else if (!seeded && !__atomic_load_n(&frng, __ATOMIC_RELAXED)) {
		fault_reseed();
		(void)ns_fork_hook(NULL, NULL, fault_reseed);
	}
	__atomic_store_n(&ns_fault_local, (pol && pol->has_faults) || env_n > 0 || scen.n > 0 ? NS_FL_FAULTS : 0,
			 __ATOMIC_RELEASE);
}

/* Draw the choice for one connection (or lookup) from the shared source. */
uint32_t ns_fault_choose(const struct ns_faults *f, int phase)
{
	uint64_t old = __atomic_load_n(&frng, __ATOMIC_RELAXED), st;
	uint32_t mask;

	do {
		st = old;
		mask = ns_faults_choose(f, phase, &st);
	} while (!__atomic_compare_exchange_n(&frng, &old, st, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
	return mask;
}

/* for D every P, first N, every N: this process's connections (lookups) per destination
 * (its table slot) and fault of the list, counted in a map made on first
 * use: 512 entries, key (slot << 5 | fault) + 1, claimed by compare-and-swap. */
#define SCHED_MAX 512u
struct sched { uint64_t key, count; };
static struct sched *sched_map;

static uint64_t sched_count(int slot, uint32_t i)
{
	struct sched *m = ns_lazy_map((void **)&sched_map, SCHED_MAX * sizeof(*m));
	uint64_t key = ((uint64_t)(uint32_t)slot << 5 | i) + 1;

	uint32_t h = (uint32_t)((key * 0x9e3779b97f4a7c15ULL) >> 55);   /* 9 bits: 0 to 511 */

	for (uint32_t k = 0; m && k < SCHED_MAX; k++) {
		struct sched *e = &m[(h + k) % SCHED_MAX];
		uint64_t cur = __atomic_load_n(&e->key, __ATOMIC_ACQUIRE), none = 0;

		if (cur == key || (!cur && (__atomic_compare_exchange_n(&e->key, &none, key, 0, __ATOMIC_ACQ_REL,
									 __ATOMIC_ACQUIRE) || none == key)))
			return __atomic_add_fetch(&e->count, 1, __ATOMIC_RELAXED);
	}
	return 0;   /* no room (or memory): not counted */
}

uint32_t ns_fault_sched(const struct ns_faults *f, int slot)
{
	uint32_t keep = ns_fault_windows(f);

	for (uint32_t i = 0; i < f->n && i < NS_FAULTS_MAX; i++) {
		const struct ns_fault *x = &f->f[i];
		uint64_t nth;

		if (!x->first && !x->every)
			continue;
		nth = slot >= 0 ? sched_count(slot, i) : 0;
		if (!nth || (x->first ? nth > x->first : nth % x->every != 0))
			keep &= ~(1u << i);
	}
	return keep;
}

/* A draw of mean 0 and standard deviation sd: the sum of four uniform
 * draws (16 bits each, from one draw of the fault source), centred and
 * scaled by sqrt(3) -- near enough to normal, and bounded at 3.46 sd, so
 * latency 200ms jitter 50ms never adds less than 27 ms. A seeded run draws
 * the same sequence. */
int64_t ns_fault_jitter(int64_t sd)
{
	uint64_t old = __atomic_load_n(&frng, __ATOMIC_RELAXED), st, x;
	int64_t s, d;

	do {
		st = old;
		x = ns_rng_next(&st);
	} while (!__atomic_compare_exchange_n(&frng, &old, st, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
	s = (int64_t)(x & 0xffff) + (int64_t)(x >> 16 & 0xffff) + (int64_t)(x >> 32 & 0xffff) + (int64_t)(x >> 48);
	d = (int64_t)((__int128)sd * (s - 2 * 65535) * 17320508 / ((__int128)65535 * 10000000));
	NS_LOG(NS_LOG_DEBUG, "latency jitter: %lld us", (long long)(d / 1000));
	return d;
}

int ns_fault_env_match(const struct ns_dest *d, struct ns_faults *out)
{
	if (scen.n && ns_scenario_match(&scen, (uint64_t)(ns_now() - scen_t0) / 1000000, d, out))
		return 1;
	for (int i = 0; i < env_n; i++) {
		if (ns_pattern_match(&env_inj[i].pat, d)) {
			*out = env_inj[i].f;
			return 1;
		}
	}
	return 0;
}

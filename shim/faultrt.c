/* faultrt.c -- runtime faults (shimctl inject): a private copy of the
 * table's records, rebuilt when the table's fault generation moves, and
 * which destination gets which; for --existing, which open connections.
 *
 * A record set with --existing reaches the connections that were open
 * before this process first saw it: the process that sees a new one (at a
 * connect, a lookup, or the send that starts an HTTP request) flags every
 * governed connection it has (NS_C_RTCHECK, one atomic or each: no call,
 * no lock), and each connection then looks for itself at its next data
 * call, on its own thread (fault.c, ns_fault_existing). */
#include "faultcfg.h"

#include <pthread.h>
#include <string.h>

#include "../policy/faultspec.h"
#include "../policy/table.h"
#include "config.h"
#include "conn.h"
#include "lock.h"
#include "outcome.h"
#include "settings.h"

struct rt {
	struct ns_section pat;
	struct ns_faults f;
	uint64_t expires_ms;
	uint32_t idx;
	uint32_t order;
	int existing;
	monotime seen;            /* --existing: when this process first saw the record */
	char dest[NS_KEY_MAX];
};

/* Guards the copy: held to rebuild it or to read one entry out, never
 * across a system call. A fork while another thread held it would leave it
 * locked in the child, hence the atfork handlers. */
static pthread_mutex_t rt_lock = PTHREAD_MUTEX_INITIALIZER;
static struct rt *rt_copy;   /* NS_FAULT_RECS of them, mapped when the table first has one */
static int rt_n;
static uint64_t rt_gen;      /* atomic: the generation the copy is of */
static uint64_t rt_once;     /* lock.h: a handler inside its own thread's set-up does without */
/* --existing: the record (by index) this process saw, and since when, kept
 * across rebuilds of the copy */
static uint32_t seen_order[NS_FAULT_RECS];
static monotime seen_at[NS_FAULT_RECS];

static void rt_prepare(void) { pthread_mutex_lock(&rt_lock); }
static void rt_parent(void) { pthread_mutex_unlock(&rt_lock); }
static void rt_child(void) { pthread_mutex_init(&rt_lock, NULL); }
static void rt_init(void)
{
	(void)ns_fork_hook(rt_prepare, rt_parent, rt_child);
}

static uint64_t mono_ms(monotime now)
{
	return (uint64_t)(now / 1000000);
}

/* Rebuild the copy. Returns 1 when it holds an --existing record this
 * process had not seen: the open connections are to look. */
static int rt_refresh(struct ns_table *t, uint64_t gen, monotime now)
{
	int n = 0, fresh = 0;

	if (!rt_copy && !ns_lazy_map((void **)&rt_copy, NS_FAULT_RECS * sizeof(*rt_copy))) {
		rt_n = 0;   /* no memory for the copy: no runtime faults here (the table keeps them) */
		__atomic_store_n(&rt_gen, gen, __ATOMIC_RELEASE);
		return 0;
	}
	for (uint32_t i = 0; i < t->flt_cap && n < (int)NS_FAULT_RECS; i++) {
		struct ns_fltview v;
		struct rt *r = &rt_copy[n];
		char why[200];

		if (ns_table_fault_read(t, i, &v) < 0 || v.state != NS_FLT_ACTIVE)
			continue;
		/* shared memory is untrusted: the record is parsed like input */
		if (ns_pattern_parse(v.dest, &r->pat) || ns_faults_parse(v.text, &r->f, why, sizeof(why)) < 0)
			continue;
		r->expires_ms = v.expires_ms;
		r->idx = i;
		r->order = v.order;
		r->existing = v.existing;
		r->seen = now;
		if (v.existing && i < NS_FAULT_RECS) {
			if (seen_order[i] != v.order || !seen_at[i]) {
				__atomic_store_n(&seen_order[i], v.order, __ATOMIC_RELAXED);
				seen_at[i] = now;
				fresh = 1;
			}
			r->seen = seen_at[i];
		}
		memcpy(r->dest, v.dest, sizeof(r->dest));
		n++;
	}
	rt_n = n;
	__atomic_store_n(&rt_gen, gen, __ATOMIC_RELEASE);
	return fresh;
}

/* Every governed connection of this process looks at the runtime faults
 * before its next data call. */
static void flag_open_connections(void)
{
	unsigned hi = __atomic_load_n(&ns_fdhi, __ATOMIC_ACQUIRE);

	for (unsigned fd = 0; fd < hi && fd < ns_fdmax; fd++) {
		struct ns_conn *c = ns_conn_of((int)fd);

		if (c)
			__atomic_fetch_or(&c->flags, NS_C_RTCHECK, __ATOMIC_RELEASE);
	}
}

/* The most specific active record for d (one with a port before one
 * without), the copy refreshed first: its index in the copy, or -1. Called
 * and returns with rt_lock held; *fresh as rt_refresh's. */
static int rt_best(const struct ns_dest *d, monotime now, int *expired, int *fresh)
{
	struct ns_table *t = ns_tbl();
	uint64_t gen;
	int best = -1, best_port = -1;

	*expired = -1;
	*fresh = 0;
	if (!t || !(gen = ns_table_fault_gen(t)))
		return -1;
	if (gen != rt_gen)
		*fresh = rt_refresh(t, gen, now);
	for (int i = 0; i < rt_n; i++) {
		if (!ns_pattern_match(&rt_copy[i].pat, d))
			continue;
		if (rt_copy[i].expires_ms && rt_copy[i].expires_ms <= mono_ms(now)) {
			*expired = i;
			continue;
		}
		if (rt_copy[i].pat.port > best_port) {
			best = i;
			best_port = rt_copy[i].pat.port;
		}
	}
	return best;
}

/* The runtime faults for d, if any. Returns the record index or -1. With
 * existing (an open connection that began at *existing), only a record
 * set with --existing that this process first saw after that, with its
 * order in *order. */
static int rt_lookup(const struct ns_dest *d, monotime now, struct ns_faults *out, const monotime *existing,
		     uint32_t *order)
{
	int best, expired, fresh, idx = -1;
	char dest[NS_KEY_MAX];

	if (!ns_tbl() || !ns_table_fault_gen(ns_tbl()))
		return -1;
	ns_once(&rt_once, rt_init);
	if (!ns_mutex_take(&rt_lock, NS_LOCK_RT))
		return -1;   /* a handler's connect inside its own thread's lookup: no runtime fault */
	best = rt_best(d, now, &expired, &fresh);
	if (best >= 0 && (!existing || (rt_copy[best].existing && rt_copy[best].seen > *existing))) {
		*out = rt_copy[best].f;
		idx = (int)rt_copy[best].idx;
		if (order)
			*order = rt_copy[best].order;
	}
	if (expired >= 0) {
		memcpy(dest, rt_copy[expired].dest, sizeof(dest));
		expired = (int)rt_copy[expired].idx;
	}
	ns_mutex_give(&rt_lock, NS_LOCK_RT);
	if (fresh)
		flag_open_connections();
	/* --for ran out: the first process to notice says so, once */
	if (expired >= 0 && ns_table_fault_expire(ns_tbl(), (uint32_t)expired))
		ns_note_event(NS_E_FAULT_CLEARED, -1, dest, "expired");
	return idx;
}

int ns_fault_list_for(const struct ns_dest *d, const struct ns_faults *policy, monotime now,
		      struct ns_faults *out, int *rt)
{
	*rt = rt_lookup(d, now, out, NULL, NULL);
	if (*rt >= 0)
		return out->n > 0;
	if (ns_fault_env_match(d, out))
		return 1;
	if (policy && policy->n) {
		*out = *policy;
		return 1;
	}
	return 0;
}

int ns_fault_rt_existing(const struct ns_dest *d, monotime start, monotime now, struct ns_faults *out,
			 uint32_t *order)
{
	int idx = rt_lookup(d, now, out, &start, order);

	return idx >= 0 && out->n > 0 ? idx : -1;
}

void ns_fault_rt_poll(void)
{
	const uint64_t *g = __atomic_load_n(&ns_fault_genp, __ATOMIC_ACQUIRE);
	struct ns_table *t = ns_tbl();
	uint64_t gen;
	int fresh = 0;

	if (!g || !t || (gen = __atomic_load_n(g, __ATOMIC_ACQUIRE)) == __atomic_load_n(&rt_gen, __ATOMIC_ACQUIRE))
		return;
	ns_once(&rt_once, rt_init);
	if (!ns_mutex_take(&rt_lock, NS_LOCK_RT))
		return;   /* (its own thread is refreshing the copy) */
	if (gen != rt_gen)
		fresh = rt_refresh(t, gen, ns_now());
	ns_mutex_give(&rt_lock, NS_LOCK_RT);
	if (fresh)
		flag_open_connections();
}

uint32_t ns_fault_rt_order_of(int idx)
{
	return idx >= 0 && idx < (int)NS_FAULT_RECS ? __atomic_load_n(&seen_order[idx], __ATOMIC_RELAXED) : 0;
}

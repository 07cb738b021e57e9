/* shadow.c -- the shadow policy (NETSHIM_SHADOW_POLICY, or shadow_policy in
 * [defaults]): a second set of breakers, judged on every attempt and
 * outcome of the live ones and never enforced, so an operator sees what a
 * candidate policy would do on today's traffic before it does anything.
 *
 * Its breakers live in a table of their own beside the live one
 * (/dev/shm/TABLE.shadow, the same format, made by the first process with a
 * shadow policy), so every process on the machine judges the same shadow
 * breakers, with the same code (policy/table.c). A connect the shadow would
 * turn away is counted there (shimctl status: shadow_would_reject) and goes
 * out as the live policy says; its outcomes are not the shadow's, as they
 * would not have happened. Its transitions are events of the live table
 * (shadow_opened, shadow_closed, with the rule). A shadow policy with
 * errors is said once and ignored: the live policy never depends on it. */
#include "shadow.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "settings.h"

static struct ns_policy *shadow;         /* atomic: the shadow policy in force, NULL = none */
static const struct ns_policy *loaded_for;   /* atomic: the live policy it was loaded for */
static int loading;                      /* atomic: a thread is loading it */
static char said[256];                   /* the last file whose errors were said */
static struct ns_table stbl;
static int stbl_state;                   /* atomic: 0 not opened, 1 open, 2 opening, -1 failed */

/* A child forked while another thread loaded the shadow or opened its
 * table does it again itself (that thread is not in the child). */
static void loading_child(void)
{
	int opening = 2;

	__atomic_store_n(&loading, 0, __ATOMIC_RELAXED);
	__atomic_compare_exchange_n(&stbl_state, &opening, 0, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
}

/* The shadow policy for the live policy p (NETSHIM_SHADOW_POLICY, else
 * p's shadow_policy), loaded once for each live policy (config.c replaces
 * that on a reload): by one thread, the others going on without the shadow
 * meanwhile. One with errors is said once and ignored. */
static const struct ns_policy *current(void)
{
	const struct ns_policy *live = __atomic_load_n(&ns_cfg_cur, __ATOMIC_ACQUIRE);
	const char *env, *path;
	struct ns_policy *s;
	char err[NS_ERRBUF], *nl;
	int zero = 0, saved = errno;

	static int atfork_set;

	if (__atomic_load_n(&loaded_for, __ATOMIC_ACQUIRE) == live)
		return __atomic_load_n(&shadow, __ATOMIC_ACQUIRE);
	if (!__atomic_exchange_n(&atfork_set, 1, __ATOMIC_RELAXED))
		(void)ns_fork_hook(NULL, NULL, loading_child);
	if (!__atomic_compare_exchange_n(&loading, &zero, 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
		return NULL;
	env = ns_getenv("NETSHIM_SHADOW_POLICY");
	path = env && *env ? env : live && live->shadow[0] ? live->shadow : NULL;
	s = path ? calloc(1, sizeof(*s)) : NULL;
	if (s && ns_policy_load(path, s, err, sizeof(err)) != 0) {
		ns_policy_free(s);
		free(s);
		s = NULL;
		if (strncmp(said, path, sizeof(said) - 1) != 0) {
			nl = strchr(err, '\n');
			if (nl)
				*nl = '\0';
			ns_log(NS_LOG_ERROR, "shadow policy ignored (the live policy is not affected): %s", err);
			ns_str_put(said, sizeof(said), 0, path);
		}
	} else if (path && !s) {
		ns_log(NS_LOG_ERROR, "shadow policy ignored: out of memory");
	}
	/* (the one before stays allocated: another thread may be reading it) */
	__atomic_store_n(&shadow, s, __ATOMIC_RELEASE);
	__atomic_store_n(&loaded_for, live, __ATOMIC_RELEASE);
	__atomic_store_n(&loading, 0, __ATOMIC_RELEASE);
	errno = saved;
	return s;
}

/* The shadow's table: opened by the first thread that needs it; the others
 * go on without the shadow for that call rather than wait. */
static int stbl_ready(void)
{
	int st = __atomic_load_n(&stbl_state, __ATOMIC_ACQUIRE), zero = 0;
	const char *base;
	char name[256], err[NS_ERRBUF];

	if (st != 0)
		return st == 1 && !ns_table_broken(&stbl);
	if (!ns_tbl_on() || !__atomic_compare_exchange_n(&stbl_state, &zero, 2, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
		return 0;
	base = strrchr(ns_breakers.path, '/');
	base = base ? base + 1 : ns_breakers.path;
	ns_str_put(name, sizeof(name), ns_str_put(name, sizeof(name), 0, base), ".shadow");
	if (ns_table_open(name, 1, ns_breakers.nslots, 1, &stbl, err, sizeof(err)) != NS_TBL_OK) {
		ns_log(NS_LOG_ERROR, "shadow policy: %s; the shadow is off", err);
		__atomic_store_n(&stbl_state, -1, __ATOMIC_RELEASE);
		return 0;
	}
	__atomic_store_n(&stbl_state, 1, __ATOMIC_RELEASE);
	return 1;
}

static const struct ns_settings *no_fallback(void)
{
	return NULL;
}

void ns_shadow_attempt(struct ns_conn *c, const struct ns_dest *d, monotime now)
{
	const struct ns_policy *p = current();
	const struct ns_settings *kept;
	struct ns_settings set;
	char key[NS_KEY_MAX];
	int slot, full, saved = errno;

	if (!p || !stbl_ready() || ns_dest_key(d, key, sizeof(key)) < 0)
		goto out;
	ns_policy_resolve(p, d, &set, NULL);
	if (set.mode == NS_MODE_BYPASS)
		goto out;
	kept = ns_settings_keep(&set, no_fallback, &full);
	if (!kept || full)
		goto out;
	slot = ns_shadow_admit(&stbl, kept, key, (uint64_t)(now / 1000000));
	if (c) {
		/* turned away by the shadow's breaker: its outcomes are not the shadow's */
		c->shadow_set = kept;
		c->shadow_slot = slot;
		__atomic_store_n(&c->shadow_gen, __atomic_load_n(&c->gen, __ATOMIC_RELAXED), __ATOMIC_RELEASE);
	}
out:
	errno = saved;
}

void ns_shadow_ref(const struct ns_conn *c, struct ns_shadow_ref *ref)
{
	ref->t = NULL;
	if (__atomic_load_n(&c->shadow_gen, __ATOMIC_ACQUIRE) != __atomic_load_n(&c->gen, __ATOMIC_RELAXED) ||
	    !c->shadow_set || c->shadow_slot < 0 || !stbl_ready())
		return;
	ref->t = &stbl;
	ref->set = c->shadow_set;
	ref->slot = c->shadow_slot;
}

/* config.c -- the policy in force, the shared breaker table, and the
 * events written into it.
 *
 * Both are loaded once, by the first call that needs them or by the
 * constructor, whichever comes first (a call from another library's
 * constructor may come before ours). A changed policy file is picked up
 * from the connect path, looked at no more than once a second. */

#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "../policy/polimage.h"
#include "conn.h"
#include "faultcfg.h"
#include "real.h"
#include "settings.h"
#include "trace.h"

uint64_t ns_rng_state;   /* per process: connect retry jitter */
int ns_trace_env;        /* NETSHIM_TRACE=1 */

/* The policy in force. A reload swaps the pointer; the old policy is kept,
 * since another thread may be resolving against it at that moment, and a
 * reload happens at most once a second. NULL: a bad policy, pass through. */
struct ns_policy *ns_cfg_cur;
int ns_cfg_disabled;
static char cfg_path[1024];            /* "" = built-in defaults, nothing to reload */
static struct { int64_t sec, nsec, size, ino; } cfg_stamp;
static int64_t cfg_checked_s;          /* atomic: the second of the last look at the file */
monotime ns_cfg_next_ns;           /* atomic: no look before then (the next second) */
static int cfg_reloading;              /* atomic: one thread reloads, the others go on */
uint64_t ns_cfg_once;
/* The fallback settings (ns_cfg_fallback) last kept. */
static const struct ns_settings *cfg_fallback = &ns_builtin_settings;   /* atomic */

uint64_t ns_tbl_once;
int ns_req_any;

/* Load the policy file into a new heap policy. Returns it, or NULL with the
 * first error line in err. */
static struct ns_policy *cfg_read(char *err, size_t len, int *nerr)
{
	struct ns_policy *p = calloc(1, sizeof(*p));
	char *nl;
	int r, mapped = 0;

	if (!p) {
		snprintf(err, len, "out of memory");
		return NULL;
	}
	/* the machine's compiled image of the file when there is one (mapped,
	 * shared), else the file parsed and its image left for the next
	 * process (policy/polimage.h) */
	r = cfg_path[0] ? ns_policy_load_shared(cfg_path, p, err, len, &mapped) : (ns_policy_builtin(p) == 0 ? 0 : -1);
	*nerr = r;
	if (r == 0) {
		if (mapped < 0)
			ns_log(NS_LOG_WARN,
			       "policy image %s: not used, the policy file read instead and its image written again",
			       err);
		ns_log(NS_LOG_DEBUG, "policy %s: %s", cfg_path[0] ? cfg_path : "(built in)",
		       mapped > 0 ? "its compiled image mapped" : "parsed");
		/* (the data path asks for a request's place only once a policy
		 * has had max_requests: one load when none has) */
		if (p->has_max_requests)
			__atomic_store_n(&ns_req_any, 1, __ATOMIC_RELAXED);
		return p;
	}
	nl = strchr(err, '\n');
	if (nl)
		*nl = '\0';
	free(p);
	return NULL;
}

static int cfg_stat(void)
{
	struct stat st;

	if (stat(cfg_path, &st) < 0)
		return -1;
	if (st.st_mtim.tv_sec == cfg_stamp.sec && st.st_mtim.tv_nsec == cfg_stamp.nsec &&
	    st.st_size == cfg_stamp.size && (int64_t)st.st_ino == cfg_stamp.ino)
		return 0;
	cfg_stamp.sec = st.st_mtim.tv_sec;
	cfg_stamp.nsec = st.st_mtim.tv_nsec;
	cfg_stamp.size = st.st_size;
	cfg_stamp.ino = (int64_t)st.st_ino;
	return 1;
}

/* What a destination gets once the process keeps NS_SETTINGS_KEPT_MAX
 * values: the settings of one that no section names (the policy's
 * [defaults] over the built-in values) for the policy in force, kept (from
 * the store's reserve) when first needed. NULL: the built-in ones. */
const struct ns_settings *ns_cfg_fallback(void)
{
	static const struct ns_policy *for_pol;   /* atomic */
	const struct ns_policy *p = __atomic_load_n(&ns_cfg_cur, __ATOMIC_ACQUIRE);
	const struct ns_settings *k = __atomic_load_n(&cfg_fallback, __ATOMIC_ACQUIRE);
	struct ns_dest none;
	struct ns_settings set;

	if (!p || __atomic_load_n(&for_pol, __ATOMIC_ACQUIRE) == p)
		return k;
	memset(&none, 0, sizeof(none));
	none.family = AF_INET;   /* 0.0.0.0 port 0, no name: only [defaults] (and a /0) match */
	ns_policy_resolve(p, &none, &set, NULL);
	k = ns_settings_intern_reserve(&set);
	if (k) {
		__atomic_store_n(&cfg_fallback, k, __ATOMIC_RELEASE);
		__atomic_store_n(&for_pol, p, __ATOMIC_RELEASE);
	}
	return k;
}

/* A shadow policy is asked for (shadow.c loads it at the next connect):
 * a bit of the word a connect tests for faults anyway (faultcfg.h), set
 * after ns_fault_config wrote the word. */
static void shadow_wanted(const struct ns_policy *p)
{
	const char *env = ns_getenv("NETSHIM_SHADOW_POLICY");

	if ((env && *env) || (p && p->shadow[0]))
		__atomic_fetch_or(&ns_fault_local, NS_FL_SHADOW, __ATOMIC_RELEASE);
	else
		__atomic_fetch_and(&ns_fault_local, ~NS_FL_SHADOW, __ATOMIC_RELEASE);
}

void ns_cfg_load_once(void)
{
	monotime t0 = ns_startup_begin();
	const char *disable = ns_getenv("NETSHIM_DISABLE");
	const char *path = ns_policy_path_env(ns_getenv("NETSHIM_POLICY"));
	struct ns_policy *p;
	char err[NS_ERRBUF];
	int nerr;

	ns_real_bind();   /* reached from a connect before our constructor ran */
	ns_log_init();
	if (ns_fdtab_failed) /* (made by the first socket, which comes before a connect's policy) */
		ns_log(NS_LOG_ERROR, "cannot reserve the fd table; passing every call through");
	ns_trace_env = ns_getenv("NETSHIM_TRACE") && strcmp(ns_getenv("NETSHIM_TRACE"), "1") == 0;
	if (disable && strcmp(disable, "1") == 0) {
		ns_cfg_disabled = 1;
		return;
	}
	if (path && strlen(path) < sizeof(cfg_path)) {
		ns_str_put(cfg_path, sizeof(cfg_path), 0, path);
		cfg_stat();
	}
	p = cfg_read(err, sizeof(err), &nerr);
	if (!p) {
		ns_log(NS_LOG_ERROR, "bad policy, passing every call through: %s%s", err,
		       nerr > 1 ? " (and more; see shimctl check)" : "");
		return;
	}
	__atomic_store_n(&ns_cfg_cur, p, __ATOMIC_RELEASE);
	ns_fault_config(p);
	shadow_wanted(p);
	ns_startup_end(NS_SU_POLICY, t0,
		       !cfg_path[0]            ? "built in"
			       : p->img_mapped ? "its image mapped"
			       : p->idx        ? "parsed, indexed"
					       : "parsed");
}

/* For the lookup faults (fault.c): the policy's faults for d, none when
 * the shim is off or d is bypassed. */
void ns_policy_faults_for(const struct ns_dest *d, struct ns_settings *set)
{
	const struct ns_policy *pol = ns_cfg_get(ns_now());

	set->fault.n = 0;
	if (!pol)
		return;
	ns_policy_resolve(pol, d, set, NULL);
	if (set->mode == NS_MODE_BYPASS)
		set->fault.n = 0;
}

/* Pick up a changed policy file: looked at no more than once a second, from
 * the connect path. A file that does not parse is logged once and the
 * policy in force stays. */
void ns_cfg_maybe_reload(monotime now)
{
	int64_t sec = now / 1000000000, seen = __atomic_load_n(&cfg_checked_s, __ATOMIC_RELAXED);
	struct ns_policy *p;
	char err[NS_ERRBUF];
	int nerr, busy = 0;

	if (!cfg_path[0]) {
		__atomic_store_n(&ns_cfg_next_ns, INT64_MAX, __ATOMIC_RELAXED);   /* built-in: nothing to reload */
		return;
	}
	__atomic_store_n(&ns_cfg_next_ns, (sec + 1) * 1000000000, __ATOMIC_RELAXED);
	if (sec == seen ||
	    !__atomic_compare_exchange_n(&cfg_checked_s, &seen, sec, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
		return;
	if (!__atomic_compare_exchange_n(&cfg_reloading, &busy, 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
		return;
	if (cfg_stat() == 1) {
		p = cfg_read(err, sizeof(err), &nerr);
		if (p) {
			__atomic_store_n(&ns_cfg_cur, p, __ATOMIC_RELEASE);
			ns_fault_config(p);
			shadow_wanted(p);
			NS_LOG(NS_LOG_WARN, "policy reloaded from %s", cfg_path);
			if (ns_tbl_on())
				ns_emit(NS_E_POLICY_RELOADED, -1, "", NULL, 0, cfg_path, 0);
		} else {
			NS_LOG(NS_LOG_ERROR, "changed policy rejected, keeping the one in force: %s", err);
			if (ns_tbl_on())
				ns_emit(NS_E_POLICY_REJECTED, -1, "", NULL, 0, err, 0);
		}
	}
	__atomic_store_n(&cfg_reloading, 0, __ATOMIC_RELEASE);
}

void ns_tbl_load_once(void)
{
	monotime t0 = ns_startup_begin();
	const char *name = ns_getenv("NETSHIM_TABLE");
	const char *slots = ns_getenv("NETSHIM_TABLE_SLOTS");
	const char *events = ns_getenv("NETSHIM_TABLE_EVENTS");
	char def[64], err[NS_ERRBUF];
	uint32_t nslots, nevents;

	if (!name || !*name) {
		ns_table_default_name(def, sizeof(def));
		name = def;
	}
	if (ns_table_size_env(slots, NS_TABLE_MAX_SLOTS, &nslots) < 0)
		ns_log(NS_LOG_ERROR, "NETSHIM_TABLE_SLOTS=%s is not a whole number from 1 to %u; a new table gets %u slots",
		       slots, NS_TABLE_MAX_SLOTS, NS_TABLE_DEFAULT_SLOTS);
	if (ns_table_size_env(events, NS_EVENTS_MAX, &nevents) < 0)
		ns_log(NS_LOG_ERROR, "NETSHIM_TABLE_EVENTS=%s is not a whole number from 1 to %u; a new table gets %u events",
		       events, NS_EVENTS_MAX, NS_EVENTS_DEFAULT);
	if (ns_table_open(name, 1, nslots, nevents, &ns_breakers, err, sizeof(err)) != NS_TBL_OK) {
		ns_log(NS_LOG_ERROR, "%s; breakers off, passing calls through", err);
		return;
	}
	if (ns_breakers.moved)
		ns_log(NS_LOG_WARN, "%s", err);
	ns_breakers_ok = 1;
	/* shimctl inject moves it: the one thing a connect checks for faults */
	__atomic_store_n(&ns_fault_genp, &ns_breakers.hdr->flt_gen, __ATOMIC_RELEASE);
	ns_startup_end(NS_SU_TABLE, t0, NULL);
}

/* The table shrank under us (see ns_table_broken): say so once and leave
 * it; the breakers are off for this process from here on. */
__attribute__((noinline, cold)) void ns_tbl_broke(void)
{
	__atomic_store_n(&ns_fault_genp, NULL, __ATOMIC_RELEASE);
	if (__atomic_exchange_n(&ns_breakers_ok, 0, __ATOMIC_ACQ_REL))
		ns_log(NS_LOG_ERROR, "%s was truncated under this process; breakers off, passing calls through",
		       ns_breakers.path);
}

/* In every fork child: its own jitter, not its parent's; a one-time
 * set-up another thread had under way begun again (lock.h); the fd
 * table's pid; then the set-ups' own hooks (ns_fork_hook). Registered at
 * start, not by the set-ups themselves: a handler's first socket, lookup,
 * fault or place must not take glibc's atfork lock, which the thread it
 * interrupted may hold in fork(). */
static void forked_child(void)
{
	pid_t pid = getpid();

	ns_once_forked();
	ns_rng_state = (uint64_t)ns_now() ^ ((uint64_t)pid << 32) ^ (uint64_t)(uintptr_t)&ns_rng_state;
	ns_own_pid = pid;
	ns_fork_run(NS_FORK_CHILD); /* the set-ups' own (lock.h: ns_fork_hook) */
}

static void forking(void)
{
	ns_fork_run(NS_FORK_PREPARE);
}

static void forked_parent(void)
{
	ns_fork_run(NS_FORK_PARENT);
}

/* At start only what makes no system call: the variables kept, libc's
 * functions bound (dlsym's lookups, some 50,000 instructions a first
 * connect would otherwise pay), the random source seeded. The fd table is
 * made by the first socket (fdtab.c), the policy and the table loaded by
 * the first call that needs them (a connect, a lookup): a process that
 * never touches the network makes no system call of the shim's, and a bad
 * policy is said at the first connect. */
__attribute__((constructor)) static void ns_init(void)
{
	const uint64_t *r = (const uint64_t *)getauxval(AT_RANDOM); /* 16 bytes from the kernel, no call */

	ns_env_keep();
	ns_real_bind();
	ns_rng_state = (uint64_t)ns_now() ^ (r ? r[0] : 0) ^ (uint64_t)(uintptr_t)&ns_rng_state;
	pthread_atfork(forking, forked_parent, forked_child);
}

int ns_shim_active(void)
{
	return ns_cfg_get(ns_now()) != NULL;
}

struct ns_table *ns_tbl(void)
{
	if (!ns_cfg_get(ns_now()))
		return NULL;   /* NETSHIM_DISABLE=1 or a bad policy: no table either */
	return ns_tbl_on() ? &ns_breakers : NULL;
}

void ns_note_event(int type, int slot, const char *key, const char *detail)
{
	if (ns_tbl_on())
		ns_emit(type, slot, key, NULL, 0, detail, 0);
}

/* core.c -- the workers behind the wrappers: configuration, connect with its
 * deadline and breaker, the data path, and descriptor bookkeeping.
 *
 * Read deadlines ride on the kernel: the shim puts min(read_timeout, the
 * program's own SO_RCVTIMEO) into SO_RCVTIMEO when the connection starts, so
 * a blocking read on a healthy connection costs no system call beyond the
 * real one. When the kernel reports EAGAIN on a blocking socket the shim
 * knows whose timeout the kernel held and answers ETIMEDOUT (ours) or EAGAIN
 * (the program's), exactly as before. */

#include "shim.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <limits.h>
#include <linux/close_range.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../policy/table.h"
#include "real.h"

/* Overshoot a total deadline may have before the kernel timeout is lowered
 * again: bounds the extra setsockopt calls to 1 per this many ns, and only
 * while the total deadline is nearer than the read timeout. */
#define TOTAL_SLACK_NS (50 * 1000000LL)

/**** configuration ****/

static uint64_t rng_state;   /* per process: connect retry jitter */
static int trace_env;        /* NETSHIM_TRACE=1 */
static int tbl_on(void);
static struct ns_policy *cfg_get(monotime now);
static void emit(int type, int slot, const char *key, const struct ns_step *st, int err, const char *detail, int trace);

/* The policy in force. A reload swaps the pointer; the old policy is kept,
 * since another thread may be resolving against it at that moment, and a
 * reload happens at most once a second. NULL: a bad policy, pass through. */
static struct ns_policy *cfg_cur;
static int cfg_disabled;
static char cfg_path[1024];            /* "" = built-in defaults, nothing to reload */
static struct { int64_t sec, nsec, size, ino; } cfg_stamp;
static int64_t cfg_checked_s;          /* atomic: the second of the last look at the file */
static monotime cfg_next_ns;           /* atomic: no look before then (the next second) */
static int cfg_reloading;              /* atomic: one thread reloads, the others go on */
static pthread_once_t cfg_once = PTHREAD_ONCE_INIT;
static int cfg_ready;                  /* atomic: cfg_load has run (pthread_once's call skipped) */
/* The fallback settings (cfg_fallback_get) last kept. */
static const struct ns_settings *cfg_fallback = &ns_builtin_settings;   /* atomic */

static struct ns_table tbl;
static int tbl_ok;
static pthread_once_t tbl_once = PTHREAD_ONCE_INIT;
static int tbl_ready;                  /* atomic: tbl_load has run */

/* This thread is inside the one-time set-up of the policy or the table.
 * connect() is async-signal-safe: a signal handler's connect may run in
 * the middle of that set-up on the same thread, where pthread_once would
 * wait for ever on itself. It sees these and passes its call through (the
 * policy's built-in defaults are not even needed: it is simply not
 * governed, as a call before the set-up began would not be). */
static __thread int cfg_loading __attribute__((tls_model("initial-exec")));
static __thread int tbl_loading __attribute__((tls_model("initial-exec")));

/* Load the policy file into a new heap policy. Returns it, or NULL with the
 * first error line in err. */
static struct ns_policy *cfg_read(char *err, size_t len, int *nerr)
{
	struct ns_policy *p = calloc(1, sizeof(*p));
	char *nl;
	int r;

	if (!p) {
		snprintf(err, len, "out of memory");
		return NULL;
	}
	r = cfg_path[0] ? ns_policy_load(cfg_path, p, err, len) : (ns_policy_builtin(p) == 0 ? 0 : -1);
	*nerr = r;
	if (r == 0)
		return p;
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
static const struct ns_settings *cfg_fallback_get(void)
{
	static const struct ns_policy *for_pol;   /* atomic */
	const struct ns_policy *p = __atomic_load_n(&cfg_cur, __ATOMIC_ACQUIRE);
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

static void cfg_load(void)
{
	const char *disable = getenv("NETSHIM_DISABLE");
	const char *path = ns_policy_path();
	struct ns_policy *p;
	char err[NS_ERRBUF];
	int nerr;

	ns_real_bind();   /* reached from a connect before our constructor ran */
	ns_log_init();
	trace_env = getenv("NETSHIM_TRACE") && strcmp(getenv("NETSHIM_TRACE"), "1") == 0;
	if (disable && strcmp(disable, "1") == 0) {
		cfg_disabled = 1;
		return;
	}
	if (path && strlen(path) < sizeof(cfg_path)) {
		snprintf(cfg_path, sizeof(cfg_path), "%s", path);
		cfg_stat();
	}
	p = cfg_read(err, sizeof(err), &nerr);
	if (!p) {
		ns_log(NS_LOG_ERROR, "bad policy, passing every call through: %s%s", err,
		       nerr > 1 ? " (and more; see shimctl check)" : "");
		return;
	}
	__atomic_store_n(&cfg_cur, p, __ATOMIC_RELEASE);
	ns_fault_config(p);
}

/* pthread_once's own call, skipped once the flag is seen set */
static void cfg_load_once(void)
{
	cfg_loading = 1;
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	cfg_load();
	__atomic_store_n(&cfg_ready, 1, __ATOMIC_RELEASE);
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	cfg_loading = 0;
}

/* 0 once the policy is loaded, -1 inside its loading on this thread */
static inline int cfg_init(void)
{
	if (unlikely(!__atomic_load_n(&cfg_ready, __ATOMIC_ACQUIRE))) {
		if (cfg_loading)
			return -1;
		pthread_once(&cfg_once, cfg_load_once);
	}
	return 0;
}

/* For the lookup faults (fault.c): the policy's faults for d, none when
 * the shim is off or d is bypassed. */
void ns_policy_faults_for(const struct ns_dest *d, struct ns_settings *set)
{
	const struct ns_policy *pol = cfg_get(ns_now());

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
static void cfg_maybe_reload(monotime now)
{
	int64_t sec = now / 1000000000, seen = __atomic_load_n(&cfg_checked_s, __ATOMIC_RELAXED);
	struct ns_policy *p;
	char err[NS_ERRBUF];
	int nerr, busy = 0;

	if (!cfg_path[0]) {
		__atomic_store_n(&cfg_next_ns, INT64_MAX, __ATOMIC_RELAXED);   /* built-in: nothing to reload */
		return;
	}
	__atomic_store_n(&cfg_next_ns, (sec + 1) * 1000000000, __ATOMIC_RELAXED);
	if (sec == seen ||
	    !__atomic_compare_exchange_n(&cfg_checked_s, &seen, sec, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
		return;
	if (!__atomic_compare_exchange_n(&cfg_reloading, &busy, 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
		return;
	if (cfg_stat() == 1) {
		p = cfg_read(err, sizeof(err), &nerr);
		if (p) {
			__atomic_store_n(&cfg_cur, p, __ATOMIC_RELEASE);
			ns_fault_config(p);
			NS_LOG(NS_LOG_WARN, "policy reloaded from %s", cfg_path);
			if (tbl_on())
				emit(NS_E_POLICY_RELOADED, -1, "", NULL, 0, cfg_path, 0);
		} else {
			NS_LOG(NS_LOG_ERROR, "changed policy rejected, keeping the one in force: %s", err);
			if (tbl_on())
				emit(NS_E_POLICY_REJECTED, -1, "", NULL, 0, err, 0);
		}
	}
	__atomic_store_n(&cfg_reloading, 0, __ATOMIC_RELEASE);
}

/* The policy in force, or NULL to pass the call through. */
static inline __attribute__((always_inline)) struct ns_policy *cfg_get(monotime now)
{
	if (unlikely(cfg_init() < 0) || cfg_disabled)
		return NULL;
	if (unlikely(now >= __atomic_load_n(&cfg_next_ns, __ATOMIC_RELAXED)))
		cfg_maybe_reload(now);   /* once a second at most: one comparison otherwise */
	return __atomic_load_n(&cfg_cur, __ATOMIC_ACQUIRE);
}

static void tbl_load(void)
{
	const char *name = getenv("NETSHIM_TABLE");
	const char *slots = getenv("NETSHIM_TABLE_SLOTS");
	const char *events = getenv("NETSHIM_TABLE_EVENTS");
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
	if (ns_table_open(name, 1, nslots, nevents, &tbl, err, sizeof(err)) != NS_TBL_OK) {
		ns_log(NS_LOG_ERROR, "%s; breakers off, passing calls through", err);
		return;
	}
	if (tbl.moved)
		ns_log(NS_LOG_WARN, "%s", err);
	tbl_ok = 1;
	/* shimctl inject moves it: the one thing a connect checks for faults */
	__atomic_store_n(&ns_fault_genp, &tbl.hdr->flt_gen, __ATOMIC_RELEASE);
}

/* The table shrank under us (see ns_table_broken): say so once and leave
 * it; the breakers are off for this process from here on. */
static __attribute__((noinline, cold)) void tbl_broke(void)
{
	__atomic_store_n(&ns_fault_genp, NULL, __ATOMIC_RELEASE);
	if (__atomic_exchange_n(&tbl_ok, 0, __ATOMIC_ACQ_REL))
		ns_log(NS_LOG_ERROR, "%s was truncated under this process; breakers off, passing calls through",
		       tbl.path);
}

static void tbl_load_once(void)
{
	tbl_loading = 1;
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	tbl_load();
	__atomic_store_n(&tbl_ready, 1, __ATOMIC_RELEASE);
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	tbl_loading = 0;
}

static inline __attribute__((always_inline)) int tbl_on(void)
{
	if (unlikely(!__atomic_load_n(&tbl_ready, __ATOMIC_ACQUIRE))) {
		if (tbl_loading)
			return 0;   /* a handler inside our own set-up: uncounted */
		pthread_once(&tbl_once, tbl_load_once);
	}
	if (unlikely(tbl_ok && ns_table_broken(&tbl)))
		tbl_broke();
	return tbl_ok;
}


static void rng_seed(void)
{
	rng_state = (uint64_t)ns_now() ^ ((uint64_t)getpid() << 32) ^ (uint64_t)(uintptr_t)&rng_state;
}

__attribute__((constructor)) static void ns_init(void)
{
	ns_real_bind();
	cfg_init();
	rng_seed();
	/* a forked child draws its own jitter, not its parent's */
	pthread_atfork(NULL, NULL, rng_seed);
}

/**** outcomes ****/

static int is_failure_errno(int e)
{
	switch (e) {
	case ECONNREFUSED: case ECONNRESET: case ETIMEDOUT: case EHOSTUNREACH:
	case ENETUNREACH: case ENETDOWN: case EHOSTDOWN: case ECONNABORTED: case EPIPE:
		return 1;
	default:
		return 0;
	}
}

/* Write one event into the shared ring: a transition, a traced failure, or
 * a process-wide happening (key may then be ""). */
static void emit(int type, int slot, const char *key, const struct ns_step *st, int err, const char *detail, int trace)
{
	struct ns_evrec ev;
	struct ns_entry e;
	int saved = errno;

	if (!tbl_ok)
		return;
	memset(&ev, 0, sizeof(ev));
	ev.type = (uint32_t)type;
	ev.pid = (uint32_t)getpid();
	ev.err = (uint32_t)err;
	snprintf(ev.dest, sizeof(ev.dest), "%s", key);
	snprintf(ev.program, sizeof(ev.program), "%s", program_invocation_short_name);
	if (detail)
		snprintf(ev.detail, sizeof(ev.detail), "%s", detail);
	if (st) {
		ev.rule = (uint32_t)st->rule;
		ev.consecutive = st->next.consec;
	}
	if (slot >= 0 && ns_table_read(&tbl, slot, (uint64_t)(ns_now() / 1000000), &e) == 0)
		ev.failures_in_window = e.failures_in_window;
	if (trace)
		ev.nframes = ns_trace_frames(ev.frames, NS_FRAMES);
	ns_table_event(&tbl, &ev, ns_wall_ms());
	errno = saved;
}

static void log_step(int slot, const char *key, const struct ns_step *st, int err, int trace, const char *what)
{
	switch (st->transition) {
	case NS_TR_OPENED:
		NS_LOG(NS_LOG_WARN, "breaker for %s opened by rule %s (%u failures in a row)%s%s",
		       key, ns_rule_name(st->rule), st->next.consec, what ? "; the last " : "", what ? what : "");
		emit(NS_E_OPENED, slot, key, st, err, what, trace);
		break;
	case NS_TR_REOPENED:
		NS_LOG(NS_LOG_WARN, "breaker for %s reopened: half-open probe failed", key);
		emit(NS_E_REOPENED, slot, key, st, err, what, trace);
		break;
	case NS_TR_CLOSED:
		NS_LOG(NS_LOG_WARN, "breaker for %s closed: probe succeeded", key);
		emit(NS_E_CLOSED, slot, key, st, 0, NULL, 0);
		break;
	}
}

/* When the exchange in progress began: its request, or the connect for
 * the first. */
static monotime exchange_start(const struct ns_conn *c)
{
	return LD(c->xstart) ? LD(c->xstart) : LD(c->start);
}

/* Count the connection's one outcome. kind is NS_OUT_*. */
static void conn_outcome(struct ns_conn *c, int kind, int err)
{
	struct ns_step st;
	char key[NS_KEY_MAX];
	uint64_t now_ms;
	uint32_t was;
	int saved = errno, trace, slot;
	const char *what = NULL;

	was = __atomic_fetch_and(&c->flags, ~(NS_C_CONNECTING | NS_C_PARSE | NS_C_SENT), __ATOMIC_RELAXED);
	if (__atomic_exchange_n(&c->outcome, 1, __ATOMIC_ACQ_REL))
		return;
	/* decided: the next send starts the next exchange */
	__atomic_fetch_or(&c->flags, NS_C_XNEXT, __ATOMIC_RELAXED);
	slot = LD(c->slot);
	if ((was & NS_C_TLSWIRE) && !(was & NS_C_HSDONE) && !(was & NS_C_CONNECTING)) {
		__atomic_fetch_or(&c->flags, NS_C_HSDONE, __ATOMIC_RELAXED);   /* the handshake: no exchange */
	} else if (!(was & NS_C_CONNECTING)) {
		/* an answer came: the connection's next exchange is a reuse */
		if (kind == NS_OUT_SUCCESS && (was & NS_C_SENT))
			__atomic_fetch_or(&c->flags, NS_C_ANSWERED, __ATOMIC_RELAXED);
		if (slot >= 0 && tbl_ok)
			ns_table_exchange(&tbl, slot);
	}
	if (kind == NS_OUT_SUCCESS && (slot < 0 || !tbl_ok))
		goto out;
	/* the key is for the log and events: a success needs it only when it
	 * moves the breaker (every exchange of a keep-alive loop comes here) */
	key[0] = '\0';
	if (kind != NS_OUT_SUCCESS || ns_log_level >= NS_LOG_INFO)
		ns_conn_key(c, key);
	/* the bank-transfer lesson: a connect that failed never reached the
	 * server (safe to retry); a failure after the request went out is an
	 * unknown outcome (never retry it blindly) */
	if (kind != NS_OUT_SUCCESS)
		what = (was & NS_C_CONNECTING) ? "connect failed (nothing sent)" :
		       !(was & NS_C_SENT) ? NULL : kind == NS_OUT_TIMEOUT ?
		       "timed out after the request was sent (outcome unknown)" :
		       "failed after the request was sent (outcome unknown)";
	if (kind != NS_OUT_SUCCESS)
		NS_LOG(NS_LOG_INFO, "%s: %s%s%s", key, kind == NS_OUT_TIMEOUT ? "deadline expired" :
		       err ? strerror(err) : "closed before the answer", what ? ": " : "", what ? what : "");
	if (slot >= 0 && tbl_ok) {
		monotime now = ns_now(), from = exchange_start(c);

		const struct ns_settings *set = ns_conn_set(c);

		now_ms = (uint64_t)(now / 1000000);
		ns_table_outcome_at(&tbl, slot, kind, err, kind == NS_OUT_SUCCESS ? (uint64_t)(now - from) / 1000 : 0,
				    now_ms, ns_wall_ms(), set, &st);
		trace = kind != NS_OUT_SUCCESS && (trace_env || set->trace);
		if (st.transition != NS_TR_NONE && !key[0])
			ns_conn_key(c, key);
		if (st.transition != NS_TR_NONE)
			log_step(slot, key, &st, err, trace, what);
		else if (trace)
			emit(NS_E_CONNECT_FAILED, slot, key, &st, err, what, 1);
	}
out:
	errno = saved;
}

void ns_conn_outcome(struct ns_conn *c, int kind, int err)
{
	conn_outcome(c, kind, err);
}

/* A reused connection ended (end of stream, or err) before any byte of the
 * answer to its request (ns_exchange_stale): the server closed it while it
 * sat idle, and the client's answer to that is a new connection, whose
 * outcome is the one that counts. The exchange is settled without an
 * outcome and counted as a stale reuse. */
static void conn_stale(struct ns_conn *c, int err)
{
	int saved = errno, slot = LD(c->slot);

	__atomic_fetch_and(&c->flags, ~(NS_C_PARSE | NS_C_SENT), __ATOMIC_RELAXED);
	if (__atomic_exchange_n(&c->outcome, 1, __ATOMIC_ACQ_REL))
		return;
	__atomic_fetch_or(&c->flags, NS_C_XNEXT, __ATOMIC_RELAXED);
	if (slot >= 0 && tbl_ok)
		ns_table_stale_reuse(&tbl, slot);
	if (unlikely(ns_log_level >= NS_LOG_INFO)) {
		char key[NS_KEY_MAX];

		ns_conn_key(c, key);
		ns_log(NS_LOG_INFO, "%s: reused connection %s before the answer: stale keep-alive, not counted",
		       key, err ? strerror(err) : "closed");
	}
	errno = saved;
}

void ns_note_event(int type, int slot, const char *key, const char *detail)
{
	if (tbl_on())
		emit(type, slot, key, NULL, 0, detail, 0);
}

int ns_shim_active(void)
{
	return cfg_get(ns_now()) != NULL;
}

struct ns_table *ns_tbl(void)
{
	if (!cfg_get(ns_now()))
		return NULL;   /* NETSHIM_DISABLE=1 or a bad policy: no table either */
	return tbl_on() ? &tbl : NULL;
}

void ns_first_byte_latency(struct ns_conn *c)
{
	if (LD(c->slot) >= 0 && tbl_ok)
		ns_table_latency(&tbl, LD(c->slot), 1, (uint64_t)(ns_now() - exchange_start(c)) / 1000);
}

void ns_conn_http(struct ns_conn *c, unsigned code, int failed)
{
	int slot = LD(c->slot);

	if (LD(c->outcome))
		return;
	__atomic_fetch_and(&c->flags, ~NS_C_PARSE, __ATOMIC_RELAXED);   /* the status decides, not the bytes */
	if (slot >= 0 && tbl_ok)
		ns_table_http(&tbl, slot, code, failed);
	__atomic_fetch_or(&c->flags, NS_C_ANSWERED, __ATOMIC_RELAXED);   /* an answer, whatever its status */
	if (failed)
		NS_LOG(NS_LOG_INFO, "exchange failed: HTTP %u", code);
	conn_outcome(c, failed ? NS_OUT_FAILURE : NS_OUT_SUCCESS, 0);
}

/* The connect completed: note how long it took, once. */
static inline __attribute__((always_inline)) void conn_connected_inline(struct ns_conn *c)
{
	uint32_t old = __atomic_fetch_and(&c->flags, ~NS_C_CONNECTING, __ATOMIC_RELAXED);

	if ((old & NS_C_CONNECTING) && LD(c->slot) >= 0 && tbl_ok)
		ns_table_latency(&tbl, LD(c->slot), 0, (uint64_t)(ns_now() - LD(c->start)) / 1000);
}

/* ...out of line, for the paths that are not a connect's own */
static __attribute__((noinline)) void conn_connected(struct ns_conn *c)
{
	conn_connected_inline(c);
}

static void conn_fail_errno(struct ns_conn *c, int e)
{
	/* a connect that failed leaves the socket free for a new attempt */
	if (__atomic_load_n(&c->flags, __ATOMIC_RELAXED) & NS_C_CONNECTING)
		__atomic_fetch_or(&c->flags, NS_C_FAILED, __ATOMIC_RELAXED);
	conn_outcome(c, e == ETIMEDOUT ? NS_OUT_TIMEOUT : NS_OUT_FAILURE, e);
}

/**** the fields the data path notices, with their flags ****/

/* Set a time field and the flag bit that says it is set: the field first,
 * so a thread that sees the bit finds the value (or a newer one). */
static void set_flagged(struct ns_conn *c, monotime *field, monotime v, uint32_t bit)
{
	__atomic_store_n(field, v, __ATOMIC_RELAXED);
	if (v)
		__atomic_fetch_or(&c->flags, bit, __ATOMIC_RELEASE);
	else
		__atomic_fetch_and(&c->flags, ~bit, __ATOMIC_RELEASE);
}

#define set_rd_wait(c, v) set_flagged((c), &(c)->rd_wait_start, (v), NS_C_WAITING)
#define set_intr(c, v) set_flagged((c), &(c)->intr_deadline, (v), NS_C_INTR)

/**** kernel timeouts ****/

static int64_t tv_to_ns(const struct timeval *tv)
{
	if (tv->tv_sec < 0 || tv->tv_usec < 0)
		return 0;
	return (int64_t)tv->tv_sec * 1000000000 + (int64_t)tv->tv_usec * 1000;
}

static struct timeval ns_to_tv(int64_t ns)
{
	struct timeval tv;

	ns = (ns + 999) / 1000;   /* round up: never fire before the deadline */
	tv.tv_sec = ns / 1000000;
	tv.tv_usec = ns % 1000000;
	if (tv.tv_sec == 0 && tv.tv_usec == 0 && ns > 0)
		tv.tv_usec = 1;
	return tv;
}

/* ...of a whole number of milliseconds: the same, with less arithmetic */
static struct timeval ms_to_tv(uint64_t ms)
{
	struct timeval tv = { .tv_sec = (time_t)(ms / 1000), .tv_usec = (suseconds_t)(ms % 1000) * 1000 };

	return tv;
}

/* Make the kernel hold the shorter of the program's timeout and want_ns
 * (the shim's, 0 = none) for direction d. On a tie the program's wins so that
 * its own timeout reports EAGAIN, as it always did. */
static void dir_sync(int fd, struct ns_conn *c, int d, int64_t want_ns, uint32_t want_src)
{
	struct ns_dir *dir = &c->dir[d];
	int64_t k = LD(dir->prog_ns);
	uint32_t src = LD(dir->prog_ns) ? NS_SRC_PROGRAM : NS_SRC_NONE;
	struct timeval tv;

	if (want_ns > 0 && (k == 0 || want_ns < k)) {
		k = want_ns;
		src = want_src;
	}
	if (k == LD(dir->kernel_ns)) {
		ST(dir->src, src);
		return;
	}
	tv = ns_to_tv(k);
	if (REAL(setsockopt)(fd, SOL_SOCKET, d == NS_IN ? SO_RCVTIMEO : SO_SNDTIMEO, &tv, sizeof(tv)) == 0) {
		ST(dir->kernel_ns, k);
		ST(dir->src, src);
	}
}

/* What the shim wants in direction d given the time left of the total budget. */
static void dir_want(const struct ns_conn *c, int d, int64_t left, int64_t *want, uint32_t *src)
{
	*want = d == NS_IN ? LD(c->read_timeout_ns) : 0;
	*src = NS_SRC_SHIM_READ;
	if (left > 0 && (*want == 0 || left < *want)) {
		*want = left;
		*src = NS_SRC_SHIM_TOTAL;
	}
}

static inline __attribute__((always_inline)) int dest_from_sa(const struct sockaddr *sa, socklen_t len, struct ns_dest *d);

/* Is fd still the socket c was made for? Asked only where the shim is
 * about to act on its own (fail a call at a deadline, inject a fault): a
 * close it could not see (a raw system call, libc's own close reached
 * through dlsym) may have freed the number, and whatever holds it now must
 * not inherit c's state. A stream socket connected to c's destination (or
 * not connected at all: reset, or still connecting, or faulted to a local
 * target) is taken as c's; anything else is not, and fd's entry is dropped.
 * Two system calls, on those paths only. errno is kept. */
static __attribute__((noinline, cold)) int conn_still(int fd, struct ns_conn *c)
{
	struct sockaddr_storage ss;
	socklen_t l = sizeof(ss), tl;
	struct ns_dest d;
	int type = 0, saved = errno, ours = 0;

	tl = sizeof(type);
	if (REAL(getsockopt)(fd, SOL_SOCKET, SO_TYPE, &type, &tl) == 0 && type == SOCK_STREAM) {
		if (getpeername(fd, (struct sockaddr *)&ss, &l) < 0)
			ours = errno == ENOTCONN;
		else
			ours = (LD(c->flags) & NS_C_FAULT) ||
			       (dest_from_sa((struct sockaddr *)&ss, l, &d) == 0 &&
				LD(c->peer_fp) == ((uint32_t)d.family << 16 | d.port) &&
				memcmp(c->peer_a, d.addr, 16) == 0);
	}
	if (!ours) {
		NS_LOG(NS_LOG_DEBUG, "fd %d is no longer the socket the shim knew (closed unseen): its state dropped", fd);
		if (ns_fd_get(fd) == (uintptr_t)c)
			ns_fd_set(fd, 0);
	}
	errno = saved;
	return ours;
}

/* Before a data call with a deadline of its own: the total budget, or the
 * rest of a read that a signal interrupted. Fails once it is spent, and keeps
 * the kernel timeout from outliving it. Returns 0, 1 when fd is no longer
 * c's socket (the call is the kernel's alone), or -1 with errno ETIMEDOUT. */
static int deadline_check(int fd, struct ns_conn *c, int d)
{
	monotime now;
	struct ns_dir *dir = &c->dir[d];
	int64_t left = 0, want;
	uint32_t src;

	if (ns_exp_kind(c)) {
		if (!conn_still(fd, c))
			return 1;
		errno = ETIMEDOUT;   /* a deadline fired in a wait: the connection is done */
		return -1;
	}
	now = ns_now();
	if (LD(c->total_deadline)) {
		left = LD(c->total_deadline) - now;
		if (left <= 0)
			goto out_expired;
	}
	if (d == NS_IN && LD(c->intr_deadline)) {
		int64_t rest = LD(c->intr_deadline) - now;

		if (rest <= 0) {
			set_intr(c, 0);
			goto out_expired;
		}
		if (left == 0 || rest < left) {
			dir_sync(fd, c, d, rest, NS_SRC_SHIM_READ);
			return 0;
		}
	}
	if (LD(c->total_deadline) && (LD(dir->kernel_ns) == 0 || left + TOTAL_SLACK_NS < LD(dir->kernel_ns))) {
		dir_want(c, d, left, &want, &src);
		dir_sync(fd, c, d, want, src);
	}
	return 0;
out_expired:
	if (!conn_still(fd, c))
		return 1;
	conn_outcome(c, NS_OUT_TIMEOUT, ETIMEDOUT);
	errno = ETIMEDOUT;
	return -1;
}

/* A blocking read interrupted by a signal is usually called again at once
 * (Python always does). The kernel would then wait a whole read_timeout
 * again, and a program with a periodic timer signal would never time out, so
 * the retry waits only for what is left of the first interrupted wait. The
 * shim cannot see when the interrupted call began without reading the clock
 * on every read, so that rest is counted from the interruption: the read
 * fails at most read_timeout after its first signal. */
static void note_interrupted(int fd, struct ns_conn *c, int e)
{
	int64_t want;
	uint32_t src;

	if (e == EINTR) {
		if (!LD(c->intr_deadline) && LD(c->dir[NS_IN].src) >= NS_SRC_SHIM_READ &&
		    !(__atomic_load_n(&c->flags, __ATOMIC_RELAXED) & NS_C_NONBLOCK))
			set_intr(c, ns_now() + LD(c->dir[NS_IN].kernel_ns));
		return;
	}
	if (LD(c->intr_deadline)) {
		set_intr(c, 0);
		dir_want(c, NS_IN, LD(c->total_deadline) ? LD(c->total_deadline) - ns_now() : 0, &want, &src);
		dir_sync(fd, c, NS_IN, want, src);
	}
}

/**** data path ****/

/* After a data call that did not simply move bytes on a settled connection:
 * count the outcome, and turn the kernel's EAGAIN into ETIMEDOUT when the
 * timeout it held was the shim's. Kept out of line so the healthy path in
 * IO() stays a handful of loads. */
#define after_io ns_after_io
__attribute__((noinline)) ssize_t ns_after_io(int fd, struct ns_conn *c, int d, ssize_t r, size_t len,
					      int flags, uint32_t gen)
{
	int e = errno;

	/* The connection ended while this call was blocked (another thread
	 * closed it) and the record may now serve another: touch nothing. */
	if (unlikely(__atomic_load_n(&c->gen, __ATOMIC_ACQUIRE) != gen))
		return r;
	if (r > 0) {
		if (LD(c->rd_wait_start)) {
			/* input: a wait for more starts afresh. Output while an
			 * event loop waits for input (another thread sent the
			 * request): the answer is due read_timeout after it. */
			set_rd_wait(c, d == NS_IN ? 0 : ns_now());
		}
		if (__atomic_load_n(&c->flags, __ATOMIC_RELAXED) & NS_C_CONNECTING)
			conn_connected(c);
		if ((LD(c->flags) & NS_C_FAULT) && !(flags & MSG_PEEK))
			ns_fault_post(c, d, r);
		if (!LD(c->outcome) && d == NS_IN && !(LD(c->flags) & (NS_C_PARSE | NS_C_TLS))) {
			/* the first byte of the answer: the exchange succeeded */
			ns_first_byte_latency(c);
			conn_outcome(c, NS_OUT_SUCCESS, 0);
		}
		if (LD(c->intr_deadline) && d == NS_IN)
			note_interrupted(fd, c, 0);
		errno = e;
		return r;
	}
	if (d == NS_IN && (e == EINTR || LD(c->intr_deadline)))
		note_interrupted(fd, c, r < 0 ? e : 0);
	if (r == 0) {
		if (d == NS_IN && len > 0 && !LD(c->outcome)) {
			/* the peer closed: cleanly if nothing was asked, before the
			 * answer if a request is out (err 0: no errno says it) */
			if (ns_exchange_stale(c))
				conn_stale(c, 0);
			else if (LD(c->flags) & NS_C_SENT)
				conn_outcome(c, NS_OUT_FAILURE, 0);
			else
				conn_outcome(c, NS_OUT_SUCCESS, 0);
		}
		errno = e;
		return 0;
	}
	if (e == EAGAIN || e == EWOULDBLOCK) {
		if (!(__atomic_load_n(&c->flags, __ATOMIC_RELAXED) & NS_C_NONBLOCK) &&
		    !(flags & MSG_DONTWAIT) && LD(c->dir[d].src) >= NS_SRC_SHIM_READ) {
			conn_outcome(c, NS_OUT_TIMEOUT, ETIMEDOUT);
			errno = ETIMEDOUT;
			return -1;
		}
	} else if (is_failure_errno(e) && !LD(c->outcome)) {
		if ((e == ECONNRESET || e == EPIPE) && ns_exchange_stale(c))
			conn_stale(c, e);
		else
			conn_fail_errno(c, e);
	}
	errno = e;
	return r;
}

struct io_ctx {
	int fd;
	int d;
	int flags;
	uint32_t gen;
	size_t len;
};

static __attribute__((noinline)) ssize_t after_io_ctx(struct ns_conn *c, ssize_t r, const struct io_ctx *x)
{
	return ns_after_io(x->fd, c, x->d, r, x->len, x->flags, x->gen);
}

/* The data path on a governed connection (the wrappers have already sent
 * every other descriptor straight to libc): a settled, healthy connection
 * costs a few loads of its record. */
#define IOX(d_, fd_, len_, fl_, buf_, cap_, call) do { \
	struct ns_conn *c_ = c; \
	uint32_t g_ = __atomic_load_n(&c_->gen, __ATOMIC_RELAXED); \
	ssize_t r_; \
	if (unlikely(LD(c_->flags) & NS_C_PRE_DIR(d_))) { \
		int k_ = deadline_check((fd_), c_, (d_)); \
		if (k_ < 0) \
			return -1; \
		if (k_ > 0) /* the number is no longer c's socket */ \
			return call; \
		if (LD(c_->expired) & NS_ATTN_FAULT) { \
			size_t allow_; \
			r_ = ns_fault_pre((fd_), c_, (d_), (fl_), (buf_), (len_), &allow_); \
			if (r_ != NS_FAULT_GO && !conn_still((fd_), c_)) \
				return call; \
			if (r_ != NS_FAULT_GO) /* counted as if the kernel said it */ \
				return (LD(c_->flags) & NS_C_TURN) ? \
					ns_exchange_io((fd_), c_, (d_), r_, (buf_), (len_), (fl_), g_) : \
					after_io((fd_), c_, (d_), r_, (len_), (fl_), g_); \
			cap_; \
		} \
		if (LD(c_->flags) & NS_C_TURN) { \
			if ((d_) == NS_OUT && (LD(c_->flags) & (NS_C_XNEXT | NS_C_NOTHTTP | NS_C_TLS)) == NS_C_XNEXT && \
			    ns_exchange_proxied(c_, (buf_), (len_)) < 0) \
				return -1; /* a proxied target whose breaker is open */ \
			r_ = call; \
			return ns_exchange_io((fd_), c_, (d_), r_, (buf_), (len_), (fl_), g_); \
		} \
	} \
	r_ = call; \
	if (likely(r_ > 0 && ((d_) == NS_OUT || LD(c_->outcome)) && !(LD(c_->flags) & NS_C_POST))) \
		return r_; \
	return after_io((fd_), c_, (d_), r_, (len_), (fl_), g_); \
} while (0)

/* The calls with no plain buffer to cap or to answer into. */
#define IO(d_, fd_, len_, fl_, call) IOX(d_, fd_, len_, fl_, NULL, (void)allow_, call)
/* The calls with (buf, n): an injected fault may cap n (bandwidth, bytes
 * left before a stall) or answer into buf (status). */
#define IOB(d_, fd_, buf, n, fl_, call) IOX(d_, fd_, n, fl_, buf, if (allow_ < (n)) (n) = allow_, call)

/* A data call as two functions: the healthy path, whose frame keeps what
 * after_io needs in memory rather than in six saved registers (so its
 * return restores one), and, out of line, everything a flag asks for
 * before the call (deadlines, faults, exchanges), the IOX above. ret name
 * params is the worker; args passes its parameters on; the rest is IOX's.
 * len only matters after the call for input (end of stream), so output
 * calls never compute it on the healthy path. */
/* A governed connection was made through the bound table: no check. */
#define BOUND(fn) (ns_real.fn)
#define NS_IOFN(ret, name, params, args, d_, fd_, len_, fl_, buf_, cap_, call) \
static __attribute__((noinline, cold)) ret name##_flagged params \
{ \
	IOX(d_, fd_, len_, fl_, buf_, cap_, call); \
} \
ret name params \
{ \
	struct io_ctx x_; \
	ssize_t r_; \
	if (unlikely(LD(c->flags) & NS_C_PRE_DIR(d_))) \
		return name##_flagged args; \
	x_.fd = (fd_); \
	x_.d = (d_); \
	x_.flags = (fl_); \
	x_.gen = __atomic_load_n(&c->gen, __ATOMIC_RELAXED); \
	x_.len = (d_) == NS_IN ? (size_t)(len_) : 0; \
	r_ = call; \
	if (likely(r_ > 0 && ((d_) == NS_OUT || LD(c->outcome)) && !(LD(c->flags) & NS_C_POST))) \
		return r_; \
	return after_io_ctx(c, r_, &x_); \
}
#define NS_IOFN_B(ret, name, params, args, d_, fd_, buf, n, fl_, call) \
	NS_IOFN(ret, name, params, args, d_, fd_, n, fl_, buf, if (allow_ < (n)) (n) = allow_, call)

/* The first buffer of a vector, when it holds the 8 bytes an HTTP method
 * needs to be told (exchange.c looks at no more). */
#define FIRST8(iov, cnt) ((iov) && (cnt) > 0 && (iov)[0].iov_len >= 8 ? (iov)[0].iov_base : NULL)

static size_t iov_len(const struct iovec *iov, int cnt)
{
	size_t n = 0;

	for (int i = 0; iov && i < cnt; i++)
		n += iov[i].iov_len;
	return n;
}

NS_IOFN_B(ssize_t, ns_recv, (int fd, void *buf, size_t n, int flags, struct ns_conn *c), (fd, buf, n, flags, c), NS_IN, fd, buf, n, flags, BOUND(recv)(fd, buf, n, flags))

NS_IOFN_B(ssize_t, ns_recvfrom, (int fd, void *buf, size_t n, int flags, struct sockaddr *sa, socklen_t *len, struct ns_conn *c), (fd, buf, n, flags, sa, len, c), NS_IN, fd, buf, n, flags, BOUND(recvfrom)(fd, buf, n, flags, sa, len))

NS_IOFN(ssize_t, ns_recvmsg, (int fd, struct msghdr *msg, int flags, struct ns_conn *c), (fd, msg, flags, c), NS_IN, fd, msg && msg->msg_iovlen ? msg->msg_iov[0].iov_len : 0, flags,
	    msg && msg->msg_iovlen ? msg->msg_iov[0].iov_base : NULL, (void)allow_, BOUND(recvmsg)(fd, msg, flags))

NS_IOFN_B(ssize_t, ns_read, (int fd, void *buf, size_t n, struct ns_conn *c), (fd, buf, n, c), NS_IN, fd, buf, n, 0, BOUND(read)(fd, buf, n))

NS_IOFN(ssize_t, ns_readv, (int fd, const struct iovec *iov, int cnt, struct ns_conn *c), (fd, iov, cnt, c), NS_IN, fd, iov && cnt > 0 ? iov[0].iov_len : 0, 0, iov && cnt > 0 ? iov[0].iov_base : NULL,
	    (void)allow_, BOUND(readv)(fd, iov, cnt))

NS_IOFN_B(ssize_t, ns_recv_chk, (int fd, void *buf, size_t n, size_t buflen, int flags, struct ns_conn *c), (fd, buf, n, buflen, flags, c), NS_IN, fd, buf, n, flags, BOUND(recv_chk)(fd, buf, n, buflen, flags))

NS_IOFN_B(ssize_t, ns_recvfrom_chk, (int fd, void *buf, size_t n, size_t buflen, int flags, struct sockaddr *sa, socklen_t *len, struct ns_conn *c), (fd, buf, n, buflen, flags, sa, len, c), NS_IN, fd, buf, n, flags, BOUND(recvfrom_chk)(fd, buf, n, buflen, flags, sa, len))

NS_IOFN_B(ssize_t, ns_read_chk, (int fd, void *buf, size_t n, size_t buflen, struct ns_conn *c), (fd, buf, n, buflen, c), NS_IN, fd, buf, n, 0, BOUND(read_chk)(fd, buf, n, buflen))

NS_IOFN(ssize_t, ns_send, (int fd, const void *buf, size_t n, int flags, struct ns_conn *c), (fd, buf, n, flags, c), NS_OUT, fd, n, flags, (void *)buf, (void)allow_, BOUND(send)(fd, buf, n, flags))

NS_IOFN(ssize_t, ns_sendto, (int fd, const void *buf, size_t n, int flags, const struct sockaddr *sa, socklen_t len, struct ns_conn *c), (fd, buf, n, flags, sa, len, c), NS_OUT, fd, n, flags, (void *)buf, (void)allow_, BOUND(sendto)(fd, buf, n, flags, sa, len))

NS_IOFN(ssize_t, ns_sendmsg, (int fd, const struct msghdr *msg, int flags, struct ns_conn *c), (fd, msg, flags, c), NS_OUT, fd, msg ? iov_len(msg->msg_iov, (int)msg->msg_iovlen) : 0, flags, FIRST8(msg ? msg->msg_iov : NULL,
	    msg ? (int)msg->msg_iovlen : 0), (void)allow_, BOUND(sendmsg)(fd, msg, flags))

NS_IOFN(ssize_t, ns_write, (int fd, const void *buf, size_t n, struct ns_conn *c), (fd, buf, n, c), NS_OUT, fd, n, 0, (void *)buf, (void)allow_, BOUND(write)(fd, buf, n))

NS_IOFN(ssize_t, ns_writev, (int fd, const struct iovec *iov, int cnt, struct ns_conn *c), (fd, iov, cnt, c), NS_OUT, fd, iov_len(iov, cnt), 0, FIRST8(iov, cnt), (void)allow_, BOUND(writev)(fd, iov, cnt))

/* The batch calls: a count of messages, not bytes, but the same rules (a
 * positive count is data moved). recvmmsg's own timeout is checked by the
 * kernel only between messages, so the read deadline is what bounds it. */
NS_IOFN(int, ns_recvmmsg, (int fd, struct mmsghdr *v, unsigned n, int flags, struct timespec *ts, struct ns_conn *c), (fd, v, n, flags, ts, c), NS_IN, fd, n, flags, NULL, (void)allow_, BOUND(recvmmsg)(fd, v, n, flags, ts))

NS_IOFN(int, ns_sendmmsg, (int fd, struct mmsghdr *v, unsigned n, int flags, struct ns_conn *c), (fd, v, n, flags, c), NS_OUT, fd, n, flags, NULL, (void)allow_, BOUND(sendmmsg)(fd, v, n, flags))

NS_IOFN(ssize_t, ns_sendfile, (int out, int in, off_t *off, size_t n, struct ns_conn *c), (out, in, off, n, c), NS_OUT, out, n, 0, NULL, (void)allow_, BOUND(sendfile)(out, in, off, n))

/* splice moves data between a pipe and a socket; the socket side decides
 * the direction. SPLICE_F_NONBLOCK is the call's MSG_DONTWAIT. */
ssize_t ns_splice(int in, loff_t *offin, int out, loff_t *offout, size_t n, unsigned flags)
{
	struct ns_conn *c = ns_conn_of(in);
	int fl = (flags & SPLICE_F_NONBLOCK) ? MSG_DONTWAIT : 0;

	if (c)
		IO(NS_IN, in, n, fl, REAL(splice)(in, offin, out, offout, n, flags));
	c = ns_conn_of(out);
	if (c)
		IO(NS_OUT, out, n, fl, REAL(splice)(in, offin, out, offout, n, flags));
	return REAL(splice)(in, offin, out, offout, n, flags);
}

/**** socket and connect ****/

int ns_socket(int domain, int type, int protocol)
{
	int fd = REAL(socket)(domain, type, protocol);
	uintptr_t tag = 0;

	if (fd < 0)
		return fd;
	if ((domain == AF_INET || domain == AF_INET6) && (type & 0xf) == SOCK_STREAM)
		tag = NS_TAG | NS_TAG_STREAM | ((type & SOCK_NONBLOCK) ? NS_TAG_NONBLOCK : 0);
	/* also clears what a close we did not see (fclose, close_range) left */
	ns_fd_tag(fd, tag);
	return fd;
}

static inline __attribute__((always_inline)) int dest_from_sa(const struct sockaddr *sa, socklen_t len, struct ns_dest *d)
{
	d->name[0] = '\0';   /* (all of it would be 280 bytes to clear on every connect) */
	memset(d->addr, 0, sizeof(d->addr));
	if (sa->sa_family == AF_INET && len >= (socklen_t)sizeof(struct sockaddr_in)) {
		const struct sockaddr_in *s4 = (const struct sockaddr_in *)sa;

		d->family = AF_INET;
		memcpy(d->addr, &s4->sin_addr, 4);
		d->port = ntohs(s4->sin_port);
		return 0;
	}
	if (sa->sa_family == AF_INET6 && len >= (socklen_t)sizeof(struct sockaddr_in6)) {
		const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)sa;

		if (IN6_IS_ADDR_V4MAPPED(&s6->sin6_addr)) {
			d->family = AF_INET;
			memcpy(d->addr, &s6->sin6_addr.s6_addr[12], 4);
		} else {
			d->family = AF_INET6;
			memcpy(d->addr, &s6->sin6_addr, 16);
		}
		d->port = ntohs(s6->sin6_port);
		return 0;
	}
	return -1;
}

/* Classify an fd we did not see created. Returns its tag, or 0 if it is not
 * an inet stream socket. */
static uintptr_t classify(int fd, int family)
{
	int type = 0, fl;
	socklen_t l = sizeof(type);

	if (family != AF_INET && family != AF_INET6)
		return 0;
	if (REAL(getsockopt)(fd, SOL_SOCKET, SO_TYPE, &type, &l) < 0 || type != SOCK_STREAM)
		return 0;
	fl = REAL(fcntl)(fd, F_GETFL);
	/* a socket we did not see created may carry timeouts: ask at connect */
	return NS_TAG | NS_TAG_STREAM | NS_TAG_TIMEO | ((fl >= 0 && (fl & O_NONBLOCK)) ? NS_TAG_NONBLOCK : 0);
}

static int64_t prog_timeout(int fd, int opt)
{
	struct timeval tv;
	socklen_t l = sizeof(tv);

	if (REAL(getsockopt)(fd, SOL_SOCKET, opt, &tv, &l) < 0)
		return 0;
	return tv_to_ns(&tv);
}

/* A fired connect deadline is told once (connect() or SO_ERROR), as the
 * kernel tells its own: 1 for the one caller that takes it. */
static int take_err_pending(struct ns_conn *c)
{
	return (__atomic_fetch_and(&c->flags, ~NS_C_ERR_PENDING, __ATOMIC_RELAXED) & NS_C_ERR_PENDING) != 0;
}

/* End a connect the shim timed out. AF_UNSPEC drops the half-open attempt,
 * so no SYN is retried and the socket may connect anew; the ECONNRESET the
 * kernel then leaves pending is read away, since the program is told
 * ETIMEDOUT and nothing else. errno is kept. */
static void drop_attempt(int fd)
{
	struct sockaddr un = { .sa_family = AF_UNSPEC };
	int saved = errno, err;
	socklen_t l = sizeof(err);

	REAL(connect)(fd, &un, sizeof(un));
	REAL(getsockopt)(fd, SOL_SOCKET, SO_ERROR, &err, &l);
	errno = saved;
}

/* A blocking connect bounded by the connect deadline, the total budget and
 * the program's own SO_SNDTIMEO, which the kernel applies to connect: the
 * shim's limit goes into SO_SNDTIMEO for the call (two setsockopt calls
 * around one connect, where a non-blocking connect and a poll loop took
 * five system calls), and the kernel's EINPROGRESS at its end becomes
 * ETIMEDOUT with the attempt dropped. ask: the program may have set its own
 * SO_SNDTIMEO before the shim saw the socket. now: the clock, read at most
 * the shim's own few microseconds ago. */
static int connect_bounded(int fd, struct ns_conn *c, const struct ns_settings *set, const struct sockaddr *sa,
			   socklen_t len, int ask, monotime now)
{
	int64_t prog = ask ? prog_timeout(fd, SO_SNDTIMEO) : 0, lim = 0, before, left;
	struct timeval tv;
	int r, e, whole = 0;   /* whole: lim is the connect timeout, in milliseconds */

	if (set->connect_timeout_ms) {
		lim = (int64_t)set->connect_timeout_ms * 1000000;
		whole = 1;
	}
	if (LD(c->total_deadline) && (lim == 0 || LD(c->total_deadline) - LD(c->start) < lim)) {
		lim = LD(c->total_deadline) - LD(c->start);
		whole = 0;
	}
	if (lim == 0)
		return REAL(connect)(fd, sa, len);
	ST(c->connect_deadline, LD(c->start) + lim);
	if (prog && prog <= lim)
		return REAL(connect)(fd, sa, len);   /* the program's own timeout ends it first */
	/* what the kernel holds now: the shim's total budget (conn_arm), or the program's */
	before = LD(c->dir[NS_OUT].src) >= NS_SRC_SHIM_READ ? LD(c->dir[NS_OUT].kernel_ns) : prog;
	left = LD(c->start) + lim - now;
	if (left <= 0) {
		errno = ETIMEDOUT;
		return -1;
	}
	tv = whole && left == lim ? ms_to_tv(set->connect_timeout_ms) : ns_to_tv(left);
	if (REAL(setsockopt)(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) < 0)
		return REAL(connect)(fd, sa, len);
	r = REAL(connect)(fd, sa, len);
	e = errno;
	if (before) {
		tv = ns_to_tv(before);
	} else {
		tv.tv_sec = 0;
		tv.tv_usec = 0;
	}
	REAL(setsockopt)(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	if (r < 0 && e == EINPROGRESS) {
		drop_attempt(fd);
		e = ETIMEDOUT;
	}
	errno = e;
	return r;
}

/* connect() again on a socket whose connect is in progress or done: how a
 * non-blocking program learns the result (0 or EISCONN once connected). */
static int connect_again(int fd, struct ns_conn *c, const struct sockaddr *sa, socklen_t len)
{
	int r, e;

	if (ns_exp_kind(c)) {
		errno = ETIMEDOUT;
		return -1;
	}
	if (unlikely(LD(c->expired) & NS_ATTN_FAULT))
		ns_fault_delay_due(fd, c, ns_now());
	r = REAL(connect)(fd, sa, len);
	e = errno;

	if (r == 0 || e == EISCONN) {
		conn_connected(c);
	} else if (is_failure_errno(e)) {
		conn_fail_errno(c, e);
	} else if ((e == EALREADY || e == EINPROGRESS) && LD(c->connect_deadline) &&
		   ns_wait_expire(c, fd, 1, 1, ns_now()) == NS_EXP_CONNECT) {
		/* a program that asks connect() itself whether it is done
		 * (lynx, hiredis) meets the connect deadline there */
		take_err_pending(c);
		e = ETIMEDOUT;
	}
	errno = e;
	return r;
}

/* The kernel's timeouts back to the program's own: the shim's end with the
 * connection (a disconnect, a failed attempt the program makes again), and
 * the next connect must find the program's values there, not ours. */
static void conn_release_kernel(int fd, struct ns_conn *c)
{
	for (int d = NS_IN; d <= NS_OUT; d++) {
		if (LD(c->dir[d].kernel_ns) != LD(c->dir[d].prog_ns))
			dir_sync(fd, c, d, 0, NS_SRC_NONE);
	}
}

/* The record of fd's connection ends without a close: the socket is a bare
 * stream socket again, to be governed anew by its next connect. */
static uintptr_t conn_detach(int fd, struct ns_conn *c)
{
	uintptr_t v = NS_TAG | NS_TAG_STREAM | NS_TAG_TIMEO |
		((__atomic_load_n(&c->flags, __ATOMIC_RELAXED) & NS_C_NONBLOCK) ? NS_TAG_NONBLOCK : 0);

	conn_release_kernel(fd, c);
	ns_fd_set(fd, v);
	return v;
}

/* Put the shim's read (and total) timeouts into the kernel, beside the
 * program's own. ask: the program may have set its own before connecting
 * (otherwise it has none and no system call is spent asking). */
static __attribute__((noinline)) void conn_arm_full(int fd, struct ns_conn *c, monotime now, int ask)
{
	int64_t want;
	uint32_t src;

	ST(c->dir[NS_IN].prog_ns, ask ? prog_timeout(fd, SO_RCVTIMEO) : 0);
	ST(c->dir[NS_IN].kernel_ns, LD(c->dir[NS_IN].prog_ns));
	dir_want(c, NS_IN, LD(c->total_deadline) ? LD(c->total_deadline) - now : 0, &want, &src);
	dir_sync(fd, c, NS_IN, want, src);
	if (LD(c->total_deadline)) {
		ST(c->dir[NS_OUT].prog_ns, ask ? prog_timeout(fd, SO_SNDTIMEO) : 0);
		ST(c->dir[NS_OUT].kernel_ns, LD(c->dir[NS_OUT].prog_ns));
		dir_want(c, NS_OUT, LD(c->total_deadline) - now, &want, &src);
		dir_sync(fd, c, NS_OUT, want, src);
	}
}

static inline __attribute__((always_inline)) void conn_arm(int fd, struct ns_conn *c, monotime now, int ask)
{
	struct timeval tv;

	if (ask || LD(c->total_deadline)) {
		conn_arm_full(fd, c, now, ask);
		return;
	}
	/* the common case: the program set no timeout of its own, no total
	 * budget; the read timeout goes in as it is */
	tv = ms_to_tv(ns_conn_set(c)->read_timeout_ms);   /* read_timeout_ns, exactly */
	ST(c->dir[NS_IN].prog_ns, 0);
	if (REAL(setsockopt)(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) == 0) {
		ST(c->dir[NS_IN].kernel_ns, LD(c->read_timeout_ns));
		ST(c->dir[NS_IN].src, NS_SRC_SHIM_READ);
	} else {
		ST(c->dir[NS_IN].kernel_ns, 0);
		ST(c->dir[NS_IN].src, NS_SRC_NONE);
	}
}

/* Ask the breaker whether a connect to key may go out: 0, or -1 when it is
 * open. *slot: the key's slot (hint, a slot remembered for it, or the one found), or -1
 * when uncounted. */
#define NS_SLOT_UNKNOWN (-101)   /* no slot remembered for the destination */
static int tbl_full_said;

static int breaker_admit(const char *key, int hint, int *slotp, const struct ns_settings *set,
			 int enforce, monotime now)
{
	struct ns_step st;
	int slot;

	*slotp = -1;
	if (!tbl_on())
		return 0;
	/* a slot keeps its key for the table's life: a remembered one is used as it is */
	slot = hint >= 0 ? hint : ns_table_find(&tbl, key, 1, (uint64_t)(now / 1000000));
	if (unlikely(ns_table_broken(&tbl))) {
		tbl_broke();
		return 0;
	}
	if (slot == NS_SLOT_FULL && !__atomic_exchange_n(&tbl_full_said, 1, __ATOMIC_RELAXED)) {
		/* once per process: the table says so too, and shimctl shows the count */
		NS_LOG(NS_LOG_WARN, "breaker table full; %s and other new destinations pass through uncounted", key);
		emit(NS_E_TABLE_FULL, -1, key, NULL, 0, "new destinations pass through uncounted", 0);
	}
	if (slot < 0)
		return 0;
	*slotp = slot;
	if (ns_table_attempt(&tbl, slot, enforce, (uint64_t)(now / 1000000), set, &st) == NS_REJECT) {
		NS_LOG(NS_LOG_DEBUG, "%s: breaker open, connect refused", key);
		return -1;
	}
	if (st.transition == NS_TR_HALF_OPENED) {
		NS_LOG(NS_LOG_INFO, "breaker for %s half-open: letting a probe through", key);
		emit(NS_E_HALF_OPEN, slot, key, &st, 0, NULL, 0);
	}
	return 0;
}

/* A fresh attempt on c: its clock, deadlines and outcome start over (the
 * total budget runs from the first attempt). */
static inline __attribute__((always_inline)) void conn_clock(struct ns_conn *c, const struct ns_settings *set, monotime now)
{
	ST(c->start, now);
	ST(c->outcome, 0);
	ST(c->xstart, 0);
	ST(c->rd_wait_start, 0);
	ST(c->connect_deadline, (LD(c->flags) & NS_C_ENFORCE) && set->connect_timeout_ms ?
		now + (int64_t)set->connect_timeout_ms * 1000000 : 0);
}

/* ...on a record others may see (a retry): its flags change bit by bit */
static void conn_begin(struct ns_conn *c, const struct ns_settings *set, monotime now)
{
	conn_clock(c, set, now);
	__atomic_fetch_and(&c->flags, ~(NS_C_WAITING | NS_C_FAILED), __ATOMIC_RELEASE);
	__atomic_fetch_or(&c->flags, NS_C_XNEXT | NS_C_CONNECTING, __ATOMIC_RELAXED);
}

/* After a failed blocking connect: wait and try again if the policy says so.
 * Only a connect that never reached the server is retried (refused,
 * unreachable, connect deadline), never past the total budget, never through
 * an open breaker. Returns 1 to try again, 0 to give up (errno untouched). */
static int retry_wait(struct ns_conn *c, const struct ns_settings *set, const char *key, unsigned attempt, int e)
{
	struct timespec ts;
	uint64_t delay;
	monotime now;
	int slot, saved = errno;

	if (attempt >= set->connect_retries ||
	    (e != ECONNREFUSED && e != ENETUNREACH && e != EHOSTUNREACH && e != ETIMEDOUT))
		return 0;
	delay = ns_retry_delay_ms(set->retry_backoff_ms, attempt, &rng_state);
	now = ns_now();
	if (LD(c->total_deadline) && now + (int64_t)delay * 1000000 + (set->connect_timeout_ms ? 0 : 1) >= LD(c->total_deadline))
		return 0;
	ts.tv_sec = (time_t)(delay / 1000);
	ts.tv_nsec = (long)(delay % 1000) * 1000000;
	if (nanosleep(&ts, NULL) < 0) {
		errno = saved;
		return 0;   /* a signal cuts the retries short: the program sees the failure */
	}
	if (breaker_admit(key, LD(c->slot), &slot, set, 1, ns_now()) < 0) {
		errno = saved;
		return 0;
	}
	if (slot >= 0)
		ns_table_add_retry(&tbl, slot);
	NS_LOG(NS_LOG_INFO, "%s: %s, retry %u of %u after %llu ms", key, strerror(e), attempt + 1,
	       set->connect_retries, (unsigned long long)delay);
	errno = saved;
	return 1;
}

/* A blocking connect with an injected delay: wait it out (a connect
 * deadline that comes first ends it as a timeout, nothing sent), then
 * connect for real. Returns 0, or -1 with errno ETIMEDOUT. */
static int delay_blocking(struct ns_conn *c)
{
	monotime until = c->fault.delay_until, cd = LD(c->connect_deadline), td = LD(c->total_deadline);
	monotime end = until;

	if (cd && cd < end)
		end = cd;
	if (td && td < end)
		end = td;
	for (;;) {
		monotime now = ns_now();
		struct timespec ts;

		if (now >= end)
			break;
		ts.tv_sec = (end - now) / 1000000000;
		ts.tv_nsec = (end - now) % 1000000000;
		REAL(ppoll)(NULL, 0, &ts, NULL);   /* a signal: wait on, the connect is still in progress */
	}
	c->fault.delay_until = 0;
	if (end < until) {
		__atomic_fetch_or(&c->flags, NS_C_FAILED, __ATOMIC_RELAXED);
		conn_outcome(c, NS_OUT_TIMEOUT, ETIMEDOUT);
		errno = ETIMEDOUT;
		return -1;
	}
	return 0;
}

/* This thread's last destination found in the destination cache. The
 * same address, port and policy, with no name remembered by the process
 * since and within a second (the name map's own answer may expire), is
 * the same destination and the same entry: a scraper's repeated connect,
 * and the fail-fast one above all, skips the name lookup and the cache's
 * hash. The entry itself is still checked unchanged when it is copied;
 * the slot and mode hold whatever became of it (a slot keeps its key; the
 * mode is the policy's). */
struct conn_memo {
	uint32_t seq;           /* odd while written: a signal handler's connect in the middle sees it */
	const void *pol;
	uint64_t gen;
	monotime until;
	uint64_t a[2];
	uint32_t fp;            /* family << 16 | port */
	struct ns_dcref ref;
};
static __thread struct conn_memo memo __attribute__((tls_model("initial-exec")));

/* 1 with *ref when d is the memo's destination (d's name not looked up). */
static inline int memo_find(const void *pol, const struct ns_dest *d, monotime now, struct ns_dcref *ref)
{
	uint32_t s = memo.seq;
	uint64_t a[2];

	/* connect is async-signal-safe: a handler's connect may run between
	 * any two of these reads, so the memo is read as a seqlock against
	 * the same thread (signal fences, no hardware ordering needed) */
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	memcpy(a, d->addr, 16);
	if ((s & 1) || memo.pol != pol || now >= memo.until || memo.a[0] != a[0] || memo.a[1] != a[1] ||
	    memo.fp != ((uint32_t)d->family << 16 | d->port) ||
	    memo.gen != __atomic_load_n(&ns_names_gen, __ATOMIC_ACQUIRE))
		return 0;
	*ref = memo.ref;
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	return memo.seq == s;
}

/* gen: ns_names_gen read before d's name was looked up, so a name
 * remembered meanwhile makes the memo miss, never hold the older answer */
static inline void memo_put(const void *pol, const struct ns_dest *d, uint64_t gen, monotime now,
			    const struct ns_dcref *ref)
{
	uint32_t s = memo.seq;

	if (s & 1)
		return;   /* a handler's connect inside our own write: leave it to us */
	memo.seq = s + 1;
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	memo.gen = gen;
	memo.pol = pol;
	memo.until = now + 1000000000;
	memcpy(memo.a, d->addr, 16);
	memo.fp = (uint32_t)d->family << 16 | d->port;
	memo.ref = *ref;
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	memo.seq = s + 2;
}

static int kept_full_said;

/* An open breaker refuses a connect on fd (v: its tag). A blocking socket
 * is told ECONNREFUSED at once, as the kernel tells it of a refusal. A
 * non-blocking one gets what a real refusal gives it, which event loops
 * rely on (Mojo, ab): EINPROGRESS, then ready with POLLERR and SO_ERROR
 * ECONNREFUSED in poll, select and epoll alike, and a connect() again
 * reports the error. The kernel makes it so: the connect goes to the
 * shim's local refusing socket (loopback; nothing reaches the destination).
 * The mark on fd sends the program's next connect(), which asks for the
 * outcome, there too, uncounted (refused_again). */
static __attribute__((noinline)) int refuse_open(int fd, uintptr_t v, int family)
{
	struct sockaddr_storage to;
	socklen_t tolen;
	int r;

	if (!(v & NS_TAG_NONBLOCK) || ns_fault_refusing_target(family, &to, &tolen) < 0) {
		errno = ECONNREFUSED;
		return -1;
	}
	r = REAL(connect)(fd, (struct sockaddr *)&to, tolen);
	if (r < 0 && errno == EINPROGRESS) {
		int e = errno;

		ns_fd_set(fd, v | NS_TAG_REFUSED);
		errno = e;
	} else if (r == 0) {
		errno = ECONNREFUSED;   /* never: nothing listens there */
		r = -1;
	}
	return r;
}

/* The connect() after refuse_open's: the kernel's answer for that attempt
 * (ECONNREFUSED, or ECONNABORTED once SO_ERROR took it), mark cleared. */
static __attribute__((noinline)) int refused_again(int fd, uintptr_t v, int family)
{
	struct sockaddr_storage to;
	socklen_t tolen;

	ns_fd_set(fd, v & ~(uintptr_t)NS_TAG_REFUSED);
	if (ns_fault_refusing_target(family, &to, &tolen) < 0) {
		errno = ECONNREFUSED;
		return -1;
	}
	return REAL(connect)(fd, (struct sockaddr *)&to, tolen);
}

/* d found by the per-thread memo (*unnamed set) has no name looked up yet:
 * look it up now, once, for the code that needs it in d */
static inline void name_needed(struct ns_dest *d, int *unnamed, monotime now)
{
	if (*unnamed) {
		ns_names_lookup(d->family, d->addr, d->name, sizeof(d->name), now);
		*unnamed = 0;
	}
}

int ns_connect(int fd, const struct sockaddr *sa, socklen_t len)
{
	const struct ns_policy *pol;
	struct ns_settings set;
	const struct ns_settings *sp = &set;   /* the settings in force: set (with its faults), or kept */
	const struct ns_settings *kept = NULL; /* their kept value (settings.c), for the record and the cache */
	struct ns_conn *c = NULL;
	struct ns_dest d;
	char key[NS_KEY_MAX];
	const char *kp = key;
	struct sockaddr_storage to;
	socklen_t tolen = 0;
	monotime now;
	uintptr_t v;
	int slot, hint, klen = 0, r, e, enforce, fr = NS_FC_NONE, saved = errno, admitted = -1, named, found = 0, full;
	struct ns_dcref ref;
	uint64_t gen;

	if (!sa || len < (socklen_t)sizeof(sa_family_t) || (unsigned)fd >= ns_fdmax)
		return REAL(connect)(fd, sa, len);
	if (sa->sa_family == AF_UNSPEC) {
		/* a disconnect ends the connection as a close would; whatever
		 * the socket connects to next meets its own breaker */
		c = ns_conn_of(fd);
		if (c) {
			saved = errno;
			conn_detach(fd, c);
			errno = saved;
		}
		return REAL(connect)(fd, sa, len);
	}
	if (sa->sa_family != AF_INET && sa->sa_family != AF_INET6)
		return REAL(connect)(fd, sa, len);
	now = ns_now();
	pol = cfg_get(now);
	if (!pol)
		return REAL(connect)(fd, sa, len);
	v = ns_fd_get(fd);
	if (v && !(v & NS_TAG)) {
		uint32_t f;

		c = (struct ns_conn *)v;
		f = __atomic_load_n(&c->flags, __ATOMIC_RELAXED);
		if ((f & NS_C_ERR_PENDING) && take_err_pending(c)) {
			/* the connect deadline fired in a wait: this connect() is
			 * where the program learns it, once, as from the kernel */
			errno = ETIMEDOUT;
			return -1;
		}
		if (!(f & NS_C_FAILED))
			return connect_again(fd, c, sa, len);
		/* a new attempt on a socket whose last one failed: a new
		 * connection, with a record of its own (the old one's
		 * reference went with the fd's entry) */
		v = conn_detach(fd, c);
		c = NULL;
	}
	if (v == 0)
		v = classify(fd, sa->sa_family);
	if (unlikely(v & NS_TAG_REFUSED))
		return refused_again(fd, v, sa->sa_family);
	if (!(v & NS_TAG_STREAM) || dest_from_sa(sa, len, &d) < 0)
		return REAL(connect)(fd, sa, len);
	hint = NS_SLOT_UNKNOWN;
	named = memo_find(pol, &d, now, &ref);
	if (!named) {
		gen = __atomic_load_n(&ns_names_gen, __ATOMIC_ACQUIRE);
		ns_names_lookup(d.family, d.addr, d.name, sizeof(d.name), now);
		found = ns_destcache_find(pol, &d, &ref) == 0;
		if (found)
			memo_put(pol, &d, gen, now, &ref);
	}
	if (named || found) {
		/* a remembered destination whose breaker needs no step (closed,
		 * or refusing as it stands) is admitted or refused straight off
		 * its slot: the fail-fast connect copies nothing */
		if (ref.slot >= 0 && ref.mode != NS_MODE_BYPASS && tbl_on())
			admitted = ns_table_attempt_quick(&tbl, ref.slot, ref.mode == NS_MODE_ENFORCE,
							  (uint64_t)(now / 1000000));
		if (admitted == NS_REJECT) {
			if (unlikely(ns_log_level >= NS_LOG_DEBUG) && ns_destcache_copy(&ref, &kept, key) == 0)
				ns_log(NS_LOG_DEBUG, "%s: breaker open, connect refused", key);
			if (unlikely(v & NS_TAG_NONBLOCK))
				return refuse_open(fd, v, sa->sa_family);
			errno = ECONNREFUSED;
			return -1;
		}
		if (ref.mode == NS_MODE_BYPASS)
			return REAL(connect)(fd, sa, len);
		hint = ref.slot;
		klen = -1;
		if (admitted == NS_ALLOW && hint >= 0 && (c = ns_conn_alloc()) != NULL) {
			/* the common connect: the key goes straight from the
			 * cache into the record, which nobody sees yet */
			if (ns_destcache_copy(&ref, &kept, c->key) == 0) {
				klen = (int)ref.klen;
				sp = kept;
				kp = c->key;
			} else {
				ns_conn_unref(c);
				c = NULL;
			}
		} else if (ns_destcache_copy(&ref, &kept, key) == 0) {
			klen = (int)ref.klen;
			sp = kept;
		}
		/* else the entry changed under us: the settings are resolved
		 * anew (the slot stays: a slot keeps its key) */
	} else {
		klen = -1;
	}
	/* found by the memo, d has no name yet: the cache's key has it, and
	 * only resolving, remembering or injecting faults needs it in d */
	if (klen < 0) {
		name_needed(&d, &named, now);
		ns_policy_resolve(pol, &d, &set, NULL);
		sp = &set;
		/* fail safe: past the kept values' limit a new destination is
		 * governed by what [defaults] says (deadlines above all), never
		 * passed through without any */
		kept = ns_settings_keep(&set, cfg_fallback_get, &full);
		klen = ns_dest_key(&d, key, sizeof(key));
		if (klen < 0)
			return REAL(connect)(fd, sa, len);
		if (unlikely(full)) {
			if (!__atomic_exchange_n(&kept_full_said, 1, __ATOMIC_RELAXED))
				ns_log(NS_LOG_ERROR, "more than %u distinct settings in this process; %s and other "
				       "new destinations get the [defaults] settings", NS_SETTINGS_KEPT_MAX, key);
			sp = kept;
		}
		if (admitted != NS_ALLOW)
			hint = NS_SLOT_UNKNOWN;   /* find (and remember) the slot below */
	}
	if (sp->mode == NS_MODE_BYPASS) {
		if (hint == NS_SLOT_UNKNOWN) {
			name_needed(&d, &named, now);
			ns_destcache_put(pol, &d, kept, key, (size_t)klen, -1);
		}
		return REAL(connect)(fd, sa, len);
	}
	enforce = sp->mode == NS_MODE_ENFORCE;

	if (admitted == NS_ALLOW && hint >= 0) {
		slot = hint;   /* admitted above */
		r = 0;
	} else {
		r = breaker_admit(key, hint, &slot, sp, enforce, now);
		/* the slow way here may have loaded the policy and mapped the
		 * table (a process's first connect): the connection's clock, and
		 * the connect latency it records, start after the shim's own
		 * set-up, with the network's part (a vDSO read, no system call) */
		now = ns_now();
	}
	if (slot != hint) {   /* (faults are chosen per connection: settings with faults are not remembered) */
		name_needed(&d, &named, now);
		ns_destcache_put(pol, &d, sp->fault.n ? NULL : kept, key, (size_t)klen, slot);
	}
	if (r < 0)
		return refuse_open(fd, v, sa->sa_family);   /* (c is NULL: only an admitted connect has one here) */
	if (!c) {
		c = ns_conn_alloc();
		if (!c) {
			NS_LOG(NS_LOG_ERROR, "out of memory for connection state; %s passes through", key);
			return REAL(connect)(fd, sa, len);
		}
		ns_conn_put_key(c, key, (size_t)klen);
	}
	__atomic_store_n(&c->set, kept, __ATOMIC_RELEASE);
	ST(c->slot, slot);
	ST(c->peer_fp, (uint32_t)d.family << 16 | d.port);
	memcpy(c->peer_a, d.addr, 16);   /* not published yet: plain stores */
	{
		/* the record is not published yet: its flags are written whole */
		uint32_t f = NS_C_XNEXT | NS_C_CONNECTING | ((v & NS_TAG_NONBLOCK) ? NS_C_NONBLOCK : 0);

		if (enforce) {
			f |= NS_C_ENFORCE;
			ST(c->read_timeout_ns, (int64_t)sp->read_timeout_ms * 1000000);
			if (sp->total_timeout_ms) {
				ST(c->total_deadline, now + (int64_t)sp->total_timeout_ms * 1000000);
				f |= NS_C_TOTAL;
			}
		}
		ST(c->flags, f);
	}
	conn_clock(c, sp, now);
	if (unlikely(ns_fault_possible())) {
		name_needed(&d, &named, now);
		fr = ns_fault_at_connect(c, &d, sp, slot, sa, len, &to, &tolen);
		if (fr == NS_FC_FAIL) {
			e = errno;
			ns_fd_publish(fd, c);
			conn_fail_errno(c, e);
			errno = e;
			return -1;
		}
		if (fr == NS_FC_TARGET && !c->fault.delay_until) {
			sa = (const struct sockaddr *)&to;   /* the kernel makes the fault real */
			len = tolen;
		}
	}
	ns_fd_publish(fd, c);   /* the fd table holds it now */
	if (unlikely(fr == NS_FC_TARGET && c->fault.delay_until)) {
		if (LD(c->flags) & NS_C_NONBLOCK) {
			sa = (const struct sockaddr *)&to;   /* the target that never answers, until the delay is up */
			len = tolen;
		} else if (delay_blocking(c) < 0) {
			return -1;
		}
	}

	if (enforce && (LD(c->read_timeout_ns) || LD(c->total_deadline))) {
		/* a non-blocking socket never waits in the kernel: its deadlines
		 * are kept in the waits, and the kernel's only if it turns blocking */
		if (LD(c->flags) & NS_C_NONBLOCK)
			__atomic_fetch_or(&c->flags, NS_C_ARM_PENDING, __ATOMIC_RELAXED);
		else
			conn_arm(fd, c, now, (v & NS_TAG_TIMEO) != 0);
	}

	if (!enforce || (LD(c->flags) & NS_C_NONBLOCK)) {
		r = REAL(connect)(fd, sa, len);
		e = errno;
	} else {
		/* a fault's delay slept since the clock was read */
		monotime t = fr == NS_FC_NONE ? now : ns_now();

		for (unsigned attempt = 0;; attempt++) {
			r = connect_bounded(fd, c, sp, sa, len, (v & NS_TAG_TIMEO) != 0, t);
			e = errno;
			if (r == 0 || !is_failure_errno(e))
				break;
			conn_fail_errno(c, e);   /* each attempt is its own connection */
			if (!retry_wait(c, sp, kp, attempt, e))
				return -1;
			t = ns_now();
			conn_begin(c, sp, t);
		}
	}
	if (r == 0)
		conn_connected_inline(c);
	else if (is_failure_errno(e))
		conn_fail_errno(c, e);
	else if (e != EINPROGRESS && e != EINTR && e != EALREADY)
		__atomic_fetch_and(&c->flags, ~NS_C_CONNECTING, __ATOMIC_RELAXED);
	errno = r == 0 ? saved : e;
	return r;
}

/**** forward proxies ****/

/* The target of a request to a forward HTTP proxy, from its request line:
 * "CONNECT host:port HTTP/1.x" or "METHOD http://host[:port]/... HTTP/1.x"
 * (the absolute form, which only proxies are sent). Returns 0 with
 * "host:port" in out (port 80 when the URI has none), or -1. */
static int proxy_target(const char *b, size_t n, char *out, size_t len)
{
	const char *sp = memchr(b, ' ', n < 16 ? n : 16), *end = b + n, *h, *e;
	int connect;
	size_t hl;

	if (!sp)
		return -1;
	connect = sp - b == 7 && memcmp(b, "CONNECT", 7) == 0;
	h = sp + 1;
	if (!connect) {
		if (end - h < 8 || strncasecmp(h, "http://", 7) != 0)
			return -1;
		h += 7;
	}
	for (e = h; e < end && *e != '/' && *e != ' ' && *e != '?' && *e != '#' && *e != '\r'; e++)
		;
	hl = (size_t)(e - h);
	if (hl == 0 || hl + 4 >= len || memchr(h, '@', hl))
		return -1;   /* (userinfo in the URI: left to the proxy's own breaker) */
	memcpy(out, h, hl);
	out[hl] = '\0';
	if (!(out[0] == '[' ? strstr(out, "]:") != NULL : strchr(out, ':') != NULL)) {
		if (connect)
			return -1;
		memcpy(out + hl, ":80", 4);
	}
	return 0;
}

/* Behind a forward proxy the connection's destination is the proxy, and
 * one dead upstream (three 502s for bad.example) would open the proxy's
 * breaker and block every host. Before a send that starts an exchange with
 * a proxy's request line, the exchange is given to the target the program
 * asked for: its breaker admits it (or refuses it: -1, errno ECONNREFUSED,
 * nothing sent, counted as rejected on the target), and the connection's
 * outcomes, key and breaker settings are the target's from this request on
 * (the deadlines in force stay the proxy connection's). The connect's own
 * outcome stayed on the proxy. Returns 0 to send. */
int ns_exchange_proxied(struct ns_conn *c, const void *buf, size_t n)
{
	char text[NS_KEY_MAX], key[NS_KEY_MAX], cur[NS_KEY_MAX];
	const struct ns_policy *pol;
	const struct ns_settings *kept;
	struct ns_settings set;
	struct ns_dest d;
	monotime now;
	int slot, klen, full, saved = errno;

	if (!buf || n < 12 || proxy_target(buf, n, text, sizeof(text)) < 0 || ns_dest_parse(text, &d) < 0)
		return 0;
	now = ns_now();
	pol = cfg_get(now);
	if (!pol)
		return 0;
	ns_policy_resolve(pol, &d, &set, NULL);
	klen = ns_dest_key(&d, key, sizeof(key));
	ns_conn_key(c, cur);
	if (set.mode == NS_MODE_BYPASS || klen < 0 || strcmp(key, cur) == 0)
		return 0;
	kept = ns_settings_keep(&set, cfg_fallback_get, &full);
	if (breaker_admit(key, NS_SLOT_UNKNOWN, &slot, kept, set.mode == NS_MODE_ENFORCE, now) < 0) {
		NS_LOG(NS_LOG_DEBUG, "%s (through %s): breaker open, request refused", key, cur);
		errno = ECONNREFUSED;
		return -1;
	}
	ns_conn_put_key(c, key, (size_t)klen);
	__atomic_store_n(&c->set, kept, __ATOMIC_RELEASE);
	ST(c->slot, slot);
	errno = saved;
	return 0;
}

/**** deadlines inside waits (used by wait.c) ****/

void ns_wait_start_clock(struct ns_conn *c, monotime now)
{
	set_rd_wait(c, now);
}

monotime ns_wait_interest_faults(struct ns_conn *c, int want_in, int want_out, monotime now)
{
	monotime d = ns_wait_deadline(c, want_in, want_out, now), t = 0, until;
	int ev;

	if (LD(c->flags) & NS_C_CONNECTING) {
		t = c->fault.delay_until;       /* the real connect starts then */
	} else if (want_in) {
		int st = ns_fault_wait(c, now, &until, &ev);

		if (st == NS_FW_READY)
			t = now;
		else if (st == NS_FW_GATED)
			t = until;
	}
	return t && (!d || t < d) ? t : d;
}

int ns_wait_expire(struct ns_conn *c, int fd, int want_in, int want_out, monotime now)
{
	uint32_t f = __atomic_load_n(&c->flags, __ATOMIC_RELAXED), kind, none = NS_EXP_NONE;
	monotime d;

	if (unlikely(LD(c->expired) & NS_ATTN_FAULT) && (f & NS_C_CONNECTING) && fd >= 0 && ns_conn_of(fd) == c)
		ns_fault_delay_due(fd, c, now);
	kind = ns_exp_kind(c);
	if (kind)
		return (int)kind;
	d = ns_wait_deadline(c, want_in, want_out, now);
	if (!d || now < d)
		return 0;
	if (LD(c->total_deadline) && now >= LD(c->total_deadline))
		kind = NS_EXP_TOTAL;
	else
		kind = (f & NS_C_CONNECTING) ? NS_EXP_CONNECT : NS_EXP_READ;
	none = __atomic_load_n(&c->expired, __ATOMIC_ACQUIRE) & ~NS_EXP_MASK;   /* keeps NS_ATTN_* */
	if (__atomic_compare_exchange_n(&c->expired, &none, none | kind, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
		__atomic_fetch_or(&c->flags, NS_C_EXPIRED, __ATOMIC_RELEASE);
		if (kind == NS_EXP_CONNECT) {
			__atomic_fetch_or(&c->flags, NS_C_FAILED | NS_C_ERR_PENDING, __ATOMIC_RELAXED);
			if (fd >= 0 && ns_conn_of(fd) == c)
				drop_attempt(fd);
		}
		conn_outcome(c, NS_OUT_TIMEOUT, ETIMEDOUT);
	}
	return (int)ns_exp_kind(c);
}

void ns_wait_ready(struct ns_conn *c, int in, int out, int err)
{
	if (in && LD(c->rd_wait_start))
		set_rd_wait(c, 0);
	/* writable without an error: the connect completed. With an error the
	 * program reads it through SO_ERROR, which counts the failure. */
	if (out && !err && (__atomic_load_n(&c->flags, __ATOMIC_RELAXED) & NS_C_CONNECTING))
		conn_connected(c);
}

/**** descriptors ****/

int ns_close(int fd)
{
	uintptr_t v = ns_fd_get(fd);

	/* a vfork child shares our memory but not our descriptors: its close
	 * must leave the parent's entry alone */
	if (v && !ns_in_vfork_child()) {
		/* the kernel drops epoll registrations with the last reference */
		if ((v & NS_TAG) || __atomic_load_n(&((struct ns_conn *)v)->fds, __ATOMIC_RELAXED) == 1)
			ns_wait_forget_fd(fd);
		ns_fd_set(fd, 0);
	}
	return REAL(close)(fd);
}

static void copy_entry(int from, int to)
{
	uintptr_t v = ns_fd_get(from);

	if ((v || ns_fd_get(to)) && !ns_in_vfork_child())
		ns_fd_set(to, v);
}

/* The shim's own descriptors in [first, last], ascending: how many. */
static int own_in(unsigned first, unsigned last, int *own, int max)
{
	int n = ns_fault_own_fds(own, max), k = 0;

	for (int i = 0; i < n; i++)
		if ((unsigned)own[i] >= first && (unsigned)own[i] <= last)
			own[k++] = own[i];
	for (int i = 1; i < k; i++)
		for (int j = i; j > 0 && own[j - 1] > own[j]; j--) {
			int x = own[j];

			own[j] = own[j - 1];
			own[j - 1] = x;
		}
	return k;
}

/* close_range over [first, last] less the shim's own descriptors (the
 * hidden sockets that make injected faults real: closefrom(3) in a daemon
 * closed the blackhole listener, and the next blackholed connect was
 * refused at once). Returns 0, or -1 with the first failure's errno. */
static int close_range_around(unsigned first, unsigned last, int flags, const int *own, int n)
{
	int r = 0, e = 0;

	for (int i = 0; i <= n; i++) {
		unsigned hi = i < n ? (unsigned)own[i] - 1 : last;

		if (i < n && (unsigned)own[i] == first) {
			first = (unsigned)own[i] + 1;
			continue;
		}
		if (first <= hi && REAL(close_range)(first, hi, flags) < 0 && !e) {
			e = errno;
			r = -1;
		}
		if (i < n)
			first = (unsigned)own[i] + 1;
	}
	if (r)
		errno = e;
	return r;
}

/* Closes the shim would otherwise not see. Each entry is dropped before the
 * real call, as in close(): once the number is free another thread may get
 * it, and its new entry must not be wiped. */
int ns_close_range(unsigned first, unsigned last, int flags)
{
	int own[8], n;

	if (!(flags & CLOSE_RANGE_CLOEXEC) && first <= last && !ns_in_vfork_child())
		ns_fd_forget_range(first, last);
	n = first <= last ? own_in(first, last, own, 8) : 0;
	if (likely(n == 0))
		return REAL(close_range)(first, last, flags);
	return close_range_around(first, last, flags, own, n);
}

void ns_closefrom(int lowfd)
{
	int own[8], n, saved = errno;

	if (lowfd >= 0 && !ns_in_vfork_child())
		ns_fd_forget_range((unsigned)lowfd, UINT_MAX);
	n = lowfd >= 0 ? own_in((unsigned)lowfd, UINT_MAX, own, 8) : 0;
	if (likely(n == 0)) {
		REAL(closefrom)(lowfd);
		return;
	}
	/* below the highest of ours by ranges; above it, libc's closefrom */
	close_range_around((unsigned)lowfd, (unsigned)own[n - 1] - 1, 0, own, n - 1);
	REAL(closefrom)(own[n - 1] + 1);
	errno = saved;
}

int ns_fclose(FILE *fp)
{
	/* fileno() of a stream without a descriptor (fmemopen) is -1 */
	int fd = fp ? fileno(fp) : -1, saved = errno;

	if (fd >= 0 && ns_fd_get(fd) && !ns_in_vfork_child())
		ns_fd_forget_range((unsigned)fd, (unsigned)fd);
	errno = saved;
	return REAL(fclose)(fp);
}

/* An accepted socket is the program's server side: never governed, and
 * whatever an unseen close left at its number goes. */
static int accepted(int r)
{
	if (r >= 0 && unlikely(ns_fd_get(r)))
		ns_fd_set(r, 0);
	return r;
}

int ns_accept(int fd, struct sockaddr *sa, socklen_t *len)
{
	return accepted(REAL(accept)(fd, sa, len));
}

int ns_accept4(int fd, struct sockaddr *sa, socklen_t *len, int flags)
{
	return accepted(REAL(accept4)(fd, sa, len, flags));
}

int ns_dup(int fd)
{
	int r = REAL(dup)(fd);

	if (r >= 0)
		copy_entry(fd, r);
	return r;
}

int ns_dup2(int fd, int fd2)
{
	int r = REAL(dup2)(fd, fd2);

	if (r >= 0 && fd != fd2) {
		int e = errno;

		copy_entry(fd, r);
		errno = e;
	}
	return r;
}

int ns_dup3(int fd, int fd2, int flags)
{
	int r = REAL(dup3)(fd, fd2, flags);

	if (r >= 0)
		copy_entry(fd, r);
	return r;
}

/* The program changed O_NONBLOCK: remember it wherever the fd's state is. */
static void note_nonblock(int fd, int on)
{
	uintptr_t v = ns_fd_get(fd);

	if (!v)
		return;
	if (v & NS_TAG) {
		uintptr_t nv = on ? (v | NS_TAG_NONBLOCK) : (v & ~(uintptr_t)NS_TAG_NONBLOCK);

		__atomic_compare_exchange_n(&ns_fdtab[fd], &v, nv, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
		return;
	}
	if (on) {
		__atomic_fetch_or(&((struct ns_conn *)v)->flags, NS_C_NONBLOCK, __ATOMIC_RELAXED);
	} else {
		struct ns_conn *c = (struct ns_conn *)v;
		uint32_t old = __atomic_fetch_and(&c->flags, ~(NS_C_NONBLOCK | NS_C_ARM_PENDING), __ATOMIC_RELAXED);

		if (old & NS_C_ARM_PENDING)
			conn_arm(fd, c, ns_now(), 1);
	}
}

int ns_fcntl(int use64, int fd, int cmd, void *arg)
{
	int r = use64 ? REAL(fcntl64)(fd, cmd, arg) : REAL(fcntl)(fd, cmd, arg);
	int e = errno;

	if (r < 0 || (unsigned)fd >= ns_fdmax)
		return r;
	if (cmd == F_SETFL)
		note_nonblock(fd, ((int)(intptr_t)arg & O_NONBLOCK) != 0);
	else if (cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC)
		copy_entry(fd, r);
	errno = e;
	return r;
}

int ns_ioctl(int fd, unsigned long req, void *arg)
{
	int r = REAL(ioctl)(fd, req, arg);
	int e = errno;

	if (r == 0 && req == FIONBIO && arg && ns_fd_get(fd))
		note_nonblock(fd, *(const int *)arg != 0);
	errno = e;
	return r;
}

static int is_timeo(int level, int name, int *d)
{
	if (level != SOL_SOCKET)
		return 0;
	/* x86_64: SO_RCVTIMEO_NEW carries the same two 64-bit fields as timeval */
	if (name == SO_RCVTIMEO_OLD || name == SO_RCVTIMEO_NEW) {
		*d = NS_IN;
		return 1;
	}
	if (name == SO_SNDTIMEO_OLD || name == SO_SNDTIMEO_NEW) {
		*d = NS_OUT;
		return 1;
	}
	return 0;
}

int ns_setsockopt(int fd, int level, int name, const void *val, socklen_t len)
{
	struct ns_conn *c = ns_conn_of(fd);
	struct ns_dir *dir;
	int64_t want = 0;
	uint32_t src = NS_SRC_SHIM_READ;
	int d, r;

	if (likely(!c)) {
		uintptr_t v;

		r = REAL(setsockopt)(fd, level, name, val, len);
		/* before the connect: remember to ask the kernel for it then */
		if (r == 0 && is_timeo(level, name, &d) && ((v = ns_fd_get(fd)) & NS_TAG_STREAM))
			__atomic_compare_exchange_n(&ns_fdtab[fd], &v, v | NS_TAG_TIMEO, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
		return r;
	}
	if (!is_timeo(level, name, &d) || !(LD(c->flags) & NS_C_ENFORCE) ||
	    !val || len < (socklen_t)sizeof(struct timeval))
		return REAL(setsockopt)(fd, level, name, val, len);
	dir = &c->dir[d];
	if (LD(dir->kernel_ns) == 0 && LD(dir->src) == NS_SRC_NONE)
		return REAL(setsockopt)(fd, level, name, val, len);   /* the shim holds nothing here */
	/* let the kernel validate the program's value first */
	r = REAL(setsockopt)(fd, level, name, val, len);
	if (r < 0)
		return r;
	ST(dir->prog_ns, tv_to_ns(val));
	ST(dir->kernel_ns, LD(dir->prog_ns));
	dir_want(c, d, LD(c->total_deadline) ? LD(c->total_deadline) - ns_now() : 0, &want, &src);
	dir_sync(fd, c, d, want, src);
	return 0;
}

int ns_getsockopt(int fd, int level, int name, void *val, socklen_t *len)
{
	struct ns_conn *c = ns_conn_of(fd);
	int d, r, e, so_error;

	if (likely(!c))
		return REAL(getsockopt)(fd, level, name, val, len);
	if (is_timeo(level, name, &d) && val && len && *len >= (socklen_t)sizeof(struct timeval) &&
	    LD(c->dir[d].src) != NS_SRC_NONE) {
		/* report the program's own value, not the one the shim put there */
		struct timeval tv = { 0, 0 };

		if (LD(c->dir[d].prog_ns)) {
			tv.tv_sec = LD(c->dir[d].prog_ns) / 1000000000;
			tv.tv_usec = (LD(c->dir[d].prog_ns) % 1000000000) / 1000;
		}
		memcpy(val, &tv, sizeof(tv));
		*len = sizeof(tv);
		return 0;
	}
	so_error = level == SOL_SOCKET && name == SO_ERROR && val && len && *len >= (socklen_t)sizeof(int);
	if (so_error) {
		uint32_t exp = ns_exp_kind(c);
		int pending = 0;

		/* a timed-out connect's error is read once, as the kernel's is;
		 * a read or total deadline stays in force on the connection */
		if (exp && (exp != NS_EXP_CONNECT || take_err_pending(c)))
			pending = ETIMEDOUT;
		/* an injected reset that is due: the pending error, read once */
		else if (unlikely(LD(c->expired) & NS_ATTN_FAULT) && ns_fault_so_error(c))
			pending = ECONNRESET;
		if (pending) {
			*(int *)val = pending;
			*len = sizeof(int);
			return 0;
		}
	}
	r = REAL(getsockopt)(fd, level, name, val, len);
	e = errno;
	if (r == 0 && so_error && !LD(c->outcome)) {
		int err = *(int *)val;

		if (err && is_failure_errno(err))
			conn_fail_errno(c, err);
	}
	errno = e;
	return r;
}

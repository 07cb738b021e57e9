/* connect.c -- socket() and connect(): a connect's destination, its
 * breaker, its deadlines and its injected faults, in that order.
 *
 * A connect is governed when it goes to an AF_INET/AF_INET6 stream socket
 * and the policy does not bypass its destination. The destination's
 * settings and its slot in the breaker table are remembered per process
 * (destcache.c) and the last one per thread (its memo, destcache.h), so the
 * common connect, and the fail-fast one above all, resolves nothing. */
#include "connect.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <time.h>

#include "config.h"
#include "connfail.h"
#include "destcache.h"
#include "fault.h"
#include "engine.h"
#include "shadow.h"
#include "multiaddr.h"
#include "names.h"
#include "outcome.h"
#include "refuse.h"
#include "real.h"
#include "settings.h"
#include "shape.h"
#include "timeo.h"
#include "wait.h"

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

/* A blocking connect bounded by the connect deadline, the total budget,
 * connect_total_timeout's end for this attempt (budget_share) and the
 * program's own SO_SNDTIMEO, which the kernel applies to connect: the
 * shim's limit goes into SO_SNDTIMEO for the call (two setsockopt calls
 * around one connect, where a non-blocking connect and a poll loop took
 * four more system calls), and the kernel's EINPROGRESS at its end becomes
 * ETIMEDOUT with the attempt dropped. ask: the program may have set its own
 * SO_SNDTIMEO before the shim saw the socket. now: the clock, read at most
 * the shim's own few microseconds ago. */
static inline __attribute__((always_inline)) int connect_bounded(int fd, struct ns_conn *c,
								 const struct ns_settings *set,
								 const struct sockaddr *sa, socklen_t len, int ask,
								 monotime now)
{
	int64_t prog = ask ? ns_prog_timeout(fd, SO_SNDTIMEO) : 0, lim = 0, before, left;
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
	if (unlikely(set->connect_total_timeout_ms)) {
		int64_t share = ns_budget_share(c, lim);

		whole &= share == lim;
		lim = share;
	}
	if (lim == 0)
		return REAL(connect)(fd, sa, len);
	ST(c->connect_deadline, LD(c->start) + lim);
	if (prog && prog <= lim)
		return REAL(connect)(fd, sa, len);   /* the program's own timeout ends it first */
	/* what the kernel holds now: the shim's total budget (ns_conn_arm), or the program's */
	before = ns_src_fires(LD(c->dir[NS_OUT].src)) ? LD(c->dir[NS_OUT].kernel_ns) : prog;
	left = LD(c->start) + lim - now;
	if (left <= 0) {
		errno = ETIMEDOUT;
		return -1;
	}
	tv = whole && left == lim ? ns_ms_to_tv(set->connect_timeout_ms) : ns_to_tv(left);
	if (REAL(setsockopt)(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) < 0)
		return REAL(connect)(fd, sa, len);
	r = REAL(connect)(fd, sa, len);
	e = errno;
	/* the program's own value back at once, whatever the outcome: a
	 * limit left in the socket would cut its blocking sends short, turn a
	 * restarted write into EINTR, and go with the socket to any program
	 * it is handed to (SCM_RIGHTS, an exec the shim does not see) */
	tv = ns_to_tv(before); /* (0: none) */
	REAL(setsockopt)(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	if (r < 0 && e == EINPROGRESS) {
		ns_drop_attempt(fd);
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
	if (unlikely(LD(c->expired) & NS_ATTN_FAULT)) {
		ns_fault_delay_due(fd, c, ns_now());
		if (LD(c->flags) & NS_C_THROTTLED)
			return ns_throttled_again(fd, c);
	}
	r = REAL(connect)(fd, sa, len);
	e = errno;

	if (r == 0 || e == EISCONN) {
		ns_conn_connected(c);
	} else if (ns_is_failure_errno(e)) {
		ns_conn_fail_errno(c, e);
	} else if ((e == EALREADY || e == EINPROGRESS) && LD(c->connect_deadline) &&
		   ns_wait_expire(c, fd, 1, 1, ns_now()) == NS_EXP_CONNECT) {
		/* a program that asks connect() itself whether it is done
		 * (lynx, hiredis) meets the connect deadline there */
		ns_take_err_pending(c);
		e = ETIMEDOUT;
	}
	errno = e;
	return r;
}

/* The record of fd's connection ends without a close: the socket is a bare
 * stream socket again, to be governed anew by its next connect. */
static uintptr_t conn_detach(int fd, struct ns_conn *c)
{
	uintptr_t v = NS_TAG | NS_TAG_STREAM | NS_TAG_TIMEO |
		((__atomic_load_n(&c->flags, __ATOMIC_RELAXED) & NS_C_NONBLOCK) ? NS_TAG_NONBLOCK : 0);

	ns_conn_release_kernel(fd, c);
	ns_fd_set(fd, v);
	return v;
}


/* ...on a record others may see (a retry): its flags change bit by bit */
static void conn_begin(struct ns_conn *c, const struct ns_settings *set, monotime now)
{
	ns_conn_clock(c, set, now);
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
	delay = ns_retry_delay_ms(set->retry_backoff_ms, attempt, &ns_rng_state);
	now = ns_now();
	if (LD(c->total_deadline) && now + (int64_t)delay * 1000000 + (set->connect_timeout_ms ? 0 : 1) >= LD(c->total_deadline))
		return 0;
	ts.tv_sec = (time_t)(delay / 1000);
	ts.tv_nsec = (long)(delay % 1000) * 1000000;
	if (nanosleep(&ts, NULL) < 0) {
		errno = saved;
		return 0;   /* a signal cuts the retries short: the program sees the failure */
	}
	if (ns_breaker_admit(key, LD(c->slot), &slot, set, 1, ns_now()) < 0) {
		errno = saved;
		return 0;
	}
	if (slot >= 0)
		ns_table_add_retry(&ns_breakers, slot);
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
		ns_conn_failed(c, NS_OUT_TIMEOUT, ETIMEDOUT);
		errno = ETIMEDOUT;
		return -1;
	}
	return 0;
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

/**** connect, step by step ****/

/* One governed connect in the making: what each step finds, for the next. */
struct attempt {
	int fd;
	const struct sockaddr *sa;      /* where the kernel connects (a fault's local target, maybe) */
	socklen_t len;
	uintptr_t v;                    /* fd's tag */
	const struct ns_policy *pol;
	monotime now;
	struct ns_dest d;
	int named;                      /* d came from the memo: its name not looked up yet */
	struct ns_dcref ref;            /* the destination cache's entry */
	int admitted;                   /* NS_ALLOW/NS_REJECT from the slot, or -1: not asked yet */
	int hint;                       /* the destination's slot when known, or NS_SLOT_UNKNOWN */
	int slot;
	int klen;                       /* the key's length, -1 while the settings are to be resolved */
	int enforce;
	const struct ns_settings *sp;   /* the settings in force: set (with its faults), or kept */
	const struct ns_settings *kept; /* their kept value (settings.c), for the record and the cache */
	struct ns_conn *c;
	const char *kp;                 /* the key: key, or the record's */
	int fr;                         /* what the injected faults made of it: NS_FC_* */
	int shape;                      /* NS_SHAPE_* (with max_connections only), or -1 */
	socklen_t tolen;
	struct sockaddr_storage to;
	struct ns_settings set;
	char key[NS_KEY_MAX];
};

/* A step's verdict: go on, pass the connect through ungoverned, or the
 * connect is done (its result returned as it stands). */
enum { STEP_ON, STEP_PASS, STEP_DONE };

/* fd already has a record: a connect in progress or done (connect() again
 * is how a non-blocking program learns the result), or a failed one the
 * program tries anew (a new connection: the record goes). */
static inline __attribute__((always_inline)) int prior_record(struct attempt *a, int *r)
{
	struct ns_conn *c = (struct ns_conn *)a->v;
	uint32_t f = __atomic_load_n(&c->flags, __ATOMIC_RELAXED);

	if ((f & NS_C_ERR_PENDING) && ns_take_err_pending(c)) {
		/* the connect deadline fired in a wait: this connect() is
		 * where the program learns it, once, as from the kernel */
		errno = ETIMEDOUT;
		*r = -1;
		return STEP_DONE;
	}
	if (unlikely(f & NS_C_THROTTLED)) {
		*r = ns_throttled_again(a->fd, c);
		return STEP_DONE;
	}
	if (!(f & NS_C_FAILED)) {
		*r = connect_again(a->fd, c, a->sa, a->len);
		return STEP_DONE;
	}
	/* the old record's reference goes with the fd's entry */
	a->v = conn_detach(a->fd, c);
	return STEP_ON;
}

/* What the steps below start from (set after the fail-fast refusal,
 * which needs none of it). */
static inline __attribute__((always_inline)) void unsettled(struct attempt *a)
{
	a->c = NULL;
	a->kp = a->key;
	a->sp = &a->set;
	a->kept = NULL;
	a->hint = NS_SLOT_UNKNOWN;
}

/* The shadow policy's breaker asked about this connect (shadow.c).
 * Returns 1 (for the connect's one test of faults and shadow). */
static __attribute__((noinline, cold)) int shadow_attempt(struct attempt *a)
{
	name_needed(&a->d, &a->named, a->now);
	ns_shadow_attempt(a->c, &a->d, a->now);
	return 1;
}

/* A connect the breaker turned away, for the history recorder and the
 * shadow policy when either is there (out of line: the fail-fast path's
 * registers stay the connect's). */
static __attribute__((noinline, cold)) void rejected_note(struct attempt *a)
{
	if (ns_hist_on((uint64_t)(a->now / 1000000)))
		ns_account_rejected(&ns_engine, &ns_breakers, a->ref.slot, (uint64_t)a->now / 1000,
				    (uint32_t)ns_own_pid);
	if (__atomic_load_n(&ns_fault_local, __ATOMIC_RELAXED) & NS_FL_SHADOW) {
		a->c = NULL;   /* (a connect turned away has no record) */
		shadow_attempt(a);
	}
}

/* The destination as this thread or this process last saw it (the memo,
 * the destination cache): its slot, its mode, its settings and key, and,
 * when its breaker needs no step, its admission straight off the slot (the
 * fail-fast connect copies nothing). */
static inline __attribute__((always_inline)) int remembered(struct attempt *a, int *r)
{
	int found = 0;

	a->named = ns_memo_find(a->pol, &a->d, a->now, &a->ref);
	if (!a->named) {
		uint64_t gen = __atomic_load_n(&ns_names_gen, __ATOMIC_ACQUIRE);

		ns_names_lookup(a->d.family, a->d.addr, a->d.name, sizeof(a->d.name), a->now);
		found = ns_destcache_find(a->pol, &a->d, &a->ref) == 0;
		if (found)
			ns_memo_put(a->pol, &a->d, gen, a->now, &a->ref);
	}
	a->klen = -1;
	if (!a->named && !found) {
		unsettled(a);
		return STEP_ON;
	}
	if (a->ref.slot >= 0 && a->ref.mode != NS_MODE_BYPASS && ns_tbl_on())
		a->admitted = ns_table_attempt_quick(&ns_breakers, a->ref.slot, a->ref.mode == NS_MODE_ENFORCE,
						     (uint64_t)(a->now / 1000000));
	if (a->admitted == NS_REJECT) {
		const struct ns_settings *kept;

		/* a recorder or a shadow policy (or a recorder that died: its
		 * lease is looked at there) */
		if (unlikely((__atomic_load_n(&ns_fault_local, __ATOMIC_RELAXED) & NS_FL_SHADOW) |
			     (__atomic_load_n(&ns_breakers.hdr->hist_until_ms, __ATOMIC_RELAXED) != 0)))
			rejected_note(a);
		if (unlikely(ns_log_level >= NS_LOG_DEBUG) && ns_destcache_copy(&a->ref, &kept, a->key) == 0)
			ns_log(NS_LOG_DEBUG, "%s: breaker open, connect refused", a->key);
		if (unlikely(a->v & NS_TAG_NONBLOCK)) {
			*r = ns_refuse_open(a->fd, a->v, a->sa->sa_family);
			return STEP_DONE;
		}
		errno = ECONNREFUSED;
		*r = -1;
		return STEP_DONE;
	}
	if (a->ref.mode == NS_MODE_BYPASS)
		return STEP_PASS;
	unsettled(a);
	a->hint = a->ref.slot;
	if (a->admitted == NS_ALLOW && a->hint >= 0 && (a->c = ns_conn_alloc()) != NULL) {
		/* the common connect: the key goes straight from the cache
		 * into the record, which nobody sees yet */
		if (ns_destcache_copy(&a->ref, &a->kept, a->c->key) == 0) {
			a->klen = (int)a->ref.klen;
			a->sp = a->kept;
			a->kp = a->c->key;
		} else {
			ns_conn_unref(a->c);
			a->c = NULL;
		}
	} else if (ns_destcache_copy(&a->ref, &a->kept, a->key) == 0) {
		a->klen = (int)a->ref.klen;
		a->sp = a->kept;
	}
	/* else the entry changed under us: the settings are resolved anew
	 * (the slot stays: a slot keeps its key) */
	return STEP_ON;
}

static int kept_full_said;

/* A destination not remembered (or changed meanwhile): its settings from
 * the policy, kept, and its key. Fail safe: past the kept values' limit a
 * new destination is governed by what [defaults] says (deadlines above
 * all), never passed through without any. */
static int resolve(struct attempt *a)
{
	int full;

	name_needed(&a->d, &a->named, a->now);
	ns_policy_resolve(a->pol, &a->d, &a->set, NULL);
	a->sp = &a->set;
	a->kept = ns_settings_keep(&a->set, ns_cfg_fallback, &full);
	a->klen = ns_dest_key(&a->d, a->key, sizeof(a->key));
	if (a->klen < 0)
		return STEP_PASS;
	if (unlikely(full)) {
		if (!__atomic_exchange_n(&kept_full_said, 1, __ATOMIC_RELAXED))
			ns_log(NS_LOG_ERROR, "more than %u distinct settings in this process; %s and other "
			       "new destinations get the [defaults] settings", NS_SETTINGS_KEPT_MAX, a->key);
		a->sp = a->kept;
	}
	if (a->admitted != NS_ALLOW)
		a->hint = NS_SLOT_UNKNOWN;   /* find (and remember) the slot below */
	return STEP_ON;
}

/* The breaker's word on a connect not admitted straight off its slot, the
 * destination remembered, and the record made. */
static inline __attribute__((always_inline)) int admit(struct attempt *a, int *r)
{
	int k = 0;

	if (a->sp->mode == NS_MODE_BYPASS) {
		if (a->hint == NS_SLOT_UNKNOWN) {
			name_needed(&a->d, &a->named, a->now);
			ns_destcache_put(a->pol, &a->d, a->kept, a->key, (size_t)a->klen, -1);
		}
		return STEP_PASS;
	}
	a->enforce = a->sp->mode == NS_MODE_ENFORCE;
	if (a->admitted == NS_ALLOW && a->hint >= 0) {
		a->slot = a->hint;
	} else {
		k = ns_breaker_admit(a->key, a->hint, &a->slot, a->sp, a->enforce, a->now);
		/* the slow way here may have loaded the policy and mapped the
		 * table (a process's first connect): the connection's clock, and
		 * the connect latency it records, start after the shim's own
		 * set-up, with the network's part (a vDSO read, no system call) */
		a->now = ns_now();
	}
	if (a->slot != a->hint) {   /* (faults are chosen per connection: settings with faults are not remembered) */
		name_needed(&a->d, &a->named, a->now);
		ns_destcache_put(a->pol, &a->d, a->sp->fault.n ? NULL : a->kept, a->key, (size_t)a->klen, a->slot);
	}
	if (k < 0) {
		*r = ns_refuse_open(a->fd, a->v, a->sa->sa_family);   /* (no record: only an admitted connect has one) */
		return STEP_DONE;
	}
	if (!a->c) {
		a->c = ns_conn_alloc();
		if (!a->c) {
			NS_LOG(NS_LOG_ERROR, "out of memory for connection state; %s passes through", a->key);
			return STEP_PASS;
		}
		ns_conn_put_key(a->c, a->key, (size_t)a->klen);
	}
	return STEP_ON;
}

/* The record filled in (nobody sees it yet: plain stores, its flags
 * written whole) and its clock started. */
static inline __attribute__((always_inline)) void record(struct attempt *a)
{
	struct ns_conn *c = a->c;
	uint32_t f = NS_C_XNEXT | NS_C_CONNECTING | ((a->v & NS_TAG_NONBLOCK) ? NS_C_NONBLOCK : 0);

	__atomic_store_n(&c->set, a->kept, __ATOMIC_RELEASE);
	ST(c->slot, a->slot);
	ST(c->peer_fp, (uint32_t)a->d.family << 16 | a->d.port);
	{
		uint64_t pa[2];

		memcpy(pa, a->d.addr, sizeof(pa));
		ST(c->peer_a[0], pa[0]); /* (a record from the pool: a thread of its last use may read it) */
		ST(c->peer_a[1], pa[1]);
	}
	if (a->enforce) {
		f |= NS_C_ENFORCE;
		ST(c->read_timeout_ns, (int64_t)a->sp->read_timeout_ms * 1000000);
		if (a->sp->total_timeout_ms) {
			ST(c->total_deadline, a->now + (int64_t)a->sp->total_timeout_ms * 1000000);
			f |= NS_C_TOTAL;
		}
	}
	ST(c->flags, f);
	ns_conn_clock(c, a->sp, a->now);
	a->fr = NS_FC_NONE;
	a->tolen = 0;
}

/* Injected faults at connect: a failure now, or a local target the kernel
 * connects to instead (which makes the fault real), maybe after a delay.
 * The record is published into the fd table here, faults or not. */
static inline __attribute__((always_inline)) int faults_and_publish(struct attempt *a, int *r)
{
	struct ns_conn *c = a->c;

	/* (a queued connect, NS_FC_TARGET already, gets no injected fault) */
	if (unlikely(ns_fault_or_shadow()) && a->fr == NS_FC_NONE &&
	    (!(__atomic_load_n(&ns_fault_local, __ATOMIC_RELAXED) & NS_FL_SHADOW) || shadow_attempt(a)) &&
	    ns_fault_possible()) {
		name_needed(&a->d, &a->named, a->now);
		a->fr = ns_fault_at_connect(c, &a->d, a->sp, a->slot, a->sa, a->len, &a->to, &a->tolen);
		if (a->fr == NS_FC_FAIL) {
			int e = errno;

			ns_fd_publish(a->fd, c);
			ns_conn_fail_errno(c, e);
			errno = e;
			*r = -1;
			return STEP_DONE;
		}
		if (a->fr == NS_FC_TARGET && !c->fault.delay_until) {
			a->sa = (const struct sockaddr *)&a->to;   /* the kernel makes the fault real */
			a->len = a->tolen;
		}
	}
	ns_fd_publish(a->fd, c);   /* the fd table holds it now */
	if (unlikely(a->fr == NS_FC_TARGET && c->fault.delay_until)) {
		if (LD(c->flags) & NS_C_NONBLOCK) {
			a->sa = (const struct sockaddr *)&a->to;   /* the target that never answers, until the delay is up */
			a->len = a->tolen;
		} else if (delay_blocking(c) < 0) {
			*r = -1;
			return STEP_DONE;
		}
	}
	return STEP_ON;
}

/* The connect itself: the kernel's timeouts armed, then the call (bounded
 * by the deadlines and retried by the policy when blocking), its outcome
 * counted. Returns connect()'s result, errno set. */
static inline __attribute__((always_inline)) int make(struct attempt *a, int saved)
{
	struct ns_conn *c = a->c;
	int ask = (a->v & NS_TAG_TIMEO) != 0, r, e;

	if (a->enforce && (LD(c->read_timeout_ns) || LD(c->total_deadline))) {
		/* a non-blocking socket never waits in the kernel: its deadlines
		 * are kept in the waits, and the kernel's only if it turns blocking */
		if (LD(c->flags) & NS_C_NONBLOCK)
			__atomic_fetch_or(&c->flags, NS_C_ARM_PENDING, __ATOMIC_RELAXED);
		else
			ns_conn_arm(a->fd, c, a->now, ask);
	}
	if (!a->enforce || (LD(c->flags) & NS_C_NONBLOCK)) {
		r = REAL(connect)(a->fd, a->sa, a->len);
		e = errno;
	} else {
		/* a fault's delay slept since the clock was read */
		monotime t = a->fr == NS_FC_NONE ? a->now : ns_now();

		for (unsigned attempt = 0;; attempt++) {
			r = connect_bounded(a->fd, c, a->sp, a->sa, a->len, ask, t);
			e = errno;
			if (r == 0 || !ns_is_failure_errno(e))
				break;
			ns_conn_fail_errno(c, e);   /* each attempt is its own connection */
			if ((unlikely(a->sp->connect_total_timeout_ms) && ns_budget_spent()) ||
			    !retry_wait(c, a->sp, a->kp, attempt, e))
				return -1;
			t = ns_now();
			conn_begin(c, a->sp, t);
		}
	}
	if (r == 0)
		ns_conn_connected_now(c);
	else if (ns_is_failure_errno(e))
		ns_conn_fail_errno(c, e);
	else if (e != EINPROGRESS && e != EINTR && e != EALREADY)
		__atomic_fetch_and(&c->flags, ~NS_C_CONNECTING, __ATOMIC_RELAXED);
	errno = r == 0 ? saved : e;
	return r;
}

/* throttle = adaptive: the destination accepts what it is sent (the
 * common case, asked here inline: nothing drawn, nothing refused) */
static inline int throttle_healthy(const struct attempt *a)
{
	const struct ns_slot *s = ns_tbl_on() ? ns_table_slot_(&ns_breakers, a->slot) : NULL;

	return !s || ns_throttle_healthy(s, a->sp);
}

/* The steps that may refuse a connect before its place: connect_total_timeout
 * spent on the name's other addresses (ETIMEDOUT), a retry beyond
 * retry_budget, a connect the adaptive throttle turns away. */
static __attribute__((noinline)) int refused_first(struct attempt *a, int *r)
{
	if (a->sp->connect_total_timeout_ms &&
	    ns_budget_enter(a->slot, &a->d, a->sp->connect_total_timeout_ms, a->now) < 0) {
		NS_LOG(NS_LOG_INFO,
		       "%s: connect_total_timeout (%llu ms) spent on its other addresses: ETIMEDOUT, nothing tried",
		       a->kp, (unsigned long long)a->sp->connect_total_timeout_ms);
		ns_table_uncall(&ns_breakers, a->slot);
		ns_conn_unref(a->c); /* (not published) */
		errno = ETIMEDOUT;
		*r = -1;
		return STEP_DONE;
	}
	if (((a->sp->retry_budget_bp | a->sp->retry_budget_min_mps) && ns_shape_retry(a->slot, a->sp, a->now) < 0) ||
	    (a->sp->throttle && !throttle_healthy(a) && ns_shape_throttle(a->slot, a->kp, a->sp, a->now))) {
		NS_LOG(NS_LOG_DEBUG, "%s: %s, refused", a->kp,
		       a->sp->throttle ? "throttled here (throttle = adaptive), or a retry beyond retry_budget"
				       : "a retry beyond retry_budget");
		ns_conn_unref(a->c); /* (not published) */
		*r = ns_refuse_open(a->fd, a->v, a->sa->sa_family);
		return STEP_DONE;
	}
	return STEP_ON;
}

/* Shaping (shape.c), after refused_first: for a destination with
 * max_connections or rate, a place and a token taken
 * before the record is filled in (a blocking connect may wait for them
 * here, before its clock starts), or a non-blocking one to be held until
 * its turn (shaped_record). One turned away is throttled: refused as an
 * open breaker refuses, counted apart, never a failure. */
static __attribute__((noinline)) int shaped(struct attempt *a, int *r)
{
	a->shape = ns_shape_connect(a->c, a->sp, a->slot, (a->v & NS_TAG_NONBLOCK) != 0, a->now);
	if (a->shape == NS_SHAPE_REFUSE) {
		ns_shape_throttled(a->slot, a->kp, a->sp);
		ns_conn_unref(a->c);   /* (not published) */
		*r = ns_refuse_open(a->fd, a->v, a->sa->sa_family);
		return STEP_DONE;
	}
	if (a->shape == NS_SHAPE_WAITED)
		a->now = ns_now();   /* the wait is not the connection's time */
	return STEP_ON;
}

/* ...and the record filled in (not published: plain stores): it holds its
 * place, or (shaped_queued) it is held at the local target that never
 * answers, its deadlines to start with its turn. */
static __attribute__((noinline, cold)) int shaped_queued(struct attempt *a, int *r)
{
	struct ns_conn *c = a->c;

	monotime look = LD(c->pace_until) ? LD(c->pace_until) : a->now + NS_SHAPE_TICK_NS;

	if (ns_fault_hold_connect(c, a->sa, a->len, look, &a->to, &a->tolen) < 0) {
		ns_shape_throttled(a->slot, a->kp, a->sp);   /* no local target to hold it at */
		ns_conn_unref(c);
		*r = ns_refuse_open(a->fd, a->v, a->sa->sa_family);
		return STEP_DONE;
	}
	ST(c->connect_deadline, 0);
	ST(c->total_deadline, 0);
	/* (a place taken while a token is awaited is held from now) */
	ST(c->flags, (LD(c->flags) & ~NS_C_TOTAL) | NS_C_QUEUED | NS_C_FAULT | (LD(c->place) >= 0 ? NS_C_PLACE : 0));
	a->fr = NS_FC_TARGET;
	return STEP_ON;
}

static inline __attribute__((always_inline)) int shaped_record(struct attempt *a, int *r)
{
	if (unlikely(a->shape == NS_SHAPE_QUEUED))
		return shaped_queued(a, r);
	/* (NS_C_PLACE only for a place held: a connection under rate alone
	 * has no place to give up, and its answers' ends are not followed) */
	ST(a->c->flags,
	   LD(a->c->flags) | (LD(a->c->place) >= 0 ? NS_C_PLACE : 0) |
		   (a->sp->rate_interval_us && LD(a->c->tok_tat) ? NS_C_TOKEN : 0));
	return STEP_ON;
}

/* The record filled in, under the shaping keys or a name's: its place, and
 * connect_total_timeout's end as its connect deadline when that comes
 * first (the waits keep a non-blocking connect's; connect_bounded a
 * blocking one's). */

static inline __attribute__((always_inline)) int after_record(struct attempt *a, int *r)
{
	if (unlikely(a->sp->connect_total_timeout_ms))
		ns_budget_deadline(a->c);
	return a->shape >= 0 ? shaped_record(a, r) : STEP_ON;
}

/* What is not governed passes through: no address, a descriptor past the
 * table, a family other than inet, no policy (NETSHIM_DISABLE=1, a bad
 * one). A disconnect (AF_UNSPEC) ends the connection as a close would;
 * whatever the socket connects to next meets its own breaker. */
static inline __attribute__((always_inline)) int governed_call(int fd, const struct sockaddr *sa, socklen_t len)
{
	struct ns_conn *c;

	/* (a socket the wrappers never saw made, inherited: the table made now) */
	if (!sa || len < (socklen_t)sizeof(sa_family_t) || ((unsigned)fd >= ns_fdmax && ns_fd_beyond(fd, 1)))
		return 0;
	if (sa->sa_family == AF_UNSPEC) {
		c = ns_conn_of(fd);
		if (c) {
			int saved = errno;

			conn_detach(fd, c);
			errno = saved;
		}
		return 0;
	}
	return sa->sa_family == AF_INET || sa->sa_family == AF_INET6;
}

int ns_connect(int fd, const struct sockaddr *sa, socklen_t len)
{
	struct attempt a;
	int r = -1, saved = errno, k;

	if (!governed_call(fd, sa, len))
		return REAL(connect)(fd, sa, len);
	a.now = ns_now();
	a.pol = ns_cfg_get(a.now);
	if (!a.pol)
		return REAL(connect)(fd, sa, len);
	a.fd = fd;
	a.sa = sa;
	a.len = len;
	a.v = ns_fd_get(fd);
	if (a.v && !(a.v & NS_TAG) && prior_record(&a, &r) == STEP_DONE)
		return r;
	if (a.v == 0)
		a.v = classify(fd, sa->sa_family);
	if (unlikely(a.v & NS_TAG_REFUSED))
		return ns_refused_again(fd, a.v, sa->sa_family);
	if (!(a.v & NS_TAG_STREAM) || ns_dest_from_sa(sa, len, &a.d) < 0)
		return REAL(connect)(fd, sa, len);
	a.admitted = -1;
	k = remembered(&a, &r);
	/* found by the memo, d has no name yet: the cache's key has it, and
	 * only resolving, remembering or injecting faults needs it in d */
	if (k == STEP_ON && a.klen < 0)
		k = resolve(&a);
	if (k == STEP_ON)
		k = admit(&a, &r);
	if (k == STEP_PASS)
		return REAL(connect)(fd, sa, len);
	if (k == STEP_DONE)
		return r;
	if (unlikely(a.sp->shaping)) { /* (or the keys of a name's addresses) */
		a.shape = -1;
		if (a.enforce && a.slot >= 0) {
			/* connect_total_timeout, retry_budget, throttle: one test
			 * for them all; then max_connections' place, rate's token
			 * (else a.shape stays -1: no place, no token) */
			if (unlikely(a.sp->shaping_first) && refused_first(&a, &r) == STEP_DONE)
				return r;
			/* (a place free, max_connections alone: taken inline;
			 * else the whole question, shaped) */
			if ((a.sp->max_connections || a.sp->rate_interval_us) &&
			    (a.shape = ns_shape_connect_fast(a.c, a.sp, a.slot, a.now)) < 0 &&
			    shaped(&a, &r) == STEP_DONE)
				return r;
		} else if (a.sp->connect_total_timeout_ms) {
			ns_budget_forget(); /* (no slot, or not enforced: no attempt, no budget) */
		}
	}
	record(&a);
	if (unlikely(a.sp->shaping) && after_record(&a, &r) == STEP_DONE)
		return r;
	if (faults_and_publish(&a, &r) == STEP_DONE)
		return r;
	return make(&a, saved);
}

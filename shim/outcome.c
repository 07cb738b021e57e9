/* outcome.c -- what a connection's calls mean for its destination's
 * breaker: the one outcome of each exchange (success, failure, timeout, or
 * a stale keep-alive reuse that counts as nothing), the latencies, the HTTP
 * status, and the breaker's admission of a connect. Each is counted in the
 * shared table (config.c), logged, and, when it moves a breaker, written
 * to the events ring. */
#include "outcome.h"

#include "multiaddr.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "config.h"
#include "faultcfg.h"
#include "engine.h"
#include "shadow.h"
#include "shape.h"

/* When the exchange in progress began: its request, or the connect for
 * the first. */
static monotime exchange_start(const struct ns_conn *c)
{
	return LD(c->xstart) ? LD(c->xstart) : LD(c->start);
}

/* The connection o is of: its record, that record's use, its connect's
 * time, the process (the history's connection number). */
static inline void outcome_of_conn(struct ns_outcome *o, const struct ns_conn *c)
{
	o->conn_ns = (uint64_t)LD(c->start);
	o->conn = (uintptr_t)c;
	o->conn_gen = __atomic_load_n(&c->gen, __ATOMIC_RELAXED);
	o->pid = (uint32_t)ns_own_pid;
}

/* Count one outcome of c's destination: kind NS_OUT_*, err its errno;
 * status: the HTTP status that decided it (for the history), else 0; said:
 * what decided it in the answer's own words ("gRPC UNAVAILABLE (14)"), or NULL; was: the
 * connection's flags before (whether it was connecting, whether a request
 * was out); from: when the exchange began; first: when its answer's first
 * byte came (0: now). */
static inline __attribute__((always_inline)) void count(struct ns_conn *c, int slot, int kind, int err,
							const struct ns_answer *ans, uint32_t was, monotime from,
							monotime first, int own)
{
	struct ns_outcome o;
	struct ns_step st;
	char key[NS_KEY_MAX];
	const struct ns_settings *set;
	monotime now;

	if (slot < 0 || !ns_breakers_ok) {
		if (kind != NS_OUT_SUCCESS && ns_log_level >= NS_LOG_INFO) {
			ns_conn_key(c, key);
			ns_log(NS_LOG_INFO, "%s: %s%s", key, kind == NS_OUT_TIMEOUT ? "deadline expired: " : "",
			       kind == NS_OUT_TIMEOUT ? "ETIMEDOUT"
				       : err          ? ns_errno_word(err)
						      : "closed before the answer");
		}
		return;
	}
	now = ns_now();
	set = ns_conn_set(c);
	if (kind != NS_OUT_SUCCESS && (set->retry_budget_bp | set->retry_budget_min_mps))
		ns_shape_note_failure(slot, now); /* a connect soon after is a retry */
	/* healthy-first: the address's connect failed, or its connection's
	 * first outcome (an answer, a TLS handshake) came: it is healthy */
	if (unlikely(set->address_choice) &&
	    (kind != NS_OUT_SUCCESS ? (was & NS_C_CONNECTING) != 0 : !(was & NS_C_REUSED)))
		ns_addr_connect_outcome(c, kind == NS_OUT_SUCCESS, kind == NS_OUT_TIMEOUT ? ETIMEDOUT : err);
	o.kind = kind;
	o.err = err;
	o.ans = ans;
	o.at_connect = (was & NS_C_CONNECTING) != 0;
	o.sent = (was & NS_C_SENT) != 0;
	o.trace = kind != NS_OUT_SUCCESS && (ns_trace_env || set->trace);
	o.latency_us = kind == NS_OUT_SUCCESS ? (uint64_t)((first ? first : now) - from) / 1000 : 0;
	o.now_ms = (uint64_t)now / 1000000;
	o.now_ns = (uint64_t)now;
	o.from_ns = (uint64_t)from;
	outcome_of_conn(&o, c);
	o.own = own;
	o.program = program_invocation_short_name;
	o.key = NULL;
	if (kind != NS_OUT_SUCCESS || ns_log_level >= NS_LOG_INFO) {
		ns_conn_key(c, key);
		o.key = key;
	}
	o.shadow.t = NULL;
	if (unlikely(__atomic_load_n(&ns_fault_local, __ATOMIC_RELAXED) & NS_FL_SHADOW))
		ns_shadow_ref(c, &o.shadow);
	ns_account_at(&ns_engine, &ns_breakers, slot, set, &o, ns_wall_ms(), &st);
}

/* The connection's own success (its TLS handshake, an h2 connection's
 * first frame) counted now: requests it carries take it back (below). */
#define OWN_AFTER UINT64_MAX /* own_ms: a stream's outcome came first (an answer read before the preface was) */

static int own_success(struct ns_conn *c, int slot)
{
	uint64_t ms = (uint64_t)(ns_now() / 1000000), was = 0;

	if (slot < 0 || !ns_breakers_ok)
		return 0;
	if (ms == 0 || ms == OWN_AFTER)
		ms = 1;
	/* a stream already counted: the requests are the outcomes, this goes */
	if (!__atomic_compare_exchange_n(&c->own_ms, &was, ms, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE) &&
	    was == OWN_AFTER) {
		ns_table_success_undo(&ns_breakers, slot, ms, ns_conn_set(c)->window_ms);
		return 1;
	}
	return 0;
}

/* ...taken back after its history row was written: the row goes too
 * (policy/account.c, while a recorder reads). */
static __attribute__((noinline, cold)) void own_row_withdrawn(struct ns_conn *c, int slot)
{
	struct ns_outcome o;
	monotime now = ns_now();

	memset(&o, 0, sizeof(o));
	o.now_ns = (uint64_t)now;
	o.now_ms = (uint64_t)now / 1000000;
	outcome_of_conn(&o, c);
	o.from_ns = o.conn_ns;
	ns_account_withdrawn(&ns_engine, &ns_breakers, slot, &o);
}

/* Its first request's outcome is counted: from then the requests are the
 * connection's outcomes, and its own success is taken back (a connection
 * that carries no request keeps it: it is then its one outcome). */
static __attribute__((noinline, cold)) void own_success_taken(struct ns_conn *c, int slot)
{
	uint64_t at = __atomic_exchange_n(&c->own_ms, 0, __ATOMIC_ACQ_REL);

	if (at && at != OWN_AFTER && slot >= 0 && ns_breakers_ok) {
		ns_table_success_undo(&ns_breakers, slot, at, ns_conn_set(c)->window_ms);
		own_row_withdrawn(c, slot);
	}
}

static inline __attribute__((always_inline)) void own_success_back(struct ns_conn *c, int slot)
{
	if (unlikely(__atomic_load_n(&c->own_ms, __ATOMIC_RELAXED)))
		own_success_taken(c, slot);
}

void ns_conn_own_success(struct ns_conn *c)
{
	if (own_success(c, LD(c->slot)))
		own_row_withdrawn(c, LD(c->slot));
}

/* Count the connection's one outcome. kind is NS_OUT_*; ans: what its
 * answer said when that decided it, else NULL. */
static void conn_outcome(struct ns_conn *c, int kind, int err, const struct ns_answer *ans)
{
	uint32_t was;
	int saved = errno, slot, h2 = 0, own = 0;

	/* HTTP/2: the streams still open failed with the connection first
	 * (connfail.c), and are its outcomes; without one open, the
	 * connection's failure is no exchange's */
	if (unlikely(kind != NS_OUT_SUCCESS) && unlikely(LD(c->h2) != NULL))
		h2 = 1;
	was = __atomic_fetch_and(&c->flags, ~(NS_C_CONNECTING | NS_C_PARSE | NS_C_SENT), __ATOMIC_RELAXED);
	if (__atomic_exchange_n(&c->outcome, 1, __ATOMIC_ACQ_REL))
		goto out;
	/* decided: the next send starts the next exchange */
	__atomic_fetch_or(&c->flags, NS_C_XNEXT, __ATOMIC_RELAXED);
	slot = LD(c->slot);
	if ((was & NS_C_TLSWIRE) && !(was & NS_C_HSDONE) && !(was & NS_C_CONNECTING)) {
		__atomic_fetch_or(&c->flags, NS_C_HSDONE, __ATOMIC_RELAXED); /* the handshake: no exchange */
		/* (taken back at once: a request's outcome came first; no row) */
		if (kind == NS_OUT_SUCCESS)
			own = own_success(c, slot) ? -1 : 1;
	} else if (!(was & NS_C_CONNECTING) && !h2) {
		/* an answer came: the connection's next exchange is a reuse */
		if (kind == NS_OUT_SUCCESS && (was & NS_C_SENT))
			__atomic_fetch_or(&c->flags, NS_C_ANSWERED, __ATOMIC_RELAXED);
		if (slot >= 0 && ns_breakers_ok)
			ns_table_exchange(&ns_breakers, slot);
		own_success_back(c, slot);
		/* an answer before any request (a server that speaks first, an
		 * h2c server's SETTINGS read before the preface went: exchange.c
		 * server_spoke_first makes it the connection's own): its row may
		 * be taken back */
		if (kind == NS_OUT_SUCCESS && !(was & NS_C_SENT))
			own = 1;
	}
	count(c, slot, kind, err, ans, was, exchange_start(c), 0, own);
out:
	errno = saved;
}

void ns_conn_outcome(struct ns_conn *c, int kind, int err)
{
	conn_outcome(c, kind, err, NULL);
}

void ns_conn_h2_answered(struct ns_conn *c)
{
	uint32_t was;
	int saved = errno;

	was = __atomic_fetch_and(&c->flags, ~(NS_C_CONNECTING | NS_C_PARSE | NS_C_SENT), __ATOMIC_RELAXED);
	if (__atomic_exchange_n(&c->outcome, 1, __ATOMIC_ACQ_REL))
		goto out;
	if ((was & NS_C_TLSWIRE) && !(was & NS_C_HSDONE))
		__atomic_fetch_or(&c->flags, NS_C_HSDONE, __ATOMIC_RELAXED);
	/* its connect's outcome: no exchange, no latency (its first frame,
	 * SETTINGS, answers nothing: its streams' do) */
	count(c, LD(c->slot), NS_OUT_SUCCESS, 0, NULL, was, LD(c->start), LD(c->start), 1);
	if (own_success(c, LD(c->slot)))
		own_row_withdrawn(c, LD(c->slot));
out:
	errno = saved;
}

void ns_stream_outcome(struct ns_conn *c, int kind, int err, const struct ns_answer *ans, monotime from, monotime first)
{
	int saved = errno, slot = LD(c->slot);
	uint64_t none = 0;

	if (slot >= 0 && ns_breakers_ok)
		ns_table_exchange(&ns_breakers, slot);
	/* the connection's own success, counted: taken back; not yet (its
	 * first frame read before its preface was looked at): it will not be */
	if (!__atomic_compare_exchange_n(&c->own_ms, &none, OWN_AFTER, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE) &&
	    none != OWN_AFTER)
		own_success_taken(c, slot);
	count(c, slot, kind, err, ans, NS_C_SENT, from, first, 0);
	errno = saved;
}

/* A reused connection ended (end of stream, or err) before any byte of the
 * answer to its request (ns_exchange_stale): the server closed it while it
 * sat idle, and the client's answer to that is a new connection, whose
 * outcome is the one that counts. The exchange is settled without an
 * outcome and counted as a stale reuse. */
void ns_conn_stale(struct ns_conn *c, int err)
{
	int saved = errno, slot = LD(c->slot);

	__atomic_fetch_and(&c->flags, ~(NS_C_PARSE | NS_C_SENT), __ATOMIC_RELAXED);
	if (__atomic_exchange_n(&c->outcome, 1, __ATOMIC_ACQ_REL))
		return;
	__atomic_fetch_or(&c->flags, NS_C_XNEXT, __ATOMIC_RELAXED);
	if (slot >= 0 && ns_breakers_ok)
		ns_table_stale_reuse(&ns_breakers, slot);
	if (unlikely(ns_log_level >= NS_LOG_INFO)) {
		char key[NS_KEY_MAX];

		ns_conn_key(c, key);
		ns_log(NS_LOG_INFO, "%s: reused connection %s before the answer: stale keep-alive, not counted",
		       key, err ? strerror(err) : "closed");
	}
	errno = saved;
}



void ns_first_byte_latency(struct ns_conn *c)
{
	if (LD(c->slot) >= 0 && ns_breakers_ok) {
		uint64_t us = (uint64_t)(ns_now() - exchange_start(c)) / 1000;

		ST(c->fb_us, us > UINT32_MAX ? UINT32_MAX : (uint32_t)us);
		ns_table_latency(&ns_breakers, LD(c->slot), 1, us);
	}
}

void ns_conn_http(struct ns_conn *c, unsigned code, int failed)
{
	struct ns_answer ans = { .status = code, .http_status = code, .http_fails = failed };

	if (LD(c->outcome))
		return;
	__atomic_fetch_and(&c->flags, ~NS_C_PARSE, __ATOMIC_RELAXED);    /* the status decides, not the bytes */
	__atomic_fetch_or(&c->flags, NS_C_ANSWERED, __ATOMIC_RELAXED);   /* an answer, whatever its status */
	if (failed)
		NS_LOG(NS_LOG_INFO, "exchange failed: HTTP %u", code);
	conn_outcome(c, failed ? NS_OUT_FAILURE : NS_OUT_SUCCESS, 0, &ans);
}


/* ...out of line, for the paths that are not a connect's own */
__attribute__((noinline)) void ns_conn_connected(struct ns_conn *c)
{
	ns_conn_connected_now(c);
}

/* A connect the live breaker turned away on the slow path (the key, not
 * the destination, is at hand here): the shadow's breaker asked too. */
static __attribute__((noinline, cold)) void shadow_rejected(const char *key, monotime now)
{
	struct ns_dest d;

	if (ns_dest_parse(key, &d) == 0)
		ns_shadow_attempt(NULL, &d, now);
}

/* Ask the breaker whether a connect to key may go out: 0, or -1 when it is
 * open. *slot: the key's slot (hint, a slot remembered for it, or the one found), or -1
 * when uncounted (NS_SLOT_FULL: the table is full, which the destination
 * cache remembers as its hint). */
static int tbl_full_said;
static uint64_t full_retry_ms; /* atomic: CLOCK_MONOTONIC ms when a destination the full table turned away asks again */

/* A destination the full table turned away: 1 while it is not yet time to
 * ask the table again (per process, once a second for all of them). */
static int full_again(monotime now)
{
	return (uint64_t)(now / 1000000) < __atomic_load_n(&full_retry_ms, __ATOMIC_RELAXED);
}

int ns_breaker_admit(const char *key, int hint, int *slotp, const struct ns_settings *set,
			 int enforce, monotime now)
{
	int slot;

	*slotp = -1;
	if (!ns_tbl_on())
		return 0;
	if (hint == NS_SLOT_FULL && full_again(now)) {
		/* turned away by a full table before: uncounted, asked again
		 * once a second (a miss in a full table reads every slot) */
		__atomic_fetch_add(&ns_breakers.hdr->full_count, 1, __ATOMIC_RELAXED);
		*slotp = NS_SLOT_FULL;
		return 0;
	}
	/* a slot keeps its key for the table's life: a remembered one is used as it is */
	slot = hint >= 0 ? hint : ns_table_find(&ns_breakers, key, 1, (uint64_t)(now / 1000000));
	if (unlikely(ns_table_broken(&ns_breakers))) {
		ns_tbl_broke();
		return 0;
	}
	if (slot == NS_SLOT_FULL && !__atomic_exchange_n(&tbl_full_said, 1, __ATOMIC_RELAXED)) {
		/* once per process: the table says so too, and shimctl shows the count */
		NS_LOG(NS_LOG_WARN, "breaker table full; %s and other new destinations pass through uncounted", key);
		ns_emit(NS_E_TABLE_FULL, -1, key, NULL, 0, "new destinations pass through uncounted", 0);
	}
	if (slot < 0) {
		if (slot == NS_SLOT_FULL) {
			*slotp = NS_SLOT_FULL; /* (remembered: the next connect asks full_again) */
			__atomic_store_n(&full_retry_ms, (uint64_t)(now / 1000000) + 1000, __ATOMIC_RELAXED);
		}
		return 0;
	}
	*slotp = slot;
	if (ns_admit_breaker(&ns_engine, &ns_breakers, slot, set, key, enforce, (uint64_t)now / 1000,
			     (uint32_t)ns_own_pid) == NS_REJECT) {
		NS_LOG(NS_LOG_DEBUG, "%s: breaker open, connect refused", key);
		if (unlikely(__atomic_load_n(&ns_fault_local, __ATOMIC_RELAXED) & NS_FL_SHADOW))
			shadow_rejected(key, now);
		return -1;
	}
	return 0;
}

/**** Retry-After ****/

int ns_conn_retry_after(struct ns_conn *c, const char *value)
{
	int saved = errno;
	uint64_t ms = ns_retry_after_ms(value, ns_wall_ms());

	errno = saved;
	return ns_conn_cooldown(c, ms, 0);
}

int ns_conn_cooldown(struct ns_conn *c, uint64_t asked_ms, int pushback)
{
	int slot = LD(c->slot), saved = errno, began;
	char key[NS_KEY_MAX];

	if (!asked_ms || slot < 0 || !ns_breakers_ok)
		return 0;
	ns_conn_key(c, key);
	began = ns_account_cooldown(&ns_engine, &ns_breakers, slot, ns_conn_set(c), key, asked_ms, pushback,
				    (uint64_t)(ns_now() / 1000000), (uint32_t)ns_own_pid,
				    program_invocation_short_name);
	errno = saved;
	return began;
}

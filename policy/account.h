/* account.h -- what an outcome counts, written once for both engines
 * (docs/design.md, "One core for both engines").
 *
 * An engine (the preloaded library, shimrun's seccomp engine) sees a call
 * end and hands the core one outcome: the destination's slot, its settings,
 * what happened (kind, errno, the HTTP status or the answer's own words,
 * the latency), where it came from (the engine, the process, the
 * connection) and whether the connect or a request was out. The core does
 * everything an outcome does: the table's counts and windows, the breaker
 * step, the adaptive words (policy/table.c), the history record when a
 * recorder reads, the shadow policy's judgement, the event (one builder for
 * every writer of the ring) and the engine's line. What only an engine can
 * do it lends through struct ns_engine: its log, its mapping of the
 * history ring, its stack frames, its wake of the agent (system calls the
 * library makes through libc's real functions). */
#ifndef NS_POLICY_ACCOUNT_H
#define NS_POLICY_ACCOUNT_H

#include <stdint.h>

#include "ocring.h"
#include "table.h"

enum { NS_ENGINE_PRELOAD = 1, NS_ENGINE_SECCOMP = 2 };

struct ns_engine {
	int id;               /* NS_ENGINE_* */
	const int *log_level; /* NS_LOG_*: its level in force (the library's may change on a reload) */
	void (*say)(int level, const char *line); /* one line, written with the engine's prefix */
	/* the history ring mapped for the table's recorder (NULL: none) */
	struct ns_ocring *(*hist_ring)(void);
	/* up to max frames of the calling stack (NULL: the engine has none) */
	unsigned (*frames)(char frames[][NS_FRAME_LEN], unsigned max);
	/* an event the agent wants now was written (NULL: no agent is woken) */
	void (*wake)(struct ns_table *t);
	uint64_t (*wall_ms)(void);
	/* the name of process pid, for an event that was given none (NULL: "") */
	const char *(*program_of)(uint32_t pid);
	/* the process of the id an engine hands for its caller, where that may
	 * be a thread's (shimrun is told the thread that made a call), for the
	 * events and history rows that name it (NULL: the id is the pid) */
	uint32_t (*pid_of)(uint32_t id);
};

/* The shadow policy's view of a connection: its settings and slot in the
 * shadow's table, judged at the connect (ns_shadow_admit). */
struct ns_shadow_ref {
	struct ns_table *t; /* NULL: no shadow */
	const struct ns_settings *set;
	int slot; /* -1: none, or its breaker turned the connect away */
};

/* What the answer said, as far as it decides an outcome. */
struct ns_answer {
	unsigned status;      /* the HTTP status that decided it (words, history), 0 = none */
	const char *said;     /* what decided it in the answer's words ("gRPC UNAVAILABLE (14)"), or NULL */
	unsigned http_status; /* the status the table keeps as the last (0: none), */
	int http_fails;       /* ...counted in http_failures (failure_status) */
	unsigned grpc;        /* a gRPC status + 1 (0: none), */
	int grpc_fails;       /* ...counted in grpc_failures (grpc_failure_status) */
};

/* One outcome, as an engine saw it. */
struct ns_outcome {
	int kind;                    /* NS_OUT_* */
	int err;                     /* its errno, 0 = none */
	const struct ns_answer *ans; /* what the answer said, or NULL */
	int at_connect;              /* the connect was in progress: nothing was sent */
	int sent;                    /* a request was out (a failure's outcome is unknown) */
	int trace;                   /* the event carries the stack (trace = on) */
	uint64_t latency_us;         /* a success: its first byte after the exchange began */
	uint64_t now_ms;             /* CLOCK_MONOTONIC, */
	uint64_t now_ns;             /* ...and the same in ns */
	uint64_t from_ns;            /* when the exchange began: its request, or the connect */
	uint64_t conn_ns;            /* when the connection's connect was admitted */
	uintptr_t conn;              /* the connection's record in its process (its address, or its index << 6), */
	uint32_t conn_gen;           /* ...and that record's use: the history's connection number of both */
	uint32_t pid;
	int own;             /* a success that is the connection's own (a TLS handshake, an h2 connection's
			      * first frame): its first request takes it back (ns_account_withdrawn) */
	const char *program; /* the process's short name (events) */
	const char *key;     /* the destination as the table names it, or NULL: read from the slot */
	struct ns_shadow_ref shadow;
};

/* Count o on slot of t under set; *st: what it did to the breaker. */
void ns_account(const struct ns_engine *e, struct ns_table *t, int slot, const struct ns_settings *set,
		const struct ns_outcome *o, struct ns_step *st);

/* The parts of an outcome's accounting that only some outcomes take
 * (account.c): a failure's line at info, the history's record while a
 * recorder reads, the shadow's judgement, the breaker's step or a traced
 * failure said and written. */
void ns_account_said_before(const struct ns_engine *e, struct ns_table *t, int slot, const struct ns_outcome *o)
	__attribute__((cold));
void ns_account_hist(const struct ns_engine *e, int slot, const struct ns_outcome *o);
/* The connection o names (conn, conn_gen, conn_ns, pid; now_ns) had its
 * own success taken back (the table's ns_table_success_undo): the history
 * drops that row too, while a recorder reads. */
void ns_account_withdrawn(const struct ns_engine *e, struct ns_table *t, int slot, const struct ns_outcome *o);
void ns_account_shadow(const struct ns_engine *e, struct ns_table *t, int slot, const struct ns_outcome *o,
		       uint64_t now_ms) __attribute__((cold));
void ns_account_said_after(const struct ns_engine *e, struct ns_table *t, int slot, const struct ns_settings *set,
			   const struct ns_outcome *o, const struct ns_step *st, uint64_t now_ms) __attribute__((cold));

/* ns_account itself, inline for an engine whose every keep-alive exchange
 * comes here (the library): wall_ms is the engine's wall clock now. */
static inline __attribute__((always_inline)) void ns_account_at(const struct ns_engine *e, struct ns_table *t, int slot,
								const struct ns_settings *set,
								const struct ns_outcome *o, uint64_t wall_ms,
								struct ns_step *st)
{
	uint64_t now_ms = o->now_ms;
	const struct ns_answer *a = o->ans;

	if (__builtin_expect(o->kind != NS_OUT_SUCCESS, 0) && e->say && *e->log_level >= 3 /* info */)
		ns_account_said_before(e, t, slot, o);
	if (a) {
		if (a->http_status)
			ns_table_http(t, slot, a->http_status, a->http_fails);
		if (__builtin_expect(a->grpc != 0, 0))
			ns_table_grpc(t, slot, a->grpc - 1, a->grpc_fails);
	}
	ns_table_outcome_at(t, slot, o->kind, o->err, o->latency_us, now_ms, wall_ms, set, st);
	if (__builtin_expect(__atomic_load_n(&t->hdr->hist_until_ms, __ATOMIC_RELAXED) > now_ms, 0))
		ns_account_hist(e, slot, o);
	if (__builtin_expect(o->shadow.t != NULL, 0))
		ns_account_shadow(e, t, slot, o, now_ms);
	if (__builtin_expect(st->transition != NS_TR_NONE || (o->kind != NS_OUT_SUCCESS && o->trace), 0))
		ns_account_said_after(e, t, slot, set, o, st, now_ms);
}

/* A connect the breaker of slot let through (st from ns_table_attempt): a
 * half-open step is said and written as an event. */
void ns_account_attempt(const struct ns_engine *e, struct ns_table *t, int slot, const char *key,
			const struct ns_step *st, uint32_t pid, const char *program);
/* A server asked for time (a 429/503's Retry-After, or with pushback 1
 * gRPC's grpc-retry-pushback-ms): slot of t in cooldown for asked_ms, at
 * most set's retry_after_max; the adaptive limits told the server is full
 * (no failure of the breaker's); said at info and written as an event
 * (key, pid, program). 1: a cooldown began; 0: asked_ms is 0. */
int ns_account_cooldown(const struct ns_engine *e, struct ns_table *t, int slot, const struct ns_settings *set,
			const char *key, uint64_t asked_ms, int pushback, uint64_t now_ms, uint32_t pid,
			const char *program);
/* A connect a breaker turned away: the history's record of it. */
void ns_account_rejected(const struct ns_engine *e, struct ns_table *t, int slot, uint64_t now_us, uint32_t pid);

/* The shadow policy's breaker asked about a connect to key under its
 * settings set: the slot its outcomes are judged on, or -1 (turned away,
 * or no room: its outcomes are not the shadow's). */
int ns_shadow_admit(struct ns_table *stbl, const struct ns_settings *set, const char *key, uint64_t now_ms);

/* The one builder of an event record (the library, shimrun, shimctl and the
 * agent write through it): type, who, the destination, the breaker's step
 * (or NULL), the errno and the detail (or NULL). failures_in_window is read
 * from slot when slot >= 0. Then written to t's ring, and the agent woken
 * through e->wake when the event wants it. */
void ns_event_write(const struct ns_engine *e, struct ns_table *t, int type, int slot, const char *key,
		    const struct ns_step *st, int err, const char *detail, uint32_t pid, const char *program,
		    int trace);

/* An errno as the lines name it: the network's by name ("ECONNREFUSED"),
 * another by its text. */
const char *ns_errno_word(int e);

/* The destination slot idx names, NUL-terminated (shared memory: bounded). */
void ns_table_key_copy(const struct ns_table *t, int idx, char out[NS_KEY_MAX]);

#endif

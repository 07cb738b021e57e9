/* outcome.h -- a connection's outcomes, counted against its destination's
 * breaker (outcome.c). */
#ifndef NS_OUTCOME_H
#define NS_OUTCOME_H

#include <errno.h>
#include <string.h>

#include "../policy/account.h"
#include "config.h"
#include "conn.h"

/* Is e an errno that fails a connection (refused, reset, timed out,
 * unreachable...)? The others are the program's business. */
static inline int ns_is_failure_errno(int e)
{
	switch (e) {
	case ECONNREFUSED: case ECONNRESET: case ETIMEDOUT: case EHOSTUNREACH:
	case ENETUNREACH: case ENETDOWN: case EHOSTDOWN: case ECONNABORTED: case EPIPE:
		return 1;
	default:
		return 0;
	}
}

/* Count the connection's one outcome: NS_OUT_* with its errno (0 when no
 * errno says it: the peer closed before the answer). errno is kept. A
 * failure goes through ns_conn_failed (connfail.h): its HTTP/2 streams
 * fail first. */
NS_HIDDEN void ns_conn_outcome(struct ns_conn *c, int kind, int err);
/* An HTTP/2 connection's server answered its first frame: the
 * connection's own outcome, a success that is not an exchange. */
NS_HIDDEN void ns_conn_h2_answered(struct ns_conn *c);
/* An h2c connection's first outcome, counted before it was known to be h2,
 * is its own success (exchange.c): its first stream takes it back. */
NS_HIDDEN void ns_conn_own_success(struct ns_conn *c);
/* One HTTP/2 stream's outcome (h2conn.c), an exchange of c's destination:
 * ans what its answer said (the HTTP status that decided it, what else did:
 * "gRPC 14", "RST_STREAM 2"; the statuses the table counts), or NULL; from
 * its start, first its first byte (0: now). errno is kept. */
NS_HIDDEN void ns_stream_outcome(struct ns_conn *c, int kind, int err, const struct ns_answer *ans, monotime from,
				 monotime first);
/* A reused connection ended (err, or end of stream: 0) before any byte of
 * its answer: a stale keep-alive, settled without an outcome. */
NS_HIDDEN void ns_conn_stale(struct ns_conn *c, int err);
/* The answer's first byte came: its time since the exchange began. */
NS_HIDDEN void ns_first_byte_latency(struct ns_conn *c);
/* A 429 or 503 answer's Retry-After value (seconds, or an HTTP date): the
 * destination is put in cooldown for that long, at most retry_after_max.
 * 1: a cooldown began; 0: the value asked for none. */
NS_HIDDEN int ns_conn_retry_after(struct ns_conn *c, const char *value);
/* ...a cooldown of asked_ms (at most retry_after_max) that the server
 * asked for: by Retry-After, or (pushback 1) by gRPC's server pushback
 * (grpc-retry-pushback-ms). 1: it began; 0: none (no table, 0 ms). */
NS_HIDDEN int ns_conn_cooldown(struct ns_conn *c, uint64_t asked_ms, int pushback);
/* An exchange's outcome from its HTTP status. */
NS_HIDDEN void ns_conn_http(struct ns_conn *c, unsigned code, int failed);

/* The connect completed: note how long it took, once. */
static inline __attribute__((always_inline)) void ns_conn_connected_now(struct ns_conn *c)
{
	uint32_t old = __atomic_fetch_and(&c->flags, ~NS_C_CONNECTING, __ATOMIC_RELAXED);

	if ((old & NS_C_CONNECTING) && LD(c->slot) >= 0 && ns_breakers_ok)
		ns_table_latency(&ns_breakers, LD(c->slot), 0, (uint64_t)(ns_now() - LD(c->start)) / 1000);
}

/* ...out of line, for the paths that are not a connect's own */
NS_HIDDEN void ns_conn_connected(struct ns_conn *c);

/* Ask the breaker whether a connect to key may go out: 0, or -1 when it is
 * open. hint: the key's slot when known, or NS_SLOT_UNKNOWN; *slotp: the
 * slot used, or -1 when uncounted. */
#define NS_SLOT_UNKNOWN (-101)   /* no slot remembered for the destination */
NS_HIDDEN int ns_breaker_admit(const char *key, int hint, int *slotp, const struct ns_settings *set,
			       int enforce, monotime now);

#endif

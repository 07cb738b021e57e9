/* shape.h -- shaping traffic: connection caps with a queue, pacing (shape.c). */
#ifndef NS_SHAPE_H
#define NS_SHAPE_H

#include "../policy/admit.h"
#include "../policy/policy.h"
#include "conn.h"
#include "config.h"

/* At connect, after the breaker admitted it, for a destination with
 * max_connections (c's slot: slot; not yet published). NS_SHAPE_GO: a place
 * is c's; NS_SHAPE_WAITED: the same, after a blocking wait; NS_SHAPE_QUEUED: a
 * non-blocking connect waits for one (ns_shape_due, from the waits);
 * NS_SHAPE_REFUSE: turned away (throttled: ns_shape_throttled). */
enum { NS_SHAPE_GO, NS_SHAPE_WAITED, NS_SHAPE_QUEUED, NS_SHAPE_REFUSE };
struct ns_admitter;
/* The process's own state for the core's questions (policy/admit.h). */
extern NS_HIDDEN struct ns_admitter ns_admitter_here;

NS_HIDDEN int ns_shape_connect(struct ns_conn *c, const struct ns_settings *set, int slot, int nonblock, monotime now);
/* The common case, inline: max_connections alone (no slow_start, no rate)
 * and a place free. NS_SHAPE_GO, or -1: ns_shape_connect decides. */
extern uint32_t ns_shape_self NS_HIDDEN;   /* this process's holder word (shape.c), 0 until made */
extern int ns_shape_queued NS_HIDDEN;      /* (queued.c) */
static inline __attribute__((always_inline)) int ns_shape_connect_fast(struct ns_conn *c, const struct ns_settings *set,
								       int slot, monotime now)
{
	uint32_t h = __atomic_load_n(&ns_shape_self, __ATOMIC_RELAXED);
	int p;

	/* (h is made after the hook that gives places back is in: shape.c) */
	if (unlikely(!h || !(set->shaping & NS_SHAPING_PLACE_ONLY) ||
		     __atomic_load_n(&ns_shape_queued, __ATOMIC_RELAXED) ||
		     !__atomic_load_n(&ns_breakers_ok, __ATOMIC_ACQUIRE)))
		return -1;
	p = ns_admit_place_now(&ns_breakers, slot, set, h, (uint64_t)(now / 1000000));
	if (p < 0)
		return -1;
	ST(c->place_slot, slot);
	ST(c->place_holder, h);
	ST(c->place, p);
	return NS_SHAPE_GO;
}
/* A queued connect's turn? 1: a place (and a token) is c's now; 0: not
 * yet, look again at *next; -1: its queue_timeout passed. */
NS_HIDDEN int ns_shape_due(struct ns_conn *c, monotime now, monotime *next);
/* A send that starts an HTTP/1.x request on a reused connection (or one
 * paced before), under rate: 0 go (a token taken; or the total deadline
 * passed while it waited, which the caller's check then tells), or -1 with
 * errno: EAGAIN for a non-blocking one until its token is due (the waits
 * hold fd's output back until then; fd -1: not known here), or when the
 * program's send timeout ran out. */
NS_HIDDEN int ns_shape_request(int fd, struct ns_conn *c, int nonblock);
/* A request on an open connection during its destination's cooldown
 * (Retry-After): held until it ends. 0 go, or -1 with errno (EAGAIN). */
NS_HIDDEN int ns_shape_cooldown(int fd, struct ns_conn *c, int nonblock);
/* ...the common case, inline: no cooldown was set (or it ended and was
 * seen to): one load of the slot's word, no clock. */
static inline int ns_shape_cooling(const struct ns_conn *c)
{
	int slot = LD(c->slot);

	return slot >= 0 && __atomic_load_n(&ns_breakers_ok, __ATOMIC_RELAXED) && (uint32_t)slot < ns_breakers.nslots &&
	       __atomic_load_n(&ns_breakers.slots[slot].cooldown_until_ms, __ATOMIC_RELAXED) != 0;
}
/* Does a send on c (flags f) start a request that needs rate's token, or
 * is one held? tls: NS_C_TLS for the plaintext of a TLS connection (tls.c),
 * 0 for the socket's bytes. */
static inline int ns_shape_wants_token(const struct ns_conn *c, uint32_t f, uint32_t tls)
{
	if (likely(!(f & (NS_C_PACED | NS_C_ANSWERED | NS_C_TOKEN))))
		return 0;   /* (a connection's first request rides on the connect's token) */
	return (f & (NS_C_PACED | NS_C_TOKEN)) ||
		((f & (NS_C_XNEXT | NS_C_H2 | NS_C_TLS)) == (NS_C_XNEXT | NS_C_HTTP | tls) && /* HTTP/1 only */
		 ns_conn_set(c)->rate_interval_us);
}
/* Count a connect turned away (and the throttling event, once a minute). */
NS_HIDDEN void ns_shape_throttled(int slot, const char *key, const struct ns_settings *set);
/* A send that may start a request on an idle connection holding a place:
 * 0, it goes out (NS_C_OUTGOING set: the caller clears it after the call,
 * and the place is not given up meanwhile), or -1 with EPIPE when the
 * place was given up first (the connection shut down): as after a server's
 * idle close, but with no SIGPIPE; the first is counted a stale reuse. */
NS_HIDDEN int ns_shape_outgoing(struct ns_conn *c);
/* giveup.c: the place of this process's oldest provably idle connection
 * to slot (places [0, cap)), given up for a connect that would otherwise
 * wait on itself (self: this process's holder word; loop: that connect is
 * non-blocking, an event loop's): its index, or -1. */
NS_HIDDEN int ns_shape_give_up_idle(int slot, uint32_t cap, uint32_t self, int loop);
/* c's place back (its record ends). */
NS_HIDDEN void ns_shape_release(struct ns_conn *c);
/* Before an exec: the places of connections whose every descriptor is
 * close-on-exec given back (the kernel closes them unseen); their records
 * in out, at most max: how many. A failed exec gives them to
 * ns_shape_exec_failed, which takes places for them again. */
NS_HIDDEN int ns_shape_exec_release(struct ns_conn **out, int max);
NS_HIDDEN void ns_shape_exec_failed(struct ns_conn **list, int n);
/* retry_budget: this process's failure to slot (now), and whether a
 * connect to it may go out: 0, or -1 when it is a retry beyond the budget
 * (counted retry_throttled). */
NS_HIDDEN void ns_shape_note_failure(int slot, monotime now);
NS_HIDDEN int ns_shape_retry(int slot, const struct ns_settings *set, monotime now);
/* throttle = adaptive: 1 when this connect is to be refused here (counted
 * throttled; the first of a minute said), else 0. */
NS_HIDDEN int ns_shape_throttle(int slot, const char *key, const struct ns_settings *set, monotime now);
/* A request about to start on an open connection (an HTTP/1 connection's
 * next exchange): 0 go, or -1 with ECONNREFUSED before a byte of it
 * leaves, while the destination's breaker is open (counted rejected) or
 * the adaptive throttle refuses (counted throttled), as a connect would be. */
NS_HIDDEN int ns_shape_request_admit(struct ns_conn *c);
/* What a wait of reqs.c borrows: this process's holder word (made at
 * first), a futex wait (a signal, the word moving or ns passing end it)
 * and wake, a non-blocking send held (EAGAIN, and not writable in the waits
 * until c->pace_until), a blocking send's own limit (its send timeout from
 * from, the total deadline; 0 none). */
NS_HIDDEN uint32_t ns_shape_holder(void);
NS_HIDDEN void ns_shape_futex_wait(uint32_t *word, uint32_t seen, int64_t ns);
NS_HIDDEN void ns_shape_futex_wake(uint32_t *word);
NS_HIDDEN int ns_shape_hold_output(int fd, struct ns_conn *c);
NS_HIDDEN monotime ns_shape_send_limit(const struct ns_conn *c, monotime from);
/* How often a queued non-blocking connect looks for a place. */
#define NS_SHAPE_TICK_NS (2 * 1000000LL)

#endif

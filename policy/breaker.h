/* breaker.h -- the breaker state machine: a pure function of events and a clock. */
#ifndef NS_BREAKER_H
#define NS_BREAKER_H

#include <stdint.h>

#include "policy.h"

enum ns_state { NS_CLOSED = 0, NS_OPEN = 1, NS_HALF_OPEN = 2, NS_FORCED_OPEN = 3 };

/* Unpacked breaker state. t_ms is a CLOCK_MONOTONIC time in ms: while open,
 * when half-open may start (unused when manual); while half-open, when the
 * current batch of probes was let through. */
struct ns_brk {
	uint32_t state;
	uint32_t manual;
	uint32_t consec;     /* saturates at NS_BRK_CONSEC_MAX */
	uint32_t probes;     /* probes let through in this half-open period */
	uint64_t t_ms;       /* 40 bits */
};

#define NS_BRK_CONSEC_MAX 4095u
#define NS_BRK_PROBES_MAX 255u
#define NS_BRK_TIME_MAX ((1ULL << 40) - 1)

enum ns_event { NS_EV_ATTEMPT, NS_EV_SUCCESS, NS_EV_FAILURE, NS_EV_RESET, NS_EV_FORCE_OPEN };

enum ns_verdict { NS_ALLOW = 0, NS_ALLOW_PROBE = 1, NS_REJECT = 2 };

enum ns_transition { NS_TR_NONE, NS_TR_OPENED, NS_TR_HALF_OPENED, NS_TR_CLOSED, NS_TR_REOPENED, NS_TR_RESET, NS_TR_FORCED };

enum ns_rule { NS_RULE_NONE, NS_RULE_THRESHOLD, NS_RULE_CONSECUTIVE, NS_RULE_RATE, NS_RULE_PROBE,
	NS_RULE_TIMEOUT_RATE, NS_RULE_SLOW_RATE, NS_RULE_LATENCY_P99 };

/* Outcomes in the sliding window, this event's included: failures, all,
 * slow calls, timeouts, and the p99 of first-byte time (us, the upper bound
 * of its histogram bucket; 0 = no sample). */
/* What an outcome is judged with: the window's counts, the p99, and for
 * the length of an open period the failed probes in a row so far
 * (reopens) and a draw from 0 to 10000 for its jitter. */
struct ns_window { uint32_t failures, outcomes, slow, timeouts; uint64_t p99_us; uint32_t reopens, jitter; };

/* How long the breaker stays open after `reopens` failed probes in a row:
 * open_duration, times open_backoff per reopen up to open_duration_max,
 * spread by open_jitter with draw (0 to 10000). */
uint64_t ns_open_period_ms(const struct ns_settings *s, uint32_t reopens, uint32_t draw);

struct ns_step {
	struct ns_brk next;
	int verdict;      /* enum ns_verdict, for NS_EV_ATTEMPT */
	int transition;   /* enum ns_transition */
	int rule;         /* enum ns_rule, when it opened */
};

/* Compute the next state. w may be NULL for events other than FAILURE. */
struct ns_step ns_brk_step(const struct ns_brk *cur, int event, const struct ns_window *w,
			   uint64_t now_ms, const struct ns_settings *s);

uint64_t ns_brk_pack(const struct ns_brk *b);
/* The packed word's fields read without unpacking (breaker.c packs). */
#define NS_BRK_SH_STATE 0
#define NS_BRK_SH_MANUAL 2
#define NS_BRK_SH_TIME 24

/* An attempt that changes nothing, read off a packed word without a step:
 * NS_ALLOW (closed), NS_REJECT (open, held by hand or not yet due), or -1
 * when ns_brk_step must decide (a transition may follow). */
static inline int ns_brk_attempt_quick(uint64_t w, uint64_t now_ms)
{
	uint32_t state = (uint32_t)(w >> NS_BRK_SH_STATE) & 3;

	if (state == NS_CLOSED)
		return NS_ALLOW;
	if (state == NS_FORCED_OPEN ||
	    (state == NS_OPEN && (((w >> NS_BRK_SH_MANUAL) & 1) || now_ms < (w >> NS_BRK_SH_TIME))))
		return NS_REJECT;
	return -1;
}
void ns_brk_unpack(uint64_t word, struct ns_brk *b);

/* The one random generator (xorshift64*): the next value from *rng (0: a
 * fixed seed), for retry jitter and the choice of injected faults. */
uint64_t ns_rng_next(uint64_t *rng);
/* The delay before connect retry number attempt (0 for the first retry):
 * base_ms * 2^attempt * uniform(0.5, 1.5), drawn from *rng (xorshift64*,
 * any non-zero seed), in ms. */
uint64_t ns_retry_delay_ms(uint64_t base_ms, unsigned attempt, uint64_t *rng);

const char *ns_state_name(uint32_t state);
const char *ns_rule_name(int rule);

#endif

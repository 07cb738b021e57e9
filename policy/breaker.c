/* breaker.c -- the breaker state machine: a pure function of events and a clock.
 *
 * The whole state fits one 64-bit word so that the shared table can move it
 * with a single compare-and-swap: no lock, nothing for a killed process to
 * leave half-written. */
#include "breaker.h"

/* word layout (breaker.h): state 2 | manual 1 | spare 1 | consec 12 | probes 8 | t_ms 40 */
#define SH_STATE NS_BRK_SH_STATE
#define SH_MANUAL NS_BRK_SH_MANUAL
#define SH_CONSEC 4
#define SH_PROBES 16
#define SH_TIME NS_BRK_SH_TIME

uint64_t ns_brk_pack(const struct ns_brk *b)
{
	uint64_t t = b->t_ms > NS_BRK_TIME_MAX ? NS_BRK_TIME_MAX : b->t_ms;
	uint64_t c = b->consec > NS_BRK_CONSEC_MAX ? NS_BRK_CONSEC_MAX : b->consec;
	uint64_t p = b->probes > NS_BRK_PROBES_MAX ? NS_BRK_PROBES_MAX : b->probes;

	return ((uint64_t)(b->state & 3) << SH_STATE) | ((uint64_t)(b->manual & 1) << SH_MANUAL) |
	       (c << SH_CONSEC) | (p << SH_PROBES) | (t << SH_TIME);
}

void ns_brk_unpack(uint64_t w, struct ns_brk *b)
{
	b->state = (uint32_t)(w >> SH_STATE) & 3;
	b->manual = (uint32_t)(w >> SH_MANUAL) & 1;
	b->consec = (uint32_t)(w >> SH_CONSEC) & NS_BRK_CONSEC_MAX;
	b->probes = (uint32_t)(w >> SH_PROBES) & NS_BRK_PROBES_MAX;
	b->t_ms = w >> SH_TIME;
}

uint64_t ns_rng_next(uint64_t *rng)
{
	uint64_t x = *rng ? *rng : 0x9e3779b97f4a7c15ULL;

	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*rng = x;
	return x * 0x2545f4914f6cdd1dULL;
}

uint64_t ns_retry_delay_ms(uint64_t base_ms, unsigned attempt, uint64_t *rng)
{
	uint64_t x = ns_rng_next(rng), scaled;

	if (attempt > 20)
		attempt = 20;   /* the policy allows 10 retries; keep the shift sane */
	scaled = base_ms << attempt;
	/* uniform(0.5, 1.5) in thousandths: 500..1500 */
	return scaled * (500 + (x >> 11) % 1001) / 1000;
}

const char *ns_state_name(uint32_t state)
{
	static const char *const names[] = { "closed", "open", "half_open", "forced_open" };

	return names[state & 3];
}

const char *ns_rule_name(int rule)
{
	switch (rule) {
	case NS_RULE_THRESHOLD: return "failure_threshold";
	case NS_RULE_CONSECUTIVE: return "consecutive_failures";
	case NS_RULE_RATE: return "failure_rate";
	case NS_RULE_PROBE: return "half_open_probe";
	case NS_RULE_TIMEOUT_RATE: return "timeout_rate";
	case NS_RULE_SLOW_RATE: return "slow_call_rate";
	case NS_RULE_LATENCY_P99: return "latency_p99";
	default: return "none";
	}
}

static uint64_t add_ms(uint64_t a, uint64_t b)
{
	return (a > NS_BRK_TIME_MAX - b) ? NS_BRK_TIME_MAX : a + b;
}

uint64_t ns_open_period_ms(const struct ns_settings *s, uint32_t reopens, uint32_t draw)
{
	uint64_t d = s->open_duration_ms, max = s->open_duration_max_ms ? s->open_duration_max_ms : UINT64_MAX;

	if (s->open_backoff_milli > 1000)
		for (uint32_t i = 0; i < reopens && d < max; i++)
			d = d > UINT64_MAX / s->open_backoff_milli ? UINT64_MAX : d * s->open_backoff_milli / 1000;
	if (d > max)
		d = max;
	if (s->open_jitter_bp && d) {
		/* uniform in d * (1 - jitter, 1 + jitter) */
		uint64_t spread = d * (s->open_jitter_bp > 10000 ? 10000 : s->open_jitter_bp) / 10000;
		uint32_t x = draw > 10000 ? 10000 : draw;

		d = d - spread + spread * 2 * x / 10000;
	}
	return d;
}

static void open_now(struct ns_step *r, uint64_t now_ms, const struct ns_settings *s, const struct ns_window *w,
		     uint32_t reopens)
{
	r->next.state = NS_OPEN;
	r->next.probes = 0;
	r->next.manual = s->recovery == NS_RECOVERY_MANUAL;
	r->next.t_ms = add_ms(now_ms, ns_open_period_ms(s, reopens, w ? w->jitter : 5000));
}

/* share/outcomes >= rate, in integers (49 % of 100 does not trip 50 %),
 * once min_calls are in the window */
static int rate_reached(uint32_t share, uint32_t rate_bp, const struct ns_window *w, const struct ns_settings *s)
{
	return rate_bp && w && w->outcomes >= s->min_calls && w->outcomes > 0 &&
	       (uint64_t)share * 10000 >= (uint64_t)rate_bp * w->outcomes;
}

/* The rules a slow success can trip too: slow calls and latency. */
static int slow_rule(const struct ns_window *w, const struct ns_settings *s)
{
	if (w && s->slow_call_ms && rate_reached(w->slow, s->slow_call_rate_bp, w, s))
		return NS_RULE_SLOW_RATE;
	if (w && s->latency_p99_ms && w->outcomes >= s->min_calls && w->p99_us &&
	    w->p99_us >= s->latency_p99_ms * 1000)
		return NS_RULE_LATENCY_P99;
	return NS_RULE_NONE;
}

/* Which rule, if any, opens a closed breaker after this failure. */
static int trip_rule(const struct ns_brk *b, const struct ns_window *w, const struct ns_settings *s)
{
	if (s->failure_threshold && w && w->failures >= s->failure_threshold)
		return NS_RULE_THRESHOLD;
	if (s->consecutive_failures && b->consec >= s->consecutive_failures)
		return NS_RULE_CONSECUTIVE;
	if (w && rate_reached(w->failures, s->failure_rate_bp, w, s))
		return NS_RULE_RATE;
	if (w && rate_reached(w->timeouts, s->timeout_rate_bp, w, s))
		return NS_RULE_TIMEOUT_RATE;
	return slow_rule(w, s);
}

struct ns_step ns_brk_step(const struct ns_brk *cur, int event, const struct ns_window *w,
			   uint64_t now_ms, const struct ns_settings *s)
{
	struct ns_step r = { *cur, NS_ALLOW, NS_TR_NONE, NS_RULE_NONE };
	/* A probe whose process died never reports; after this long the next
	 * connect may probe again, so a killed prober cannot wedge the breaker. */
	uint64_t probe_stale_ms = s->open_duration_ms;

	switch (event) {
	case NS_EV_ATTEMPT:
		switch (cur->state) {
		case NS_CLOSED:
			break;
		case NS_OPEN:
			if (cur->manual || now_ms < cur->t_ms) {
				r.verdict = NS_REJECT;
				break;
			}
			r.next.state = NS_HALF_OPEN;
			r.next.probes = 1;
			r.next.t_ms = now_ms;
			r.verdict = NS_ALLOW_PROBE;
			r.transition = NS_TR_HALF_OPENED;
			break;
		case NS_HALF_OPEN:
			if (cur->probes < s->half_open_probes) {
				r.next.probes = cur->probes + 1;
				r.verdict = NS_ALLOW_PROBE;
			} else if (now_ms >= add_ms(cur->t_ms, probe_stale_ms)) {
				r.next.probes = 1;
				r.next.t_ms = now_ms;
				r.verdict = NS_ALLOW_PROBE;
			} else {
				r.verdict = NS_REJECT;
			}
			break;
		default:
			r.verdict = NS_REJECT;
			break;
		}
		break;
	case NS_EV_SUCCESS:
		r.next.consec = 0;
		if (cur->state == NS_CLOSED && (r.rule = slow_rule(w, s)) != NS_RULE_NONE) {
			/* answered, but slowly: the slow-call rules open on successes */
			open_now(&r, now_ms, s, w, 0);
			r.transition = NS_TR_OPENED;
		} else if (cur->state == NS_HALF_OPEN) {
			r.next.state = NS_CLOSED;
			r.next.probes = 0;
			r.next.t_ms = 0;
			r.transition = NS_TR_CLOSED;
		}
		break;
	case NS_EV_FAILURE:
		r.next.consec = cur->consec < NS_BRK_CONSEC_MAX ? cur->consec + 1 : NS_BRK_CONSEC_MAX;
		if (cur->state == NS_CLOSED) {
			r.rule = trip_rule(&r.next, w, s);
			if (r.rule != NS_RULE_NONE) {
				open_now(&r, now_ms, s, w, 0);
				r.transition = NS_TR_OPENED;
			}
		} else if (cur->state == NS_HALF_OPEN) {
			/* one more failed probe in a row */
			open_now(&r, now_ms, s, w, w ? w->reopens + 1 : 1);
			r.rule = NS_RULE_PROBE;
			r.transition = NS_TR_REOPENED;
		}
		break;
	case NS_EV_RESET:
		r.next.state = NS_CLOSED;
		r.next.manual = 0;
		r.next.consec = 0;
		r.next.probes = 0;
		r.next.t_ms = 0;
		r.transition = NS_TR_RESET;
		break;
	case NS_EV_FORCE_OPEN:
		r.next.state = NS_FORCED_OPEN;
		r.next.manual = 1;
		r.next.probes = 0;
		r.next.t_ms = now_ms;
		r.transition = NS_TR_FORCED;
		break;
	}
	return r;
}

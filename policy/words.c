/* words.c -- what the table says, in the words a refusal or a breaker's
 * line gives its operator: the rule that opened a breaker with its
 * figures, the max_connections limit in force. Pure: both engines (the
 * library, shimrun's seccomp engine) say the same thing the same way. */
#include <stdio.h>
#include <string.h>

#include "table.h"

void ns_rule_figures(const struct ns_table *t, int slot, const struct ns_step *st, const struct ns_settings *s,
		     uint64_t now_ms, char *b, size_t n)
{
	struct ns_entry e;
	unsigned long long win = (unsigned long long)s->window_ms;

	memset(&e, 0, sizeof(e));
	ns_table_read(t, slot, now_ms, &e);
	switch (st->rule) {
	case NS_RULE_THRESHOLD:
		snprintf(b, n, "%u failures in the %llu ms window, threshold %u", e.failures_in_window, win,
			 s->failure_threshold);
		break;
	case NS_RULE_CONSECUTIVE:
		snprintf(b, n, "%u failures in a row, threshold %u", st->next.consec, s->consecutive_failures);
		break;
	case NS_RULE_RATE:
		snprintf(b, n, "%u of %u outcomes in the %llu ms window failed, failure_rate %u.%02u%%",
			 e.failures_in_window, e.outcomes_in_window, win, s->failure_rate_bp / 100,
			 s->failure_rate_bp % 100);
		break;
	case NS_RULE_TIMEOUT_RATE:
		snprintf(b, n, "%u of %u outcomes in the %llu ms window timed out, timeout_rate %u.%02u%%",
			 e.timeouts_in_window, e.outcomes_in_window, win, s->timeout_rate_bp / 100,
			 s->timeout_rate_bp % 100);
		break;
	case NS_RULE_SLOW_RATE:
		snprintf(b, n, "%u of %u outcomes in the %llu ms window slower than %llu ms, slow_call_rate %u.%02u%%",
			 e.slow_in_window, e.outcomes_in_window, win, (unsigned long long)s->slow_call_ms,
			 s->slow_call_rate_bp / 100, s->slow_call_rate_bp % 100);
		break;
	case NS_RULE_LATENCY_P99:
		snprintf(b, n, "first-byte p99 %llu ms in the %llu ms window, latency_p99 %llu ms",
			 (unsigned long long)(e.p99_in_window_us / 1000), win, (unsigned long long)s->latency_p99_ms);
		break;
	default:
		snprintf(b, n, "%u failures in a row", st->next.consec);
	}
}

void ns_cap_text(const struct ns_table *t, int idx, const struct ns_settings *set, uint64_t now_ms, char *buf, size_t n)
{
	uint32_t cap = ns_table_cap_for(t, idx, set, now_ms);

	if (set->adaptive)
		snprintf(buf, n, "auto: %u now", cap);
	else if (cap != set->max_connections)
		snprintf(buf, n, "%u; %u now, in slow_start", set->max_connections, cap);
	else
		snprintf(buf, n, "%u", cap);
}

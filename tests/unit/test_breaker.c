/* test_breaker.c -- the state machine under a fake clock. */
#include <criterion/criterion.h>

#include "../../policy/breaker.h"

static struct ns_settings S(void)
{
	struct ns_settings s = ns_builtin_settings;

	s.failure_threshold = 3;
	s.open_duration_ms = 1000;
	return s;
}

static struct ns_step fail(struct ns_brk *b, uint32_t wf, uint32_t wo, uint64_t now, const struct ns_settings *s)
{
	struct ns_window w = { wf, wo, 0, 0, 0, 0, 5000 };
	struct ns_step st = ns_brk_step(b, NS_EV_FAILURE, &w, now, s);

	*b = st.next;
	return st;
}

static struct ns_step ev(struct ns_brk *b, int e, uint64_t now, const struct ns_settings *s)
{
	struct ns_step st = ns_brk_step(b, e, NULL, now, s);

	*b = st.next;
	return st;
}

Test(breaker, opens_at_threshold_not_before)
{
	struct ns_settings s = S();
	struct ns_brk b = { 0 };

	cr_assert_eq(fail(&b, 1, 1, 100, &s).transition, NS_TR_NONE);
	cr_assert_eq(fail(&b, 2, 2, 200, &s).transition, NS_TR_NONE);
	cr_assert_eq(ev(&b, NS_EV_ATTEMPT, 250, &s).verdict, NS_ALLOW);
	{
		struct ns_step st = fail(&b, 3, 3, 300, &s);

		cr_assert_eq(st.transition, NS_TR_OPENED);
		cr_assert_eq(st.rule, NS_RULE_THRESHOLD);
	}
	cr_assert_eq(b.state, NS_OPEN);
	cr_assert_eq(b.t_ms, 1300);
	cr_assert_eq(ev(&b, NS_EV_ATTEMPT, 1299, &s).verdict, NS_REJECT);
}

Test(breaker, window_expiry_is_the_callers_count)
{
	/* the window count comes in with the event: old failures that left the
	 * window do not open it even with many failures overall */
	struct ns_settings s = S();
	struct ns_brk b = { 0 };

	for (int i = 0; i < 10; i++)
		cr_assert_eq(fail(&b, 1, 1, (uint64_t)i * 100000, &s).transition, NS_TR_NONE);
	cr_assert_eq(b.state, NS_CLOSED);
	cr_assert_eq(b.consec, 10);
}

Test(breaker, half_open_probe_success_closes)
{
	struct ns_settings s = S();
	struct ns_brk b = { 0 };
	struct ns_step st;

	fail(&b, 3, 3, 0, &s);
	st = ev(&b, NS_EV_ATTEMPT, 1000, &s);
	cr_assert_eq(st.verdict, NS_ALLOW_PROBE);
	cr_assert_eq(st.transition, NS_TR_HALF_OPENED);
	cr_assert_eq(b.state, NS_HALF_OPEN);
	/* only half_open_probes (1) probes while the first is out */
	cr_assert_eq(ev(&b, NS_EV_ATTEMPT, 1001, &s).verdict, NS_REJECT);
	st = ev(&b, NS_EV_SUCCESS, 1002, &s);
	cr_assert_eq(st.transition, NS_TR_CLOSED);
	cr_assert_eq(b.state, NS_CLOSED);
	cr_assert_eq(b.consec, 0);
	cr_assert_eq(ev(&b, NS_EV_ATTEMPT, 1003, &s).verdict, NS_ALLOW);
}

Test(breaker, half_open_probe_failure_reopens_for_another_period)
{
	struct ns_settings s = S();
	struct ns_brk b = { 0 };
	struct ns_step st;

	fail(&b, 3, 3, 0, &s);
	ev(&b, NS_EV_ATTEMPT, 1500, &s);
	st = fail(&b, 1, 1, 1600, &s);
	cr_assert_eq(st.transition, NS_TR_REOPENED);
	cr_assert_eq(st.rule, NS_RULE_PROBE);
	cr_assert_eq(b.state, NS_OPEN);
	cr_assert_eq(b.t_ms, 2600);
	cr_assert_eq(ev(&b, NS_EV_ATTEMPT, 2599, &s).verdict, NS_REJECT);
	cr_assert_eq(ev(&b, NS_EV_ATTEMPT, 2600, &s).verdict, NS_ALLOW_PROBE);
}

Test(breaker, several_probes_then_none)
{
	struct ns_settings s = S();
	struct ns_brk b = { 0 };

	s.half_open_probes = 3;
	fail(&b, 3, 3, 0, &s);
	cr_assert_eq(ev(&b, NS_EV_ATTEMPT, 1000, &s).verdict, NS_ALLOW_PROBE);
	cr_assert_eq(ev(&b, NS_EV_ATTEMPT, 1001, &s).verdict, NS_ALLOW_PROBE);
	cr_assert_eq(ev(&b, NS_EV_ATTEMPT, 1002, &s).verdict, NS_ALLOW_PROBE);
	cr_assert_eq(ev(&b, NS_EV_ATTEMPT, 1003, &s).verdict, NS_REJECT);
}

Test(breaker, a_probe_that_never_reports_does_not_wedge)
{
	struct ns_settings s = S();
	struct ns_brk b = { 0 };

	fail(&b, 3, 3, 0, &s);
	cr_assert_eq(ev(&b, NS_EV_ATTEMPT, 1000, &s).verdict, NS_ALLOW_PROBE);
	cr_assert_eq(ev(&b, NS_EV_ATTEMPT, 1999, &s).verdict, NS_REJECT);
	cr_assert_eq(ev(&b, NS_EV_ATTEMPT, 2000, &s).verdict, NS_ALLOW_PROBE);
}

Test(breaker, manual_recovery_stays_open_until_reset)
{
	struct ns_settings s = S();
	struct ns_brk b = { 0 };

	s.recovery = NS_RECOVERY_MANUAL;
	fail(&b, 3, 3, 0, &s);
	cr_assert_eq(b.manual, 1);
	cr_assert_eq(ev(&b, NS_EV_ATTEMPT, 1000000, &s).verdict, NS_REJECT);
	cr_assert_eq(ev(&b, NS_EV_RESET, 1000001, &s).transition, NS_TR_RESET);
	cr_assert_eq(b.state, NS_CLOSED);
	cr_assert_eq(ev(&b, NS_EV_ATTEMPT, 1000002, &s).verdict, NS_ALLOW);
}

Test(breaker, forced_open_ignores_time_and_success)
{
	struct ns_settings s = S();
	struct ns_brk b = { 0 };

	ev(&b, NS_EV_FORCE_OPEN, 5, &s);
	cr_assert_eq(b.state, NS_FORCED_OPEN);
	cr_assert_eq(ev(&b, NS_EV_ATTEMPT, 99999999, &s).verdict, NS_REJECT);
	ev(&b, NS_EV_SUCCESS, 99999999, &s);
	cr_assert_eq(b.state, NS_FORCED_OPEN);
	ev(&b, NS_EV_RESET, 99999999, &s);
	cr_assert_eq(b.state, NS_CLOSED);
}

Test(breaker, success_resets_consecutive)
{
	struct ns_settings s = S();
	struct ns_brk b = { 0 };

	s.failure_threshold = 0;
	s.consecutive_failures = 3;
	fail(&b, 0, 0, 1, &s);
	fail(&b, 0, 0, 2, &s);
	ev(&b, NS_EV_SUCCESS, 3, &s);
	fail(&b, 0, 0, 4, &s);
	fail(&b, 0, 0, 5, &s);
	cr_assert_eq(b.state, NS_CLOSED);
	cr_assert_eq(fail(&b, 0, 0, 6, &s).rule, NS_RULE_CONSECUTIVE);
	cr_assert_eq(b.state, NS_OPEN);
}

Test(breaker, rate_boundary_49_vs_50_percent)
{
	struct ns_settings s = S();
	struct ns_brk b = { 0 };

	s.failure_threshold = 0;
	s.failure_rate_bp = 5000;
	s.min_calls = 10;
	cr_assert_eq(fail(&b, 49, 100, 1, &s).transition, NS_TR_NONE);
	cr_assert_eq(fail(&b, 4, 9, 2, &s).transition, NS_TR_NONE);   /* under min_calls */
	cr_assert_eq(fail(&b, 50, 100, 3, &s).rule, NS_RULE_RATE);
}

Test(breaker, pack_round_trips_and_saturates)
{
	struct ns_brk b = { NS_HALF_OPEN, 1, 4095, 255, (1ULL << 40) - 1 }, c;

	ns_brk_unpack(ns_brk_pack(&b), &c);
	cr_assert_eq(memcmp(&b, &c, sizeof(b)), 0);
	b.consec = 100000;
	b.t_ms = 1ULL << 50;
	ns_brk_unpack(ns_brk_pack(&b), &c);
	cr_assert_eq(c.consec, 4095);
	cr_assert_eq(c.t_ms, (1ULL << 40) - 1);
	cr_assert_eq(c.state, NS_HALF_OPEN);
}

Test(breaker, open_periods_grow_by_the_backoff_up_to_the_maximum)
{
	struct ns_settings s = S();

	cr_assert_eq(ns_open_period_ms(&s, 0, 0), 1000);
	cr_assert_eq(ns_open_period_ms(&s, 5, 10000), 1000, "no backoff, no jitter: always the same");
	s.open_backoff_milli = 2000;
	s.open_duration_max_ms = 4000;
	cr_assert_eq(ns_open_period_ms(&s, 0, 5000), 1000);
	cr_assert_eq(ns_open_period_ms(&s, 1, 5000), 2000);
	cr_assert_eq(ns_open_period_ms(&s, 2, 5000), 4000);
	cr_assert_eq(ns_open_period_ms(&s, 3, 5000), 4000);
	cr_assert_eq(ns_open_period_ms(&s, 64, 5000), 4000);
	s.open_backoff_milli = 1500;
	s.open_duration_max_ms = 0;
	cr_assert_eq(ns_open_period_ms(&s, 2, 5000), 2250);
	/* the jitter spreads within +- its share: the draw's ends and middle */
	s.open_backoff_milli = 0;
	s.open_jitter_bp = 2000;
	cr_assert_eq(ns_open_period_ms(&s, 0, 0), 800);
	cr_assert_eq(ns_open_period_ms(&s, 0, 5000), 1000);
	cr_assert_eq(ns_open_period_ms(&s, 0, 10000), 1200);
}

Test(breaker, each_failed_probe_in_a_row_opens_longer)
{
	struct ns_settings s = S();
	struct ns_brk b = { 0 };
	struct ns_window w = { 3, 3, 0, 0, 0, 0, 5000 };
	struct ns_step st;

	s.open_backoff_milli = 2000;
	s.open_duration_max_ms = 4000;
	fail(&b, 1, 1, 0, &s);
	fail(&b, 2, 2, 0, &s);
	st = fail(&b, 3, 3, 0, &s);
	cr_assert_eq(st.transition, NS_TR_OPENED);
	cr_assert_eq(b.t_ms, 1000);
	/* the table keeps the failed probes in a row (w.reopens) */
	for (uint32_t k = 0, at = 1000; k < 3; k++) {
		cr_assert_eq(ev(&b, NS_EV_ATTEMPT, at, &s).verdict, NS_ALLOW_PROBE);
		w.reopens = k;
		st = ns_brk_step(&b, NS_EV_FAILURE, &w, at, &s);
		b = st.next;
		cr_assert_eq(st.transition, NS_TR_REOPENED);
		cr_assert_eq(b.t_ms - at, k == 0 ? 2000 : 4000, "reopen %u: %llu ms", k,
			     (unsigned long long)(b.t_ms - at));
		at = (uint32_t)b.t_ms;
	}
}

Test(retry, delay_bounds_with_a_seeded_source)
{
	uint64_t rng = 42, lo[4] = { UINT64_MAX, UINT64_MAX, UINT64_MAX, UINT64_MAX }, hi[4] = { 0 };

	for (int i = 0; i < 20000; i++)
		for (unsigned a = 0; a < 4; a++) {
			uint64_t d = ns_retry_delay_ms(100, a, &rng);

			lo[a] = d < lo[a] ? d : lo[a];
			hi[a] = d > hi[a] ? d : hi[a];
		}
	for (unsigned a = 0; a < 4; a++) {
		uint64_t base = 100ULL << a;

		cr_assert_geq(lo[a], base / 2, "attempt %u: %llu", a, (unsigned long long)lo[a]);
		cr_assert_leq(hi[a], base * 3 / 2, "attempt %u: %llu", a, (unsigned long long)hi[a]);
		/* the whole range is used: jitter, not a constant */
		cr_assert_lt(lo[a], base * 11 / 20);
		cr_assert_gt(hi[a], base * 29 / 20);
	}
}

Test(retry, same_seed_same_sequence)
{
	uint64_t a = 7, b = 7;

	for (int i = 0; i < 100; i++)
		cr_assert_eq(ns_retry_delay_ms(1000, 1, &a), ns_retry_delay_ms(1000, 1, &b));
}

/* The quick read of an attempt (table.c's fast path) must agree with the
 * step wherever it answers, and answer only where the step changes nothing. */
Test(breaker, quick_attempt_agrees_with_the_step)
{
	struct ns_settings s = ns_builtin_settings;
	const uint64_t now = 1000000;
	struct ns_brk cases[] = {
		{ NS_CLOSED, 0, 0, 0, 0 },
		{ NS_CLOSED, 0, 3, 0, now - 5 },
		{ NS_OPEN, 0, 5, 0, now + 1 },      /* not yet due */
		{ NS_OPEN, 0, 5, 0, now },          /* due: half-opens */
		{ NS_OPEN, 0, 5, 0, now - 1000 },
		{ NS_OPEN, 1, 0, 0, 0 },            /* open, held by hand */
		{ NS_FORCED_OPEN, 1, 0, 0, now - 5 },   /* shimctl open */
		{ NS_HALF_OPEN, 0, 0, 1, now - 10 },
		{ NS_HALF_OPEN, 0, 0, 0, now - 10 },
	};
	int answered = 0;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		uint64_t w = ns_brk_pack(&cases[i]);
		int q = ns_brk_attempt_quick(w, now);
		struct ns_step st = ns_brk_step(&cases[i], NS_EV_ATTEMPT, NULL, now, &s);

		if (q < 0)
			continue;
		answered++;
		cr_assert_eq(q, st.verdict, "case %zu: quick %d, step %d", i, q, st.verdict);
		cr_assert_eq(ns_brk_pack(&st.next), w, "case %zu: the step changed the state the quick read kept", i);
		cr_assert_eq(st.transition, NS_TR_NONE, "case %zu", i);
	}
	cr_assert_eq(answered, 5, "closed twice, open not yet due, held, forced open: %d", answered);
}

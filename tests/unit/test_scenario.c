/* test_scenario.c -- shimrun --scenario's timeline: which faults are in
 * force at each moment, for which destination, and the errors. */
#include <criterion/criterion.h>
#include <string.h>

#include "../../policy/scenario.h"

static struct ns_scenario parse_ok(const char *text)
{
	struct ns_scenario s;
	char errs[1000] = "";

	cr_assert_eq(ns_scenario_parse(text, "t.scn", &s, errs, sizeof(errs)), 0, "%s", errs);
	return s;
}

/* The kind of the first fault in force for dest at t ms, or 0. */
static unsigned kind_at(const struct ns_scenario *s, const char *dest, uint64_t t)
{
	struct ns_dest d;
	struct ns_faults f;

	cr_assert_eq(ns_dest_parse(dest, &d), 0, "%s", dest);
	return ns_scenario_match(s, t, &d, &f) ? f.f[0].kind : 0;
}

Test(scenario, phases_begin_at_their_time_and_clear_ends_them)
{
	struct ns_scenario s = parse_ok("# a flapping dependency\n"
					"0s api.test:80 latency 200ms\n"
					"\n"
					"10s api.test:80 refuse   # the outage\n"
					"20s api.test:80 clear\n");

	cr_assert_eq(s.n, 3);
	cr_assert_eq(kind_at(&s, "api.test:80", 0), NS_F_LATENCY);
	cr_assert_eq(kind_at(&s, "api.test:80", 9999), NS_F_LATENCY);
	cr_assert_eq(kind_at(&s, "api.test:80", 10000), NS_F_REFUSE);
	cr_assert_eq(kind_at(&s, "api.test:80", 19999), NS_F_REFUSE);
	cr_assert_eq(kind_at(&s, "api.test:80", 20000), 0);
	cr_assert_eq(kind_at(&s, "api.test:80", 1000000), 0);
	cr_assert_eq(kind_at(&s, "other.test:80", 15000), 0);
	cr_assert_eq(ns_scenario_end(&s), 20000);
	ns_scenario_free(&s);
}

Test(scenario, lines_out_of_order_are_played_in_time_order)
{
	struct ns_scenario s = parse_ok("20s api.test clear\n5s api.test reset\n0s api.test stall\n");

	cr_assert_eq(kind_at(&s, "api.test:443", 0), NS_F_STALL);
	cr_assert_eq(kind_at(&s, "api.test:443", 5000), NS_F_RESET);
	cr_assert_eq(kind_at(&s, "api.test:443", 20000), 0);
	ns_scenario_free(&s);
}

Test(scenario, each_destination_has_its_own_state_and_a_port_is_more_specific)
{
	struct ns_scenario s = parse_ok("0s api.test refuse\n"
					"1s api.test:443 latency 1s\n"
					"2s 127.0.0.1 blackhole\n"
					"3s api.test clear\n"
					"4s api.test:443 clear\n");

	cr_assert_eq(kind_at(&s, "api.test:80", 500), NS_F_REFUSE);
	cr_assert_eq(kind_at(&s, "api.test:443", 500), NS_F_REFUSE);
	cr_assert_eq(kind_at(&s, "api.test:443", 1500), NS_F_LATENCY);   /* with a port: more specific */
	cr_assert_eq(kind_at(&s, "api.test:80", 1500), NS_F_REFUSE);
	cr_assert_eq(kind_at(&s, "127.0.0.1:9", 2500), NS_F_BLACKHOLE);
	cr_assert_eq(kind_at(&s, "api.test:80", 3500), 0);               /* its own clear */
	cr_assert_eq(kind_at(&s, "api.test:443", 3500), NS_F_LATENCY);   /* not api.test:443's */
	cr_assert_eq(kind_at(&s, "api.test:443", 4500), 0);
	cr_assert_eq(kind_at(&s, "127.0.0.1:9", 4500), NS_F_BLACKHOLE);
	ns_scenario_free(&s);
}

Test(scenario, every_bad_line_is_named_by_file_and_line)
{
	struct ns_scenario s;
	char errs[2000] = "";

	cr_assert_eq(ns_scenario_parse("0s api.test refuse\n"
				       "soon api.test refuse\n"
				       "5s\n"
				       "5s bad..name refuse\n"
				       "5s api.test latency\n"
				       "5s api.test clear now\n"
				       "5 api.test refuse\n",
				       "t.scn", &s, errs, sizeof(errs)),
		     6, "%s", errs);
	cr_assert(strstr(errs, "t.scn:2: bad time 'soon'"), "%s", errs);
	cr_assert(strstr(errs, "t.scn:3: expected AT DEST FAULTS or AT DEST clear"), "%s", errs);
	cr_assert(strstr(errs, "t.scn:4: bad destination 'bad..name'"), "%s", errs);
	cr_assert(strstr(errs, "t.scn:5: bad fault 'latency'"), "%s", errs);
	cr_assert(strstr(errs, "t.scn:6: bad fault 'clear now'"), "%s", errs);
	cr_assert(strstr(errs, "t.scn:7: bad time '5': a duration needs a unit"), "%s", errs);
	cr_assert(!strstr(errs, "t.scn:1:"), "%s", errs);
	cr_assert_null(s.l);
}

Test(scenario, an_empty_text_has_no_line)
{
	struct ns_scenario s = parse_ok("# nothing yet\n\n");

	cr_assert_eq(s.n, 0);
	ns_scenario_free(&s);
}

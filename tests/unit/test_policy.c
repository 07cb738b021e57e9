/* test_policy.c -- the policy language: parsing, errors with file:line, matching. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <sys/stat.h>
#include <unistd.h>
#include <stdio.h>
#include <string.h>

#include "../../policy/policy.h"
#include "testdest.h"

static char err[4096];

static int parse(const char *text, struct ns_policy *p)
{
	return ns_policy_parse(text, strlen(text), "t.conf", p, err, sizeof(err));
}

/* text parsed (it must) and resolved for 127.0.0.1:80 into s */
static void resolve_local(const char *text, struct ns_policy *p, struct ns_settings *s)
{
	struct ns_dest d = { "", AF_INET, { 127, 0, 0, 1 }, 80 };

	cr_assert_eq(parse(text, p), 0, "%s: %s", text, err);
	ns_policy_resolve(p, &d, s, NULL);
}

static void expect_error(const char *text, const char *msg)
{
	struct ns_policy p;
	int r = parse(text, &p);

	cr_assert_gt(r, 0, "expected an error for: %s", text);
	cr_assert_str_eq(err, msg, "for input:\n%s", text);
}

Test(policy, the_design_example_parses)
{
	static const char text[] =
		"[defaults]\n"
		"connect_timeout   = 5s\n"
		"read_timeout      = 30s\n"
		"\n"
		"[host \"api.example.com\"]        # exact host name, any port\n"
		"read_timeout      = 5s\n"
		"\n"
		"[host \"*.bank.example\"]         # any subdomain\n"
		"recovery          = manual\n"
		"connect_retries   = 0\n"
		"\n"
		"[host \"203.0.113.0/24\"]         # CIDR, IPv4 or IPv6\n"
		"mode              = bypass\n"
		"\n"
		"[host \"api.example.com:8443\"]   # host and port\n";
	struct ns_policy p;

	cr_assert_eq(parse(text, &p), 0, "%s", err);
	cr_assert_eq(p.nsections, 5);
	cr_assert_eq(p.sec[0].v.connect_timeout_ms, 5000);
	cr_assert_eq(p.sec[1].kind, NS_MATCH_NAME);
	cr_assert_eq(p.sec[2].kind, NS_MATCH_WILDCARD);
	cr_assert_eq(p.sec[3].kind, NS_MATCH_CIDR);
	cr_assert_eq(p.sec[3].prefix, 24);
	cr_assert_eq(p.sec[4].port, 8443);
	ns_policy_free(&p);
}

Test(policy, every_key_and_unit)
{
	static const char text[] =
		"[defaults]\n"
		"connect_timeout = 250ms\n read_timeout = 1.5s\ntotal_timeout = 2m\n"
		"failure_threshold = 7\nwindow = 1h\nconsecutive_failures = 3\n"
		"failure_rate = 50%\nmin_calls = 12\nrecovery = manual\nopen_duration = 0.25s\n"
		"half_open_probes = 2\nconnect_retries = 2\nretry_backoff = 100ms\nmode = monitor\n";
	struct ns_policy p;
	const struct ns_settings *s;

	cr_assert_eq(parse(text, &p), 0, "%s", err);
	s = &p.sec[0].v;
	cr_assert_eq(s->connect_timeout_ms, 250);
	cr_assert_eq(s->read_timeout_ms, 1500);
	cr_assert_eq(s->total_timeout_ms, 120000);
	cr_assert_eq(s->failure_threshold, 7);
	cr_assert_eq(s->window_ms, 3600000);
	cr_assert_eq(s->consecutive_failures, 3);
	cr_assert_eq(s->failure_rate_bp, 5000);
	cr_assert_eq(s->min_calls, 12);
	cr_assert_eq(s->recovery, NS_RECOVERY_MANUAL);
	cr_assert_eq(s->open_duration_ms, 250);
	cr_assert_eq(s->half_open_probes, 2);
	cr_assert_eq(s->connect_retries, 2);
	cr_assert_eq(s->retry_backoff_ms, 100);
	cr_assert_eq(s->mode, NS_MODE_MONITOR);
	ns_policy_free(&p);
}

Test(policy, rate_is_kept_exactly_and_written_back_as_read)
{
	static const struct { const char *in; uint64_t mph; uint64_t us; const char *out; } cases[] = {
		{ "5/s", 18000000, 200000, "5/s" }, { "30/m", 1800000, 2000000, "30/m" },
		{ "1/h", 1000, 3600000000ULL, "1/h" }, { "2.5/s", 9000000, 400000, "150/m" },
		{ "1.5/h", 1500, 2400000000ULL, "1.500/h" }, { "1000000/s", 3600000000000ULL, 1, "1000000/s" },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char text[128], back[32];
		struct ns_policy p;
		struct ns_settings s;

		snprintf(text, sizeof(text), "[defaults]\nrate = %s\nburst = 2\n", cases[i].in);
		resolve_local(text, &p, &s);
		cr_assert_eq(s.rate_mph, cases[i].mph, "%s", cases[i].in);
		cr_assert_eq(s.rate_interval_us, cases[i].us, "%s", cases[i].in);
		cr_assert_eq(s.burst, 2);
		cr_assert(s.shaping, "rate alone shapes");
		ns_setting_format(NS_K_RATE, &s, back, sizeof(back));
		cr_assert_str_eq(back, cases[i].out);
		ns_policy_free(&p);
	}
}

/* the place's fast try on the connect path (shape.h) is for max_connections
 * alone: with rate or slow_start beside it the connect also waits for a
 * token or a share, which only the full path asks for */
Test(policy, max_connections_alone_is_the_fast_place_try)
{
	static const struct {
		const char *text;
		unsigned shaping;
	} cases[] = {
		{ "max_connections = 4\n", NS_SHAPING_ANY | NS_SHAPING_PLACE_ONLY },
		{ "max_connections = auto\n", NS_SHAPING_ANY | NS_SHAPING_PLACE_ONLY },
		{ "max_connections = 4\nrate = 5/s\n", NS_SHAPING_ANY },
		{ "max_connections = 4\nslow_start = 10s\n", NS_SHAPING_ANY },
		{ "rate = 5/s\n", NS_SHAPING_ANY },
		{ "throttle = adaptive\n", NS_SHAPING_ANY },
		{ "read_timeout = 5s\n", 0 },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char text[160];
		struct ns_policy p;
		struct ns_settings s;

		snprintf(text, sizeof(text), "[defaults]\n%s", cases[i].text);
		resolve_local(text, &p, &s);
		cr_assert_eq(s.shaping, cases[i].shaping, "%s: %u", cases[i].text, s.shaping);
		ns_policy_free(&p);
	}
}

Test(policy, max_connections_auto_and_throttle_adaptive_resolve_and_write_back)
{
	struct ns_policy p;
	struct ns_settings s;
	struct ns_dest d = { "", AF_INET, { 127, 0, 0, 1 }, 80 };
	char back[32];

	cr_assert_eq(parse("[defaults]\nmax_connections = auto\nmax_connections_max = 12\nadaptive_backoff = 0.75\n"
			   "throttle = adaptive\nthrottle_k = 1.5\n[host \"10.0.0.0/8\"]\nmax_connections = 3\n",
			   &p),
		     0, "%s", err);
	ns_policy_resolve(&p, &d, &s, NULL);
	cr_assert(s.adaptive && s.shaping && s.throttle);
	cr_assert_eq(s.max_connections, 12, "auto spans max_connections_max's places");
	cr_assert_eq(s.max_connections_min, 1);
	cr_assert_eq(s.adaptive_backoff_milli, 750);
	cr_assert_eq(s.adaptive_interval_ms, 1000);
	cr_assert_eq(s.throttle_k_milli, 1500);
	cr_assert_eq(s.throttle_window_ms, 120000);
	ns_setting_format(NS_K_MAX_CONNECTIONS, &s, back, sizeof(back));
	cr_assert_str_eq(back, "auto");
	ns_setting_format(NS_K_THROTTLE, &s, back, sizeof(back));
	cr_assert_str_eq(back, "adaptive");
	d.addr[0] = 10;
	ns_policy_resolve(&p, &d, &s, NULL);
	cr_assert(!s.adaptive && s.max_connections == 3, "a fixed cap in a host section wins");
	ns_setting_format(NS_K_MAX_CONNECTIONS, &s, back, sizeof(back));
	cr_assert_str_eq(back, "3");
	ns_policy_free(&p);
	expect_error("[defaults]\nmax_connections = 4\nadaptive_interval = 2s\n",
		     "t.conf:3: adaptive_interval: shapes max_connections = auto, which this section (or [defaults]) "
		     "does not set\n");
	expect_error("[defaults]\nmax_connections = auto\n[host \"a\"]\nmax_connections_min = 33\n",
		     "t.conf:4: max_connections_min: 33 is out of range (1 to 32)\n");
}

Test(policy, max_requests_is_a_number_of_requests_or_auto)
{
	struct ns_policy p;
	struct ns_settings s;
	struct ns_dest d = { "", AF_INET, { 127, 0, 0, 1 }, 80 };
	char back[32];

	cr_assert_eq(parse("[defaults]\nmax_requests = 4\n[host \"10.0.0.0/8\"]\nmax_requests = 0\n", &p), 0, "%s",
		     err);
	ns_policy_resolve(&p, &d, &s, NULL);
	cr_assert_eq(s.max_requests, 4);
	cr_assert_eq(s.max_connections, 0, "connections are not capped by it");
	ns_setting_format(NS_K_MAX_REQUESTS, &s, back, sizeof(back));
	cr_assert_str_eq(back, "4");
	d.addr[0] = 10;
	ns_policy_resolve(&p, &d, &s, NULL);
	cr_assert_eq(s.max_requests, 0);
	ns_policy_free(&p);
	expect_error("[defaults]\nmax_requests = 33\n", "t.conf:2: max_requests: 33 is out of range (0 to 32)\n");
	cr_assert_eq(parse("[defaults]\nmax_requests = auto\nmax_requests_max = 8\nadaptive_interval = 2s\n", &p), 0,
		     "%s", err);
	d.addr[0] = 127;
	ns_policy_resolve(&p, &d, &s, NULL);
	cr_assert(s.req_adaptive && !s.adaptive);
	cr_assert_eq(s.max_requests, 8, "auto spans max_requests_max's places");
	cr_assert_eq(s.max_requests_min, 1);
	cr_assert_eq(s.adaptive_interval_ms, 2000);
	ns_setting_format(NS_K_MAX_REQUESTS, &s, back, sizeof(back));
	cr_assert_str_eq(back, "auto");
	ns_policy_free(&p);
	expect_error(
		"[defaults]\nmax_requests = 4\nmax_requests_min = 2\n",
		"t.conf:3: max_requests_min: shapes max_requests = auto, which this section (or [defaults]) does not "
		"set\n");
	expect_error("[defaults]\nmax_requests = auto\nmax_requests_min = 9\nmax_requests_max = 4\n",
		     "t.conf:4: max_requests_min (9) is over max_requests_max (4)\n");
}

Test(policy, zero_switches_a_limit_off_and_empty_file_is_builtin)
{
	struct ns_policy p;
	struct ns_settings s;
	struct ns_dest d = dest(NULL, "10.0.0.1", 80);

	cr_assert_eq(parse("[defaults]\nread_timeout = 0\n", &p), 0, "%s", err);
	ns_policy_resolve(&p, &d, &s, NULL);
	cr_assert_eq(s.read_timeout_ms, 0);
	cr_assert_eq(s.connect_timeout_ms, 5000);
	ns_policy_free(&p);
	cr_assert_eq(parse("", &p), 0);
	ns_policy_resolve(&p, &d, &s, NULL);
	for (int k = 0; k < NS_K_COUNT; k++) {
		char got[64], want[64];

		ns_setting_format(k, &s, got, sizeof(got));
		ns_setting_format(k, &ns_builtin_settings, want, sizeof(want));
		cr_assert_str_eq(got, want, "%s", ns_key_names[k]);
	}
	ns_policy_free(&p);
}

Test(policy_errors, each_with_file_and_line)
{
	expect_error("[defaults]\nbogus = 1\n", "t.conf:2: unknown key 'bogus'\n");
	expect_error("[defaults]\nmax_connections = 33\n", "t.conf:2: max_connections: 33 is out of range (0 to 32)\n");
	expect_error("[defaults]\nopen_backoff = 0.5\n", "t.conf:2: open_backoff: 0.5 is out of range (1 to 100)\n");
	expect_error("[defaults]\nread_timeout = 5s\n\n[host \"a.example\"]\nslow_start = 5s\n",
		     "t.conf:5: slow_start: ramps max_connections and rate, neither of which this section (or [defaults]) sets\n");
	expect_error("[defaults]\nrate = 0/s\n", "t.conf:2: rate: 0/s lets nothing through (write off to have no rate)\n");
	expect_error("[defaults]\nburst = 2\n", "t.conf:2: burst: shapes rate, which this section (or [defaults]) does not set\n");
	expect_error("[defaults]\nretry_budget_min = 1/h\n", "t.conf:2: retry_budget_min: 1/h is out of range (from 4/h to 1000000/s)\n");
	expect_error("[defaults]\nopen_backoff = twice\n",
		     "t.conf:2: open_backoff: bad factor 'twice': expected a number such as 2 or 1.5 (at most three decimals)\n");
	expect_error("[defaults]\nqueue_timeout = 30\n",
		     "t.conf:2: queue_timeout: bad duration '30': a duration needs a unit (ms, s, m, h), such as 250ms or 3s\n");
	expect_error("[defaults]\nread_timeout = 5\n",
		     "t.conf:2: read_timeout: bad duration '5': a duration needs a unit (ms, s, m, h), such as 250ms or 3s\n");
	expect_error("[defaults]\nread_timeout = 5 s\n",
		     "t.conf:2: read_timeout: bad duration '5 s': unknown unit (use ms, s, m or h)\n");
	expect_error("[defaults]\nread_timeout = fast\n",
		     "t.conf:2: read_timeout: bad duration 'fast': expected a number with a unit (ms, s, m, h), such as 250ms or 3s\n");
	expect_error("[defaults]\nread_timeout = 1s\nread_timeout = 2s\n",
		     "t.conf:3: duplicate key 'read_timeout' (first set at line 2)\n");
	expect_error("[default]\n", "t.conf:1: unknown section [default]: expected [defaults] or [host \"...\"]\n");
	expect_error("[host api.example.com]\n",
		     "t.conf:1: bad section header: the host pattern must be in double quotes\n");
	expect_error("[defaults\n", "t.conf:1: bad section header: missing ']'\n");
	expect_error("read_timeout = 1s\n", "t.conf:1: key 'read_timeout' outside a section (put it under [defaults])\n");
	expect_error("[defaults]\nread_timeout\n", "t.conf:2: expected 'key = value' or a [section] header\n");
	expect_error("[defaults]\nmode = off\n",
		     "t.conf:2: mode: bad value 'off': expected enforce, monitor or bypass\n");
	expect_error("[defaults]\nrecovery = later\n", "t.conf:2: recovery: bad value 'later': expected auto or manual\n");
	expect_error("[defaults]\nfailure_rate = 50\n",
		     "t.conf:2: failure_rate: bad percentage '50': expected a value such as 50%\n");
	expect_error("[defaults]\nfailure_rate = 150%\n", "t.conf:2: failure_rate: 150% is over 100%\n");
	expect_error("[defaults]\nfailure_threshold = -1\n",
		     "t.conf:2: failure_threshold: bad number '-1': expected a whole number\n");
	expect_error("[defaults]\nhalf_open_probes = 0\n", "t.conf:2: half_open_probes: 0 is out of range (1 to 255)\n");
	expect_error("[defaults]\nconsecutive_failures = 5000\n",
		     "t.conf:2: consecutive_failures: 5000 is out of range (0 to 4095)\n");
	expect_error("[defaults]\nwindow = 0\n", "t.conf:2: window: cannot be 0 (failures are counted in it)\n");
	expect_error("[defaults]\nread_timeout = 1.0001s\n",
		     "t.conf:2: read_timeout: bad duration '1.0001s': expected a number with a unit (ms, s, m, h), such as 250ms or 3s\n");
	expect_error("[defaults]\n[defaults]\n", "t.conf:2: duplicate section [defaults] (first at line 1)\n");
	expect_error("[host \"a.example\"]\n[host \"A.example.\"]\n",
		     "t.conf:2: duplicate section [host \"A.example.\"] (first at line 1)\n");
	expect_error("[host \"10.0.0.1/33\"]\n", "t.conf:1: bad host pattern \"10.0.0.1/33\": bad prefix length\n");
	expect_error("[host \"10.0.0.1/8\"]\n",
		     "t.conf:1: bad host pattern \"10.0.0.1/8\": address has bits set beyond the prefix length\n");
	expect_error("[host \"a.example:0\"]\n", "t.conf:1: bad host pattern \"a.example:0\": bad port (1 to 65535)\n");
	expect_error("[host \"a.example:99999\"]\n", "t.conf:1: bad host pattern \"a.example:99999\": bad port (1 to 65535)\n");
	expect_error("[host \"*\"]\n",
		     "t.conf:1: bad host pattern \"*\": a wildcard must be '*.' followed by a domain, such as *.example.com\n");
	expect_error("[host \"bad host\"]\n", "t.conf:1: bad host pattern \"bad host\": not a valid host name, address or CIDR\n");
	expect_error("[host \"\"]\n", "t.conf:1: bad host pattern \"\": empty host\n");
	expect_error("[host \"[10.0.0.1]:80\"]\n", "t.conf:1: bad host pattern \"[10.0.0.1]:80\": brackets are only for IPv6 addresses\n");
	expect_error("[host \"2001:db8::/129\"]\n", "t.conf:1: bad host pattern \"2001:db8::/129\": bad prefix length\n");
}

Test(policy_errors, reports_every_error_not_just_the_first)
{
	struct ns_policy p;
	int r = parse("[defaults]\nbogus = 1\nread_timeout = x\n[host \"\"]\nmode = on\n", &p);

	cr_assert_eq(r, 4);
	cr_assert_str_eq(err,
		"t.conf:2: unknown key 'bogus'\n"
		"t.conf:3: read_timeout: bad duration 'x': expected a number with a unit (ms, s, m, h), such as 250ms or 3s\n"
		"t.conf:4: bad host pattern \"\": empty host\n"
		"t.conf:5: mode: bad value 'on': expected enforce, monitor or bypass\n");
}

Test(policy_errors, binary_and_overlong_lines_do_not_crash)
{
	char text[3000];
	struct ns_policy p;

	memset(text, 'a', sizeof(text));
	text[sizeof(text) - 1] = '\n';
	cr_assert_gt(ns_policy_parse(text, sizeof(text), "t.conf", &p, err, sizeof(err)), 0);
	cr_assert_str_eq(err, "t.conf:1: line longer than 1024 characters\n");
	cr_assert_gt(ns_policy_parse("[defaults]\n\0x\n", 14, "t.conf", &p, err, sizeof(err)), 0);
	cr_assert_str_eq(err, "t.conf:2: NUL byte in line\n");
}

Test(policy_errors, a_fifo_is_refused_without_waiting_for_a_writer)
{
	struct ns_policy p;
	char path[64];

	snprintf(path, sizeof(path), "/tmp/nsfifo.%d", (int)getpid());
	unlink(path);
	cr_assert_eq(mkfifo(path, 0600), 0);
	cr_assert_gt(ns_policy_load(path, &p, err, sizeof(err)), 0);
	unlink(path);
	cr_assert(strstr(err, ": not a regular file") != NULL, "%s", err);
}

Test(policy_errors, missing_file_names_it)
{
	struct ns_policy p;

	cr_assert_gt(ns_policy_load("/nonexistent/x.conf", &p, err, sizeof(err)), 0);
	cr_assert_str_eq(err, "/nonexistent/x.conf: cannot open: No such file or directory\n");
}

Test(policy_errors, a_tiny_error_buffer_is_never_overrun)
{
	struct ns_policy p;
	char small[16];

	memset(small, 'Z', sizeof(small));
	cr_assert_gt(ns_policy_parse("[defaults]\nbogus = 1\n", 21, "t.conf", &p, small, 10), 0);
	cr_assert_eq(strlen(small), 9);
	cr_assert_eq(small[10], 'Z');
}

Test(matching, most_specific_section_wins_per_key)
{
	static const char text[] =
		"[defaults]\nread_timeout = 10s\nconnect_timeout = 4s\n"
		"[host \"10.0.0.0/8\"]\nread_timeout = 8s\n"
		"[host \"10.1.0.0/16\"]\nread_timeout = 6s\nmode = monitor\n"
		"[host \"10.1.2.3\"]\nfailure_threshold = 2\n"
		"[host \"10.1.2.3:443\"]\nread_timeout = 1s\n"
		"[host \"*.example.com\"]\nread_timeout = 3s\n"
		"[host \"*.api.example.com\"]\nread_timeout = 2s\n"
		"[host \"x.api.example.com\"]\nconnect_timeout = 1s\n"
		"[host \"2001:db8::/32\"]\nread_timeout = 7s\n";
	struct ns_policy p;
	struct ns_settings s;
	struct ns_origin o;
	struct ns_dest d;

	cr_assert_eq(parse(text, &p), 0, "%s", err);

	d = dest(NULL, "10.9.9.9", 80);
	ns_policy_resolve(&p, &d, &s, &o);
	cr_assert_eq(s.read_timeout_ms, 8000);
	cr_assert_eq(o.sec[NS_K_READ_TIMEOUT], 1);
	cr_assert_eq(s.connect_timeout_ms, 4000);
	cr_assert_eq(o.sec[NS_K_CONNECT_TIMEOUT], 0);
	cr_assert_eq(o.sec[NS_K_WINDOW], -1);

	d = dest(NULL, "10.1.2.3", 80);   /* narrower CIDR over wider */
	ns_policy_resolve(&p, &d, &s, &o);
	cr_assert_eq(s.read_timeout_ms, 6000);
	cr_assert_eq(s.mode, NS_MODE_MONITOR);
	cr_assert_eq(s.failure_threshold, 2);

	d = dest(NULL, "10.1.2.3", 443);  /* host and port over host */
	ns_policy_resolve(&p, &d, &s, &o);
	cr_assert_eq(s.read_timeout_ms, 1000);
	cr_assert_eq(s.failure_threshold, 2);

	d = dest("x.api.example.com", "192.0.2.1", 80);  /* exact over wildcard, longer wildcard over shorter */
	ns_policy_resolve(&p, &d, &s, &o);
	cr_assert_eq(s.connect_timeout_ms, 1000);
	cr_assert_eq(s.read_timeout_ms, 2000);

	d = dest("Y.Example.COM", "192.0.2.1", 80);  /* case-insensitive */
	ns_policy_resolve(&p, &d, &s, &o);
	cr_assert_eq(s.read_timeout_ms, 3000);

	d = dest("example.com", "192.0.2.1", 80);   /* the apex is not a subdomain */
	ns_policy_resolve(&p, &d, &s, &o);
	cr_assert_eq(s.read_timeout_ms, 10000);

	d = dest(NULL, "2001:db8:1::5", 80);
	ns_policy_resolve(&p, &d, &s, &o);
	cr_assert_eq(s.read_timeout_ms, 7000);
	d = dest(NULL, "2001:db9::5", 80);
	ns_policy_resolve(&p, &d, &s, &o);
	cr_assert_eq(s.read_timeout_ms, 10000);
	ns_policy_free(&p);
}

Test(matching, trailing_dot_and_ipv6_with_port)
{
	struct ns_policy p;
	struct ns_settings s;
	struct ns_dest d;

	cr_assert_eq(parse("[host \"Api.Example.com.\"]\nread_timeout = 2s\n[host \"[::1]:8080\"]\nread_timeout = 3s\n", &p), 0, "%s", err);
	d = dest("api.example.com", "192.0.2.1", 1);
	ns_policy_resolve(&p, &d, &s, NULL);
	cr_assert_eq(s.read_timeout_ms, 2000);
	d = dest(NULL, "::1", 8080);
	ns_policy_resolve(&p, &d, &s, NULL);
	cr_assert_eq(s.read_timeout_ms, 3000);
	d = dest(NULL, "::1", 8081);
	ns_policy_resolve(&p, &d, &s, NULL);
	cr_assert_eq(s.read_timeout_ms, 30000);
	ns_policy_free(&p);
}

Test(dest, keys_round_trip)
{
	struct ns_dest d;
	char key[NS_KEY_MAX];

	d = dest(NULL, "127.0.0.1", 8080);
	ns_dest_key(&d, key, sizeof(key));
	cr_assert_str_eq(key, "127.0.0.1:8080");
	d = dest(NULL, "::1", 8080);
	ns_dest_key(&d, key, sizeof(key));
	cr_assert_str_eq(key, "[::1]:8080");
	cr_assert_eq(ns_dest_parse("[::1]:8080", &d), 0);
	ns_dest_key(&d, key, sizeof(key));
	cr_assert_str_eq(key, "[::1]:8080");
	cr_assert_eq(ns_dest_parse("Api.Example.com:443", &d), 0);
	ns_dest_key(&d, key, sizeof(key));
	cr_assert_str_eq(key, "api.example.com:443");
	cr_assert_eq(ns_dest_parse("127.0.0.1", &d), -1);
	cr_assert_eq(ns_dest_parse("10.0.0.0/8:80", &d), -1);
	cr_assert_eq(ns_dest_parse("*.x.com:80", &d), -1);
	/* found by tests/fuzz/fuzz_dest: an address written with a trailing
	 * dot is that address, so its key round-trips */
	cr_assert_eq(ns_dest_parse("17.0.0.17.:80", &d), 0);
	ns_dest_key(&d, key, sizeof(key));
	cr_assert_str_eq(key, "17.0.0.17:80");
}

Test(policy, address_choice_and_connect_total_timeout_resolve_and_write_back)
{
	struct ns_policy p;
	struct ns_settings s;
	struct ns_dest d = { "multi.test", AF_INET, { 127, 0, 0, 2 }, 80 };
	char back[32];

	cr_assert_eq(
		parse("[defaults]\nconnect_total_timeout = 3s\n[host \"multi.test\"]\naddress_choice = healthy-first\n",
		      &p),
		0, "%s", err);
	cr_assert(p.has_addr_choice, "one load tells getaddrinfo whether any name asks");
	ns_policy_resolve(&p, &d, &s, NULL);
	cr_assert_eq(s.address_choice, NS_ADDR_HEALTHY_FIRST);
	cr_assert_eq(s.connect_total_timeout_ms, 3000);
	ns_setting_format(NS_K_ADDRESS_CHOICE, &s, back, sizeof(back));
	cr_assert_str_eq(back, "healthy-first");
	ns_setting_format(NS_K_CONNECT_TOTAL_TIMEOUT, &s, back, sizeof(back));
	cr_assert_str_eq(back, "3s");
	strcpy(d.name, "other.test");
	ns_policy_resolve(&p, &d, &s, NULL);
	cr_assert_eq(s.address_choice, NS_ADDR_AS_RESOLVED, "the default");
	ns_policy_free(&p);
	cr_assert_eq(parse("[defaults]\naddress_choice = as-resolved\n", &p), 0, "%s", err);
	cr_assert(!p.has_addr_choice);
	ns_policy_free(&p);
	expect_error("[defaults]\naddress_choice = best\n",
		     "t.conf:2: address_choice: bad value 'best': expected healthy-first or as-resolved\n");
	cr_assert_gt(parse("[defaults]\nconnect_total_timeout = soon\n", &p), 0);
	cr_assert(strstr(err, "t.conf:2: connect_total_timeout:"), "%s", err);
}

Test(policy, fleet_keys_resolve_to_a_span_of_places_and_a_rate_below_the_local_keys)
{
	struct ns_policy p;
	struct ns_settings s;
	struct ns_dest d;

	cr_assert_eq(parse("[host \"a.example\"]\nfleet_max_requests = 40\nfleet_rate = 50/s\n"
			   "[host \"b.example\"]\nfleet_max_connections = 8\nmax_connections = 3\nrate = 1/s\n"
			   "fleet_rate = 50/s\n",
			   &p),
		     0, "%s", err);
	cr_assert(p.has_max_requests, "fleet_max_requests follows requests");
	memset(&d, 0, sizeof(d));
	strcpy(d.name, "a.example");
	d.family = AF_INET;
	ns_policy_resolve(&p, &d, &s, NULL);
	cr_assert_eq(s.fleet, NS_FLEET_REQ | NS_FLEET_RATE);
	cr_assert_eq(s.fleet_max_requests, 40);
	cr_assert_eq(s.max_requests, NS_PLACES, "alone: the places span up to a machine's most");
	cr_assert_eq(s.rate_mph, 50 * 3600000ULL, "alone: the whole fleet's rate bounds the machine's");
	strcpy(d.name, "b.example");
	ns_policy_resolve(&p, &d, &s, NULL);
	cr_assert_eq(s.fleet, NS_FLEET_CONN | NS_FLEET_RATE);
	cr_assert_eq(s.max_connections, 3, "a local key beside it stays");
	cr_assert_eq(s.rate_mph, 3600000ULL);
	ns_policy_free(&p);
	expect_error("[defaults]\nfleet_max_requests = 0\n",
		     "t.conf:2: fleet_max_requests: 0 is out of range (1 to 1000000)\n");
}

/* test_namemap.c -- the address -> host name map: lookups, eviction, TTL, bound. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <stdio.h>

#include "../../policy/namemap.h"


Test(namemap, several_addresses_of_one_name)
{
	struct ns_namemap *m = ns_namemap_new(16, 0);
	uint8_t a[4], b[16];
	char out[256];

	inet_pton(AF_INET, "192.0.2.1", a);
	inet_pton(AF_INET6, "2001:db8::1", b);
	cr_assert_eq(ns_namemap_put(m, AF_INET, a, "Api.Example.COM.", 1), 0);
	cr_assert_eq(ns_namemap_put(m, AF_INET6, b, "api.example.com", 1), 0);
	cr_assert_eq(ns_namemap_get(m, AF_INET, a, out, sizeof(out), 2), 0);
	cr_assert_str_eq(out, "api.example.com");
	cr_assert_eq(ns_namemap_get(m, AF_INET6, b, out, sizeof(out), 2), 0);
	cr_assert_str_eq(out, "api.example.com");
	a[3] = 2;
	cr_assert_eq(ns_namemap_get(m, AF_INET, a, out, sizeof(out), 2), -1);
	ns_namemap_free(m);
}

Test(namemap, latest_resolution_wins_and_bad_names_are_refused)
{
	struct ns_namemap *m = ns_namemap_new(16, 0);
	uint8_t a[4] = { 10, 0, 0, 1 };
	char out[256];

	ns_namemap_put(m, AF_INET, a, "one.example", 1);
	ns_namemap_put(m, AF_INET, a, "two.example", 2);
	cr_assert_eq(ns_namemap_count(m), 1);
	ns_namemap_get(m, AF_INET, a, out, sizeof(out), 3);
	cr_assert_str_eq(out, "two.example");
	cr_assert_eq(ns_namemap_put(m, AF_INET, a, "bad name\n", 3), -1);
	cr_assert_eq(ns_namemap_put(m, AF_INET, a, "", 3), -1);
	ns_namemap_get(m, AF_INET, a, out, sizeof(out), 3);
	cr_assert_str_eq(out, "two.example");
	ns_namemap_free(m);
}

Test(namemap, ttl_forgets)
{
	struct ns_namemap *m = ns_namemap_new(16, 1000);
	uint8_t a[4] = { 10, 0, 0, 1 };
	char out[256];

	ns_namemap_put(m, AF_INET, a, "x.example", 5000);
	cr_assert_eq(ns_namemap_get(m, AF_INET, a, out, sizeof(out), 6000), 0);
	cr_assert_eq(ns_namemap_get(m, AF_INET, a, out, sizeof(out), 6001), -1);
	cr_assert_eq(ns_namemap_count(m), 0);
	ns_namemap_free(m);
}

Test(namemap, bounded_under_100000_resolutions)
{
	struct ns_namemap *m = ns_namemap_new(4096, 0);
	char name[64], out[256];
	size_t peak = 0;

	for (uint32_t i = 0; i < 100000; i++) {
		uint8_t a[4] = { 10, (uint8_t)(i >> 16), (uint8_t)(i >> 8), (uint8_t)i };

		snprintf(name, sizeof(name), "host-%u.a-rather-long-subdomain.example.com", i);
		cr_assert_eq(ns_namemap_put(m, AF_INET, a, name, i), 0);
		if (ns_namemap_bytes(m) > peak)
			peak = ns_namemap_bytes(m);
	}
	cr_assert_eq(ns_namemap_count(m), 4096);
	/* the stated bound: 4096 * (80 + 254) bytes + 64 KiB of buckets */
	cr_assert_leq(peak, 4096 * (80 + 254) + 65536, "peak %zu bytes", peak);
	{
		uint8_t oldest[4] = { 10, 0, 0, 0 }, newest[4] = { 10, 1, 0x86, 0x9f };   /* 0 and 99999 */

		cr_assert_eq(ns_namemap_get(m, AF_INET, oldest, out, sizeof(out), 0), -1, "evicted");
		cr_assert_eq(ns_namemap_get(m, AF_INET, newest, out, sizeof(out), 0), 0);
		cr_assert_str_eq(out, "host-99999.a-rather-long-subdomain.example.com");
	}
	cr_log_info("namemap: peak %zu bytes for 4096 entries", peak);
	ns_namemap_free(m);
}

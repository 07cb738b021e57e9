/* test_settings.c -- kept settings values: one copy per distinct value. */
#include <criterion/criterion.h>
#include <string.h>

#include "../../shim/settings.h"

static struct ns_settings value(uint64_t read_ms)
{
	struct ns_settings s;

	memcpy(&s, &ns_builtin_settings, sizeof(s));   /* as ns_policy_resolve starts */
	s.read_timeout_ms = read_ms;
	return s;
}

Test(settings, equal_values_share_one_copy_and_different_ones_do_not)
{
	struct ns_settings a = value(1234), b = value(1234), c = value(4321);
	const struct ns_settings *ka = ns_settings_intern(&a), *kb = ns_settings_intern(&b), *kc;

	cr_assert_not_null(ka);
	cr_assert_eq(ka, kb);
	cr_assert_neq(ka, &a);
	cr_assert_eq(ka->read_timeout_ms, 1234);
	kc = ns_settings_intern(&c);
	cr_assert_neq(kc, ka);
	cr_assert_eq(kc->read_timeout_ms, 4321);
	a.read_timeout_ms = 9;   /* the kept value is a copy */
	cr_assert_eq(ka->read_timeout_ms, 1234);
}

Test(settings, the_fault_list_is_not_part_of_the_value)
{
	struct ns_settings a = value(777), b = value(777);
	const struct ns_settings *ka, *kb;

	b.fault.n = 1;
	ka = ns_settings_intern(&a);
	kb = ns_settings_intern(&b);
	cr_assert_eq(ka, kb);
	cr_assert_eq(kb->fault.n, 0);
}

/* What the connect path's fallback gives: the [defaults] value, from the
 * store's reserve. */
static const struct ns_settings *defaults_kept(void)
{
	struct ns_settings s = value(5555);

	return ns_settings_intern_reserve(&s);
}

Test(settings, a_full_arena_says_null_and_keeps_what_it_has)
{
	const struct ns_settings *first = NULL, *k;
	unsigned got = 0;

	for (uint64_t i = 0; i < NS_SETTINGS_KEPT_MAX + 10; i++) {
		struct ns_settings s = value(1000000 + i);

		k = ns_settings_intern(&s);
		if (!k)
			break;
		if (!first)
			first = k;
		got++;
	}
	cr_assert_null(k);
	{
		/* the connect path's fail-safe: the fallback, and full said */
		struct ns_settings s = value(42424242);
		int full = 0;

		const struct ns_settings *f = ns_settings_keep(&s, defaults_kept, &full);

		cr_assert_eq(full, 1);
		cr_assert_eq(f->read_timeout_ms, 5555);   /* kept from the reserve, though the store is full */
		cr_assert_eq(ns_settings_keep(&s, defaults_kept, &full), f);
		cr_assert_eq(ns_settings_keep(first, defaults_kept, &full), first);   /* a kept value still is */
		cr_assert_eq(full, 0);
	}
	cr_assert_leq(got, NS_SETTINGS_KEPT_MAX - NS_SETTINGS_RESERVE);
	cr_assert_geq(got, NS_SETTINGS_KEPT_MAX - NS_SETTINGS_RESERVE - 2);   /* the two values the tests before may have kept */
	{
		struct ns_settings s = value(1000000);   /* already kept: still found */

		cr_assert_eq(ns_settings_intern(&s), first);
	}
}

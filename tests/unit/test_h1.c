/* test_h1.c -- an HTTP/1.x exchange read as it passes (policy/h1.c): the
 * protocol of a request's first bytes, an answer's final status (1xx
 * skipped, bare-LF lines too) and a 429/503's Retry-After, each the same
 * whole and split at every byte. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "../../policy/h1.h"

/* The status of a fed in two pieces split at k, and the bytes of a taken
 * to say it. */
static unsigned status_split(const char *a, size_t k, size_t *at)
{
	struct ns_h1status s;
	size_t n = strlen(a), used = 0;
	unsigned code;

	ns_h1status_start(&s);
	code = ns_h1status_feed(&s, a, k, &used);
	if (code != NS_H1S_MORE) {
		*at = used;
		return code;
	}
	code = ns_h1status_feed(&s, a + k, n - k, &used);
	*at = k + used;
	return code;
}

static void status_everywhere(const char *a, unsigned want, size_t want_at)
{
	for (size_t k = 0; k <= strlen(a); k++) {
		size_t at = 0;

		cr_assert_eq(status_split(a, k, &at), want, "split at %zu: %s", k, a);
		if (want != NS_H1S_MORE)
			cr_assert_eq(at, want_at, "split at %zu: said after %zu bytes, not %zu", k, at, want_at);
	}
}

Test(h1, a_final_status_is_read_in_any_pieces)
{
	status_everywhere("HTTP/1.1 503 Service Unavailable\r\n\r\n", 503, 12);
	status_everywhere("HTTP/1.0 200 OK\r\n", 200, 12);
	status_everywhere("HTTP/1.1 101 Switching Protocols\r\n\r\n", 101, 12);
}

Test(h1, interim_answers_are_skipped_with_their_headers)
{
	const char *a = "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: x\r\n\r\nHTTP/1.1 404 NF\r\n";

	status_everywhere(a, 404, strlen(a) - strlen(" NF\r\n"));
	/* bare "\n" lines end an interim answer as HTTP readers take them */
	status_everywhere("HTTP/1.1 100 Continue\n\nHTTP/1.1 500 X\n", 500, 35);
}

Test(h1, an_answer_that_is_no_http_says_so_at_its_twelfth_byte)
{
	status_everywhere("SSH-2.0-OpenSSH_9.2p1\r\n", NS_H1S_NOSTATUS, 12);
	status_everywhere("HTTP/1.1 600 Nope\r\n", NS_H1S_NOSTATUS, 12);
	status_everywhere("HTTP/1.1 2", NS_H1S_MORE, 0);
}

static int ra_split(const char *a, size_t k, char *val)
{
	struct ns_h1ra r;
	int said;

	ns_h1ra_start(&r);
	said = ns_h1ra_feed(&r, a, k, val);
	if (said != NS_H1RA_MORE)
		return said;
	return ns_h1ra_feed(&r, a + k, strlen(a) - k, val);
}

static void ra_everywhere(const char *a, int want, const char *want_val)
{
	for (size_t k = 0; k <= strlen(a); k++) {
		char val[NS_H1RA_MAX + 1] = "";

		cr_assert_eq(ra_split(a, k, val), want, "split at %zu: %s", k, a);
		if (want == NS_H1RA_VALUE)
			cr_assert_str_eq(val, want_val, "split at %zu", k);
	}
}

Test(h1, retry_after_is_found_in_any_case_and_pieces)
{
	/* fed from the status line's 13th byte, as the shim does */
	ra_everywhere(" Too Many\r\nContent-Type: text/plain\r\nRetry-After:   120\r\nX: y\r\n\r\n", NS_H1RA_VALUE,
		      "120");
	ra_everywhere(" X\r\nretry-AFTER: Wed, 21 Oct 2026 07:28:00 GMT\r\n\r\n", NS_H1RA_VALUE,
		      "Wed, 21 Oct 2026 07:28:00 GMT");
	/* a header that only ends in the name is not it */
	ra_everywhere(" X\r\nX-Retry-After: 5\r\n\r\n", NS_H1RA_NONE, "");
	ra_everywhere(" X\n\n", NS_H1RA_NONE, "");
	ra_everywhere(" X\r\nRetry-After: 5", NS_H1RA_MORE, "");
}

Test(h1, a_long_retry_after_value_is_cut_not_overrun)
{
	char val[NS_H1RA_MAX + 1];
	char a[200];

	snprintf(a, sizeof(a), " X\r\nRetry-After: %0100d\r\n\r\n", 7);
	cr_assert_eq(ra_split(a, 20, val), NS_H1RA_VALUE);
	cr_assert_eq(strlen(val), NS_H1RA_MAX);
}

Test(h1, a_requests_first_bytes_say_its_protocol)
{
	cr_assert_eq(ns_h1_looks("GET / HTTP/1.1\r\n", 16), 1);
	cr_assert_eq(ns_h1_looks("OPTIONS ", 8), 1);
	cr_assert_eq(ns_h1_looks("PRI * HTTP/2.0", 14), 2);
	cr_assert_eq(ns_h1_looks("\x16\x03\x01", 3), 0);
	cr_assert_eq(ns_h1_looks("GETX", 4), 0);
	/* still "may": a method (or the preface) can follow */
	cr_assert_eq(ns_h1_looks("PO", 2), -1);
	cr_assert_eq(ns_h1_looks("PRI * H", 7), -1);
	cr_assert_eq(ns_h1_looks("", 0), -1);
}

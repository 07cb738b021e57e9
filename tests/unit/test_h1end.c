/* test_h1end.c -- where an HTTP/1.x answer ends (policy/h1end.c): each
 * answer fed whole, byte by byte and split at every octet, which must read
 * the same; the end reached exactly at the last byte, never before it;
 * whatever cannot be framed is UNKNOWN for good. */
#include <criterion/criterion.h>
#include <string.h>

#include "../../policy/h1end.h"

/* The result after feeding a[0..n) in two pieces split at k. */
static uint32_t split_at(const char *a, size_t n, size_t k, int head)
{
	struct ns_h1end e;

	ns_h1end_start(&e, head);
	ns_h1end_feed(&e, a, k);
	return ns_h1end_feed(&e, a + k, n - k);
}

/* Every split gives want; byte by byte, every prefix short of the whole
 * is MORE (when want is DONE: the end is never seen early). */
static void same_everywhere(const char *a, int head, uint32_t want)
{
	size_t n = strlen(a);
	struct ns_h1end e;

	for (size_t k = 0; k <= n; k++)
		cr_assert_eq(split_at(a, n, k, head), want, "split at %zu of %zu: %s", k, n, a);
	ns_h1end_start(&e, head);
	for (size_t i = 0; i < n; i++) {
		uint32_t r = ns_h1end_feed(&e, a + i, 1);

		if (want == NS_H1E_DONE && i + 1 < n)
			cr_assert_eq(r, NS_H1E_MORE, "ended early at byte %zu of %zu: %s", i, n, a);
	}
	cr_assert_eq(e.result, want);
}

Test(h1end, content_length_ends_at_its_last_byte)
{
	same_everywhere("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", 0, NS_H1E_DONE);
	same_everywhere("HTTP/1.1 200 OK\r\ncontent-length:0\r\n\r\n", 0, NS_H1E_DONE);
	same_everywhere("HTTP/1.0 404 Not Found\nContent-Length:  3 \nX: y\n\nabc", 0, NS_H1E_DONE);
}

Test(h1end, a_body_still_arriving_is_more)
{
	struct ns_h1end e;
	const char *a = "HTTP/1.1 200 OK\r\nContent-Length: 409600\r\n\r\n";
	char body[40960];

	memset(body, 'x', sizeof(body));
	ns_h1end_start(&e, 0);
	cr_assert_eq(ns_h1end_feed(&e, a, strlen(a)), NS_H1E_MORE);
	for (int i = 0; i < 9; i++)
		cr_assert_eq(ns_h1end_feed(&e, body, sizeof(body)), NS_H1E_MORE);
	cr_assert_eq(ns_h1end_feed(&e, body, sizeof(body)), NS_H1E_DONE);
}

Test(h1end, chunked_ends_after_the_last_chunk_and_trailers)
{
	same_everywhere("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", 0, NS_H1E_DONE);
	same_everywhere("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, Chunked\r\n\r\n1a;ext=1\r\n"
			"abcdefghijklmnopqrstuvwxyz\r\n0\r\nX-Trailer: 1\r\n\r\n",
			0, NS_H1E_DONE);
	/* the zero chunk's line alone is not the end: its trailers follow */
	same_everywhere("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n", 0, NS_H1E_MORE);
}

Test(h1end, no_body_for_head_204_304_and_after_interim_answers)
{
	same_everywhere("HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n", 1, NS_H1E_DONE);
	same_everywhere("HTTP/1.1 204 No Content\r\n\r\n", 0, NS_H1E_DONE);
	same_everywhere("HTTP/1.1 304 Not Modified\r\nContent-Length: 10\r\n\r\n", 0, NS_H1E_DONE);
	same_everywhere("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", 0, NS_H1E_DONE);
	same_everywhere("HTTP/1.1 100 Continue\r\n\r\n", 0, NS_H1E_MORE);
}

Test(h1end, what_cannot_be_framed_is_unknown_for_good)
{
	/* a body ended by the close, another protocol, a coding not chunked last */
	same_everywhere("HTTP/1.1 200 OK\r\n\r\nbody until close", 0, NS_H1E_UNKNOWN);
	same_everywhere("HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\n\r\n", 0, NS_H1E_UNKNOWN);
	same_everywhere("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, gzip\r\n\r\n", 0, NS_H1E_UNKNOWN);
	same_everywhere("HTTP/1.1 200 OK\r\nTransfer-Encoding: xchunked\r\n\r\n", 0, NS_H1E_UNKNOWN);
	/* lengths that disagree, lists, signs, past 64 bits */
	same_everywhere("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello", 0, NS_H1E_UNKNOWN);
	same_everywhere("HTTP/1.1 200 OK\r\nContent-Length: 5, 5\r\n\r\nhello", 0, NS_H1E_UNKNOWN);
	same_everywhere("HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", 0, NS_H1E_UNKNOWN);
	same_everywhere("HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999999\r\n\r\n", 0, NS_H1E_UNKNOWN);
	/* a folded line, a name with blanks before its colon, not an answer */
	same_everywhere("HTTP/1.1 200 OK\r\nX: a\r\n b\r\nContent-Length: 0\r\n\r\n", 0, NS_H1E_UNKNOWN);
	same_everywhere("HTTP/1.1 200 OK\r\nContent-Length : 0\r\n\r\n", 0, NS_H1E_UNKNOWN);
	same_everywhere("SSH-2.0-OpenSSH\r\n", 0, NS_H1E_UNKNOWN);
	/* a bad chunk size line, bytes after the end */
	same_everywhere("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 0, NS_H1E_UNKNOWN);
	same_everywhere("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokHTTP/1.1 200 OK\r\n", 0, NS_H1E_UNKNOWN);
}

Test(h1end, a_header_named_like_the_framing_ones_is_not_them)
{
	same_everywhere("HTTP/1.1 200 OK\r\nContent-Lengths: 2\r\n\r\nok", 0, NS_H1E_UNKNOWN);
	same_everywhere("HTTP/1.1 200 OK\r\nX-Content-Length: 2\r\nContent-Length: 3\r\n\r\nabc", 0, NS_H1E_DONE);
	same_everywhere("HTTP/1.1 200 OK\r\nTransfer-Encodin: chunked\r\nContent-Length: 1\r\n\r\na", 0, NS_H1E_DONE);
}

/* The readers of whole tokens at once (status line, a framing header's
 * name and a Content-Length line, a line nobody reads, the blank line) give
 * what the byte reader gives: each answer here is read whole (at once) and
 * split everywhere (the byte reader where a token is cut). */
Test(h1end, tokens_read_at_once_say_what_the_byte_reader_says)
{
	same_everywhere("HTTP/1.1 200 OK\r\nCONTENT-length:\t12 \t\r\n\r\nhello world!", 0, NS_H1E_DONE);
	same_everywhere("HTTP/1.1 200 OK\r\nContent-Length: 1\r2\r\n\r\n123456789012", 0, NS_H1E_DONE);
	same_everywhere("HTTP/1.1 200 OK\r\nContent-Length: \r3\r\n\r\nabc", 0, NS_H1E_DONE);
	same_everywhere("HTTP/1.1 200 OK\r\nContent-Length: 3 4\r\n\r\nabc", 0, NS_H1E_UNKNOWN);
	same_everywhere("HTTP/1.1 200 OK\r\nContent-Length: \r\n\r\n", 0, NS_H1E_UNKNOWN);
	same_everywhere("HTTP/1.1 200 OK\r\nContent\rLength: 3\r\n\r\nabc", 0, NS_H1E_UNKNOWN);
	same_everywhere("HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc", 0, NS_H1E_DONE);
	same_everywhere("HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabc", 0, NS_H1E_UNKNOWN);
	same_everywhere("HTTP/1.1 200 OK\r\nTRANSFER-ENCODING: gzip, chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", 0,
			NS_H1E_DONE);
	same_everywhere("HTTP/1.1 200 OK\r\nTransfer\rEncoding: chunked\r\nContent-Length: 1\r\n\r\na", 0,
			NS_H1E_UNKNOWN);
	same_everywhere("HTTP/1.1 2000 OK\r\nContent-Length: 1\r\n\r\na", 0,
			NS_H1E_DONE); /* (its first three digits) */
	same_everywhere("HTTP/1.x 200 OK\r\nContent-Length: 1\r\n\r\na", 0, NS_H1E_UNKNOWN);
	same_everywhere("HTTP/1.1 204 No Content\r\nServer: x\r\n\r\n", 0, NS_H1E_DONE);
	same_everywhere("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", 0, NS_H1E_DONE);
	same_everywhere("HTTP/1.1 200 OK\r\n\r\r\n\r\n", 0, NS_H1E_UNKNOWN);
}

/* The line walker (a whole head in one read): names that begin as the
 * framing ones do and part from them at each place, in any case, with a
 * blank or a colon where they part, give what the byte reader gives. */
Test(h1end, a_whole_head_read_line_by_line_says_what_the_byte_reader_says)
{
	same_everywhere("HTTP/1.1 200 OK\r\nServer: nginx/1.22.1\r\nDate: Sun, 06 Dec 2026 12:00:00 GMT\r\n"
			"Content-Type: text/html; charset=utf-8\r\nContent-Length: 5\r\nConnection: keep-alive\r\n"
			"Cache-Control: no-cache\r\nTrailer: x\r\nTE: y\r\nVary: Accept-Encoding\r\n\r\nhello",
			0, NS_H1E_DONE);
	same_everywhere("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n"
			"Connection: keep-alive\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
			0, NS_H1E_DONE);
	same_everywhere("HTTP/1.1 200 OK\r\nContent-Length : 5\r\n\r\nhello", 0, NS_H1E_UNKNOWN);
	same_everywhere("HTTP/1.1 200 OK\r\nContent-Len gth: 5\r\nContent-Length: 5\r\n\r\nhello", 0, NS_H1E_UNKNOWN);
	same_everywhere("HTTP/1.1 200 OK\r\nContent-Lengt: 9\r\nContent-Length: 5\r\n\r\nhello", 0, NS_H1E_DONE);
	same_everywhere("HTTP/1.1 200 OK\r\nContent:-Length: 9\r\ncontent-length: 5\r\n\r\nhello", 0, NS_H1E_DONE);
	same_everywhere("HTTP/1.1 200 OK\r\nContent-LengthX: 9\r\nCONTENT-LENGTH: 5\r\n\r\nhello", 0, NS_H1E_DONE);
	same_everywhere("HTTP/1.1 200 OK\r\nContent\r\n-Length: 9\r\n\r\nhello", 0, NS_H1E_UNKNOWN);
	same_everywhere("HTTP/1.1 200 OK\r\nTransfer-Encoding : chunked\r\n\r\n0\r\n\r\n", 0, NS_H1E_UNKNOWN);
	same_everywhere("HTTP/1.1 200 OK\r\nTransfer_Encoding: chunked\r\nContent-Length: 1\r\n\r\na", 0, NS_H1E_DONE);
	same_everywhere("HTTP/1.1 200 OK\r\nTransfer-EncodingZ: chunked\r\nContent-Length: 1\r\n\r\na", 0, NS_H1E_DONE);
	same_everywhere("HTTP/1.1 200 OK\r\ntransfer-encoding: identity\r\n\r\nabc", 0, NS_H1E_UNKNOWN);
	same_everywhere("HTTP/1.1 200 OK\r\nct\r\nContent-Length: 1\r\n\r\na", 0, NS_H1E_DONE);
	same_everywhere("HTTP/1.1 200 OK\r\nc\r\nContent-Length: 1\r\n\r\na", 0, NS_H1E_UNKNOWN);
	same_everywhere("HTTP/1.1 200 OK\r\nC: 1\r\nT: 2\r\nContent-Length: 1\r\n\r\na", 0, NS_H1E_DONE);
}

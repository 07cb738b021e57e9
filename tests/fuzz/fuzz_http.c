/* fuzz_http.c -- libFuzzer harness: the HTTP/1.x readers (policy/h1.c),
 * pure code fed as the shim feeds them.
 *
 * The input is a request split point, a read size and an answer stream
 * (interim 1xx answers with CRLF or bare-LF lines, pipelined answers, HEAD
 * and chunked ones, garbage). The request is sent in two pieces and the
 * answer read in pieces of every size from 1 up; each way, the readers
 * must say what a reference reading the whole stream at once says: the
 * request's protocol, the answer's first final status (or that it is no
 * HTTP), and for a 429 or 503 whether its headers hold a Retry-After and
 * its value; and never touch memory they do not own. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../policy/h1.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len);

/* what the readers (or the reference) said of one answer */
struct said {
	unsigned code; /* a status, NS_H1S_NOSTATUS, or 0 when undecided */
	int ra;        /* for a 429/503: NS_H1RA_* */
	char val[NS_H1RA_MAX + 1];
};

/* A 429 or 503's headers from a[i]: whether a Retry-After line or the
 * blank line ends first within a[i..n), and the value (leading blanks and
 * every "\r" left out, its first NS_H1RA_MAX bytes). */
static int headers_end(const uint8_t *a, size_t n, size_t i, char *val)
{
	static const char name[] = "retry-after:";
	unsigned m = 0, v = 0;
	int value = 0;

	for (; i < n; i++) {
		char ch = (char)a[i], lc = ch >= 'A' && ch <= 'Z' ? (char)(ch + 32) : ch;
		unsigned k;

		if (value) {
			if (ch == '\n') {
				val[v] = '\0';
				return NS_H1RA_VALUE;
			}
			if (ch != '\r' && v < NS_H1RA_MAX && !(v == 0 && (ch == ' ' || ch == '\t')))
				val[v++] = ch;
			continue;
		}
		if (ch == '\n') {
			if (m == 1 || m == 2)
				return NS_H1RA_NONE;
			m = 1;
			continue;
		}
		if (m == 1 && ch == '\r') {
			m = 2;
			continue;
		}
		k = m >= 3 && m < 3 + sizeof(name) - 1 ? m - 3 : (m == 1 || m == 2) ? 0 : 0xffffffffu;
		if (k == 0xffffffffu || lc != name[k])
			m = 0;
		else if (k + 1 == sizeof(name) - 1)
			value = 1;
		else
			m = 3 + k + 1;
	}
	return NS_H1RA_MORE;
}

/* The reference: the whole answer at once. */
static void reference(const uint8_t *a, size_t n, struct said *w)
{
	size_t i = 0;

	memset(w, 0, sizeof(*w));
	for (;;) {
		const uint8_t *h = a + i;

		if (n - i < 12)
			return;
		if (memcmp(h, "HTTP/1.", 7) != 0 || h[8] != ' ' || h[9] < '1' || h[9] > '5' || h[10] < '0' ||
		    h[10] > '9' || h[11] < '0' || h[11] > '9') {
			w->code = NS_H1S_NOSTATUS;
			return;
		}
		if (h[9] != '1' || (h[10] == '0' && h[11] == '1')) {
			w->code = (unsigned)((h[9] - '0') * 100 + (h[10] - '0') * 10 + (h[11] - '0'));
			if (w->code == 429 || w->code == 503)
				w->ra = headers_end(a, n, i + 12, w->val);
			return;
		}
		/* an interim answer: on past its blank line */
		{
			unsigned m = 0;

			for (i += 12; i < n; i++) {
				if (a[i] == '\n' && m)
					break;
				m = a[i] == '\n' ? 1 : (a[i] == '\r' && m == 1) ? 2 : 0;
			}
			if (i >= n)
				return;
			i++;
		}
	}
}

static const char *const requests[] = { "GET / HTTP/1.1\r\nHost: x\r\n\r\n", "HEAD / HTTP/1.1\r\n\r\n",
	"OPTIONS * HTTP/1.1\r\n\r\n", "\x16\x03\x01\x00", "PRI * HTTP/2.0\r\n\r\n", "G", "POS" };

/* The request's protocol as the shim learns it: its first bytes held while
 * they may still begin a method, in two pieces split at split. */
static int sniffed(const char *req, size_t split)
{
	char p[NS_H1_SNIFF_MAX];
	size_t rl = strlen(req), k = 0, at = 0;
	int v = -1;

	if (split > rl)
		split = rl;
	for (int piece = 0; piece < 2 && v < 0; piece++) {
		size_t end = piece ? rl : split;

		for (; at < end && k < NS_H1_SNIFF_MAX; at++)
			p[k++] = req[at];
		at = end;
		v = ns_h1_looks(p, k);
		if (v < 0 && k == NS_H1_SNIFF_MAX)
			v = 0;
	}
	return v < 0 ? 0 : v; /* still "may": nothing more was sent */
}

/* The answer read in pieces of step bytes, as exchange.c feeds it. */
static void pieces(const uint8_t *a, size_t n, size_t step, struct said *got)
{
	struct ns_h1status s;
	struct ns_h1ra r;
	size_t i = 0;

	memset(got, 0, sizeof(*got));
	ns_h1status_start(&s);
	for (; i < n && !got->code; i += step) {
		size_t k = n - i < step ? n - i : step, used = 0;

		got->code = ns_h1status_feed(&s, (const char *)a + i, k, &used);
		if (used > k)
			__builtin_trap();
		if (got->code && (got->code == 429 || got->code == 503)) {
			/* the rest of this read is the headers' */
			ns_h1ra_start(&r);
			got->ra = ns_h1ra_feed(&r, (const char *)a + i + used, k - used, got->val);
		}
	}
	if (got->code != 429 && got->code != 503)
		return;
	for (; i < n && got->ra == NS_H1RA_MORE; i += step) {
		size_t k = n - i < step ? n - i : step;

		got->ra = ns_h1ra_feed(&r, (const char *)a + i, k, got->val);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
	const char *req;
	struct said want, got;
	size_t n;
	const uint8_t *a;
	int whole;

	if (len < 2 || len > 600)
		return 0;
	req = requests[data[0] % (sizeof(requests) / sizeof(requests[0]))];
	/* sent in two pieces, the request is told as it is whole (a request
	 * that may still begin a method when it ends is none) */
	whole = ns_h1_looks(req, strlen(req) < NS_H1_SNIFF_MAX ? strlen(req) : NS_H1_SNIFF_MAX);
	if (whole < 0)
		whole = 0;
	if (sniffed(req, data[1] % 9) != whole)
		__builtin_trap();
	if (whole != 1)
		return 0; /* only an HTTP/1 request's answer is read as lines */
	a = data + 2;
	n = len - 2;
	reference(a, n, &want);
	for (size_t step = 1; step <= n; step++) {
		pieces(a, n, step, &got);
		if (got.code != want.code || got.ra != want.ra ||
		    (want.ra == NS_H1RA_VALUE && strcmp(got.val, want.val) != 0))
			__builtin_trap(); /* read in pieces, it said otherwise than read whole */
	}
	return 0;
}

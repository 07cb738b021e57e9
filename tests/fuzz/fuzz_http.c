/* fuzz_http.c -- libFuzzer harness: the HTTP/1.x status reader of the
 * exchanges (shim/exchange.c), built here with the few calls it makes into
 * the rest of the shim replaced by recorders.
 *
 * The input is a request split point, a read size and an answer stream
 * (interim 1xx answers with CRLF or bare-LF lines, pipelined answers, HEAD
 * and chunked ones, garbage). The request is sent in two pieces and the
 * answer read in pieces of every size from 1 up; each way, the reader must
 * decide the exchange exactly as a reference reading the whole stream at
 * once does (the first final status, or a plain outcome when the answer is
 * no HTTP), and never touch memory it does not own. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../shim/exchange.c"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len);

static int decided;        /* 0 none; else the status, or 1 for a plain outcome */

void ns_conn_outcome(struct ns_conn *c, int kind, int err)
{
	uint32_t was = __atomic_fetch_and(&c->flags, ~(NS_C_PARSE | NS_C_SENT), __ATOMIC_RELAXED);

	(void)err;
	if (__atomic_exchange_n(&c->outcome, 1, __ATOMIC_ACQ_REL))
		return;
	__atomic_fetch_or(&c->flags, NS_C_XNEXT, __ATOMIC_RELAXED);
	if (kind == NS_OUT_SUCCESS && (was & NS_C_SENT))
		__atomic_fetch_or(&c->flags, NS_C_ANSWERED, __ATOMIC_RELAXED);
	if (!decided)
		decided = 1;
}

void ns_conn_http(struct ns_conn *c, unsigned code, int failed)
{
	if (LD(c->outcome))
		return;
	__atomic_fetch_and(&c->flags, ~NS_C_PARSE, __ATOMIC_RELAXED);
	decided = (int)code;
	ns_conn_outcome(c, failed ? NS_OUT_FAILURE : NS_OUT_SUCCESS, 0);
}

int ns_conn_status_fails(const struct ns_conn *c, unsigned code)
{
	(void)c;
	return code == 429 || (code >= 500 && code <= 599);
}

void ns_first_byte_latency(struct ns_conn *c)
{
	(void)c;
}

/* no table here: what exchange.c would count in it is not this harness's */
struct ns_table ns_breakers;
int ns_breakers_ok;

void ns_conn_h2_answered(struct ns_conn *c)
{
	ns_conn_outcome(c, NS_OUT_SUCCESS, 0);
}

void ns_conn_own_success(struct ns_conn *c)
{
	(void)c;
}

/* HTTP/2 (h2conn.c) is not this harness's: fuzz_h2 reads its frames */
void ns_h2c_start(struct ns_conn *c, const char *held, size_t nheld, const void *buf, size_t n, int tls,
		  int seen_before)
{
	(void)c, (void)held, (void)nheld, (void)buf, (void)n, (void)tls, (void)seen_before;
}

void ns_h2c_feed(struct ns_conn *c, int d, const void *buf, size_t n)
{
	(void)c, (void)d, (void)buf, (void)n;
}

void ns_h2c_gap(struct ns_conn *c)
{
	(void)c;
}

/* a 429/503's Retry-After (outcome.c): the value the reader kept must be
 * a string of at most 32 bytes */
int ns_conn_retry_after(struct ns_conn *c, const char *value)
{
	(void)c;
	if (strlen(value) > sizeof(c->hval))
		__builtin_trap();
	return 0;
}

/* the data path's outcome after the call (afterio.c), as far as the
 * reader's decisions go */
ssize_t ns_after_io(int fd, struct ns_conn *c, int d, ssize_t r, size_t len, int flags, uint32_t gen)
{
	(void)fd, (void)d, (void)len, (void)flags, (void)gen;
	/* the first byte of an answer whose status is not read: the plain outcome */
	if (r > 0 && d == NS_IN && !LD(c->outcome) && !(LD(c->flags) & (NS_C_PARSE | NS_C_HDRS)))
		ns_conn_outcome(c, NS_OUT_SUCCESS, 0);
	return r;
}

/* A 429 or 503 is decided by its headers (a Retry-After honoured is a
 * cooldown, not a failure): at the end of a Retry-After line or of the
 * block, whichever comes first. 1 when that is within a[i..n). */
static int headers_end(const uint8_t *a, size_t n, size_t i)
{
	static const char name[] = "retry-after:";
	unsigned m = 0;
	int value = 0;

	for (; i < n; i++) {
		char ch = (char)a[i], lc = ch >= 'A' && ch <= 'Z' ? (char)(ch + 32) : ch;
		unsigned k;

		if (value) {
			if (ch == '\n')
				return 1;
			continue;
		}
		if (ch == '\n') {
			if (m == 1 || m == 2)
				return 1;
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
	return 0;
}

/* The reference: the whole answer at once. 0 when undecided (too short). */
static int reference(const uint8_t *a, size_t n, int http)
{
	size_t i = 0;

	if (!http)
		return n ? 1 : 0;
	for (;;) {
		const uint8_t *h = a + i;

		if (n - i < 12)
			return 0;
		if (memcmp(h, "HTTP/1.", 7) != 0 || h[8] != ' ' || h[9] < '1' || h[9] > '5' || h[10] < '0' ||
		    h[10] > '9' || h[11] < '0' || h[11] > '9')
			return 1;
		if (h[9] != '1' || (h[10] == '0' && h[11] == '1')) {
			int code = (h[9] - '0') * 100 + (h[10] - '0') * 10 + (h[11] - '0');

			if ((code == 429 || code == 503) && !headers_end(a, n, i + 12))
				return 0;
			return code;
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
				return 0;
			i++;
		}
	}
}

static const char *const requests[] = { "GET / HTTP/1.1\r\nHost: x\r\n\r\n", "HEAD / HTTP/1.1\r\n\r\n",
	"OPTIONS * HTTP/1.1\r\n\r\n", "\x16\x03\x01\x00", "PRI * HTTP/2.0\r\n\r\n", "G", "POS" };

static void one(const char *req, size_t split, const uint8_t *a, size_t n, size_t step, int want)
{
	struct ns_conn c;
	size_t rl = strlen(req);

	memset(&c, 0, sizeof(c));
	c.flags = NS_C_XNEXT;
	decided = 0;
	if (split > rl)
		split = rl;
	turn(&c, NS_OUT, req, split, 0);
	if (split < rl)
		turn(&c, NS_OUT, req + split, rl - split, 0);
	for (size_t i = 0; i < n; i += step) {
		size_t k = n - i < step ? n - i : step;

		turn(&c, NS_IN, (const char *)a + i, k, 0);
		ns_after_io(0, &c, NS_IN, (ssize_t)k, k, 0, 0);
	}
	if (decided != want)
		__builtin_trap();   /* read in pieces, it decided otherwise than read whole */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
	const char *req;
	size_t split, n;
	const uint8_t *a;
	int http, want;

	if (len < 2 || len > 600)
		return 0;
	req = requests[data[0] % (sizeof(requests) / sizeof(requests[0]))];
	split = data[1] % 9;
	a = data + 2;
	n = len - 2;
	http = looks_http(req, strlen(req)) == 1; /* HTTP/1 (2: HTTP/2, whose answers are not read as lines) */
	want = reference(a, n, http);
	for (size_t step = 1; step <= n; step++)
		one(req, split, a, n, step, want);
	if (n == 0)
		one(req, split, a, 0, 1, want);
	return 0;
}

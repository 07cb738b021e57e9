/* h1.c -- an HTTP/1.x exchange as it passes (h1.h): the protocol its first
 * bytes say, its answer's status line, a 429 or 503's Retry-After. */
#include "h1.h"

int ns_h1_looks(const char *b, size_t n)
{
	static const char *const methods[] = { "GET ",     "HEAD ",  "POST ",  "PUT ",    "DELETE ",
					       "OPTIONS ", "PATCH ", "TRACE ", "CONNECT " };
	static const char h2[] = "PRI * HT";
	int may = 0;

	if (n >= sizeof(h2) - 1 && memcmp(b, h2, sizeof(h2) - 1) == 0)
		return 2;
	if (n < sizeof(h2) - 1 && memcmp(b, h2, n) == 0)
		may = 1;

	for (size_t i = 0; i < sizeof(methods) / sizeof(methods[0]); i++) {
		size_t m = strlen(methods[i]);

		if (n >= m && memcmp(b, methods[i], m) == 0)
			return 1;
		if (n < m && memcmp(b, methods[i], n) == 0)
			may = 1;
	}
	return may ? -1 : 0;
}

unsigned ns_h1status_feed(struct ns_h1status *s, const char *b, size_t n, size_t *used)
{
	if (s->st == NS_H1S_LINE && s->len == 0) {
		unsigned code = ns_h1status_whole(b, n);

		if (code != NS_H1S_MORE) {
			*used = 12;
			return code;
		}
	}
	for (size_t i = 0; i < n; i++) {
		unsigned code;

		if (s->st == NS_H1S_SKIP) {
			/* the headers of a 1xx answer, up to the blank line, whose
			 * lines may end in "\r\n" or a bare "\n" (as HTTP readers
			 * take them) */
			uint32_t m = s->len > 2 ? 0 : s->len;

			if (b[i] == '\n' && m) {
				ns_h1status_start(s); /* the blank line */
				continue;
			}
			s->len = b[i] == '\n' ? 1u : (b[i] == '\r' && m == 1) ? 2u : 0u;
			continue;
		}
		if (s->len >= sizeof(s->buf))
			s->len = 0; /* never past the buffer, whatever the caller kept */
		s->buf[s->len++] = b[i];
		if (s->len < sizeof(s->buf))
			continue;
		code = ns_h1_status(s->buf);
		if (ns_h1_interim(code)) {
			s->st = NS_H1S_SKIP; /* interim: the final answer follows */
			s->len = 0;
			continue;
		}
		*used = i + 1;
		return code ? code : NS_H1S_NOSTATUS;
	}
	*used = n;
	return NS_H1S_MORE;
}

int ns_h1ra_feed(struct ns_h1ra *r, const char *b, size_t n, char out[NS_H1RA_MAX + 1])
{
	static const char name[] = "retry-after:";

	for (size_t i = 0; i < n; i++) {
		char ch = b[i];
		uint32_t m = r->len;

		if (r->value) {
			if (ch == '\n') {
				uint32_t v = r->vlen > NS_H1RA_MAX ? 0 : r->vlen;

				memcpy(out, r->val, v);
				out[v] = '\0';
				return NS_H1RA_VALUE;
			}
			if (ch != '\r' && r->vlen < NS_H1RA_MAX && !(r->vlen == 0 && (ch == ' ' || ch == '\t')))
				r->val[r->vlen++] = ch;
			continue;
		}
		if (ch == '\n') {
			if (m == 1 || m == 2)
				return NS_H1RA_NONE; /* the blank line */
			r->len = 1;
			continue;
		}
		if (m == 1 && ch == '\r') {
			r->len = 2;
			continue;
		}
		{
			uint32_t k = m >= 3 && m < 3 + sizeof(name) - 1 ? m - 3 : (m == 1 || m == 2) ? 0 : UINT32_MAX;
			char lc = ch >= 'A' && ch <= 'Z' ? (char)(ch + 32) : ch;

			if (k == UINT32_MAX || lc != name[k]) {
				r->len = 0;
			} else if (k + 1 == sizeof(name) - 1) {
				r->value = 1;
				r->vlen = 0;
			} else {
				r->len = 3 + k + 1;
			}
		}
	}
	return NS_H1RA_MORE;
}

/* h1.c -- an HTTP/1.x exchange as it passes (h1.h): the protocol its first
 * bytes say, its answer's status line, a 429 or 503's Retry-After. */
#include "h1.h"

#include <stdio.h>
#include <time.h>

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

/* An HTTP date ("Sun, 06 Nov 1994 08:49:37 GMT") as seconds since the
 * epoch, or -1. */
static int64_t http_date(const char *s)
{
	static const char months[] = "JanFebMarAprMayJunJulAugSepOctNovDec";
	char mon[4], zone[4];
	int day, year, h, m, sec, used = 0;
	struct tm tm;
	const char *p;

	if (strlen(s) < 29 || s[3] != ',' ||
	    sscanf(s + 4, " %2d %3s %4d %2d:%2d:%2d %3s%n", &day, mon, &year, &h, &m, &sec, zone, &used) != 7 ||
	    strcmp(zone, "GMT") != 0 || (p = strstr(months, mon)) == NULL || (p - months) % 3 != 0)
		return -1;
	memset(&tm, 0, sizeof(tm));
	tm.tm_mday = day;
	tm.tm_mon = (int)((p - months) / 3);
	tm.tm_year = year - 1900;
	tm.tm_hour = h;
	tm.tm_min = m;
	tm.tm_sec = sec;
	if (day < 1 || day > 31 || h > 23 || m > 59 || sec > 60 || year < 1970)
		return -1;
	return (int64_t)timegm(&tm);
}

uint64_t ns_retry_after_ms(const char *value, uint64_t wall_ms)
{
	int64_t secs = -1;

	if (value[0] >= '0' && value[0] <= '9') {
		const char *v = value;

		/* any number of digits: past 10^8 s it only grows beyond
		 * every retry_after_max, so it stops growing there */
		for (secs = 0; *v >= '0' && *v <= '9'; v++)
			if (secs < 100000000)
				secs = secs * 10 + (*v - '0');
		if (*v && *v != ' ' && *v != '\t')
			secs = -1;
	} else {
		int64_t at = http_date(value);

		if (at >= 0)
			secs = at - (int64_t)(wall_ms / 1000);
	}
	return secs > 0 ? (uint64_t)secs * 1000 : 0; /* now, the past, or no date at all: nothing to wait for */
}

/* scalars.c -- the policy's smallest pieces of text, below every parser
 * that reads one (values.c, faultspec.c, patterns.c, scenario.c): an error
 * line naming the file and line, a trimmed word, a number in thousandths,
 * a percentage, a duration, a count. */
#include "internal.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/**** errors ****/

void ns_perr_add(struct perr *e, int line, const char *fmt, ...)
{
	va_list ap;
	int n;

	e->count++;
	if (!e->buf || e->used + 1 >= e->len)
		return;
	if (line > 0)
		n = snprintf(e->buf + e->used, e->len - e->used, "%s:%d: ", e->fname, line);
	else
		n = snprintf(e->buf + e->used, e->len - e->used, "%s: ", e->fname);
	if (n < 0 || (size_t)n >= e->len - e->used) {
		e->used = e->len - 1;
		return;
	}
	e->used += (size_t)n;
	va_start(ap, fmt);
	n = vsnprintf(e->buf + e->used, e->len - e->used, fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= e->len - e->used) {
		e->used = e->len - 1;
		return;
	}
	e->used += (size_t)n;
	if (e->used + 1 < e->len) {
		e->buf[e->used++] = '\n';
		e->buf[e->used] = '\0';
	}
}

/**** scalars ****/

const char *ns_trim(char *s)
{
	char *end;

	while (*s == ' ' || *s == '\t')
		s++;
	end = s + strlen(s);
	while (end > s && (end[-1] == ' ' || end[-1] == '\t' || end[-1] == '\r'))
		*--end = '\0';
	return s;
}

/* Parse "12", "12.5" into thousandths. Returns the end or NULL. */
const char *ns_parse_milli(const char *s, uint64_t *out)
{
	uint64_t v = 0;
	int digits = 0, frac = 0;

	while (isdigit((unsigned char)*s)) {
		if (v > UINT64_MAX / 100000)
			return NULL;
		v = v * 10 + (uint64_t)(*s++ - '0');
		digits++;
	}
	if (!digits)
		return NULL;
	v *= 1000;
	if (*s == '.') {
		uint64_t scale = 100;

		s++;
		while (isdigit((unsigned char)*s)) {
			if (frac++ >= 3)
				return NULL;
			v += (uint64_t)(*s++ - '0') * scale;
			scale /= 10;
		}
		if (!frac)
			return NULL;
	}
	*out = v;
	return s;
}

int ns_pct_parse(const char *s, uint32_t *bp)
{
	size_t n = strlen(s);
	char num[32];
	const char *end;
	uint64_t v;

	if (n < 2 || s[n - 1] != '%' || n - 1 >= sizeof(num))
		return NS_PCT_FORM;
	memcpy(num, s, n - 1);
	num[n - 1] = '\0';
	end = ns_parse_milli(num, &v);   /* thousandths of a percent */
	if (!end || *end || v % 10)
		return NS_PCT_NUMBER;
	if (v / 10 > 10000)
		return NS_PCT_OVER;
	*bp = (uint32_t)(v / 10);     /* basis points */
	return 0;
}

/* Duration with a unit into milliseconds. Returns 0, or -1 with a reason. */
int ns_duration_parse(const char *s, uint64_t *ms, const char **why)
{
	uint64_t milli, mult;
	const char *u;

	if (strcmp(s, "0") == 0) {
		*ms = 0;
		return 0;
	}
	u = ns_parse_milli(s, &milli);
	if (!u) {
		*why = "expected a number with a unit (ms, s, m, h), such as 250ms or 3s";
		return -1;
	}
	if (*u == '\0') {
		*why = "a duration needs a unit (ms, s, m, h), such as 250ms or 3s";
		return -1;
	}
	if (strcmp(u, "ms") == 0)
		mult = 1;
	else if (strcmp(u, "s") == 0)
		mult = 1000;
	else if (strcmp(u, "m") == 0)
		mult = 60000;
	else if (strcmp(u, "h") == 0)
		mult = 3600000;
	else {
		*why = "unknown unit (use ms, s, m or h)";
		return -1;
	}
	if (milli > UINT64_MAX / mult) {
		*why = "too large";
		return -1;
	}
	/* milli is in thousandths of the unit */
	if ((milli * mult) % 1000) {
		*why = "finer than a millisecond";
		return -1;
	}
	*ms = milli * mult / 1000;
	return 0;
}

int ns_parse_uint(const char *s, uint64_t *v)
{
	uint64_t x = 0;

	if (!*s)
		return -1;
	for (; *s; s++) {
		if (!isdigit((unsigned char)*s) || x > 100000000)
			return -1;
		x = x * 10 + (uint64_t)(*s - '0');
	}
	*v = x;
	return 0;
}

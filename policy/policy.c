/* policy.c -- the policy language: parse, validate, match a destination.
 *
 * No system calls here but the one read of the file in ns_policy_load, so
 * the shim, shimctl and the unit tests share exactly one interpretation. */
#include "policy.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#define NS_POLICY_MAX_BYTES (1 << 20)
#define NS_LINE_MAX 1024
#define NS_MAX_DURATION_MS (7ULL * 24 * 3600 * 1000)

const struct ns_settings ns_builtin_settings = {
	.connect_timeout_ms = 5000,
	.read_timeout_ms = 30000,
	.total_timeout_ms = 0,
	.failure_threshold = 5,
	.window_ms = 30000,
	.consecutive_failures = 0,
	.failure_rate_bp = 0,
	.min_calls = 10,
	.recovery = NS_RECOVERY_AUTO,
	.open_duration_ms = 30000,
	.half_open_probes = 1,
	.connect_retries = 0,
	.retry_backoff_ms = 1000,
	.mode = NS_MODE_ENFORCE,
	.trace = 0,
	/* 429 and 500-599: bits 329 and 400-499 */
	.failure_status = { 0, 0, 0, 0, 0, 1ULL << 9, 0xffffffffffff0000ULL, 0x000fffffffffffffULL },
	.fault_seed = 0,
	.fault = { 0, 0, { { 0, 0, 0, 0 } } },
};

enum vtype { T_DUR, T_UINT, T_PCT, T_RECOVERY, T_MODE, T_BOOL, T_FAULT, T_SEED, T_STATUSES };

struct keydef {
	int type;
	size_t off;
	uint64_t min, max;          /* for T_UINT, T_DUR (ms; 0 always allowed) */
};

const char *const ns_key_names[NS_K_COUNT] = {
	"connect_timeout", "read_timeout", "total_timeout",
	"failure_threshold", "window", "consecutive_failures",
	"failure_rate", "min_calls", "recovery", "open_duration",
	"half_open_probes", "connect_retries", "retry_backoff", "mode", "trace",
	"fault", "fault_seed", "failure_status",
	"slow_call", "slow_call_rate", "timeout_rate", "latency_p99",
};

#define OFF(f) offsetof(struct ns_settings, f)
static const struct keydef keydefs[NS_K_COUNT] = {
	[NS_K_CONNECT_TIMEOUT] = { T_DUR, OFF(connect_timeout_ms), 1, NS_MAX_DURATION_MS },
	[NS_K_READ_TIMEOUT] = { T_DUR, OFF(read_timeout_ms), 1, NS_MAX_DURATION_MS },
	[NS_K_TOTAL_TIMEOUT] = { T_DUR, OFF(total_timeout_ms), 1, NS_MAX_DURATION_MS },
	[NS_K_FAILURE_THRESHOLD] = { T_UINT, OFF(failure_threshold), 0, 65535 },
	/* The window has 32 buckets; below 100 ms they would be too fine to mean anything. */
	[NS_K_WINDOW] = { T_DUR, OFF(window_ms), 100, NS_MAX_DURATION_MS },
	/* The state word keeps 12 bits of consecutive failures. */
	[NS_K_CONSECUTIVE_FAILURES] = { T_UINT, OFF(consecutive_failures), 0, 4095 },
	[NS_K_FAILURE_RATE] = { T_PCT, OFF(failure_rate_bp), 0, 10000 },
	[NS_K_MIN_CALLS] = { T_UINT, OFF(min_calls), 1, 65535 },
	[NS_K_RECOVERY] = { T_RECOVERY, OFF(recovery), 0, 0 },
	[NS_K_OPEN_DURATION] = { T_DUR, OFF(open_duration_ms), 1, NS_MAX_DURATION_MS },
	/* The state word keeps 8 bits of probes. */
	[NS_K_HALF_OPEN_PROBES] = { T_UINT, OFF(half_open_probes), 1, 255 },
	[NS_K_CONNECT_RETRIES] = { T_UINT, OFF(connect_retries), 0, 10 },
	[NS_K_RETRY_BACKOFF] = { T_DUR, OFF(retry_backoff_ms), 1, NS_MAX_DURATION_MS },
	[NS_K_MODE] = { T_MODE, OFF(mode), 0, 0 },
	[NS_K_TRACE] = { T_BOOL, OFF(trace), 0, 0 },
	[NS_K_FAULT] = { T_FAULT, OFF(fault), 0, 0 },
	[NS_K_FAULT_SEED] = { T_SEED, OFF(fault_seed), 1, UINT64_MAX },
	[NS_K_FAILURE_STATUS] = { T_STATUSES, OFF(failure_status), 0, 0 },
	[NS_K_SLOW_CALL] = { T_DUR, OFF(slow_call_ms), 1, NS_MAX_DURATION_MS },
	[NS_K_SLOW_CALL_RATE] = { T_PCT, OFF(slow_call_rate_bp), 0, 10000 },
	[NS_K_TIMEOUT_RATE] = { T_PCT, OFF(timeout_rate_bp), 0, 10000 },
	[NS_K_LATENCY_P99] = { T_DUR, OFF(latency_p99_ms), 1, NS_MAX_DURATION_MS },
};

/**** errors ****/

struct perr {
	char *buf;
	size_t len, used;
	int count;
	const char *fname;
};

static void perr_add(struct perr *e, int line, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void perr_add(struct perr *e, int line, const char *fmt, ...)
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

/**** values ****/

static const char *trim(char *s)
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
static const char *parse_milli(const char *s, uint64_t *out)
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

/* Duration with a unit into milliseconds. Returns 0, or -1 with a reason. */
int ns_duration_parse(const char *s, uint64_t *ms, const char **why)
{
	uint64_t milli, mult;
	const char *u;

	if (strcmp(s, "0") == 0) {
		*ms = 0;
		return 0;
	}
	u = parse_milli(s, &milli);
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

static int parse_uint(const char *s, uint64_t *v)
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

static void fmt_duration(uint64_t ms, char *buf, size_t len)
{
	if (ms == 0)
		snprintf(buf, len, "0");
	else if (ms % 3600000 == 0)
		snprintf(buf, len, "%lluh", (unsigned long long)(ms / 3600000));
	else if (ms % 60000 == 0)
		snprintf(buf, len, "%llum", (unsigned long long)(ms / 60000));
	else if (ms % 1000 == 0)
		snprintf(buf, len, "%llus", (unsigned long long)(ms / 1000));
	else
		snprintf(buf, len, "%llums", (unsigned long long)ms);
}

void ns_setting_format(int key, const struct ns_settings *s, char *buf, size_t len)
{
	const struct keydef *k;
	const char *base = (const char *)s;

	if (key < 0 || key >= NS_K_COUNT) {
		snprintf(buf, len, "?");
		return;
	}
	k = &keydefs[key];
	switch (k->type) {
	case T_DUR:
		fmt_duration(*(const uint64_t *)(base + k->off), buf, len);
		break;
	case T_UINT:
		snprintf(buf, len, "%u", *(const uint32_t *)(base + k->off));
		break;
	case T_PCT: {
		uint32_t bp = *(const uint32_t *)(base + k->off);

		if (bp == 0)
			snprintf(buf, len, "0");
		else if (bp % 100 == 0)
			snprintf(buf, len, "%u%%", bp / 100);
		else
			snprintf(buf, len, "%u.%02u%%", bp / 100, bp % 100);
		break;
	}
	case T_RECOVERY:
		snprintf(buf, len, "%s", s->recovery == NS_RECOVERY_MANUAL ? "manual" : "auto");
		break;
	case T_MODE:
		snprintf(buf, len, "%s", s->mode == NS_MODE_BYPASS ? "bypass" :
			 s->mode == NS_MODE_MONITOR ? "monitor" : "enforce");
		break;
	case T_BOOL:
		snprintf(buf, len, "%s", *(const uint32_t *)(base + k->off) ? "on" : "off");
		break;
	case T_FAULT:
		if (s->fault.n)
			ns_faults_format(&s->fault, buf, len);
		else
			snprintf(buf, len, "none");
		break;
	case T_SEED:
		if (s->fault_seed)
			snprintf(buf, len, "%llu", (unsigned long long)s->fault_seed);
		else
			snprintf(buf, len, "none");
		break;
	case T_STATUSES: {
		size_t o = 0;

		buf[0] = '\0';
		for (unsigned c = 100; c < 612 && o + 16 < len; c++) {
			unsigned e = c;

			if (!ns_status_fails(s, c))
				continue;
			while (e + 1 < 612 && ns_status_fails(s, e + 1))
				e++;
			o += (size_t)(e > c ? snprintf(buf + o, len - o, "%s%u-%u", o ? ", " : "", c, e) :
				      snprintf(buf + o, len - o, "%s%u", o ? ", " : "", c));
			c = e;
		}
		if (!o)
			snprintf(buf, len, "none");
		break;
	}
	}
}

/* Set one key from its text. Returns 0 or -1 after reporting. */
static int set_value(struct perr *e, int line, int key, const char *val, struct ns_settings *s)
{
	const struct keydef *k = &keydefs[key];
	char *base = (char *)s;
	const char *why = NULL;
	uint64_t v;

	if (!*val) {
		perr_add(e, line, "%s: missing value", ns_key_names[key]);
		return -1;
	}
	switch (k->type) {
	case T_DUR:
		if (ns_duration_parse(val, &v, &why) < 0) {
			perr_add(e, line, "%s: bad duration '%s': %s", ns_key_names[key], val, why);
			return -1;
		}
		if (v != 0 && (v < k->min || v > k->max)) {
			char lo[32], hi[32];

			fmt_duration(k->min, lo, sizeof(lo));
			fmt_duration(k->max, hi, sizeof(hi));
			perr_add(e, line, "%s: %s is out of range (%s to %s, or 0 for off)",
				 ns_key_names[key], val, lo, hi);
			return -1;
		}
		if (v == 0 && key == NS_K_WINDOW) {
			perr_add(e, line, "window: cannot be 0 (failures are counted in it)");
			return -1;
		}
		if (v == 0 && (key == NS_K_OPEN_DURATION || key == NS_K_RETRY_BACKOFF)) {
			perr_add(e, line, "%s: cannot be 0", ns_key_names[key]);
			return -1;
		}
		*(uint64_t *)(base + k->off) = v;
		return 0;
	case T_UINT:
		if (parse_uint(val, &v) < 0) {
			perr_add(e, line, "%s: bad number '%s': expected a whole number", ns_key_names[key], val);
			return -1;
		}
		if (v < k->min || v > k->max) {
			perr_add(e, line, "%s: %s is out of range (%llu to %llu)", ns_key_names[key], val,
				 (unsigned long long)k->min, (unsigned long long)k->max);
			return -1;
		}
		*(uint32_t *)(base + k->off) = (uint32_t)v;
		return 0;
	case T_PCT: {
		size_t n = strlen(val);
		char num[32];
		const char *end;

		if (strcmp(val, "0") == 0) {
			*(uint32_t *)(base + k->off) = 0;
			return 0;
		}
		if (n < 2 || val[n - 1] != '%' || n - 1 >= sizeof(num)) {
			perr_add(e, line, "%s: bad percentage '%s': expected a value such as 50%%", ns_key_names[key], val);
			return -1;
		}
		memcpy(num, val, n - 1);
		num[n - 1] = '\0';
		end = parse_milli(num, &v);   /* thousandths of a percent */
		if (!end || *end || v % 10) {
			perr_add(e, line, "%s: bad percentage '%s': expected a value such as 50%% (at most two decimals)",
				 ns_key_names[key], val);
			return -1;
		}
		v /= 10;                       /* basis points */
		if (v > 10000) {
			perr_add(e, line, "%s: %s is over 100%%", ns_key_names[key], val);
			return -1;
		}
		*(uint32_t *)(base + k->off) = (uint32_t)v;
		return 0;
	}
	case T_RECOVERY:
		if (strcmp(val, "auto") == 0)
			s->recovery = NS_RECOVERY_AUTO;
		else if (strcmp(val, "manual") == 0)
			s->recovery = NS_RECOVERY_MANUAL;
		else {
			perr_add(e, line, "recovery: bad value '%s': expected auto or manual", val);
			return -1;
		}
		return 0;
	case T_MODE:
		if (strcmp(val, "enforce") == 0)
			s->mode = NS_MODE_ENFORCE;
		else if (strcmp(val, "monitor") == 0)
			s->mode = NS_MODE_MONITOR;
		else if (strcmp(val, "bypass") == 0)
			s->mode = NS_MODE_BYPASS;
		else {
			perr_add(e, line, "mode: bad value '%s': expected enforce, monitor or bypass", val);
			return -1;
		}
		return 0;
	case T_BOOL:
		if (strcmp(val, "on") == 0)
			*(uint32_t *)(base + k->off) = 1;
		else if (strcmp(val, "off") == 0)
			*(uint32_t *)(base + k->off) = 0;
		else {
			perr_add(e, line, "%s: bad value '%s': expected on or off", ns_key_names[key], val);
			return -1;
		}
		return 0;
	case T_FAULT: {
		char fwhy[200];

		if (strcmp(val, "none") == 0) {
			memset(&s->fault, 0, sizeof(s->fault));
			return 0;
		}
		if (ns_faults_parse(val, &s->fault, fwhy, sizeof(fwhy)) < 0) {
			perr_add(e, line, "fault: %s", fwhy);
			return -1;
		}
		return 0;
	}
	case T_STATUSES: {
		/* "429, 500-599", or "none" */
		uint64_t bits[8] = { 0 };
		const char *p = val;

		if (strcmp(val, "none") != 0) {
			for (;;) {
				unsigned long lo, hi;
				char *end;

				while (*p == ' ' || *p == '\t')
					p++;
				lo = strtoul(p, &end, 10);
				hi = lo;
				if (end == p || lo < 100 || lo > 599)
					goto bad_status;
				p = end;
				if (*p == '-') {
					hi = strtoul(p + 1, &end, 10);
					if (end == p + 1 || hi < lo || hi > 599)
						goto bad_status;
					p = end;
				}
				for (unsigned long c = lo; c <= hi; c++)
					bits[(c - 100) / 64] |= 1ULL << ((c - 100) % 64);
				while (*p == ' ' || *p == '\t')
					p++;
				if (!*p)
					break;
				if (*p++ != ',')
					goto bad_status;
			}
		}
		memcpy(s->failure_status, bits, sizeof(bits));
		return 0;
bad_status:
		perr_add(e, line, "failure_status: bad value '%s': expected codes and ranges from 100 to 599, "
			 "such as '429, 500-599', or none", val);
		return -1;
	}
	case T_SEED: {
		uint64_t x = 0;
		const char *c = val;

		for (; isdigit((unsigned char)*c) && x <= UINT64_MAX / 10 - 1; c++)
			x = x * 10 + (uint64_t)(*c - '0');
		if (*c || c == val || x == 0) {
			perr_add(e, line, "fault_seed: bad value '%s': expected a whole number from 1", val);
			return -1;
		}
		s->fault_seed = x;
		return 0;
	}
	}
	return -1;
}

/**** patterns ****/

static int valid_hostname(const char *s)
{
	size_t n = strlen(s), label = 0;

	if (n == 0 || n > 253)
		return 0;
	for (; *s; s++) {
		if (*s == '.') {
			if (label == 0)
				return 0;
			label = 0;
			continue;
		}
		if (!isalnum((unsigned char)*s) && *s != '-' && *s != '_')
			return 0;
		if (++label > 63)
			return 0;
	}
	return label > 0;
}

static int parse_port(const char *s, int *port)
{
	uint64_t v;

	if (parse_uint(s, &v) < 0 || v < 1 || v > 65535)
		return -1;
	*port = (int)v;
	return 0;
}

/* Address or CIDR text into family/addr/prefix. */
static int parse_addr(const char *s, struct ns_section *sec)
{
	char buf[64];
	const char *slash = strchr(s, '/');
	size_t n = slash ? (size_t)(slash - s) : strlen(s);
	uint64_t prefix;
	int max;

	if (n == 0 || n >= sizeof(buf))
		return -1;
	memcpy(buf, s, n);
	buf[n] = '\0';
	memset(sec->addr, 0, sizeof(sec->addr));
	if (inet_pton(AF_INET, buf, sec->addr) == 1) {
		sec->family = AF_INET;
		max = 32;
	} else if (inet_pton(AF_INET6, buf, sec->addr) == 1) {
		sec->family = AF_INET6;
		max = 128;
	} else {
		return -1;
	}
	sec->prefix = max;
	if (slash) {
		if (parse_uint(slash + 1, &prefix) < 0 || prefix > (uint64_t)max)
			return -2;
		sec->prefix = (int)prefix;
	}
	/* host bits must be zero, so that a typo does not silently widen or narrow */
	for (int bit = sec->prefix; bit < max; bit++)
		if (sec->addr[bit / 8] & (0x80 >> (bit % 8)))
			return -3;
	return 0;
}

/* Parse a [host "..."] pattern into sec. Returns NULL or a reason. */
static const char *parse_pattern(const char *pat, struct ns_section *sec)
{
	char host[NS_HOST_MAX + 16];
	const char *colon;
	size_t n;
	int r;

	sec->port = 0;
	if (strlen(pat) >= sizeof(host))
		return "pattern too long";
	if (pat[0] == '[') {
		const char *close = strchr(pat, ']');

		if (!close)
			return "missing ']' after an IPv6 address";
		n = (size_t)(close - pat - 1);
		memcpy(host, pat + 1, n);
		host[n] = '\0';
		if (close[1] == ':') {
			if (parse_port(close + 2, &sec->port) < 0)
				return "bad port (1 to 65535)";
		} else if (close[1] != '\0') {
			return "unexpected text after ']'";
		}
		if (!strchr(host, ':'))
			return "brackets are only for IPv6 addresses";
	} else {
		colon = strchr(pat, ':');
		if (colon && strchr(colon + 1, ':')) {
			/* bare IPv6: no port (write [v6]:port for one) */
			snprintf(host, sizeof(host), "%s", pat);
		} else if (colon) {
			n = (size_t)(colon - pat);
			memcpy(host, pat, n);
			host[n] = '\0';
			if (parse_port(colon + 1, &sec->port) < 0)
				return "bad port (1 to 65535)";
		} else {
			snprintf(host, sizeof(host), "%s", pat);
		}
	}
	if (!host[0])
		return "empty host";

	r = parse_addr(host, sec);
	if (r == 0) {
		sec->kind = NS_MATCH_CIDR;
		return NULL;
	}
	if (r == -2)
		return "bad prefix length";
	if (r == -3)
		return "address has bits set beyond the prefix length";
	if (strchr(host, '/') || strchr(host, ':'))
		return "not a valid address or CIDR";

	n = strlen(host);
	if (n > 1 && host[n - 1] == '.') {
		host[--n] = '\0';
		/* "10.0.0.1." is the address, not a name nothing connects by */
		if (parse_addr(host, sec) == 0) {
			sec->kind = NS_MATCH_CIDR;
			return NULL;
		}
	}
	for (size_t i = 0; i < n; i++)
		host[i] = (char)tolower((unsigned char)host[i]);
	if (host[0] == '*') {
		if (host[1] != '.' || !valid_hostname(host + 2))
			return "a wildcard must be '*.' followed by a domain, such as *.example.com";
		sec->kind = NS_MATCH_WILDCARD;
		snprintf(sec->name, sizeof(sec->name), "%.254s", host + 1);   /* keeps the dot */
		return NULL;
	}
	if (!valid_hostname(host))
		return "not a valid host name, address or CIDR";
	sec->kind = NS_MATCH_NAME;
	snprintf(sec->name, sizeof(sec->name), "%.253s", host);
	return NULL;
}

static int same_pattern(const struct ns_section *a, const struct ns_section *b)
{
	if (a->kind != b->kind || a->port != b->port)
		return 0;
	switch (a->kind) {
	case NS_MATCH_DEFAULTS:
		return 1;
	case NS_MATCH_NAME:
	case NS_MATCH_WILDCARD:
		return strcmp(a->name, b->name) == 0;
	default:
		return a->family == b->family && a->prefix == b->prefix &&
		       memcmp(a->addr, b->addr, sizeof(a->addr)) == 0;
	}
}

/**** parser ****/

static int add_section(struct ns_policy *p, int *cap)
{
	if (p->nsections == *cap) {
		int ncap = *cap ? *cap * 2 : 8;
		struct ns_section *n = realloc(p->sec, (size_t)ncap * sizeof(*n));

		if (!n)
			return -1;
		p->sec = n;
		*cap = ncap;
	}
	memset(&p->sec[p->nsections], 0, sizeof(p->sec[0]));
	return p->nsections++;
}

static void parse_header(struct perr *e, int line, char *s, struct ns_policy *p, int *cur, int *cap)
{
	char *end = strrchr(s, ']');
	const char *body, *why;
	struct ns_section tmp;
	int idx;

	*cur = -1;   /* keys under a broken header are checked but go nowhere */
	if (!end || end[1] != '\0') {
		perr_add(e, line, "bad section header: missing ']'");
		return;
	}
	*end = '\0';
	body = trim(s + 1);
	memset(&tmp, 0, sizeof(tmp));
	tmp.line = line;
	if (strcmp(body, "defaults") == 0) {
		if (p->sec[0].line) {
			perr_add(e, line, "duplicate section [defaults] (first at line %d)", p->sec[0].line);
			return;
		}
		p->sec[0].line = line;
		*cur = 0;
		return;
	}
	if (strncmp(body, "host", 4) != 0 || (body[4] != ' ' && body[4] != '\t' && body[4] != '"')) {
		perr_add(e, line, "unknown section [%s]: expected [defaults] or [host \"...\"]", body);
		return;
	}
	body = trim((char *)body + 4);
	if (body[0] != '"' || strlen(body) < 2 || body[strlen(body) - 1] != '"') {
		perr_add(e, line, "bad section header: the host pattern must be in double quotes");
		return;
	}
	snprintf(tmp.pattern, sizeof(tmp.pattern), "%.*s", (int)strlen(body) - 2, body + 1);
	if (strlen(body) - 2 >= sizeof(tmp.pattern)) {
		perr_add(e, line, "bad host pattern: too long");
		return;
	}
	why = parse_pattern(tmp.pattern, &tmp);
	if (why) {
		perr_add(e, line, "bad host pattern \"%s\": %s", tmp.pattern, why);
		return;
	}
	for (int i = 1; i < p->nsections; i++) {
		if (same_pattern(&p->sec[i], &tmp)) {
			perr_add(e, line, "duplicate section [host \"%s\"] (first at line %d)",
				 tmp.pattern, p->sec[i].line);
			return;
		}
	}
	idx = add_section(p, cap);
	if (idx < 0) {
		e->count = -1;
		return;
	}
	tmp.v = ns_builtin_settings;
	p->sec[idx] = tmp;
	*cur = idx;
}

static void parse_keyline(struct perr *e, int line, char *s, struct ns_policy *p, int cur, int in_section)
{
	char *eq = strchr(s, '=');
	const char *key, *val;
	int k;

	if (!eq) {
		perr_add(e, line, "expected 'key = value' or a [section] header");
		return;
	}
	*eq = '\0';
	key = trim(s);
	val = trim(eq + 1);
	for (k = 0; k < NS_K_COUNT; k++)
		if (strcmp(key, ns_key_names[k]) == 0)
			break;
	if (!*key) {
		perr_add(e, line, "missing key before '='");
		return;
	}
	if (k == NS_K_COUNT) {
		perr_add(e, line, "unknown key '%s'", key);
		return;
	}
	if (!in_section) {
		perr_add(e, line, "key '%s' outside a section (put it under [defaults])", key);
		return;
	}
	if (cur < 0) {
		struct ns_settings scratch = ns_builtin_settings;

		set_value(e, line, k, val, &scratch);
		return;
	}
	if (k == NS_K_FAULT_SEED && cur != 0) {
		perr_add(e, line, "fault_seed: only in [defaults] (one random source per process)");
		return;
	}
	if (p->sec[cur].set & (1u << k)) {
		perr_add(e, line, "duplicate key '%s' (first set at line %d)", key, p->sec[cur].key_line[k]);
		return;
	}
	if (set_value(e, line, k, val, &p->sec[cur].v) == 0) {
		p->sec[cur].set |= 1u << k;
		p->sec[cur].key_line[k] = line;
		if (k == NS_K_FAULT && p->sec[cur].v.fault.n)
			p->has_faults = 1;
	}
}

int ns_policy_builtin(struct ns_policy *out)
{
	memset(out, 0, sizeof(*out));
	out->sec = calloc(1, sizeof(*out->sec));
	if (!out->sec)
		return -1;
	out->nsections = 1;
	out->sec[0].kind = NS_MATCH_DEFAULTS;
	out->sec[0].v = ns_builtin_settings;
	snprintf(out->sec[0].pattern, sizeof(out->sec[0].pattern), "defaults");
	return 0;
}

int ns_policy_parse(const char *text, size_t len, const char *fname,
		    struct ns_policy *out, char *err, size_t errlen)
{
	struct perr e = { err, errlen, 0, 0, fname };
	char buf[NS_LINE_MAX + 2];
	size_t pos = 0;
	int line = 0, cur = -1, in_section = 0, cap = 1;

	if (err && errlen)
		err[0] = '\0';
	if (ns_policy_builtin(out) < 0) {
		perr_add(&e, 0, "out of memory");
		return -1;
	}
	snprintf(out->path, sizeof(out->path), "%s", fname);
	while (pos < len) {
		size_t start = pos, n;
		const char *nl = memchr(text + pos, '\n', len - pos);
		char *s, *hash;
		int inq = 0;

		n = nl ? (size_t)(nl - (text + start)) : len - start;
		pos = start + n + 1;
		line++;
		if (memchr(text + start, '\0', n)) {
			perr_add(&e, line, "NUL byte in line");
			continue;
		}
		if (n > NS_LINE_MAX) {
			perr_add(&e, line, "line longer than %d characters", NS_LINE_MAX);
			continue;
		}
		memcpy(buf, text + start, n);
		buf[n] = '\0';
		for (hash = buf; *hash; hash++) {
			if (*hash == '"')
				inq = !inq;
			else if (*hash == '#' && !inq)
				break;
		}
		*hash = '\0';
		s = (char *)trim(buf);
		if (!*s)
			continue;
		if (*s == '[') {
			parse_header(&e, line, s, out, &cur, &cap);
			if (e.count < 0)
				break;
			in_section = 1;
		} else {
			parse_keyline(&e, line, s, out, cur, in_section);
		}
	}
	if (e.count < 0) {
		ns_policy_free(out);
		return -1;
	}
	if (e.count) {
		ns_policy_free(out);
		return e.count;
	}
	return 0;
}

const char *ns_policy_path(void)
{
	const char *env = getenv("NETSHIM_POLICY");

	if (env && *env)
		return env;
	if (access("/etc/netshim/policy.conf", F_OK) == 0)
		return "/etc/netshim/policy.conf";
	return NULL;
}

int ns_policy_load(const char *path, struct ns_policy *out, char *err, size_t errlen)
{
	struct perr e = { err, errlen, 0, 0, path };
	struct stat st;
	char *text;
	ssize_t got;
	size_t have = 0;
	int fd, r;

	if (err && errlen)
		err[0] = '\0';
	/* O_NONBLOCK: opening a FIFO must not wait for a writer; a regular
	 * file ignores it */
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
	if (fd < 0) {
		perr_add(&e, 0, "cannot open: %s", strerror(errno));
		return 1;
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		perr_add(&e, 0, "not a regular file");
		close(fd);
		return 1;
	}
	if (st.st_size > NS_POLICY_MAX_BYTES) {
		perr_add(&e, 0, "larger than %d bytes", NS_POLICY_MAX_BYTES);
		close(fd);
		return 1;
	}
	text = malloc((size_t)st.st_size + 1);
	if (!text) {
		close(fd);
		perr_add(&e, 0, "out of memory");
		return -1;
	}
	while (have < (size_t)st.st_size) {
		got = read(fd, text + have, (size_t)st.st_size - have);
		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0)
			break;
		have += (size_t)got;
	}
	close(fd);
	r = ns_policy_parse(text, have, path, out, err, errlen);
	free(text);
	return r;
}

void ns_policy_free(struct ns_policy *p)
{
	free(p->sec);
	p->sec = NULL;
	p->nsections = 0;
}

/**** matching ****/

static int cidr_match(const struct ns_section *s, const struct ns_dest *d)
{
	int full = s->prefix / 8, rest = s->prefix % 8;

	if (s->family != d->family)
		return 0;
	if (memcmp(s->addr, d->addr, (size_t)full) != 0)
		return 0;
	if (rest) {
		uint8_t mask = (uint8_t)(0xff << (8 - rest));

		if ((s->addr[full] & mask) != (d->addr[full] & mask))
			return 0;
	}
	return 1;
}

/* How specific a matching section is (higher wins), or -1 if it does not
 * match: host and port over host, exact name over wildcard over CIDR, a
 * longer wildcard suffix or CIDR prefix over a shorter one. */
static int match_score(const struct ns_section *s, const struct ns_dest *d)
{
	int score;
	size_t nl, sl;

	if (s->port && s->port != d->port)
		return -1;
	switch (s->kind) {
	case NS_MATCH_NAME:
		if (!d->name[0] || strcasecmp(s->name, d->name) != 0)
			return -1;
		score = 3 << 16;
		break;
	case NS_MATCH_WILDCARD:
		nl = strlen(d->name);
		sl = strlen(s->name);
		if (nl <= sl || strcasecmp(d->name + nl - sl, s->name) != 0)
			return -1;
		score = (2 << 16) + (int)sl;
		break;
	case NS_MATCH_CIDR:
		if (!cidr_match(s, d))
			return -1;
		score = (1 << 16) + s->prefix;
		break;
	default:
		return -1;
	}
	if (s->port)
		score += 1 << 24;
	return score;
}

int ns_inject_parse(const char *entry, struct ns_section *pat, struct ns_faults *f, char *why, size_t whylen)
{
	char dest[NS_HOST_MAX + 16], fwhy[200];
	const char *eq = strchr(entry, '='), *pwhy;
	size_t n;

	if (!eq) {
		snprintf(why, whylen, "expected DEST=FAULTS, such as 'api.example.com=reset after 1KiB 30%%'");
		return -1;
	}
	n = (size_t)(eq - entry);
	if (n == 0 || n >= sizeof(dest)) {
		snprintf(why, whylen, "bad destination before '=': %s", n ? "too long" : "empty");
		return -1;
	}
	for (size_t i = 0; i < n; i++)
		dest[i] = (char)tolower((unsigned char)entry[i]);
	dest[n] = '\0';
	pwhy = ns_pattern_parse(trim(dest), pat);
	if (pwhy) {
		snprintf(why, whylen, "bad destination '%.60s': %s", dest, pwhy);
		return -1;
	}
	if (ns_faults_parse(eq + 1, f, fwhy, sizeof(fwhy)) < 0) {
		snprintf(why, whylen, "bad fault '%.80s': %s", eq + 1, fwhy);
		return -1;
	}
	return 0;
}

const char *ns_pattern_parse(const char *s, struct ns_section *sec)
{
	memset(sec, 0, sizeof(*sec));
	snprintf(sec->pattern, sizeof(sec->pattern), "%s", s);
	return parse_pattern(s, sec);
}

int ns_pattern_match(const struct ns_section *sec, const struct ns_dest *d)
{
	return match_score(sec, d) >= 0;
}

void ns_policy_resolve(const struct ns_policy *p, const struct ns_dest *d,
		       struct ns_settings *out, struct ns_origin *origin)
{
	int best[NS_K_COUNT], score[NS_K_COUNT];

	for (int k = 0; k < NS_K_COUNT; k++) {
		best[k] = -1;
		score[k] = -1;
		if (p->nsections > 0 && (p->sec[0].set & (1u << k))) {
			best[k] = 0;
			score[k] = 0;
		}
	}
	for (int i = 1; i < p->nsections; i++) {
		int sc = match_score(&p->sec[i], d);

		if (sc < 0)
			continue;
		for (int k = 0; k < NS_K_COUNT; k++)
			if ((p->sec[i].set & (1u << k)) && sc > score[k]) {
				best[k] = i;
				score[k] = sc;
			}
	}
	/* the fault list is most of the struct and most policies have none:
	 * then it is not copied (one store says "none") */
	memcpy(out, &ns_builtin_settings, offsetof(struct ns_settings, fault));
	out->fault.n = 0;
	for (int k = 0; k < NS_K_COUNT; k++) {
		if (origin)
			origin->sec[k] = best[k];
		if (best[k] < 0)
			continue;
		switch (keydefs[k].type) {
		case T_FAULT:
			out->fault = p->sec[best[k]].v.fault;
			break;
		case T_STATUSES:
			memcpy(out->failure_status, p->sec[best[k]].v.failure_status, sizeof(out->failure_status));
			break;
		case T_DUR:
		case T_SEED:
			memcpy((char *)out + keydefs[k].off, (const char *)&p->sec[best[k]].v + keydefs[k].off, 8);
			break;
		default:
			memcpy((char *)out + keydefs[k].off, (const char *)&p->sec[best[k]].v + keydefs[k].off, 4);
			break;
		}
	}
}

/**** destinations ****/

/* Decimal digits of v at p; returns the end. */
static char *put_uint(char *p, unsigned v)
{
	char tmp[10];
	int n = 0;

	do {
		tmp[n++] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	while (n)
		*p++ = tmp[--n];
	return p;
}

/* Formatted by hand: this runs on every connect, and snprintf with
 * inet_ntop cost about 2,800 instructions of the connect path. */
int ns_dest_key(const struct ns_dest *d, char *buf, size_t len)
{
	char tmp[NS_KEY_MAX + 8], *p = tmp;
	size_t n;

	if (d->name[0]) {
		n = strnlen(d->name, sizeof(d->name));
		memcpy(p, d->name, n);
		p += n;
	} else if (d->family == AF_INET) {
		for (int i = 0; i < 4; i++) {
			if (i)
				*p++ = '.';
			p = put_uint(p, d->addr[i]);
		}
	} else if (d->family == AF_INET6) {
		*p++ = '[';
		if (!inet_ntop(AF_INET6, d->addr, p, INET6_ADDRSTRLEN))
			return -1;
		p += strlen(p);
		*p++ = ']';
	} else {
		return -1;
	}
	*p++ = ':';
	p = put_uint(p, d->port);
	n = (size_t)(p - tmp);
	if (n >= len)
		return -1;
	memcpy(buf, tmp, n);
	buf[n] = '\0';
	return (int)n;
}

int ns_dest_parse(const char *s, struct ns_dest *d)
{
	struct ns_section tmp;
	const char *why;

	memset(d, 0, sizeof(*d));
	memset(&tmp, 0, sizeof(tmp));
	why = parse_pattern(s, &tmp);
	if (why || !tmp.port || tmp.kind == NS_MATCH_WILDCARD)
		return -1;
	d->port = (uint16_t)tmp.port;
	if (tmp.kind == NS_MATCH_NAME) {
		snprintf(d->name, sizeof(d->name), "%s", tmp.name);
		return 0;
	}
	if (tmp.prefix != (tmp.family == AF_INET ? 32 : 128))
		return -1;
	d->family = tmp.family;
	memcpy(d->addr, tmp.addr, sizeof(d->addr));
	return 0;
}

/* values.c -- the policy's keys and their values: the built-in settings,
 * each key's type and limits, and the text of a value read (durations,
 * percentages, counts, status lists, fault lists) and written back. */
#include "internal.h"

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
	/* UNKNOWN, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED, INTERNAL, UNAVAILABLE */
	.grpc_failure_status = 1u << 2 | 1u << 4 | 1u << 8 | 1u << 13 | 1u << 14,
	.retry_after = 1,
	.burst = 1,
	.queue_timeout_ms = 5000, /* unset in a policy: the destination's connect_timeout (ns_policy_resolve) */
	.retry_after_max_ms = 600000,
	.max_connections_min = 1,
	.max_connections_max = NS_PLACES,
	.max_requests_min = 1,
	.max_requests_max = NS_PLACES,
	.adaptive_backoff_milli = 900,
	.adaptive_interval_ms = 1000,
	.throttle_k_milli = 2000,
	.throttle_window_ms = 120000,
	.fault_seed = 0,
	.fault = { .n = 0 }, /* no fault */
};

const char *const ns_key_names[NS_K_COUNT] = {
	"connect_timeout",
	"read_timeout",
	"total_timeout",
	"failure_threshold",
	"window",
	"consecutive_failures",
	"failure_rate",
	"min_calls",
	"recovery",
	"open_duration",
	"half_open_probes",
	"connect_retries",
	"retry_backoff",
	"mode",
	"trace",
	"fault",
	"fault_seed",
	"failure_status",
	"slow_call",
	"slow_call_rate",
	"timeout_rate",
	"latency_p99",
	"max_connections",
	"queue_timeout",
	"open_backoff",
	"open_duration_max",
	"open_jitter",
	"retry_after",
	"retry_after_max",
	"slow_start",
	"retry_budget",
	"retry_budget_min",
	"rate",
	"burst",
	"rate_jitter",
	"grpc_failure_status",
	"max_connections_min",
	"max_connections_max",
	"adaptive_backoff",
	"adaptive_interval",
	"throttle",
	"throttle_k",
	"throttle_window",
	"connect_total_timeout",
	"address_choice",
	"max_requests",
	"max_requests_min",
	"max_requests_max",
	"fleet_max_requests",
	"fleet_max_connections",
	"fleet_rate",
};

#define OFF(f) offsetof(struct ns_settings, f)
const struct keydef ns_keydefs[NS_K_COUNT] = {
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
	[NS_K_MAX_CONNECTIONS] = { T_MAXCONN, OFF(max_connections), 0, NS_PLACES },
	[NS_K_QUEUE_TIMEOUT] = { T_DUR, OFF(queue_timeout_ms), 1, NS_MAX_DURATION_MS },
	/* a factor from 1 to 100 (thousandths) */
	[NS_K_OPEN_BACKOFF] = { T_FACTOR, OFF(open_backoff_milli), 1000, 100000 },
	[NS_K_OPEN_DURATION_MAX] = { T_DUR, OFF(open_duration_max_ms), 1, NS_MAX_DURATION_MS },
	[NS_K_OPEN_JITTER] = { T_PCT, OFF(open_jitter_bp), 0, 10000 },
	[NS_K_RETRY_AFTER] = { T_BOOL, OFF(retry_after), 0, 0 },
	[NS_K_RETRY_AFTER_MAX] = { T_DUR, OFF(retry_after_max_ms), 1, NS_MAX_DURATION_MS },
	[NS_K_SLOW_START] = { T_DUR, OFF(slow_start_ms), 1, NS_MAX_DURATION_MS },
	[NS_K_RETRY_BUDGET] = { T_PCT, OFF(retry_budget_bp), 0, 10000 },
	/* a rate, "1/s", "30/m", "100/h", in thousandths per second */
	[NS_K_RETRY_BUDGET_MIN] = { T_RATE, OFF(retry_budget_min_mps), 1, 1000000000 },
	/* a rate, "5/s", "30/m", "100/h", in thousandths per hour (1/h to 1000000/s) */
	[NS_K_RATE] = { T_RATEH, OFF(rate_mph), 1000, 3600000000000ULL },
	[NS_K_BURST] = { T_UINT, OFF(burst), 1, 100000 },
	[NS_K_RATE_JITTER] = { T_PCT, OFF(rate_jitter_bp), 0, 10000 },
	[NS_K_GRPC_FAILURE_STATUS] = { T_GRPC, OFF(grpc_failure_status), 0, 0 },
	[NS_K_MAX_CONNECTIONS_MIN] = { T_UINT, OFF(max_connections_min), 1, NS_PLACES },
	[NS_K_MAX_CONNECTIONS_MAX] = { T_UINT, OFF(max_connections_max), 1, NS_PLACES },
	/* a factor below 1: 0.5 to 0.99 (thousandths) */
	[NS_K_ADAPTIVE_BACKOFF] = { T_FACTOR, OFF(adaptive_backoff_milli), 500, 990 },
	[NS_K_ADAPTIVE_INTERVAL] = { T_DUR, OFF(adaptive_interval_ms), 10, NS_MAX_DURATION_MS },
	[NS_K_THROTTLE] = { T_THROTTLE, OFF(throttle), 0, 0 },
	[NS_K_THROTTLE_K] = { T_FACTOR, OFF(throttle_k_milli), 1000, 100000 },
	[NS_K_THROTTLE_WINDOW] = { T_DUR, OFF(throttle_window_ms), 1000, NS_MAX_DURATION_MS },
	[NS_K_CONNECT_TOTAL_TIMEOUT] = { T_DUR, OFF(connect_total_timeout_ms), 1, NS_MAX_DURATION_MS },
	[NS_K_ADDRESS_CHOICE] = { T_ADDRCHOICE, OFF(address_choice), 0, 0 },
	[NS_K_MAX_REQUESTS] = { T_MAXCONN, OFF(max_requests), 0, NS_PLACES },
	[NS_K_MAX_REQUESTS_MIN] = { T_UINT, OFF(max_requests_min), 1, NS_PLACES },
	[NS_K_MAX_REQUESTS_MAX] = { T_UINT, OFF(max_requests_max), 1, NS_PLACES },
	/* the fleet's whole: a machine's share is at most NS_PLACES of it */
	[NS_K_FLEET_MAX_REQUESTS] = { T_UINT, OFF(fleet_max_requests), 1, 1000000 },
	[NS_K_FLEET_MAX_CONNECTIONS] = { T_UINT, OFF(fleet_max_connections), 1, 1000000 },
	[NS_K_FLEET_RATE] = { T_RATEH, OFF(fleet_rate_mph), 1000, 3600000000000ULL },
};
/* The two words of a two-way key: its value 0 or 1 (off/on, off/adaptive,
 * as-resolved/healthy-first). */
static const char *choice_word(int type, uint32_t v)
{
	if (type == T_ADDRCHOICE)
		return v ? "healthy-first" : "as-resolved";
	return !v ? "off" : type == T_BOOL ? "on" : "adaptive";
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

/* A set of codes (bit code - base of bits, n codes) as "429, 500-599", or "none". */
static void format_codes(const uint64_t *bits, unsigned base, unsigned n, char *buf, size_t len)
{
	size_t o = 0;

#define HAS(c) (bits[((c)-base) / 64] >> (((c)-base) % 64) & 1)
	buf[0] = '\0';
	for (unsigned c = base; c < base + n && o + 16 < len; c++) {
		unsigned e = c;

		if (!HAS(c))
			continue;
		while (e + 1 < base + n && HAS(e + 1))
			e++;
		o += (size_t)(e > c ? snprintf(buf + o, len - o, "%s%u-%u", o ? ", " : "", c, e)
				    : snprintf(buf + o, len - o, "%s%u", o ? ", " : "", c));
		c = e;
	}
#undef HAS
	if (!o)
		snprintf(buf, len, "none");
}

void ns_setting_format(int key, const struct ns_settings *s, char *buf, size_t len)
{
	const struct keydef *k;
	const char *base = (const char *)s;

	if (key < 0 || key >= NS_K_COUNT) {
		snprintf(buf, len, "?");
		return;
	}
	k = &ns_keydefs[key];
	switch (k->type) {
	case T_DUR:
		fmt_duration(*(const uint64_t *)(base + k->off), buf, len);
		break;
	case T_UINT:
		snprintf(buf, len, "%u", *(const uint32_t *)(base + k->off));
		break;
	case T_MAXCONN:
		if (*(const uint32_t *)(base + k->off) == NS_MAXCONN_AUTO ||
		    (key == NS_K_MAX_CONNECTIONS && s->adaptive) || (key == NS_K_MAX_REQUESTS && s->req_adaptive))
			snprintf(buf, len, "auto");
		else
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
	case T_THROTTLE:
	case T_ADDRCHOICE:
		snprintf(buf, len, "%s", choice_word(k->type, *(const uint32_t *)(base + k->off)));
		break;
	case T_FAULT:
		if (s->fault.n)
			ns_faults_format(&s->fault, buf, len);
		else
			snprintf(buf, len, "none");
		break;
	case T_RATE: {
		uint32_t r = *(const uint32_t *)(base + k->off);

		if (r == 0)
			snprintf(buf, len, "0");
		else if (r % 1000 == 0)
			snprintf(buf, len, "%u/s", r / 1000);
		else if (r * 60ull % 1000 == 0)
			snprintf(buf, len, "%llu/m", (unsigned long long)r * 60 / 1000);
		else
			snprintf(buf, len, "%llu/h", (unsigned long long)r * 3600 / 1000);
		break;
	}
	case T_RATEH: {
		unsigned long long r = *(const uint64_t *)(base + k->off);

		if (r == 0)
			snprintf(buf, len, "off");
		else if (r % 3600000 == 0)
			snprintf(buf, len, "%llu/s", r / 3600000);
		else if (r % 60000 == 0)
			snprintf(buf, len, "%llu/m", r / 60000);
		else if (r % 1000 == 0)
			snprintf(buf, len, "%llu/h", r / 1000);
		else
			snprintf(buf, len, "%llu.%03llu/h", r / 1000, r % 1000);
		break;
	}
	case T_FACTOR: {
		uint32_t m = *(const uint32_t *)(base + k->off);

		if (m == 0)
			snprintf(buf, len, "off");
		else if (m % 1000 == 0)
			snprintf(buf, len, "%u", m / 1000);
		else
			snprintf(buf, len, "%u.%03u", m / 1000, m % 1000);
		break;
	}
	case T_SEED:
		if (s->fault_seed)
			snprintf(buf, len, "%llu", (unsigned long long)s->fault_seed);
		else
			snprintf(buf, len, "none");
		break;
	case T_STATUSES:
		format_codes(s->failure_status, 100, 512, buf, len);
		break;
	case T_GRPC:
		format_codes(&s->grpc_failure_status, 0, 64, buf, len);
		break;
	}
}

/* "429, 500-599" (codes and ranges from lo to hi), or "none", into bits
 * (bit code - lo; hi - lo < 512). Returns 0, or -1 when malformed. */
static int parse_codes(const char *val, unsigned lo, unsigned hi, uint64_t bits[8])
{
	const char *p = val;

	if (strcmp(val, "none") == 0)
		return 0;
	for (;;) {
		unsigned long a, b;
		char *end;

		while (*p == ' ' || *p == '\t')
			p++;
		if (*p < '0' || *p > '9')
			return -1;
		a = strtoul(p, &end, 10);
		b = a;
		if (a < lo || a > hi)
			return -1;
		p = end;
		if (*p == '-') {
			if (p[1] < '0' || p[1] > '9')
				return -1;
			b = strtoul(p + 1, &end, 10);
			if (b < a || b > hi)
				return -1;
			p = end;
		}
		for (unsigned long c = a; c <= b; c++)
			bits[(c - lo) / 64] |= 1ULL << ((c - lo) % 64);
		while (*p == ' ' || *p == '\t')
			p++;
		if (!*p)
			return 0;
		if (*p++ != ',')
			return -1;
	}
}

/* "1.500" as "1.5", "2.000" as "2" (in place). */
static char *trim_zeros(char *s)
{
	size_t n = strlen(s);

	while (n && s[n - 1] == '0')
		s[--n] = '\0';
	if (n && s[n - 1] == '.')
		s[--n] = '\0';
	return s;
}

/* Set one key from its text. Returns 0 or -1 after reporting. */
int ns_set_value(struct perr *e, int line, int key, const char *val, struct ns_settings *s)
{
	const struct keydef *k = &ns_keydefs[key];
	char *base = (char *)s;
	const char *why = NULL;
	uint64_t v;

	if (!*val) {
		ns_perr_add(e, line, "%s: missing value", ns_key_names[key]);
		return -1;
	}
	switch (k->type) {
	case T_DUR:
		if (ns_duration_parse(val, &v, &why) < 0) {
			ns_perr_add(e, line, "%s: bad duration '%s': %s", ns_key_names[key], val, why);
			return -1;
		}
		if (v != 0 && (v < k->min || v > k->max)) {
			char lo[32], hi[32];

			fmt_duration(k->min, lo, sizeof(lo));
			fmt_duration(k->max, hi, sizeof(hi));
			ns_perr_add(e, line, "%s: %s is out of range (%s to %s, or 0 for off)",
				 ns_key_names[key], val, lo, hi);
			return -1;
		}
		if (v == 0 && key == NS_K_WINDOW) {
			ns_perr_add(e, line, "window: cannot be 0 (failures are counted in it)");
			return -1;
		}
		if (v == 0 && (key == NS_K_OPEN_DURATION || key == NS_K_RETRY_BACKOFF)) {
			ns_perr_add(e, line, "%s: cannot be 0", ns_key_names[key]);
			return -1;
		}
		*(uint64_t *)(base + k->off) = v;
		return 0;
	case T_MAXCONN:
	case T_UINT:
		if (k->type == T_MAXCONN && strcmp(val, "auto") == 0) {
			*(uint32_t *)(base + k->off) = NS_MAXCONN_AUTO;
			return 0;
		}
		if (ns_parse_uint(val, &v) < 0) {
			ns_perr_add(e, line, "%s: bad number '%s': expected a whole number%s", ns_key_names[key], val,
				    k->type == T_MAXCONN ? " or auto" : "");
			return -1;
		}
		if (v < k->min || v > k->max) {
			ns_perr_add(e, line, "%s: %s is out of range (%llu to %llu)", ns_key_names[key], val,
				 (unsigned long long)k->min, (unsigned long long)k->max);
			return -1;
		}
		*(uint32_t *)(base + k->off) = (uint32_t)v;
		return 0;
	case T_PCT: {
		uint32_t bp;
		int r;

		if (strcmp(val, "0") == 0) {
			*(uint32_t *)(base + k->off) = 0;
			return 0;
		}
		r = ns_pct_parse(val, &bp);
		if (r == NS_PCT_FORM) {
			ns_perr_add(e, line, "%s: bad percentage '%s': expected a value such as 50%%", ns_key_names[key], val);
			return -1;
		}
		if (r == NS_PCT_NUMBER) {
			ns_perr_add(e, line, "%s: bad percentage '%s': expected a value such as 50%% (at most two decimals)",
				 ns_key_names[key], val);
			return -1;
		}
		if (r == NS_PCT_OVER) {
			ns_perr_add(e, line, "%s: %s is over 100%%", ns_key_names[key], val);
			return -1;
		}
		v = bp;
		*(uint32_t *)(base + k->off) = (uint32_t)v;
		return 0;
	}
	case T_RECOVERY:
		if (strcmp(val, "auto") == 0)
			s->recovery = NS_RECOVERY_AUTO;
		else if (strcmp(val, "manual") == 0)
			s->recovery = NS_RECOVERY_MANUAL;
		else {
			ns_perr_add(e, line, "recovery: bad value '%s': expected auto or manual", val);
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
			ns_perr_add(e, line, "mode: bad value '%s': expected enforce, monitor or bypass", val);
			return -1;
		}
		return 0;
	case T_BOOL:
	case T_THROTTLE:
	case T_ADDRCHOICE:
		for (uint32_t w = 0; w < 2; w++)
			if (strcmp(val, choice_word(k->type, w)) == 0) {
				*(uint32_t *)(base + k->off) = w;
				return 0;
			}
		ns_perr_add(e, line, "%s: bad value '%s': expected %s or %s", ns_key_names[key], val,
			    choice_word(k->type, 1), choice_word(k->type, 0));
		return -1;
	case T_FAULT: {
		char fwhy[200];

		if (strcmp(val, "none") == 0) {
			memset(&s->fault, 0, sizeof(s->fault));
			return 0;
		}
		if (ns_faults_parse(val, &s->fault, fwhy, sizeof(fwhy)) < 0) {
			ns_perr_add(e, line, "fault: %s", fwhy);
			return -1;
		}
		return 0;
	}
	case T_STATUSES:
	case T_GRPC: {
		/* "429, 500-599", "2, 4, 13-14", or "none" */
		uint64_t bits[8] = { 0 };
		unsigned lo = k->type == T_GRPC ? 0 : 100, hi = k->type == T_GRPC ? 16 : 599;

		if (parse_codes(val, lo, hi, bits) < 0) {
			ns_perr_add(e, line,
				    "%s: bad value '%s': expected codes and ranges from %u to %u, such as '%s', "
				    "or none",
				    ns_key_names[key], val, lo, hi, k->type == T_GRPC ? "2, 13-14" : "429, 500-599");
			return -1;
		}
		if (k->type == T_GRPC)
			s->grpc_failure_status = bits[0];
		else
			memcpy(s->failure_status, bits, sizeof(bits));
		return 0;
	}
	case T_RATE:
	case T_RATEH: {
		const char *end;
		uint64_t per;

		if (strcmp(val, k->type == T_RATE ? "0" : "off") == 0) {
			if (k->type == T_RATE)
				*(uint32_t *)(base + k->off) = 0;
			else
				*(uint64_t *)(base + k->off) = 0;
			return 0;
		}
		end = ns_parse_milli(val, &v);
		per = !end ? 0 : strcmp(end, "/s") == 0 ? 3600 : strcmp(end, "/m") == 0 ? 60 : strcmp(end, "/h") == 0 ? 1 : 0;
		if (end && v == 0) {
			ns_perr_add(e, line, "%s: %s lets nothing through (write %s to have no %s)", ns_key_names[key], val,
				    k->type == T_RATE ? "0" : "off", ns_key_names[key]);
			return -1;
		}
		if (!per) {
			ns_perr_add(e, line, "%s: bad rate '%s': expected a number per second, minute or hour, such as 1/s or 30/m",
				    ns_key_names[key], val);
			return -1;
		}
		if (v > UINT64_MAX / 3600) {
			ns_perr_add(e, line, "%s: %s is out of range", ns_key_names[key], val);
			return -1;
		}
		v *= per;   /* thousandths per hour */
		if (k->type == T_RATE)
			v /= 3600;   /* thousandths per second */
		if (v < k->min || v > k->max) {
			ns_perr_add(e, line, "%s: %s is out of range (from %s to 1000000/s)", ns_key_names[key], val,
				    k->type == T_RATE ? "4/h" : "1/h");
			return -1;
		}
		if (k->type == T_RATE)
			*(uint32_t *)(base + k->off) = (uint32_t)v;
		else
			*(uint64_t *)(base + k->off) = v;
		return 0;
	}
	case T_FACTOR: {
		const char *end;

		if (strcmp(val, "off") == 0 && key != NS_K_OPEN_BACKOFF) {
			ns_perr_add(e, line, "%s: cannot be off", ns_key_names[key]);
			return -1;
		}
		if (strcmp(val, "off") == 0) {
			*(uint32_t *)(base + k->off) = 0;
			return 0;
		}
		end = ns_parse_milli(val, &v);
		if (!end || *end) {
			ns_perr_add(e, line, "%s: bad factor '%s': expected a number such as 2 or 1.5 (at most three decimals)",
				    ns_key_names[key], val);
			return -1;
		}
		if (v < k->min || v > k->max) {
			char lo[32], hi[32];

			snprintf(lo, sizeof(lo), "%llu.%03llu", (unsigned long long)(k->min / 1000),
				 (unsigned long long)(k->min % 1000));
			snprintf(hi, sizeof(hi), "%llu.%03llu", (unsigned long long)(k->max / 1000),
				 (unsigned long long)(k->max % 1000));
			ns_perr_add(e, line, "%s: %s is out of range (%s to %s)", ns_key_names[key], val,
				    trim_zeros(lo), trim_zeros(hi));
			return -1;
		}
		*(uint32_t *)(base + k->off) = (uint32_t)v;
		return 0;
	}
	case T_SEED: {
		uint64_t x = 0;
		const char *c = val;

		for (; isdigit((unsigned char)*c) && x <= UINT64_MAX / 10 - 1; c++)
			x = x * 10 + (uint64_t)(*c - '0');
		if (*c || c == val || x == 0) {
			ns_perr_add(e, line, "fault_seed: bad value '%s': expected a whole number from 1", val);
			return -1;
		}
		s->fault_seed = x;
		return 0;
	}
	}
	return -1;
}

const char *ns_grpc_name(unsigned code)
{
	static const char *const names[] = {
		"OK",        "CANCELLED",      "UNKNOWN",           "INVALID_ARGUMENT",   "DEADLINE_EXCEEDED",
		"NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
		"ABORTED",   "OUT_OF_RANGE",   "UNIMPLEMENTED",     "INTERNAL",           "UNAVAILABLE",
		"DATA_LOSS", "UNAUTHENTICATED"
	};

	return code < sizeof(names) / sizeof(names[0]) ? names[code] : NULL;
}

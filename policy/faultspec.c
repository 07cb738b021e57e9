/* faultspec.c -- the fault grammar (see faultspec.h): one parser for the policy key,
 * shimctl inject and shimrun --inject, and the per-connection choice. */
#include "faultspec.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "breaker.h"
#include "internal.h"
#include "policy.h"

static const struct {
	const char *name;
	int phase;
	int arg;                    /* 0 none, 1 duration, 2 rate, 3 HTTP status, 4 size, 5 IPv4 address */
	int after;                  /* takes "after SIZE" */
} kinds[NS_F_KINDS] = {
	[NS_F_NONE] = { "none", NS_FP_CONNECT, 0, 0 },
	[NS_F_REFUSE] = { "refuse", NS_FP_CONNECT, 0, 0 },
	[NS_F_UNREACHABLE] = { "unreachable", NS_FP_CONNECT, 0, 0 },
	[NS_F_BLACKHOLE] = { "blackhole", NS_FP_CONNECT, 0, 0 },
	[NS_F_DELAY] = { "delay", NS_FP_CONNECT, 1, 0 },
	[NS_F_LATENCY] = { "latency", NS_FP_DATA, 1, 0 },
	[NS_F_BANDWIDTH] = { "bandwidth", NS_FP_DATA, 2, 0 },
	[NS_F_STALL] = { "stall", NS_FP_DATA, 0, 1 },
	[NS_F_RESET] = { "reset", NS_FP_DATA, 0, 1 },
	[NS_F_CLOSE] = { "close", NS_FP_DATA, 0, 1 },
	[NS_F_STATUS] = { "status", NS_FP_DATA, 3, 0 },
	[NS_F_NXDOMAIN] = { "nxdomain", NS_FP_LOOKUP, 0, 0 },
	[NS_F_FRAGMENT] = { "fragment", NS_FP_DATA, 4, 0 },
	[NS_F_SERVFAIL] = { "servfail", NS_FP_LOOKUP, 0, 0 },
	[NS_F_DNSDELAY] = { "dnsdelay", NS_FP_LOOKUP, 1, 0 },
	[NS_F_RESOLVE] = { "resolve", NS_FP_LOOKUP, 5, 0 },
	[NS_F_TLSFAIL] = { "tlsfail", NS_FP_DATA, 0, 0 },
};

int ns_fault_phase(uint32_t kind)
{
	return kind < NS_F_KINDS ? kinds[kind].phase : NS_FP_CONNECT;
}

/**** values ****/

/* "512", "1KiB", "4MiB", "10KB": bytes, at most NS_FAULT_SIZE_MAX, so that
 * every value kept formats back (fmt_size) to a text that parses to it.
 * Returns the end, or NULL (no number, or too large: never wrapped). */
static const char *parse_size(const char *s, uint64_t *out)
{
	static const struct { const char *u; uint64_t mult; } units[] = {
		{ "KiB", 1024 }, { "MiB", 1024 * 1024 }, { "GiB", 1024ULL * 1024 * 1024 },
		{ "KB", 1000 }, { "MB", 1000000 }, { "GB", 1000000000 }, { "B", 1 },
	};
	uint64_t v = 0;
	int digits = 0;

	while (isdigit((unsigned char)*s)) {
		v = v * 10 + (uint64_t)(*s++ - '0');
		if (v > NS_FAULT_SIZE_MAX)
			return NULL;
		digits++;
	}
	if (!digits)
		return NULL;
	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
		size_t n = strlen(units[i].u);

		if (strncmp(s, units[i].u, n) == 0) {
			if (v > NS_FAULT_SIZE_MAX / units[i].mult)
				return NULL;
			v *= units[i].mult;
			s += n;
			break;
		}
	}
	*out = v;
	return s;
}

static void fmt_size(uint64_t v, char *buf, size_t len)
{
	if (v && v % (1024 * 1024) == 0)
		snprintf(buf, len, "%lluMiB", (unsigned long long)(v / (1024 * 1024)));
	else if (v && v % 1024 == 0)
		snprintf(buf, len, "%lluKiB", (unsigned long long)(v / 1024));
	else
		snprintf(buf, len, "%llu", (unsigned long long)v);
}

/* "30%", "2.5%": basis points in (0, 10000]. */
static int parse_pct(const char *s, uint32_t *bp)
{
	return ns_pct_parse(s, bp) == 0 && *bp > 0 ? 0 : -1;
}

static int parse_one(char *text, struct ns_fault *f, char *why, size_t whylen)
{
	char *tok[12], *save = NULL, *t;
	int n = 0, i = 1;
	uint32_t k;
	const char *e;

	for (t = strtok_r(text, " \t", &save); t; t = strtok_r(NULL, " \t", &save)) {
		if (n == 12) {
			snprintf(why, whylen, "too many words in one fault");
			return -1;
		}
		tok[n++] = t;
	}
	if (n == 0) {
		snprintf(why, whylen, "empty fault (between two ';'?)");
		return -1;
	}
	memset(f, 0, sizeof(*f));
	f->pct_bp = 10000;
	for (k = 1; k < NS_F_KINDS; k++)
		if (strcmp(tok[0], kinds[k].name) == 0)
			break;
	if (k == NS_F_KINDS) {
		snprintf(why, whylen, "unknown fault '%.40s' (refuse, unreachable, blackhole, delay, latency, "
			 "bandwidth, fragment, stall, reset, close, status, nxdomain, servfail, dnsdelay, resolve or tlsfail)",
			 tok[0]);
		return -1;
	}
	f->kind = k;
	if (kinds[k].arg) {
		const char *dwhy = NULL;

		if (i >= n || strcmp(tok[i], "after") == 0 || strchr(tok[i], '%')) {
			snprintf(why, whylen, "%s needs %s", kinds[k].name, kinds[k].arg == 1 ? "a duration, such as 800ms" :
				 kinds[k].arg == 2 ? "a rate, such as 10KiB/s" : kinds[k].arg == 4 ? "a size, such as 1 or 512" :
				 kinds[k].arg == 5 ? "an IPv4 address, such as 127.0.0.1" : "an HTTP status code, such as 503");
			return -1;
		}
		if (kinds[k].arg == 1) {
			if (ns_duration_parse(tok[i], &f->arg, &dwhy) < 0) {
				snprintf(why, whylen, "%s: bad duration '%.40s': %s", kinds[k].name, tok[i], dwhy);
				return -1;
			}
			if (f->arg == 0 || f->arg > 24ULL * 3600 * 1000) {
				snprintf(why, whylen, "%s: %.40s is out of range (1ms to 24h)", kinds[k].name, tok[i]);
				return -1;
			}
		} else if (kinds[k].arg == 5) {
			struct in_addr a4;

			if (inet_pton(AF_INET, tok[i], &a4) != 1) {
				snprintf(why, whylen, "resolve: bad address '%.40s': expected an IPv4 address, such as "
					 "127.0.0.1", tok[i]);
				return -1;
			}
			f->arg = a4.s_addr;
		} else if (kinds[k].arg == 4) {
			e = parse_size(tok[i], &f->arg);
			if (!e || *e || f->arg == 0) {
				snprintf(why, whylen, "fragment: bad size '%.40s': expected the most bytes a read returns, "
					 "such as 1 or 512", tok[i]);
				return -1;
			}
		} else if (kinds[k].arg == 2) {
			e = parse_size(tok[i], &f->arg);
			if (!e || strcmp(e, "/s") != 0 || f->arg == 0) {
				snprintf(why, whylen, "bandwidth: bad rate '%.40s': expected bytes per second, such as "
					 "10KiB/s or 500B/s", tok[i]);
				return -1;
			}
		} else {
			uint64_t code = 0;

			for (e = tok[i]; isdigit((unsigned char)*e) && code < 1000; e++)
				code = code * 10 + (uint64_t)(*e - '0');
			if (*e || code < 100 || code > 599) {
				snprintf(why, whylen, "status: bad code '%.40s': expected 100 to 599", tok[i]);
				return -1;
			}
			f->arg = code;
		}
		i++;
		if (k == NS_F_LATENCY && i < n && strcmp(tok[i], "jitter") == 0) {
			if (i + 1 >= n || ns_duration_parse(tok[i + 1], &f->jitter, &dwhy) < 0 ||
			    f->jitter > 24ULL * 3600 * 1000) {
				snprintf(why, whylen, "jitter: expected a duration up to 24h, such as 50ms%s%s",
					 dwhy ? ": " : "", dwhy ? dwhy : "");
				return -1;
			}
			i += 2;
		}
		if (k == NS_F_STATUS && i < n && strcmp(tok[i], "retry-after") == 0) {
			uint64_t sec = 0;

			for (e = i + 1 < n ? tok[i + 1] : ""; isdigit((unsigned char)*e) && sec <= 86400; e++)
				sec = sec * 10 + (uint64_t)(*e - '0');
			if (i + 1 >= n || !*tok[i + 1] || *e || sec > 86400) {
				snprintf(why, whylen, "retry-after: expected whole seconds from 0 to 86400, such as 30");
				return -1;
			}
			f->after = sec + 1;
			i += 2;
		}
	}
	if (i < n && strcmp(tok[i], "after") == 0) {
		if (!kinds[k].after) {
			snprintf(why, whylen, "%s takes no 'after SIZE' (only stall, reset and close do)", kinds[k].name);
			return -1;
		}
		if (i + 1 >= n || !(e = parse_size(tok[i + 1], &f->after)) || *e) {
			snprintf(why, whylen, "after: expected a size in bytes up to 1024TiB, such as 512, 1KiB or 4MiB");
			return -1;
		}
		i += 2;
	}
	if (i + 3 < n && strcmp(tok[i], "for") == 0 && strcmp(tok[i + 2], "every") == 0) {
		uint64_t d, p;
		const char *dwhy = NULL;

		if (ns_duration_parse(tok[i + 1], &d, &dwhy) < 0 || ns_duration_parse(tok[i + 3], &p, &dwhy) < 0 ||
		    d == 0 || p == 0 || d >= p || p > 24ULL * 3600 * 1000) {
			snprintf(why, whylen, "for D every P: expected two durations, D shorter than P (at most 24h), "
				 "such as 'for 2s every 6s'");
			return -1;
		}
		f->for_ms = (uint32_t)d;
		f->period_ms = (uint32_t)p;
		i += 4;
	}
	while (i + 1 < n && (strcmp(tok[i], "first") == 0 || strcmp(tok[i], "every") == 0)) {
		uint64_t v;

		if (ns_parse_uint(tok[i + 1], &v) < 0 || v == 0 || v > 1000000) {
			snprintf(why, whylen, "%s: expected a count from 1 to 1000000, such as 2", tok[i]);
			return -1;
		}
		if (f->first || f->every) {
			snprintf(why, whylen, "one of 'first N' or 'every N' per fault");
			return -1;
		}
		*(tok[i][0] == 'f' ? &f->first : &f->every) = (uint32_t)v;
		i += 2;
	}
	if (i < n && strchr(tok[i], '%')) {
		if (parse_pct(tok[i], &f->pct_bp) < 0) {
			snprintf(why, whylen, "bad percentage '%.40s': expected more than 0%% and at most 100%%, "
				 "such as 30%%", tok[i]);
			return -1;
		}
		i++;
	}
	if (i < n) {
		snprintf(why, whylen, "unexpected '%.40s' after %s", tok[i], kinds[k].name);
		return -1;
	}
	return 0;
}

int ns_faults_parse(const char *s, struct ns_faults *out, char *why, size_t whylen)
{
	char buf[1024], *p, *semi;

	memset(out, 0, sizeof(*out));
	if (strlen(s) >= sizeof(buf)) {
		snprintf(why, whylen, "too long");
		return -1;
	}
	snprintf(buf, sizeof(buf), "%s", s);
	for (p = buf;; p = semi + 1) {
		semi = strchr(p, ';');
		if (semi)
			*semi = '\0';
		if (out->n == NS_FAULTS_MAX) {
			snprintf(why, whylen, "at most %d faults in one list", NS_FAULTS_MAX);
			return -1;
		}
		if (parse_one(p, &out->f[out->n], why, whylen) < 0)
			return -1;
		out->n++;
		if (!semi)
			break;
	}
	return 0;
}

void ns_faults_format(const struct ns_faults *f, char *buf, size_t len)
{
	size_t o = 0;

	buf[0] = '\0';
	for (uint32_t i = 0; i < f->n && i < NS_FAULTS_MAX && o < len; i++) {
		const struct ns_fault *x = &f->f[i];
		uint32_t k = x->kind < NS_F_KINDS ? x->kind : NS_F_NONE;
		char a[40] = "", af[96] = "", pc[16] = "";

		if (kinds[k].arg == 1)
			snprintf(a, sizeof(a), " %llums", (unsigned long long)x->arg);
		else if (kinds[k].arg == 2) {
			fmt_size(x->arg, a + 1, sizeof(a) - 4);
			a[0] = ' ';
			strcat(a, "/s");
		} else if (kinds[k].arg == 3)
			snprintf(a, sizeof(a), " %llu", (unsigned long long)x->arg);
		else if (kinds[k].arg == 4) {
			fmt_size(x->arg, a + 1, sizeof(a) - 1);
			a[0] = ' ';
		} else if (kinds[k].arg == 5) {
			struct in_addr a4 = { .s_addr = (uint32_t)x->arg };

			a[0] = ' ';
			inet_ntop(AF_INET, &a4, a + 1, sizeof(a) - 1);
		}
		if (kinds[k].after && x->after) {
			char sz[32];

			fmt_size(x->after, sz, sizeof(sz));
			snprintf(af, sizeof(af), " after %s", sz);
		} else if (k == NS_F_STATUS && x->after) {
			snprintf(af, sizeof(af), " retry-after %llu", (unsigned long long)(x->after - 1));
		} else if (k == NS_F_LATENCY && x->jitter) {
			snprintf(af, sizeof(af), " jitter %llums", (unsigned long long)x->jitter);
		}
		if (x->pct_bp < 10000) {
			if (x->pct_bp % 100)
				snprintf(pc, sizeof(pc), " %u.%02u%%", x->pct_bp / 100, x->pct_bp % 100);
			else
				snprintf(pc, sizeof(pc), " %u%%", x->pct_bp / 100);
		}
		if (x->period_ms) {
			char sc[48];

			snprintf(sc, sizeof(sc), " for %ums every %ums", x->for_ms, x->period_ms);
			strncat(af, sc, sizeof(af) - strlen(af) - 1);
		}
		if (x->first || x->every) {
			char sc[24];

			snprintf(sc, sizeof(sc), " %s %u", x->first ? "first" : "every", x->first ? x->first : x->every);
			strncat(af, sc, sizeof(af) - strlen(af) - 1);
		}
		o += (size_t)snprintf(buf + o, len - o, "%s%s%s%s%s", i ? "; " : "", kinds[k].name, a, af, pc);
	}
}

uint32_t ns_fault_roll(uint64_t *rng)
{
	return (uint32_t)((ns_rng_next(rng) >> 33) % 10000);
}

uint32_t ns_faults_choose(const struct ns_faults *f, int phase, uint64_t *rng)
{
	uint32_t mask = 0;

	for (uint32_t i = 0; i < f->n && i < NS_FAULTS_MAX; i++) {
		const struct ns_fault *x = &f->f[i];

		if (ns_fault_phase(x->kind) != phase)
			continue;
		if (x->pct_bp >= 10000 || ns_fault_roll(rng) < x->pct_bp)
			mask |= 1u << i;
	}
	return mask;
}

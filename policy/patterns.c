/* patterns.c -- which destinations a section names ("api.example.com:443",
 * "*.example.com", "10.0.0.0/8"), which section's keys a destination gets,
 * and destinations as keys ("host:port") and back. */
#include "internal.h"

#include "policy.h"
#include "polimage.h"

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

	if (ns_parse_uint(s, &v) < 0 || v < 1 || v > 65535)
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
		if (ns_parse_uint(slash + 1, &prefix) < 0 || prefix > (uint64_t)max)
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
const char *ns_parse_pattern_at(const char *pat, struct ns_section *sec)
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

uint64_t ns_pattern_hash(const struct ns_section *a)
{
	uint64_t h = 1469598103934665603ULL ^ ((uint64_t)(uint32_t)a->kind << 32 | (uint32_t)a->port);
	const unsigned char *b;
	size_t n;

	/* what ns_same_pattern compares, and nothing else */
	if (a->kind == NS_MATCH_NAME || a->kind == NS_MATCH_WILDCARD) {
		b = (const unsigned char *)a->name;
		n = strlen(a->name);
	} else if (a->kind == NS_MATCH_DEFAULTS) {
		n = 0;
		b = NULL;
	} else {
		h ^= (uint64_t)(uint32_t)a->family << 8 ^ (uint64_t)(uint32_t)a->prefix << 16;
		b = a->addr;
		n = sizeof(a->addr);
	}
	for (size_t i = 0; i < n; i++) {
		h ^= b[i];
		h *= 1099511628211ULL;
	}
	return h * 0x9e3779b97f4a7c15ULL;
}

int ns_same_pattern(const struct ns_section *a, const struct ns_section *b)
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
	pwhy = ns_pattern_parse(ns_trim(dest), pat);
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
	return ns_parse_pattern_at(s, sec);
}

int ns_pattern_match(const struct ns_section *sec, const struct ns_dest *d)
{
	return match_score(sec, d) >= 0;
}

static int unlikely_mapped(const struct ns_policy *p)
{
	return __builtin_expect(p->img_mapped, 0);
}

void ns_policy_resolve(const struct ns_policy *p, const struct ns_dest *d,
		       struct ns_settings *out, struct ns_origin *origin)
{
	int best[NS_K_COUNT], score[NS_K_COUNT], nc;
	uint32_t cand[NS_PIMG_CANDIDATES];

	for (int k = 0; k < NS_K_COUNT; k++) {
		best[k] = -1;
		score[k] = -1;
		if (p->nsections > 0 && (p->sec[0].set & NS_KBIT(k))) {
			best[k] = 0;
			score[k] = 0;
		}
	}
	/* through the index, the sections that can match (polimage.c); else
	 * every one */
	nc = ns_pimg_candidates(p, d, cand, NS_PIMG_CANDIDATES);
	for (int j = 0, n = nc >= 0 ? nc : p->nsections - 1; j < n; j++) {
		int i = nc >= 0 ? (int)cand[j] : j + 1, sc;

		if (unlikely_mapped(p) && !ns_pimg_section_ok(p, i))
			continue;
		sc = match_score(&p->sec[i], d);

		if (sc < 0)
			continue;
		for (int k = 0; k < NS_K_COUNT; k++)
			if ((p->sec[i].set & NS_KBIT(k)) && sc > score[k]) {
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
		switch (ns_keydefs[k].type) {
		case T_FAULT:
			out->fault = p->sec[best[k]].v.fault;
			break;
		case T_STATUSES:
			memcpy(out->failure_status, p->sec[best[k]].v.failure_status, sizeof(out->failure_status));
			break;
		case T_DUR:
		case T_SEED:
		case T_GRPC:
		case T_RATEH:
			memcpy((char *)out + ns_keydefs[k].off, (const char *)&p->sec[best[k]].v + ns_keydefs[k].off, 8);
			break;
		default:
			memcpy((char *)out + ns_keydefs[k].off, (const char *)&p->sec[best[k]].v + ns_keydefs[k].off, 4);
			break;
		}
	}
	if (unlikely_mapped(p))
		ns_pimg_settings_sane(out);
	/* a queued connect is a slow connect: unset, queue_timeout is the
	 * destination's connect_timeout (the built-in one where that is off);
	 * 0 set still refuses at once */
	if (best[NS_K_QUEUE_TIMEOUT] < 0)
		out->queue_timeout_ms = out->connect_timeout_ms ? out->connect_timeout_ms
								: ns_builtin_settings.connect_timeout_ms;
	/* the fleet's limits: this machine keeps to its share of them (the
	 * agent's, in the table: ns_table_fleet_share), below the local key
	 * when both are set; alone, the local places span up to the whole */
	out->fleet = (out->fleet_max_requests ? NS_FLEET_REQ : 0) | (out->fleet_max_connections ? NS_FLEET_CONN : 0) |
		(out->fleet_rate_mph ? NS_FLEET_RATE : 0);
	if ((out->fleet & NS_FLEET_REQ) && !out->max_requests)
		out->max_requests = out->fleet_max_requests < NS_PLACES ? out->fleet_max_requests : NS_PLACES;
	if ((out->fleet & NS_FLEET_CONN) && !out->max_connections)
		out->max_connections = out->fleet_max_connections < NS_PLACES ? out->fleet_max_connections : NS_PLACES;
	if ((out->fleet & NS_FLEET_RATE) && !out->rate_mph)
		out->rate_mph = out->fleet_rate_mph;
	/* rate's interval: 3.6e12 microsecond-thousandths an hour over the rate */
	out->rate_interval_us = out->rate_mph ? 3600000000000ULL / out->rate_mph : 0;
	if (out->rate_mph && !out->rate_interval_us)
		out->rate_interval_us = 1;
	/* max_connections = auto: the cap follows the destination, up to
	 * max_connections_max (its places' range) */
	out->adaptive = out->max_connections == NS_MAXCONN_AUTO;
	if (out->adaptive)
		out->max_connections = out->max_connections_max;
	/* max_requests = auto, the same on requests (shaping.c) */
	out->req_adaptive = out->max_requests == NS_MAXCONN_AUTO;
	if (out->req_adaptive)
		out->max_requests = out->max_requests_max;
	/* one test on the connect path says whether any shaping applies (or
	 * the keys of a name's addresses: their steps are taken there too) */
	out->shaping = out->max_connections || out->rate_mph || out->retry_budget_bp || out->retry_budget_min_mps ||
		out->throttle || out->address_choice || out->connect_total_timeout_ms;
	if (out->max_connections && !out->rate_interval_us && !out->slow_start_ms)
		out->shaping |= NS_SHAPING_PLACE_ONLY;
	out->shaping_first = out->retry_budget_bp || out->retry_budget_min_mps || out->throttle ||
		out->connect_total_timeout_ms;
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

size_t ns_str_put(char *buf, size_t len, size_t at, const char *src)
{
	if (!len)
		return 0;
	if (at >= len)
		at = len - 1;
	while (*src && at + 1 < len)
		buf[at++] = *src++;
	buf[at] = '\0';
	return at;
}

size_t ns_uint_put(char *buf, size_t len, size_t at, unsigned v)
{
	char tmp[11];

	*put_uint(tmp, v) = '\0';
	return ns_str_put(buf, len, at, tmp);
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
	why = ns_parse_pattern_at(s, &tmp);
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


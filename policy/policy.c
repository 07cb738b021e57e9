/* policy.c -- the policy file: its sections and key lines parsed (the keys'
 * values in values.c, the sections' patterns and the matching of a
 * destination in patterns.c), loaded, or the built-in defaults.
 *
 * No system calls in policy/ but the one read of the file in
 * ns_policy_load, so the shim, shimctl and the unit tests share exactly one
 * interpretation. */
#include "internal.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

/**** parser ****/

/* The host sections so far by pattern, for the duplicate check: an open
 * hash set of section numbers (0 free), so a policy of many sections parses
 * in time linear in them (a scan of the ones before each was quadratic:
 * 30,000 sections took 2.9 s). */
struct secset {
	int *slot;
	uint32_t cap; /* a power of two, or 0 */
	uint32_t n;
};

/* The section of p with tmp's pattern, or 0 (none); with add, tmp becomes
 * section idx when it is new. -1: out of memory. */
static int secset_find(struct secset *h, const struct ns_policy *p, const struct ns_section *tmp, int idx)
{
	uint64_t hv = ns_pattern_hash(tmp);

	if (idx && (h->n + 1) * 2 > h->cap) {
		uint32_t ncap = h->cap ? h->cap * 2 : 64;
		int *ns = calloc(ncap, sizeof(*ns));

		if (!ns)
			return -1;
		for (uint32_t i = 0; i < h->cap; i++) {
			uint32_t j;

			if (!h->slot[i])
				continue;
			for (j = (uint32_t)(ns_pattern_hash(&p->sec[h->slot[i]]) >> 32) & (ncap - 1); ns[j];
			     j = (j + 1) & (ncap - 1))
				;
			ns[j] = h->slot[i];
		}
		free(h->slot);
		h->slot = ns;
		h->cap = ncap;
	}
	if (!h->cap)
		return 0;
	for (uint32_t j = (uint32_t)(hv >> 32) & (h->cap - 1);; j = (j + 1) & (h->cap - 1)) {
		if (!h->slot[j]) {
			if (idx) {
				h->slot[j] = idx;
				h->n++;
			}
			return 0;
		}
		if (ns_same_pattern(&p->sec[h->slot[j]], tmp))
			return h->slot[j];
	}
}

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

static void parse_header(struct perr *e, int line, char *s, struct ns_policy *p, int *cur, int *cap,
			 struct secset *seen)
{
	char *end = strrchr(s, ']');
	const char *body, *why;
	struct ns_section tmp;
	int idx;

	*cur = -1;   /* keys under a broken header are checked but go nowhere */
	if (!end || end[1] != '\0') {
		ns_perr_add(e, line, "bad section header: missing ']'");
		return;
	}
	*end = '\0';
	body = ns_trim(s + 1);
	memset(&tmp, 0, sizeof(tmp));
	tmp.line = line;
	if (strcmp(body, "defaults") == 0) {
		if (p->sec[0].line) {
			ns_perr_add(e, line, "duplicate section [defaults] (first at line %d)", p->sec[0].line);
			return;
		}
		p->sec[0].line = line;
		*cur = 0;
		return;
	}
	if (strncmp(body, "host", 4) != 0 || (body[4] != ' ' && body[4] != '\t' && body[4] != '"')) {
		ns_perr_add(e, line, "unknown section [%s]: expected [defaults] or [host \"...\"]", body);
		return;
	}
	body = ns_trim((char *)body + 4);
	if (body[0] != '"' || strlen(body) < 2 || body[strlen(body) - 1] != '"') {
		ns_perr_add(e, line, "bad section header: the host pattern must be in double quotes");
		return;
	}
	snprintf(tmp.pattern, sizeof(tmp.pattern), "%.*s", (int)strlen(body) - 2, body + 1);
	if (strlen(body) - 2 >= sizeof(tmp.pattern)) {
		ns_perr_add(e, line, "bad host pattern: too long");
		return;
	}
	why = ns_parse_pattern_at(tmp.pattern, &tmp);
	if (why) {
		ns_perr_add(e, line, "bad host pattern \"%s\": %s", tmp.pattern, why);
		return;
	}
	idx = secset_find(seen, p, &tmp, 0);
	if (idx > 0) {
		ns_perr_add(e, line, "duplicate section [host \"%s\"] (first at line %d)", tmp.pattern,
			    p->sec[idx].line);
		return;
	}
	idx = add_section(p, cap);
	if (idx < 0) {
		e->count = -1;
		return;
	}
	tmp.v = ns_builtin_settings;
	p->sec[idx] = tmp;
	if (secset_find(seen, p, &tmp, idx) < 0) {
		e->count = -1;
		return;
	}
	*cur = idx;
}

/* shadow_policy = PATH, in [defaults] only: a policy judged beside this
 * one and never enforced (shim/shadow.c). Not a setting of destinations:
 * kept in the policy itself. A relative path is the policy file's
 * neighbour. */
static void shadow_key(struct perr *e, int line, const char *val, struct ns_policy *p, int cur, int in_section)
{
	const char *slash = strrchr(p->path, '/');
	size_t dir = val[0] != '/' && slash ? (size_t)(slash - p->path) + 1 : 0;

	if (!in_section || cur != 0) {
		ns_perr_add(e, line, "shadow_policy: only in [defaults] (one shadow policy per policy)");
		return;
	}
	if (p->shadow[0]) {
		ns_perr_add(e, line, "duplicate key 'shadow_policy'");
		return;
	}
	if (!*val || strchr(val, '"') || dir + strlen(val) >= sizeof(p->shadow)) {
		ns_perr_add(e, line, "shadow_policy: a file's path (under %d characters)", (int)sizeof(p->shadow));
		return;
	}
	memcpy(p->shadow, p->path, dir);
	ns_str_put(p->shadow, sizeof(p->shadow), dir, val);
}

static void parse_keyline(struct perr *e, int line, char *s, struct ns_policy *p, int cur, int in_section)
{
	char *eq = strchr(s, '=');
	const char *key, *val;
	int k;

	if (!eq) {
		ns_perr_add(e, line, "expected 'key = value' or a [section] header");
		return;
	}
	*eq = '\0';
	key = ns_trim(s);
	val = ns_trim(eq + 1);
	for (k = 0; k < NS_K_COUNT; k++)
		if (strcmp(key, ns_key_names[k]) == 0)
			break;
	if (!*key) {
		ns_perr_add(e, line, "missing key before '='");
		return;
	}
	if (k == NS_K_COUNT && strcmp(key, "shadow_policy") == 0) {
		shadow_key(e, line, val, p, cur, in_section);
		return;
	}
	if (k == NS_K_COUNT) {
		ns_perr_add(e, line, "unknown key '%s'", key);
		return;
	}
	if (!in_section) {
		ns_perr_add(e, line, "key '%s' outside a section (put it under [defaults])", key);
		return;
	}
	if (cur < 0) {
		struct ns_settings scratch = ns_builtin_settings;

		ns_set_value(e, line, k, val, &scratch);
		return;
	}
	if (k == NS_K_FAULT_SEED && cur != 0) {
		ns_perr_add(e, line, "fault_seed: only in [defaults] (one random source per process)");
		return;
	}
	if (p->sec[cur].set & NS_KBIT(k)) {
		ns_perr_add(e, line, "duplicate key '%s' (first set at line %d)", key, p->sec[cur].key_line[k]);
		return;
	}
	if (ns_set_value(e, line, k, val, &p->sec[cur].v) == 0) {
		p->sec[cur].set |= NS_KBIT(k);
		p->sec[cur].key_line[k] = line;
		if (k == NS_K_FAULT && p->sec[cur].v.fault.n)
			p->has_faults = 1;
		if (k == NS_K_ADDRESS_CHOICE && p->sec[cur].v.address_choice)
			p->has_addr_choice = 1;
		if ((k == NS_K_MAX_REQUESTS && p->sec[cur].v.max_requests) ||
		    (k == NS_K_FLEET_MAX_REQUESTS && p->sec[cur].v.fleet_max_requests))
			p->has_max_requests = 1; /* (requests followed) */
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
	ns_str_put(out->sec[0].pattern, sizeof(out->sec[0].pattern), 0, "defaults");
	return 0;
}

/* The value of key k for section s: its own, else [defaults]', else the
 * built-in one (a 4-byte key). */
static uint32_t value_in(const struct ns_policy *p, const struct ns_section *s, int k)
{
	const struct ns_settings *v = (s->set & NS_KBIT(k)) ? &s->v
		: (p->sec[0].set & NS_KBIT(k))              ? &p->sec[0].v
							    : &ns_builtin_settings;

	return *(const uint32_t *)((const char *)v + ns_keydefs[k].off);
}

/* The line a section's key comes from: its own, else [defaults]'. */
static int line_of(const struct ns_policy *p, const struct ns_section *s, int k)
{
	return (s->set & NS_KBIT(k)) ? s->key_line[k] : p->sec[0].key_line[k];
}

/* A bound lo over its hi (either set in s): an error at the line of the one set. */
static void bounds_in_order(struct perr *e, const struct ns_policy *p, const struct ns_section *s, int lo, int hi)
{
	if ((s->set & (NS_KBIT(lo) | NS_KBIT(hi))) && value_in(p, s, lo) > value_in(p, s, hi))
		ns_perr_add(e, line_of(p, s, (s->set & NS_KBIT(hi)) ? hi : lo), "%s (%u) is over %s (%u)",
			    ns_key_names[lo], value_in(p, s, lo), ns_key_names[hi], value_in(p, s, hi));
}

/* max_connections_min/_max, adaptive_backoff and adaptive_interval shape
 * max_connections = auto (max_requests_min/_max max_requests = auto, which
 * the last two shape too); throttle_k and throttle_window, throttle =
 * adaptive: each set where its key is not in force is an error, and so is a
 * minimum over the maximum. */
static void check_adaptive(struct perr *e, const struct ns_policy *p, const struct ns_section *s)
{
	int autocap = value_in(p, s, NS_K_MAX_CONNECTIONS) == NS_MAXCONN_AUTO;
	int autoreq = value_in(p, s, NS_K_MAX_REQUESTS) == NS_MAXCONN_AUTO;

	for (int k = NS_K_MAX_CONNECTIONS_MIN; k <= NS_K_ADAPTIVE_INTERVAL; k++)
		if ((s->set & NS_KBIT(k)) && !autocap &&
		    !(autoreq && (k == NS_K_ADAPTIVE_BACKOFF || k == NS_K_ADAPTIVE_INTERVAL)))
			ns_perr_add(
				e, s->key_line[k],
				"%s: shapes max_connections = auto, which this section (or [defaults]) does not set",
				ns_key_names[k]);
	for (int k = NS_K_THROTTLE_K; k <= NS_K_THROTTLE_WINDOW; k++)
		if ((s->set & NS_KBIT(k)) && !value_in(p, s, NS_K_THROTTLE))
			ns_perr_add(e, s->key_line[k],
				    "%s: shapes throttle = adaptive, which this section (or [defaults]) does not set",
				    ns_key_names[k]);
	for (int k = NS_K_MAX_REQUESTS_MIN; k <= NS_K_MAX_REQUESTS_MAX; k++)
		if ((s->set & NS_KBIT(k)) && value_in(p, s, NS_K_MAX_REQUESTS) != NS_MAXCONN_AUTO)
			ns_perr_add(e, s->key_line[k],
				    "%s: shapes max_requests = auto, which this section (or [defaults]) does not set",
				    ns_key_names[k]);
	bounds_in_order(e, p, s, NS_K_MAX_REQUESTS_MIN, NS_K_MAX_REQUESTS_MAX);
	bounds_in_order(e, p, s, NS_K_MAX_CONNECTIONS_MIN, NS_K_MAX_CONNECTIONS_MAX);
}

/* Keys that mean nothing without another: slow_start ramps max_connections
 * and rate, one of which the section or [defaults] must set; burst and
 * rate_jitter shape a rate. Reported at the key's line. */
static void check_together(struct perr *e, const struct ns_policy *p)
{
	for (int i = 0; i < p->nsections; i++) {
		const struct ns_section *s = &p->sec[i];

		uint64_t both = s->set | p->sec[0].set;

		if ((s->set & NS_KBIT(NS_K_SLOW_START)) && s->v.slow_start_ms &&
		    !(both & (NS_KBIT(NS_K_MAX_CONNECTIONS) | NS_KBIT(NS_K_RATE))))
			ns_perr_add(e, s->key_line[NS_K_SLOW_START],
				    "slow_start: ramps max_connections and rate, neither of which this section (or [defaults]) sets");
		for (int k = NS_K_BURST; k <= NS_K_RATE_JITTER; k++)
			if ((s->set & NS_KBIT(k)) && !(both & NS_KBIT(NS_K_RATE)))
				ns_perr_add(e, s->key_line[k], "%s: shapes rate, which this section (or [defaults]) does not set",
					    ns_key_names[k]);
		check_adaptive(e, p, s);
	}
}

int ns_policy_parse(const char *text, size_t len, const char *fname,
		    struct ns_policy *out, char *err, size_t errlen)
{
	struct perr e = { err, errlen, 0, 0, fname };
	char buf[NS_LINE_MAX + 2];
	size_t pos = 0;
	int line = 0, cur = -1, in_section = 0, cap = 1;
	struct secset seen = { NULL, 0, 0 };

	if (err && errlen)
		err[0] = '\0';
	if (ns_policy_builtin(out) < 0) {
		ns_perr_add(&e, 0, "out of memory");
		return -1;
	}
	ns_str_put(out->path, sizeof(out->path), 0, fname);
	while (pos < len) {
		size_t start = pos, n;
		const char *nl = memchr(text + pos, '\n', len - pos);
		char *s, *hash;
		int inq = 0;

		n = nl ? (size_t)(nl - (text + start)) : len - start;
		pos = start + n + 1;
		line++;
		if (memchr(text + start, '\0', n)) {
			ns_perr_add(&e, line, "NUL byte in line");
			continue;
		}
		if (n > NS_LINE_MAX) {
			ns_perr_add(&e, line, "line longer than %d characters", NS_LINE_MAX);
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
		s = (char *)ns_trim(buf);
		if (!*s)
			continue;
		if (*s == '[') {
			parse_header(&e, line, s, out, &cur, &cap, &seen);
			if (e.count < 0)
				break;
			in_section = 1;
		} else {
			parse_keyline(&e, line, s, out, cur, in_section);
		}
	}
	free(seen.slot);
	if (e.count >= 0)
		check_together(&e, out);
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
	return ns_policy_path_env(getenv("NETSHIM_POLICY"));
}

const char *ns_policy_path_env(const char *env)
{
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
		ns_perr_add(&e, 0, "cannot open: %s", strerror(errno));
		return 1;
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		ns_perr_add(&e, 0, "not a regular file");
		close(fd);
		return 1;
	}
	if (st.st_size > NS_POLICY_MAX_BYTES) {
		ns_perr_add(&e, 0, "larger than %d bytes", NS_POLICY_MAX_BYTES);
		close(fd);
		return 1;
	}
	text = malloc((size_t)st.st_size + 1);
	if (!text) {
		close(fd);
		ns_perr_add(&e, 0, "out of memory");
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
	/* indexed, its sections are its image's (polimage.c) */
	if (p->img && p->img_mapped)
		munmap(p->img, p->img_len);
	else if (p->img)
		free(p->img);
	else
		free(p->sec);
	p->img = NULL;
	p->idx = NULL;
	p->img_len = 0;
	p->img_mapped = 0;
	p->sec = NULL;
	p->nsections = 0;
}

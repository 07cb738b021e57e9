/* ctl_policy.c -- shimctl check and explain: a policy file read, no table. */
#include <err.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../policy/policy.h"
#include "../../policy/polimage.h"
#include "shimctl.h"

/* A policy's shadow_policy is loaded by every governed program: a broken
 * one is the policy's error too (else it shows only in their stderr). */
static int check_shadow(const char *file, const char *shadow, char *errs, size_t len)
{
	struct ns_policy sp;

	if (ns_policy_load(shadow, &sp, errs, len) == 0) {
		ns_policy_free(&sp);
		return 0;
	}
	fprintf(stderr, "%s: shadow_policy %s does not load:\n", file, shadow);
	fputs(errs, stderr);
	return 1;
}

/* max_connections = auto learns from connections that carry one request
 * each: a program that keeps its connections (a session, a pool, HTTP/2)
 * holds its places while idle, and the limit it learns starves the others
 * (8 processes with sessions: the limit fell to 1 and 3 of them got one
 * page). Said where it is set; not an error. */
static void auto_notes(const char *file, const struct ns_policy *p)
{
	for (int i = 0; i < p->nsections; i++) {
		const struct ns_section *s = &p->sec[i];

		if ((s->set & NS_KBIT(NS_K_MAX_CONNECTIONS)) && s->v.max_connections == NS_MAXCONN_AUTO)
			printf("%s:%d: note: max_connections = auto adapts connections: it suits programs that close "
			       "each connection after its request; one that keeps them open (a session, a pool, "
			       "HTTP/2) holds its places while idle. max_requests caps the requests in flight\n",
			       file, s->key_line[NS_K_MAX_CONNECTIONS]);
		/* a fleet limit is kept only by the agents: a machine without
		 * one keeps the whole to itself */
		for (int k = NS_K_FLEET_MAX_REQUESTS; k <= NS_K_FLEET_RATE; k++)
			if (s->set & NS_KBIT(k)) {
				printf("%s:%d: note: %s is a limit for every machine together: each machine keeps to "
				       "the share its netshim-agent (with --redis, reading this policy) leases; a "
				       "machine that runs none keeps the whole limit to itself\n",
				       file, s->key_line[k], ns_key_names[k]);
				break;
			}
	}
}

/* A fleet limit's value as the policy writes it: places, or a rate. */
static void fleet_value(int k, uint64_t v, char *buf, size_t len)
{
	if (k == NS_FLEET_K_RATE)
		snprintf(buf, len, "%g/s", (double)v / 3600000.0);
	else
		snprintf(buf, len, "%llu", (unsigned long long)v);
}

/* --fleet: the file's fleet limits beside those of every machine's policy,
 * as this machine's agent last saw them leasing (the table's destinations
 * with a share). Every limit leased here is compared, and each section's
 * fleet key that covers no leased destination is named as not compared.
 * 0: they agree; 1: some differ (the smallest holds for every machine). */
static int fleet_check(const char *file, const struct ns_policy *p, const char *table)
{
	struct ns_table t;
	struct ns_scan sc;
	uint64_t now = ctl_mono_ms();
	unsigned char *seen = calloc((size_t)p->nsections * 3, 1);
	int differ = 0, leased = 0;

	if (!seen)
		err(1, "out of memory");
	if (ctl_open_table(table, 0, &t) < 0) {
		free(seen);
		return 1;
	}
	for (uint32_t i = ns_scan_begin(&t, &sc); i < t.nslots; i = ns_scan_next(&t, &sc, i + 1)) {
		struct ns_entry e;
		struct ns_settings set;
		struct ns_origin o;
		struct ns_dest d;
		char key[NS_KEY_MAX * 4]; /* (the table's key: shared memory, shown escaped) */

		if (ns_table_read(&t, (int)i, now, &e) != 0 || ns_dest_parse(e.key, &d) < 0)
			continue;
		ns_policy_resolve(p, &d, &set, &o);
		ctl_escape_text(e.key, key, sizeof(key));
		for (int k = 0; k < 3; k++) {
			uint64_t mine = ns_fleet_limit(&set, k), lo = e.fleet_whole[k],
				 hi = e.fleet_largest[k] > lo ? e.fleet_largest[k] : lo;
			int sec = o.sec[NS_FLEET_KEY(k)];
			char a[32], b[32], c[32];

			if (sec >= 0 && sec < p->nsections)
				seen[sec * 3 + k] = 1;
			if (e.fleet_share[k] < 0 || !lo)
				continue; /* not leased here */
			leased++;
			fleet_value(k, mine, a, sizeof(a));
			fleet_value(k, lo, b, sizeof(b));
			fleet_value(k, hi, c, sizeof(c));
			if (mine == lo && hi == lo) {
				printf("%s: %s: %s %s: as in every machine's policy (%u machine%s)\n", file, key,
				       ns_key_names[NS_FLEET_KEY(k)], a, e.fleet_live, e.fleet_live == 1 ? "" : "s");
				continue;
			}
			differ = 1;
			if (!mine)
				printf("%s: %s: %s: not set here; %s%s%s in the machines' policies (%u machine%s): "
				       "%s holds for every machine\n",
				       file, key, ns_key_names[NS_FLEET_KEY(k)], b, hi != lo ? " to " : "",
				       hi != lo ? c : "", e.fleet_live, e.fleet_live == 1 ? "" : "s", b);
			else
				printf("%s:%d: %s: %s %s here; %s%s%s in the machines' policies (%u machine%s): the "
				       "smallest (%s) holds for every machine\n",
				       file, p->sec[sec].key_line[NS_FLEET_KEY(k)], key, ns_key_names[NS_FLEET_KEY(k)],
				       a, b, hi != lo ? " to " : "", hi != lo ? c : "", e.fleet_live,
				       e.fleet_live == 1 ? "" : "s", mine < lo ? a : b);
		}
	}
	ns_scan_end(&sc);
	ctl_close_table(&t);
	for (int i = 0; i < p->nsections; i++)
		for (int k = 0; k < 3; k++)
			if ((p->sec[i].set & NS_KBIT(NS_FLEET_KEY(k))) && !seen[i * 3 + k])
				printf("%s:%d: %s: no destination it covers is leased on this machine (table %s): not "
				       "compared\n",
				       file, p->sec[i].key_line[NS_FLEET_KEY(k)], ns_key_names[NS_FLEET_KEY(k)], table);
	if (!leased)
		printf("%s: no fleet limit is leased on this machine (table %s: no netshim-agent with --redis, or no "
		       "program has reached a destination with one yet): nothing to compare\n",
		       file, table);
	free(seen);
	return differ;
}

/* --install: the file compiled into the machine's image, which every
 * program's first connect then maps instead of parsing it (polimage.h). */
static int install_image(const char *file, struct ns_policy *p)
{
	char name[256], why[400];

	if (ns_policy_index(p) != 0 || ns_pimg_publish(p, file, name, sizeof(name), why, sizeof(why)) != 0) {
		warnx("%s: not installed: %s", file, p->idx ? why : "out of memory");
		return -1;
	}
	printf("%s: installed as %s (%d sections, %zu bytes)\n", file, name, p->nsections, p->img_len);
	return 0;
}

int ctl_cmd_check(char **files, int n, int install, const char *fleet_table)
{
	char *errs = malloc(65536);
	int bad = 0, differ = 0;

	if (!errs)
		err(1, "out of memory");
	for (int i = 0; i < n; i++) {
		struct ns_policy p;
		int r = ns_policy_load(files[i], &p, errs, 65536);

		if (r == 0 && p.shadow[0] && check_shadow(files[i], p.shadow, errs, 65536) != 0) {
			ns_policy_free(&p);
			bad = 1;
		} else if (r == 0) {
			printf("%s: ok (%d host section%s%s%s)\n", files[i], p.nsections - 1, p.nsections == 2 ? "" : "s",
			       p.shadow[0] ? "; shadow policy " : "", p.shadow);
			auto_notes(files[i], &p);
			if (install && install_image(files[i], &p) != 0)
				bad = 1;
			if (fleet_table && fleet_check(files[i], &p, fleet_table) != 0)
				differ = 1;
			ns_policy_free(&p);
		} else {
			fputs(errs, stderr);
			bad = 1;
		}
	}
	free(errs);
	return bad ? 2 : differ;
}

int ctl_cmd_explain(const char *policy, const char *dest)
{
	char errs[NS_ERRBUF * 4], val[NS_FAULTS_TEXT], esc[NS_KEY_MAX * 4];
	struct ns_settings s;
	struct ns_origin o;
	struct ns_policy p;
	struct ns_dest d;
	int r;

	if (!policy)
		policy = ns_policy_path();
	if (ns_dest_parse(dest, &d) < 0) {
		ctl_escape_text(dest, esc, sizeof(esc));
		warnx("%s: not a destination (expected HOST:PORT, ADDRESS:PORT or [IPV6]:PORT)", esc);
		return 2;
	}
	r = policy ? ns_policy_load(policy, &p, errs, sizeof(errs)) : ns_policy_builtin(&p);
	if (r != 0) {
		fputs(errs, stderr);
		return 2;
	}
	ns_policy_resolve(&p, &d, &s, &o);
	printf("# %s under %s\n", dest, policy ? policy : "the built-in defaults");
	for (int k = 0; k < NS_K_COUNT; k++) {
		int sec = o.sec[k];

		ns_setting_format(k, &s, val, sizeof(val));
		printf("%-22s= %-10s # ", ns_key_names[k], val);
		if (sec < 0)
			printf("built-in default\n");
		else if (sec == 0)
			printf("[defaults] line %d\n", p.sec[0].key_line[k]);
		else
			printf("[host \"%s\"] line %d\n", p.sec[sec].pattern, p.sec[sec].key_line[k]);
	}
	ns_policy_free(&p);
	return 0;
}


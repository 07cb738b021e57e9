/* shimctl.c -- inspect and reset the shared breaker table, check policies. */
#include <err.h>
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../policy/breaker.h"
#include "../policy/policy.h"
#include "../policy/table.h"

#define NETSHIM_VERSION "0.1.0"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: shimctl [--table NAME] status [--json] [DEST]\n"
		"       shimctl [--table NAME] reset DEST | --all\n"
		"       shimctl [--table NAME] open DEST\n"
		"       shimctl check FILE...\n"
		"       shimctl [--policy FILE] explain DEST\n"
		"       shimctl --help | --version\n");
}

static uint64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static uint64_t wall_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void rfc3339(uint64_t ms, char *buf, size_t len)
{
	time_t s = (time_t)(ms / 1000);
	struct tm tm;

	/* the time comes from shared memory: a garbage value must not become
	 * an unset struct tm */
	if (!gmtime_r(&s, &tm) || strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
		snprintf(buf, len, "invalid");
}

/* Host names come from programs: never print a control character raw. */
static void escape_text(const char *s, char *out, size_t len)
{
	size_t o = 0;

	for (; *s && o + 5 < len; s++) {
		unsigned char ch = (unsigned char)*s;

		if (ch < 0x20 || ch >= 0x7f || ch == '\\')
			o += (size_t)snprintf(out + o, len - o, "\\x%02x", ch);
		else
			out[o++] = (char)ch;
	}
	out[o] = '\0';
}

static void json_string(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		unsigned char ch = (unsigned char)*s;

		if (ch == '"' || ch == '\\')
			fprintf(f, "\\%c", ch);
		else if (ch < 0x20 || ch >= 0x7f)
			fprintf(f, "\\u%04x", ch);
		else
			fputc(ch, f);
	}
	fputc('"', f);
}

static const char *errname(uint32_t e)
{
	const char *n = e ? strerrorname_np((int)e) : NULL;

	return n ? n : NULL;
}

static const char *table_name(const char *opt, char *buf, size_t len)
{
	const char *env = getenv("NETSHIM_TABLE");

	if (opt)
		return opt;
	if (env && *env)
		return env;
	ns_table_default_name(buf, len);
	return buf;
}

static int open_table(const char *name, int create, struct ns_table *t)
{
	char e[NS_ERRBUF];
	int r = ns_table_open(name, create, 0, t, e, sizeof(e));

	if (r != NS_TBL_OK) {
		warnx("%s", e);
		return -1;
	}
	return 0;
}

/* The table's key for what the user typed: "localhost:80" and
 * "[::1]:80" are normalised the way the shim writes them. */
static void normalise_dest(const char *in, char *out, size_t len)
{
	struct ns_dest d;

	if (ns_dest_parse(in, &d) == 0 && ns_dest_key(&d, out, len) > 0)
		return;
	snprintf(out, len, "%s", in);
}

static int find_dest(struct ns_table *t, const char *arg)
{
	char key[NS_KEY_MAX];
	int idx;

	normalise_dest(arg, key, sizeof(key));
	idx = ns_table_find(t, key, 0, mono_ms());
	if (idx < 0) {
		char esc[NS_KEY_MAX * 4];

		escape_text(arg, esc, sizeof(esc));
		warnx("%s: no such destination in %s", esc, t->path);
	}
	return idx;
}

/**** status ****/

struct row {
	struct ns_entry e;
	const char *state;
};

static void print_json(const char *name, const struct ns_table *t, struct row *rows, int n)
{
	char ts[40];

	printf("{\"table\": ");
	json_string(stdout, name);
	printf(", \"capacity\": %u, \"used\": %llu, \"turned_away\": %llu, \"entries\": [",
	       t->nslots, (unsigned long long)__atomic_load_n(&t->hdr->used, __ATOMIC_RELAXED),
	       (unsigned long long)__atomic_load_n(&t->hdr->full_count, __ATOMIC_RELAXED));
	for (int i = 0; i < n; i++) {
		const struct ns_entry *e = &rows[i].e;
		const char *en = errname(e->last_error);

		printf("%s\n  {\"destination\": ", i ? "," : "");
		json_string(stdout, e->key);
		printf(", \"state\": \"%s\", \"calls\": %llu, \"successes\": %llu, \"failures\": %llu, "
		       "\"failures_in_window\": %u, \"consecutive_failures\": %u, \"timeouts\": %llu, "
		       "\"rejected\": %llu, \"retries\": %llu, \"last_error\": ",
		       rows[i].state, (unsigned long long)e->calls, (unsigned long long)e->successes,
		       (unsigned long long)e->failures, e->failures_in_window, e->brk.consec,
		       (unsigned long long)e->timeouts, (unsigned long long)e->rejected,
		       (unsigned long long)e->retries);
		if (en)
			printf("\"%s\"", en);
		else
			printf("null");
		printf(", \"opened_at\": ");
		if (e->opened_wall_ms) {
			rfc3339(e->opened_wall_ms, ts, sizeof(ts));
			printf("\"%s\"", ts);
		} else {
			printf("null");
		}
		printf(", \"half_open_at\": ");
		if (e->half_open_wall_ms && (rows[i].e.brk.state == NS_OPEN)) {
			rfc3339(e->half_open_wall_ms, ts, sizeof(ts));
			printf("\"%s\"", ts);
		} else {
			printf("null");
		}
		printf("}");
	}
	printf("%s]}\n", n ? "\n" : "");
}

static void print_text(const struct ns_table *t, struct row *rows, int n)
{
	static const char *const hdr[] = { "DESTINATION", "STATE", "WIN_FAIL", "CONSEC", "CALLS", "OK",
		"FAIL", "TIMEOUT", "REJECTED", "RETRIES", "LAST_ERROR", "OPENED_AT", "HALF_OPEN_AT" };
	enum { NC = 13 };
	char (*cells)[NC][NS_KEY_MAX * 4] = calloc((size_t)n + 1, sizeof(*cells));
	int w[NC] = { 0 };
	uint64_t full = __atomic_load_n(&t->hdr->full_count, __ATOMIC_RELAXED);

	if (!cells)
		err(1, "out of memory");
	for (int c = 0; c < NC; c++)
		snprintf(cells[0][c], sizeof(cells[0][c]), "%s", hdr[c]);
	for (int i = 0; i < n; i++) {
		const struct ns_entry *e = &rows[i].e;
		char (*r)[NS_KEY_MAX * 4] = cells[i + 1];
		const char *en = errname(e->last_error);

		escape_text(e->key, r[0], sizeof(r[0]));
		snprintf(r[1], sizeof(r[1]), "%s", rows[i].state);
		snprintf(r[2], sizeof(r[2]), "%u", e->failures_in_window);
		snprintf(r[3], sizeof(r[3]), "%u", e->brk.consec);
		snprintf(r[4], sizeof(r[4]), "%llu", (unsigned long long)e->calls);
		snprintf(r[5], sizeof(r[5]), "%llu", (unsigned long long)e->successes);
		snprintf(r[6], sizeof(r[6]), "%llu", (unsigned long long)e->failures);
		snprintf(r[7], sizeof(r[7]), "%llu", (unsigned long long)e->timeouts);
		snprintf(r[8], sizeof(r[8]), "%llu", (unsigned long long)e->rejected);
		snprintf(r[9], sizeof(r[9]), "%llu", (unsigned long long)e->retries);
		snprintf(r[10], sizeof(r[10]), "%s", en ? en : "-");
		if (e->opened_wall_ms)
			rfc3339(e->opened_wall_ms, r[11], sizeof(r[11]));
		else
			snprintf(r[11], sizeof(r[11]), "-");
		if (e->half_open_wall_ms && e->brk.state == NS_OPEN)
			rfc3339(e->half_open_wall_ms, r[12], sizeof(r[12]));
		else
			snprintf(r[12], sizeof(r[12]), "-");
	}
	for (int i = 0; i <= n; i++)
		for (int c = 0; c < NC; c++) {
			int l = (int)strlen(cells[i][c]);

			if (l > w[c])
				w[c] = l;
		}
	for (int i = 0; i <= n; i++) {
		for (int c = 0; c < NC; c++) {
			if (c == 0 || c == 1 || c >= 10)
				printf("%-*s", c == NC - 1 ? 0 : w[c], cells[i][c]);
			else
				printf("%*s", w[c], cells[i][c]);
			if (c != NC - 1)
				printf("  ");
		}
		printf("\n");
	}
	if (n == 0)
		printf("(no destinations yet)\n");
	if (full)
		printf("table full: %llu connects to new destinations passed through uncounted (capacity %u)\n",
		       (unsigned long long)full, t->nslots);
	free(cells);
}

static int rank(const struct row *r)
{
	switch (r->e.brk.state) {
	case NS_FORCED_OPEN: return 0;
	case NS_OPEN: return 1;
	case NS_HALF_OPEN: return 2;
	default: return 3;
	}
}

static int cmp_rows(const void *a, const void *b)
{
	const struct row *x = a, *y = b;

	if (rank(x) != rank(y))
		return rank(x) - rank(y);
	return strcmp(x->e.key, y->e.key);
}

static int cmd_status(const char *name, int json, const char *dest)
{
	struct ns_table t;
	struct row *rows;
	uint64_t now = mono_ms();
	int n = 0, only = -1;

	if (open_table(name, 0, &t) < 0)
		return 1;
	if (dest) {
		only = find_dest(&t, dest);
		if (only < 0) {
			ns_table_close(&t);
			return 1;
		}
	}
	rows = calloc(t.nslots, sizeof(*rows));
	if (!rows)
		err(1, "out of memory");
	for (uint32_t i = 0; i < t.nslots; i++) {
		if (only >= 0 && (int)i != only)
			continue;
		if (ns_table_read(&t, (int)i, now, &rows[n].e) == 0) {
			rows[n].state = ns_state_name(rows[n].e.brk.state);
			n++;
		}
	}
	qsort(rows, (size_t)n, sizeof(*rows), cmp_rows);
	if (json)
		print_json(name, &t, rows, n);
	else
		print_text(&t, rows, n);
	free(rows);
	ns_table_close(&t);
	return 0;
}

static int cmd_reset(const char *name, int all, const char *dest)
{
	struct ns_table t;
	struct ns_entry e;
	int idx, n = 0;

	if (open_table(name, 0, &t) < 0)
		return 1;
	if (all) {
		for (uint32_t i = 0; i < t.nslots; i++)
			if (ns_table_read(&t, (int)i, mono_ms(), &e) == 0) {
				ns_table_reset(&t, (int)i);
				n++;
			}
		printf("reset %d destination%s\n", n, n == 1 ? "" : "s");
		ns_table_close(&t);
		return 0;
	}
	idx = find_dest(&t, dest);
	if (idx < 0) {
		ns_table_close(&t);
		return 1;
	}
	ns_table_reset(&t, idx);
	ns_table_read(&t, idx, mono_ms(), &e);
	printf("%s: closed\n", e.key);
	ns_table_close(&t);
	return 0;
}

static int cmd_open(const char *name, const char *dest)
{
	char key[NS_KEY_MAX], esc[NS_KEY_MAX * 4];
	struct ns_table t;
	struct ns_dest d;
	int idx;

	if (ns_dest_parse(dest, &d) < 0 || ns_dest_key(&d, key, sizeof(key)) < 0) {
		escape_text(dest, esc, sizeof(esc));
		warnx("%s: not a destination (expected HOST:PORT, ADDRESS:PORT or [IPV6]:PORT)", esc);
		return 2;
	}
	if (open_table(name, 1, &t) < 0)
		return 1;
	idx = ns_table_find(&t, key, 1, mono_ms());
	if (idx < 0) {
		warnx("%s: cannot add %s (table full)", t.path, key);
		ns_table_close(&t);
		return 1;
	}
	ns_table_force_open(&t, idx, mono_ms(), wall_ms());
	printf("%s: forced open until shimctl reset\n", key);
	ns_table_close(&t);
	return 0;
}

static int cmd_check(char **files, int n)
{
	char *errs = malloc(65536);
	int bad = 0;

	if (!errs)
		err(1, "out of memory");
	for (int i = 0; i < n; i++) {
		struct ns_policy p;
		int r = ns_policy_load(files[i], &p, errs, 65536);

		if (r == 0) {
			printf("%s: ok (%d host section%s)\n", files[i], p.nsections - 1, p.nsections == 2 ? "" : "s");
			ns_policy_free(&p);
		} else {
			fputs(errs, stderr);
			bad = 1;
		}
	}
	free(errs);
	return bad ? 2 : 0;
}

static int cmd_explain(const char *policy, const char *dest)
{
	char errs[NS_ERRBUF * 4], val[64], esc[NS_KEY_MAX * 4];
	struct ns_settings s;
	struct ns_origin o;
	struct ns_policy p;
	struct ns_dest d;
	int r;

	if (!policy)
		policy = getenv("NETSHIM_POLICY");
	if ((!policy || !*policy))
		policy = fopen("/etc/netshim/policy.conf", "r") ? "/etc/netshim/policy.conf" : NULL;
	if (ns_dest_parse(dest, &d) < 0) {
		escape_text(dest, esc, sizeof(esc));
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
		printf("%-21s= %-10s # ", ns_key_names[k], val);
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

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "table", required_argument, NULL, 't' },
		{ "policy", required_argument, NULL, 'p' },
		{ "json", no_argument, NULL, 'j' },
		{ "all", no_argument, NULL, 'a' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	const char *table = NULL, *policy = NULL, *cmd, *name;
	char def[64];
	int json = 0, all = 0, c, nargs;

	while ((c = getopt_long(argc, argv, "t:p:jahV", opts, NULL)) != -1) {
		switch (c) {
		case 't': table = optarg; break;
		case 'p': policy = optarg; break;
		case 'j': json = 1; break;
		case 'a': all = 1; break;
		case 'h': usage(stdout); return 0;
		case 'V': printf("shimctl %s (table version %u)\n", NETSHIM_VERSION, NS_TABLE_VERSION); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind >= argc) {
		usage(stderr);
		return 2;
	}
	cmd = argv[optind++];
	nargs = argc - optind;
	name = table_name(table, def, sizeof(def));
	if (strcmp(cmd, "status") == 0 && nargs <= 1)
		return cmd_status(name, json, nargs ? argv[optind] : NULL);
	if (strcmp(cmd, "reset") == 0 && ((all && nargs == 0) || (!all && nargs == 1)))
		return cmd_reset(name, all, all ? NULL : argv[optind]);
	if (strcmp(cmd, "open") == 0 && nargs == 1)
		return cmd_open(name, argv[optind]);
	if (strcmp(cmd, "check") == 0 && nargs >= 1)
		return cmd_check(argv + optind, nargs);
	if (strcmp(cmd, "explain") == 0 && nargs == 1)
		return cmd_explain(policy, argv[optind]);
	usage(stderr);
	return 2;
}

/* ctl_faults.c -- shimctl inject and shimctl faults: runtime faults in the
 * shared table, and the list of every fault in force. */
#include <err.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "../../policy/faultspec.h"
#include "../../policy/policy.h"
#include "../../policy/table.h"
#include "shimctl.h"

/* DEST as given, checked, lower case. Returns 0 or -1 after saying why. */
/* Does a fault list count connections (first N, every N)? Those counts are
 * kept in each process, per destination: said wherever such a fault shows. */
static int counts_connections(const char *text)
{
	struct ns_faults f;
	char why[128];

	if (ns_faults_parse(text, &f, why, sizeof(why)) < 0)
		return 0;
	for (uint32_t i = 0; i < f.n && i < NS_FAULTS_MAX; i++)
		if (f.f[i].first || f.f[i].every)
			return 1;
	return 0;
}

#define PER_PROCESS_NOTE                                                                                          \
	"first N and every N count a destination's connections in each process: every process counts anew, none " \
	"machine-wide"

static int check_dest(const char *arg, char *out, size_t len)
{
	struct ns_section sec;
	const char *why;
	char esc[NS_KEY_MAX * 4];
	size_t i;

	if (strlen(arg) >= len) {
		warnx("bad destination: too long");
		return -1;
	}
	for (i = 0; arg[i]; i++)
		out[i] = (char)((arg[i] >= 'A' && arg[i] <= 'Z') ? arg[i] - 'A' + 'a' : arg[i]);
	out[i] = '\0';
	why = ns_pattern_parse(out, &sec);
	if (why) {
		ctl_escape_text(arg, esc, sizeof(esc));
		warnx("bad destination '%s': %s (expected host:port, host, address or [v6]:port)", esc, why);
		return -1;
	}
	return 0;
}

static void fmt_left(uint64_t ms, char *buf, size_t len)
{
	if (ms >= 3600000)
		snprintf(buf, len, "%lluh%02llum", (unsigned long long)(ms / 3600000),
			 (unsigned long long)(ms % 3600000 / 60000));
	else if (ms >= 60000)
		snprintf(buf, len, "%llum%02llus", (unsigned long long)(ms / 60000),
			 (unsigned long long)(ms % 60000 / 1000));
	else
		snprintf(buf, len, "%llu.%01llus", (unsigned long long)(ms / 1000),
			 (unsigned long long)(ms % 1000 / 100));
}

int ctl_cmd_inject(const char *name, int argc, char **argv, const char *for_text, int existing, int clear, int all)
{
	char dest[NS_KEY_MAX], text[NS_FAULTS_TEXT], why[200], detail[96], esc[NS_FAULTS_TEXT * 4];
	struct ns_faults f;
	struct ns_table t;
	uint64_t for_ms = 0, expires = 0;
	const char *dwhy = NULL;
	int r;

	if (clear) {
		if (!all && check_dest(argv[0], dest, sizeof(dest)) < 0)
			return 2;
		if (ctl_open_table(name, 0, &t) < 0)
			return 1;
		if (all) {
			for (uint32_t i = 0; i < t.flt_cap; i++) {
				struct ns_fltview v;

				if (ns_table_fault_read(&t, i, &v) == 0 && v.state == NS_FLT_ACTIVE &&
				    ns_table_fault_clear(&t, v.dest) > 0)
					ctl_note_action(&t, NS_E_FAULT_CLEARED, v.dest, "cleared by shimctl");
			}
			printf("every runtime fault cleared\n");
			ctl_close_table(&t);
			return 0;
		}
		r = ns_table_fault_clear(&t, dest);
		if (r == 0) {
			ctl_escape_text(dest, esc, sizeof(esc));
			warnx("%s: no runtime fault to clear", esc);
			ctl_close_table(&t);
			return 1;
		}
		ctl_note_action(&t, NS_E_FAULT_CLEARED, dest, "cleared by shimctl");
		ctl_escape_text(dest, esc, sizeof(esc));
		printf("%s: runtime fault cleared\n", esc);
		ctl_close_table(&t);
		return 0;
	}
	(void)argc;
	if (check_dest(argv[0], dest, sizeof(dest)) < 0)
		return 2;
	if (ns_faults_parse(argv[1], &f, why, sizeof(why)) < 0) {
		ctl_escape_text(argv[1], esc, sizeof(esc));
		warnx("bad fault '%s': %s", esc, why);
		return 2;
	}
	if (for_text) {
		if (ns_duration_parse(for_text, &for_ms, &dwhy) < 0 || for_ms == 0) {
			ctl_escape_text(for_text, esc, sizeof(esc));
			warnx("--for %s: %s", esc, dwhy ? dwhy : "must be more than 0");
			return 2;
		}
		expires = ctl_mono_ms() + for_ms;
	}
	ns_faults_format(&f, text, sizeof(text));
	{
		/* what is kept must read back as it was given: every program
		 * parses the record anew, and skips one that does not parse */
		struct ns_faults g;

		if (ns_faults_parse(text, &g, why, sizeof(why)) < 0 || memcmp(&f, &g, sizeof(f)) != 0) {
			ctl_escape_text(argv[1], esc, sizeof(esc));
			warnx("fault '%s' cannot be kept as given (%s)", esc, text);
			return 2;
		}
	}
	if (ctl_open_table(name, 1, &t) < 0)
		return 1;
	if (ns_table_fault_set(&t, dest, text, expires, ctl_wall_ms(),
			       (uint32_t)getpid() | (existing ? NS_FLT_EXISTING : 0), ctl_mono_ms()) < 0) {
		warnx("%s: already holds %u runtime faults; clear some (shimctl inject --clear)", t.path, t.flt_cap);
		ctl_close_table(&t);
		return 1;
	}
	if (for_ms) {
		char left[32];

		fmt_left(for_ms, left, sizeof(left));
		snprintf(detail, sizeof(detail), "%.50s (for %.12s)%s", text, left, existing ? ", open connections too" : "");
	} else {
		snprintf(detail, sizeof(detail), "%.70s%s", text, existing ? ", open connections too" : "");
	}
	ctl_note_action(&t, NS_E_FAULT_SET, dest, detail);
	ctl_escape_text(dest, esc, sizeof(esc));
	printf("%s: %s\n", esc, detail);
	if (counts_connections(text))
		printf("note: %s\n", PER_PROCESS_NOTE);
	ctl_close_table(&t);
	return 0;
}

struct frow {
	char dest[NS_KEY_MAX];
	char text[NS_FAULTS_TEXT];
	char where[300];
	int runtime;
	int existing;               /* inject --existing: open connections get it too */
	int64_t left_ms;            /* -1: until cleared */
	uint64_t applied, set_wall_ms;
};

static void print_rows(const char *name, struct frow *rows, int n, int json)
{
	char ts[40], esc[NS_KEY_MAX * 4], tesc[NS_FAULTS_TEXT * 4], left[32];
	int counted = 0;

	if (json) {
		printf("{\"table\": ");
		ctl_json_string(stdout, name);
		printf(", \"faults\": [");
		for (int i = 0; i < n; i++) {
			printf("%s\n  {\"destination\": ", i ? "," : "");
			ctl_json_string(stdout, rows[i].dest);
			printf(", \"faults\": ");
			ctl_json_string(stdout, rows[i].text);
			printf(", \"counted_per_process\": %s", counts_connections(rows[i].text) ? "true" : "false");
			printf(", \"source\": \"%s\", \"where\": ", rows[i].runtime ? "runtime" : "policy");
			ctl_json_string(stdout, rows[i].where);
			if (rows[i].runtime && rows[i].left_ms >= 0)
				printf(", \"expires_in_ms\": %lld", (long long)rows[i].left_ms);
			else
				printf(", \"expires_in_ms\": null");
			if (rows[i].runtime) {
				ctl_rfc3339(rows[i].set_wall_ms, ts, sizeof(ts));
				printf(", \"applied\": %llu, \"set_at\": \"%s\", \"existing\": %s}",
				       (unsigned long long)rows[i].applied, ts, rows[i].existing ? "true" : "false");
			} else {
				printf(", \"applied\": null, \"set_at\": null, \"existing\": false}");
			}
		}
		printf("%s]}\n", n ? "\n" : "");
		return;
	}
	if (n == 0) {
		printf("no faults in force\n");
		return;
	}
	printf("%-28s  %-36s  %-8s  %-11s  %s\n", "DESTINATION", "FAULTS", "SOURCE", "LEFT", "WHERE");
	for (int i = 0; i < n; i++) {
		ctl_escape_text(rows[i].dest, esc, sizeof(esc));
		ctl_escape_text(rows[i].text, tesc, sizeof(tesc));
		if (!rows[i].runtime)
			snprintf(left, sizeof(left), "-");
		else if (rows[i].left_ms < 0)
			snprintf(left, sizeof(left), "until clear");
		else
			fmt_left((uint64_t)rows[i].left_ms, left, sizeof(left));
		printf("%-28s  %-36s  %-8s  %-11s  %s\n", esc, tesc, rows[i].runtime ? "runtime" : "policy", left,
		       rows[i].where);
		counted |= counts_connections(rows[i].text);
	}
	if (counted)
		printf("note: %s\n", PER_PROCESS_NOTE);
}

int ctl_cmd_faults(const char *name, const char *policy, int json)
{
	struct frow *rows;
	struct ns_table t;
	struct ns_policy p;
	char errs[NS_ERRBUF];
	int n = 0, have_table, cap;

	have_table = ns_table_open(name, 0, 0, 0, &t, errs, sizeof(errs)) == NS_TBL_OK;
	cap = NS_FAULT_RECS + 1;
	if (!policy)
		policy = ns_policy_path();
	if (policy && ns_policy_load(policy, &p, errs, sizeof(errs)) != 0) {
		fputs(errs, stderr);
		if (have_table)
			ctl_close_table(&t);
		return 2;
	}
	if (policy)
		cap += p.nsections;
	rows = calloc((size_t)cap, sizeof(*rows));
	if (!rows)
		err(1, "out of memory");
	if (have_table) {
		uint64_t now = ctl_mono_ms();

		for (uint32_t i = 0; i < t.flt_cap && n < cap; i++) {
			struct ns_fltview v;

			if (ns_table_fault_read(&t, i, &v) < 0 || v.state != NS_FLT_ACTIVE)
				continue;
			if (v.expires_ms && v.expires_ms <= now) {
				if (ns_table_fault_expire(&t, i))
					ctl_note_action(&t, NS_E_FAULT_CLEARED, v.dest, "expired");
				continue;
			}
			snprintf(rows[n].dest, sizeof(rows[n].dest), "%s", v.dest);
			snprintf(rows[n].text, sizeof(rows[n].text), "%s", v.text);
			snprintf(rows[n].where, sizeof(rows[n].where), "shimctl inject%s (pid %u)",
				 v.existing ? " --existing" : "", v.pid);
			rows[n].existing = v.existing;
			rows[n].runtime = 1;
			rows[n].left_ms = v.expires_ms ? (int64_t)(v.expires_ms - now) : -1;
			rows[n].applied = v.applied;
			rows[n].set_wall_ms = v.set_wall_ms;
			n++;
		}
	}
	if (policy) {
		for (int i = 0; i < p.nsections && n < cap; i++) {
			const struct ns_section *s = &p.sec[i];

			if (!(s->set & NS_KBIT(NS_K_FAULT)) || !s->v.fault.n)
				continue;
			snprintf(rows[n].dest, sizeof(rows[n].dest), "%.260s", i == 0 ? "[defaults]" : s->pattern);
			ns_faults_format(&s->v.fault, rows[n].text, sizeof(rows[n].text));
			snprintf(rows[n].where, sizeof(rows[n].where), "%.250s:%d", policy, s->key_line[NS_K_FAULT]);
			n++;
		}
		ns_policy_free(&p);
	}
	print_rows(name, rows, n, json);
	free(rows);
	if (have_table)
		ctl_close_table(&t);
	return 0;
}

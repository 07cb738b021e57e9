/* tablebench.c -- contention on the shared breaker table: P processes
 * recording outcomes on one destination or on one each; updates per second
 * and the exact final counts.
 *
 *   tablebench PROCS same|distinct N
 *   tablebench writer NAME      (the chaos test's writer: updates table NAME
 *                                until killed, spending its time in the
 *                                table code so that a kill lands there)
 *   tablebench touch NAME       (one attempt and outcome on every slot in
 *                                use, to show that none is wedged; prints
 *                                how many)
 *   tablebench steady NAME KEY  (KEY's slot as 30 s of steady traffic
 *                                leaves it: successes in each of the
 *                                window's 32 buckets, up to now) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../../policy/table.h"

static int bench(int argc, char **argv);

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Claims new slots, counts, opens, half-opens and writes events on table
 * NAME, forever. A kill -9 almost always lands inside a table operation. */
static int writer(const char *name)
{
	struct ns_settings s = ns_builtin_settings;
	struct ns_table t;
	struct ns_evrec ev;
	char key[64], err[256];
	unsigned r = (unsigned)getpid();

	s.failure_threshold = 3;
	s.open_duration_ms = 5;
	if (ns_table_open(name, 1, 0, 0, &t, err, sizeof(err)) != NS_TBL_OK) {
		fprintf(stderr, "tablebench: %s\n", err);
		return 1;
	}
	memset(&ev, 0, sizeof(ev));
	ev.type = NS_E_CONNECT_FAILED;
	for (unsigned long i = 0;; i++) {
		int idx;

		r = r * 1103515245u + 12345u;
		snprintf(key, sizeof(key), "10.1.%u.%u:80", (r >> 20) % 4, (r >> 8) % 64);
		idx = ns_table_find(&t, key, 1, now_ms());
		if (idx < 0)
			continue;
		if (ns_table_attempt(&t, idx, 1, now_ms(), &s, NULL) != NS_REJECT)
			ns_table_outcome(&t, idx, (r >> 4) & 1 ? NS_OUT_FAILURE : NS_OUT_SUCCESS, 111, now_ms(), 1,
					 &s, NULL);
		if (i % 64 == 0) {
			snprintf(ev.dest, sizeof(ev.dest), "%s", key);
			ns_table_event(&t, &ev, 1);
		}
	}
}

/* One update on every slot in use: a slot that a killed process left
 * wedged would hang here (the chaos test runs this with a time limit). */
static int touch(const char *name)
{
	struct ns_settings s = ns_builtin_settings;
	struct ns_table t;
	struct ns_entry e;
	char err[256];
	unsigned n = 0;

	if (ns_table_open(name, 0, 0, 0, &t, err, sizeof(err)) != NS_TBL_OK) {
		fprintf(stderr, "tablebench: %s\n", err);
		return 1;
	}
	for (uint32_t i = 0; i < t.nslots; i++) {
		if (ns_table_read(&t, (int)i, now_ms(), &e) < 0)
			continue;
		if (ns_table_find(&t, e.key, 0, now_ms()) != (int)i) {
			fprintf(stderr, "tablebench: slot %u (%s) is not found by its key\n", i, e.key);
			return 1;
		}
		if (ns_table_attempt(&t, (int)i, 0, now_ms(), &s, NULL) != NS_REJECT)
			ns_table_outcome(&t, (int)i, NS_OUT_SUCCESS, 0, now_ms(), 1, &s, NULL);
		n++;
	}
	printf("%u\n", n);
	ns_table_close(&t);
	return 0;
}

/* The built-in window (30 s) filled as a destination with steady traffic
 * fills it: 100 successes at each bucket's time, the oldest first. */
static int steady(const char *name, const char *key)
{
	struct ns_settings s = ns_builtin_settings;
	uint64_t width = ns_bucket_width(s.window_ms), now = now_ms();
	struct ns_table t;
	char err[256];
	int idx;

	if (ns_table_open(name, 1, 0, 0, &t, err, sizeof(err)) != NS_TBL_OK) {
		fprintf(stderr, "tablebench: %s\n", err);
		return 1;
	}
	idx = ns_table_find(&t, key, 1, now);
	if (idx < 0) {
		fprintf(stderr, "tablebench: no slot for %s\n", key);
		return 1;
	}
	for (int b = NS_BUCKETS - 1; b >= 0; b--)
		for (int i = 0; i < 100; i++)
			ns_table_outcome(&t, idx, NS_OUT_SUCCESS, 0, now - (uint64_t)b * width, 1, &s, NULL);
	ns_table_close(&t);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 4 && strcmp(argv[1], "steady") == 0)
		return steady(argv[2], argv[3]);
	if (argc == 3 && strcmp(argv[1], "writer") == 0)
		return writer(argv[2]);
	if (argc == 3 && strcmp(argv[1], "touch") == 0)
		return touch(argv[2]);
	return bench(argc, argv);
}

static int bench(int argc, char **argv)
{
	struct ns_settings s = ns_builtin_settings;
	char name[64], key[64], err[256];
	struct timespec t0, t1;
	struct ns_table t;
	int procs, distinct, status, bad = 0;
	long n;
	double secs;

	if (argc != 4 || (procs = atoi(argv[1])) < 1 || procs > 64 || (n = atol(argv[3])) < 1) {
		fprintf(stderr, "usage: tablebench PROCS same|distinct N\n");
		return 2;
	}
	distinct = strcmp(argv[2], "distinct") == 0;
	s.failure_threshold = 0;   /* never opens: every attempt is a call */
	snprintf(name, sizeof(name), "netshim-tablebench.%d", getpid());
	if (ns_table_open(name, 1, 0, 0, &t, err, sizeof(err)) != NS_TBL_OK) {
		fprintf(stderr, "tablebench: %s\n", err);
		return 1;
	}
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (int p = 0; p < procs; p++) {
		if (fork() == 0) {
			int idx;

			snprintf(key, sizeof(key), "10.0.0.%d:80", distinct ? p : 0);
			idx = ns_table_find(&t, key, 1, now_ms());
			for (long i = 0; i < n; i++) {
				ns_table_attempt(&t, idx, 1, now_ms(), &s, NULL);
				ns_table_outcome(&t, idx, i & 1 ? NS_OUT_FAILURE : NS_OUT_SUCCESS, 111, now_ms(), 0, &s, NULL);
			}
			_exit(0);
		}
	}
	for (int p = 0; p < procs; p++)
		wait(&status);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
	for (int p = 0; p < (distinct ? procs : 1); p++) {
		struct ns_entry e;
		long want = distinct ? n : n * procs;

		snprintf(key, sizeof(key), "10.0.0.%d:80", p);
		if (ns_table_read(&t, ns_table_find(&t, key, 0, now_ms()), now_ms(), &e) < 0 ||
		    (long)e.calls != want || (long)(e.successes + e.failures) != want)
			bad = 1;
	}
	/* one update = an attempt plus an outcome */
	printf("%d process%s, %s destination%s: %.0f updates/s, counts %s\n", procs, procs == 1 ? "" : "es",
	       distinct ? "distinct" : "one", distinct ? "s" : "", (double)n * procs / secs,
	       bad ? "WRONG" : "exact");
	ns_table_close(&t);
	unlink(t.path);
	return bad;
}

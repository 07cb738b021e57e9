/* tablebench.c -- contention on the shared breaker table: P processes
 * recording outcomes on one destination or on one each; updates per second
 * and the exact final counts.
 *
 *   tablebench PROCS same|distinct N */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../policy/table.h"

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

int main(int argc, char **argv)
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

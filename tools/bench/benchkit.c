/* benchkit.c -- see benchkit.h. */
#include <err.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "benchkit.h"

extern char **environ;

uint64_t bk_now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

void bk_dataset(struct fl_conn *c, int dests, int nodes)
{
	char err[256];

	for (int d = 0; d < dests; d++) {
		char key[64], node[32];

		snprintf(key, sizeof(key), "site-%d.example:443", d);
		snprintf(node, sizeof(node), "sim-%d", d % nodes);
		ag_fleet_append_change(c, FL_VOTE, key, node, 3600 * 1000, "failure_threshold");
		if (d % 500 == 499 || d == dests - 1)
			if (ag_fleet_collect(c, err, sizeof(err)) != FL_OK)
				errx(1, "vote: %s", err);
	}
}

pid_t bk_agent(const char *agent, const char *url, const char *fleet, int poll_ms, struct ns_table *t, char *table,
	       size_t tlen, char *const *extra)
{
	char err[256], pollarg[16], *av[32];
	posix_spawn_file_actions_t fa;
	int n = 0;
	pid_t pid;

	snprintf(table, tlen, "nsfleetbench.%d", (int)getpid());
	if (ns_table_open(table, 1, 0, 0, t, err, sizeof(err)) != NS_TBL_OK)
		errx(1, "%s", err);
	snprintf(pollarg, sizeof(pollarg), "%d", poll_ms);
	av[n++] = (char *)agent;
	av[n++] = "--redis";
	av[n++] = (char *)url;
	av[n++] = "--node";
	av[n++] = "real";
	av[n++] = "--fleet";
	av[n++] = (char *)fleet;
	av[n++] = "--table";
	av[n++] = table;
	av[n++] = "--poll-ms";
	av[n++] = pollarg;
	for (int i = 0; extra && extra[i] && n < 31; i++)
		av[n++] = extra[i];
	av[n] = NULL;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
	if (posix_spawn(&pid, agent, &fa, NULL, av, environ) != 0)
		errx(1, "cannot start %s", agent);
	posix_spawn_file_actions_destroy(&fa);
	return pid;
}

int bk_held(struct ns_table *t, const char *key)
{
	uint64_t until, mono = bk_now_us() / 1000;
	struct ns_brk b;
	char k[NS_KEY_MAX];
	int idx = ns_table_find(t, key, 0, mono);

	return idx >= 0 && ns_table_state(t, idx, k, sizeof(k), &b, &until) == 0 && until > mono;
}

int bk_cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

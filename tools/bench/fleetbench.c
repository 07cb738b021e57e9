/* fleetbench.c -- what the fleet costs and how fast it spreads a trip.
 *
 *   fleetbench --redis URL --agent PATH --nodes N --dests D [--poll-ms P] [--trials R] [--no-hint]
 *
 * One real netshim-agent (its own table) stands for the node that learns;
 * this process stands for the N other nodes: each polls the fleet every P
 * ms the way an agent does (model.c, the same code), and D destinations
 * each carry one vote (below quorum), so Redis holds a fleet-sized data set.
 * Figures, on stdout, one "key value" per line:
 *   steady state: Redis commands per node per second, the real agent's CPU
 *   per poll;
 *   propagation: R trips, each two simulated nodes voting a fresh
 *   destination open, timed until the real agent's table holds it open
 *   (p50, p99, max), and the agent's CPU per poll while they happen;
 *   --no-hint: the agent ignores the hint channel (polls alone). */
#include <err.h>
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <pthread.h>
#include <sys/mman.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "../agent/agent.h"
#include "benchkit.h"


/* The agent's own figures, from its table header. */
static void agent_figures(const struct ns_table *t, uint64_t *polls, uint64_t *cpu)
{
	*polls = __atomic_load_n(&t->hdr->agent_polls, __ATOMIC_RELAXED);
	*cpu = __atomic_load_n(&t->hdr->agent_cpu_ns, __ATOMIC_RELAXED);
}

static uint64_t redis_commands(struct fl_conn *c)
{
	redisReply *r = redisCommand(c->links[0].ctx, "INFO stats");
	const char *p;
	uint64_t n = 0;

	if (!r)
		errx(1, "INFO: %s", ((redisContext *)c->links[0].ctx)->errstr);
	if (r->type == REDIS_REPLY_STRING && (p = strstr(r->str, "total_commands_processed:")))
		n = strtoull(p + 25, NULL, 10);
	freeReplyObject(r);
	return n;
}

static void nothing(void *arg, const struct fl_dest *d)
{
	(void)arg;
	(void)d;
}

struct sim {
	struct fl_conn c;           /* the simulated nodes' own connection */
	int n;
	int poll_ms;
	uint64_t *high;
	uint64_t polls;
	volatile int stop;
};

/* The simulated nodes, on their own thread: every poll_ms each polls
 * once, as an agent does (one after the other on one connection). */
static void *sim_main(void *arg)
{
	struct sim *s = arg;
	char err[256];
	uint64_t now;

	while (!s->stop) {
		uint64_t t0 = bk_now_us(), spent;

		for (int i = 0; i < s->n; i++) {
			if (ag_fleet_poll(&s->c, 0, s->high[i], nothing, NULL, &now, &s->high[i], NULL, err, sizeof(err)) != FL_OK)
				errx(1, "poll: %s", err);
			__atomic_fetch_add(&s->polls, 1, __ATOMIC_RELAXED);
		}
		spent = bk_now_us() - t0;
		if (spent < (uint64_t)s->poll_ms * 1000)
			usleep((useconds_t)((uint64_t)s->poll_ms * 1000 - spent));
	}
	return NULL;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "redis", required_argument, 0, 'r' }, { "agent", required_argument, 0, 'a' },
		{ "nodes", required_argument, 0, 'n' }, { "dests", required_argument, 0, 'd' },
		{ "poll-ms", required_argument, 0, 'p' }, { "trials", required_argument, 0, 't' },
		{ "no-hint", no_argument, 0, 'N' },
		{ 0, 0, 0, 0 },
	};
	const char *url_text = NULL, *agent = NULL;
	int nodes = 10, dests = 1000, poll_ms = 500, trials = 50, o, no_hint = 0;
	char err[256], fleet[AG_NAME_MAX], table[64];
	struct fl_url url;
	struct fl_conn c = { 0 };
	struct ns_table t;
	struct sim s = { 0 };
	pthread_t th;
	uint64_t *delay, sp0, sp1, p0, c0, p1, c1, r0, r1, t0, t1;
	pid_t pid;

	while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (o) {
		case 'r': url_text = optarg; break;
		case 'a': agent = optarg; break;
		case 'n': nodes = atoi(optarg); break;
		case 'd': dests = atoi(optarg); break;
		case 'p': poll_ms = atoi(optarg); break;
		case 't': trials = atoi(optarg); break;
		case 'N': no_hint = 1; break;
		default: exit(2);
		}
	}
	if (!url_text || !agent || nodes < 2 || dests < 0 || poll_ms < 10 || trials < 1)
		errx(2, "usage: fleetbench --redis URL --agent PATH --nodes N>=2 --dests D [--poll-ms P] [--trials R]");
	if (ag_redis_url_parse(url_text, &url, err, sizeof(err)) < 0)
		errx(2, "%s: %s", url_text, err);
	snprintf(fleet, sizeof(fleet), "bench-%d-%d", (int)getpid(), nodes);
	if (ag_fleet_connect(&c, &url, fleet, 1, 1000, err, sizeof(err)) != FL_OK)
		errx(1, "redis: %s", err);

	/* the data set: dests destinations, one vote each (below quorum) */
	bk_dataset(&c, dests, nodes);

	/* the real agent, on a fresh table */
	{
		char *extra[] = { no_hint ? "--no-hint" : NULL, NULL };

		pid = bk_agent(agent, url_text, fleet, poll_ms, &t, table, sizeof(table), extra);
	}
	s.n = nodes - 1;
	s.poll_ms = poll_ms;
	s.high = calloc((size_t)nodes, sizeof(*s.high));
	if (ag_fleet_connect(&s.c, &url, fleet, 1, 1000, err, sizeof(err)) != FL_OK)
		errx(1, "redis: %s", err);
	pthread_create(&th, NULL, sim_main, &s);
	/* the agent and the simulated nodes read the data set once (a full
	 * first poll each: two rounds of polls done means it is behind them) */
	while (__atomic_load_n(&s.polls, __ATOMIC_RELAXED) < 2 * (uint64_t)s.n)
		usleep(10000);
	usleep(3 * 1000 * (useconds_t)poll_ms + 500000);

	/* steady state */
	agent_figures(&t, &p0, &c0);
	sp0 = __atomic_load_n(&s.polls, __ATOMIC_RELAXED);
	r0 = redis_commands(&c);
	t0 = bk_now_us();
	usleep(5 * 1000 * 1000);
	t1 = bk_now_us();
	r1 = redis_commands(&c);
	sp1 = __atomic_load_n(&s.polls, __ATOMIC_RELAXED);
	agent_figures(&t, &p1, &c1);
	printf("nodes %d\ndestinations %d\npoll_ms %d\n", nodes, dests, poll_ms);
	printf("sim_polls_per_node_per_s %.2f\n", (double)(sp1 - sp0) / (nodes - 1) / ((double)(t1 - t0) / 1e6));
	printf("steady_commands_per_node_per_s %.2f\n",
	       (double)(r1 - r0 - 2) / nodes / ((double)(t1 - t0) / 1e6));
	printf("steady_agent_cpu_us_per_poll %.1f\n", p1 > p0 ? (double)(c1 - c0) / 1000.0 / (double)(p1 - p0) : 0.0);

	/* propagation: two simulated nodes vote a fresh destination open */
	delay = calloc((size_t)trials, sizeof(*delay));
	agent_figures(&t, &p0, &c0);
	r0 = redis_commands(&c);
	t0 = bk_now_us();
	for (int k = 0; k < trials; k++) {
		char key[64];
		uint64_t start, until;

		snprintf(key, sizeof(key), "prop-%d.example:80", k);
		ag_fleet_append_change(&c, FL_VOTE, key, "sim-0", 60000, "consecutive_failures");
		ag_fleet_append_change(&c, FL_VOTE, key, "sim-1", 60000, "consecutive_failures");
		if (ag_fleet_collect(&c, err, sizeof(err)) != FL_OK)
			errx(1, "vote: %s", err);
		start = bk_now_us();
		until = start + 10ull * 1000000;
		while (!bk_held(&t, key) && bk_now_us() < until)
			usleep(200);
		delay[k] = bk_now_us() - start;
		/* the next trip lands at another point of the agent's poll cycle */
		usleep((useconds_t)(rand() % poll_ms + 1) * 1000);
	}
	t1 = bk_now_us();
	r1 = redis_commands(&c);
	agent_figures(&t, &p1, &c1);
	qsort(delay, (size_t)trials, sizeof(*delay), bk_cmp_u64);
	printf("propagation_ms_p50 %.1f\npropagation_ms_p99 %.1f\npropagation_ms_max %.1f\n",
	       (double)delay[trials / 2] / 1000, (double)delay[(trials * 99 + 99) / 100 - 1] / 1000,
	       (double)delay[trials - 1] / 1000);
	printf("changing_commands_per_node_per_s %.2f\nchanges_per_s %.2f\nchanging_agent_cpu_us_per_poll %.1f\n",
	       (double)(r1 - r0 - 2) / nodes / ((double)(t1 - t0) / 1e6), 2.0 * trials / ((double)(t1 - t0) / 1e6),
	       p1 > p0 ? (double)(c1 - c0) / 1000.0 / (double)(p1 - p0) : 0.0);

	s.stop = 1;
	pthread_join(th, NULL);
	ag_fleet_close(&s.c);
	kill(pid, SIGTERM);
	waitpid(pid, NULL, 0);
	{
		char pat[AG_NAME_MAX + 16];
		redisReply *r;

		/* leave Redis as it was: the fleet's keys go */
		snprintf(pat, sizeof(pat), "netshim:{%s}:*", fleet);
		r = redisCommand(c.links[0].ctx, "EVAL %s 0 %s",
				 "for _, k in ipairs(redis.call('KEYS', ARGV[1])) do redis.call('DEL', k) end return 0", pat);
		if (r)
			freeReplyObject(r);
	}
	ns_table_close(&t);
	shm_unlink(table);
	ag_fleet_close(&c);
	return 0;
}

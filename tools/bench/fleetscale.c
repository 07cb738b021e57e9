/* fleetscale.c -- the fleet at 10,000 machines, simulated against a Redis
 * Cluster (make bench-fleet-scale; tools/bench-fleet-scale.sh starts the
 * cluster with the settings the README documents).
 *
 *   fleetscale --redis URL --agent PATH [--nodes N] [--dests D] [--shards S]
 *              [--poll-ms P] [--trials R] [--burst B] [--seconds T]
 *
 * Each simulated machine is what an agent is to Redis: a connection to each
 * master serving the fleet's shards and one hint connection to a node picked
 * at random (replicas too), SUBSCRIBEd to every shard's channel. Every P ms
 * (at its own phase) it polls each shard on its own connection as model.c
 * does (TIME, GET seq, GET epoch, ZRANGEBYSCORE changes after its last seq)
 * and reads each changed destination's two hashes (HGETALL); a hint makes
 * it poll at once, at most every 20 ms. One real netshim-agent (its own
 * table) stands for the machine that learns. One thread drives every
 * socket through epoll; the figures say how many polls a second it
 * achieved beside the number wanted. Figures, "key value" a line:
 *   per master: commands a second, CPU (user+sys seconds a second), clients;
 *   trip propagation (two simulated machines vote a fresh destination open,
 *   timed until the real agent's table holds it) p50 / p99;
 *   a burst: B destinations voted open at once, timed until the real agent
 *   holds them all, and the commands a second on the busiest master then. */
#include <err.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <arpa/inet.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "../agent/agent.h"
#include "benchkit.h"


#define HINT_GAP_MS 20

struct sock {
	int fd;
	int machine;
	int shard;                  /* -1: the hint connection */
	redisReader *rd;
	int pending;                /* replies owed */
	int zr_due;                 /* the ZRANGEBYSCORE is the 4th reply of a poll */
};

struct machine {
	uint64_t since[FL_SHARDS_MAX];
	uint64_t next_poll;         /* monotonic us */
	uint64_t last_early;
	uint64_t hinted;            /* a bit a shard whose hint came */
	struct sock *conn[FL_SHARDS_MAX];   /* by shard (shards on one master share it) */
};

static struct fl_conn ctl;      /* routes, and the writer of the benchmark's own votes */
static struct machine *M;
static int nodes = 10000, dests = 1000, shards = 3, poll_ms = 500, trials = 50, burst = 100, seconds = 5;
static int ep, total;
static uint64_t polls, replies, late;

/* Each worker process drives a share of the machines (a process may not
 * hold more than its descriptor limit): its counters, shared. */
#define WORKERS_MAX 64
struct shared {
	uint64_t polls[WORKERS_MAX], late[WORKERS_MAX];
	int ready[WORKERS_MAX];
};
static struct shared *sh_mem;
static int me;                  /* this worker */
static volatile sig_atomic_t stopping;

static void on_term(int sig)
{
	(void)sig;
	stopping = 1;
}
static char fleet[AG_NAME_MAX];

static int dial(const char *host, int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;

	if (fd < 0 || inet_pton(AF_INET, host, &a.sin_addr) != 1 || connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0)
		err(1, "connect %s:%d", host, port);
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	fcntl(fd, F_SETFL, O_NONBLOCK);
	return fd;
}

static void sendcmd(struct sock *s, int argc, const char **argv)
{
	char *cmd;
	int n = redisFormatCommandArgv(&cmd, argc, argv, NULL);
	ssize_t w = 0;

	/* small commands into a loopback socket's buffer: a short write means
	 * Redis stopped reading, a failure of the benchmark */
	while (w < n) {
		ssize_t k = write(s->fd, cmd + w, (size_t)(n - w));

		if (k < 0 && errno == EAGAIN) {
			usleep(100);
			continue;
		}
		if (k <= 0)
			err(1, "write to Redis");
		w += k;
	}
	redisFreeCommand(cmd);
	s->pending++;
}

static struct sock *new_sock(const char *host, int port, int machine, int shard)
{
	struct sock *s = calloc(1, sizeof(*s));
	struct epoll_event e = { .events = EPOLLIN };

	if (!s || !(s->rd = redisReaderCreate()))
		errx(1, "out of memory");
	s->fd = dial(host, port);
	s->machine = machine;
	s->shard = shard;
	e.data.ptr = s;
	epoll_ctl(ep, EPOLL_CTL_ADD, s->fd, &e);
	return s;
}

/* Replies the machine still waits for: an agent polls again only after
 * its last poll is answered. */
static int busy(const struct machine *m)
{
	for (int sh = 0; sh < ctl.nshards; sh++)
		if (m->conn[sh]->pending)
			return 1;
	return 0;
}

/* A poll as the agent makes it: every shard's four commands, or after a
 * hint (hints != 0) the hinted shards' changes alone. */
static void poll_machine(struct machine *m, uint64_t hints)
{
	if (busy(m)) {
		late++;
		return;
	}
	for (int sh = 0; sh < ctl.nshards; sh++) {
		char key[FL_PREFIX_MAX + 16], seq[FL_PREFIX_MAX + 16], epo[FL_PREFIX_MAX + 16], min[32];
		const char *t[] = { "TIME" }, *g[] = { "GET", seq }, *e[] = { "GET", epo };
		const char *z[] = { "ZRANGEBYSCORE", key, min, "+inf", "WITHSCORES" };
		struct sock *s = m->conn[sh];

		snprintf(key, sizeof(key), "%schanges", ctl.shard[sh].prefix);
		snprintf(seq, sizeof(seq), "%sseq", ctl.shard[sh].prefix);
		snprintf(epo, sizeof(epo), "%sepoch", ctl.shard[sh].prefix);
		snprintf(min, sizeof(min), "(%llu", (unsigned long long)m->since[sh]);
		if (hints) {
			if (hints & (1ull << sh))
				sendcmd(s, 5, z);
			continue;
		}
		sendcmd(s, 1, t);
		sendcmd(s, 2, g);
		sendcmd(s, 2, e);
		sendcmd(s, 5, z);
	}
	polls++;
}

/* A reply on a machine's shard connection: a ZRANGEBYSCORE's changes are
 * read (two HGETALL each) and its highest seq kept. */
static void on_reply(struct sock *s, redisReply *r)
{
	struct machine *m = &M[s->machine];

	replies++;
	s->pending--;
	if (r->type == REDIS_REPLY_ARRAY && r->elements % 2 == 0 && r->elements >= 2 &&
	    r->element[1]->type == REDIS_REPLY_STRING && r->element[0]->type == REDIS_REPLY_STRING &&
	    strchr(r->element[0]->str, ':')) {
		for (size_t i = 0; i + 1 < r->elements; i += 2) {
			const char *dest = r->element[i]->str;
			int sh = ag_fleet_dest_shard(&ctl, dest);
			uint64_t seq = strtoull(r->element[i + 1]->str, NULL, 10);
			char k[FL_PREFIX_MAX + NS_KEY_MAX + 16];
			const char *hv[] = { "HGETALL", k };

			snprintf(k, sizeof(k), "%svotes:%s", ctl.shard[sh].prefix, dest);
			sendcmd(s, 2, hv);
			snprintf(k, sizeof(k), "%scmd:%s", ctl.shard[sh].prefix, dest);
			sendcmd(s, 2, hv);
			if (seq > m->since[sh])
				m->since[sh] = seq;
		}
	}
}

/* A hint: the machine polls at once, or when its 20 ms gap ends. */
static void on_hint(struct sock *s, redisReply *r)
{
	if (r->type == REDIS_REPLY_ARRAY && r->elements == 3 && r->element[0]->str && r->element[1]->str &&
	    strcmp(r->element[0]->str, "message") == 0)
		for (int sh = 0; sh < ctl.nshards; sh++)
			if (strncmp(r->element[1]->str, ctl.shard[sh].prefix, strlen(ctl.shard[sh].prefix)) == 0)
				M[s->machine].hinted |= 1ull << sh;
}

static void drive(uint64_t until)
{
	struct epoll_event ev[256];
	uint64_t next_scan = 0;

	while (bk_now_us() < until && !stopping) {
		uint64_t now;
		int n = epoll_wait(ep, ev, 256, 1);

		for (int i = 0; i < n; i++) {
			struct sock *s = ev[i].data.ptr;
			char buf[65536];
			ssize_t k;
			void *v;

			while ((k = read(s->fd, buf, sizeof(buf))) > 0)
				redisReaderFeed(s->rd, buf, (size_t)k);
			if (k == 0)
				errx(1, "Redis closed a simulated machine's connection (maxclients? output buffer limit?)");
			while (redisReaderGetReply(s->rd, &v) == REDIS_OK && v) {
				if (s->shard < 0)
					on_hint(s, v);
				else
					on_reply(s, v);
				freeReplyObject(v);
			}
		}
		/* the machines due (looked at every 2 ms): their regular poll, or a hint's */
		now = bk_now_us();
		if (now < next_scan)
			continue;
		next_scan = now + 2000;
		__atomic_store_n(&sh_mem->polls[me], polls, __ATOMIC_RELAXED);
		__atomic_store_n(&sh_mem->late[me], late, __ATOMIC_RELAXED);
		for (int i = 0; i < nodes; i++) {
			struct machine *m = &M[i];

			if (now >= m->next_poll) {
				poll_machine(m, 0);
				m->next_poll += (uint64_t)poll_ms * 1000;
				if (m->next_poll < now)
					m->next_poll = now + (uint64_t)poll_ms * 1000;
			} else if (m->hinted && now >= m->last_early + HINT_GAP_MS * 1000) {
				uint64_t h = m->hinted;

				m->hinted = 0;
				m->last_early = now;
				poll_machine(m, h);
			}
		}
	}
}

struct master_stats {
	uint64_t cmds, clients;
	double cpu;
};

static uint64_t info_num(const char *text, const char *key)
{
	const char *p = strstr(text, key);

	return p ? strtoull(p + strlen(key), NULL, 10) : 0;
}

static void stats(struct master_stats *st)
{
	for (int i = 0; i < ctl.nlinks; i++) {
		redisReply *r = redisCommand(ctl.links[i].ctx, "INFO all");
		const char *p;

		if (!r || r->type != REDIS_REPLY_STRING)
			errx(1, "INFO failed");
		st[i].cmds = info_num(r->str, "total_commands_processed:");
		st[i].clients = info_num(r->str, "connected_clients:");
		p = strstr(r->str, "used_cpu_sys:");
		st[i].cpu = p ? atof(p + 13) : 0;
		p = strstr(r->str, "used_cpu_user:");
		st[i].cpu += p ? atof(p + 14) : 0;
		freeReplyObject(r);
	}
}

static void vote(const char *key)
{
	char err[256];

	ag_fleet_append_change(&ctl, FL_VOTE, key, "sim-0", 600000, "consecutive_failures");
	ag_fleet_append_change(&ctl, FL_VOTE, key, "sim-1", 600000, "consecutive_failures");
	if (ag_fleet_collect(&ctl, err, sizeof(err)) != FL_OK)
		errx(1, "vote: %s", err);
}

/* A worker: machines first .. first + count - 1 of the fleet, their
 * connections made here, driven until SIGTERM. */
static void worker(int first, int count, const uint64_t *seq0, uint64_t t0)
{
	nodes = count;
	ep = epoll_create1(EPOLL_CLOEXEC);
	M = calloc((size_t)nodes, sizeof(*M));
	if (!M)
		errx(1, "out of memory");
	for (int i = 0; i < nodes; i++) {
		struct sock *by_link[FL_LINKS_MAX] = { 0 };
		int k = ctl.nknown ? (int)((unsigned)(first + i) * 2654435761u % (unsigned)ctl.nknown) : 0;
		struct sock *h;
		const char *sub[1 + FL_SHARDS_MAX];
		char chan[FL_SHARDS_MAX][FL_PREFIX_MAX + 8];

		for (int sh = 0; sh < ctl.nshards; sh++) {
			int l = ctl.shard[sh].link;

			if (!by_link[l])
				by_link[l] = new_sock(ctl.links[l].host, ctl.links[l].port, i, sh);
			M[i].conn[sh] = by_link[l];
		}
		h = ctl.nknown ? new_sock(ctl.known[k].host, ctl.known[k].port, i, -1)
			       : new_sock(ctl.links[0].host, ctl.links[0].port, i, -1);
		sub[0] = "SUBSCRIBE";
		for (int sh = 0; sh < ctl.nshards; sh++) {
			snprintf(chan[sh], sizeof(chan[sh]), "%shint", ctl.shard[sh].prefix);
			sub[1 + sh] = chan[sh];
		}
		sendcmd(h, 1 + ctl.nshards, sub);
		/* every machine at its own phase of the interval */
		M[i].next_poll = t0 + 4000000 + (uint64_t)(first + i) * (uint64_t)poll_ms * 1000 / (uint64_t)total;
		for (int k2 = 0; k2 < ctl.nshards; k2++)
			M[i].since[k2] = seq0[k2];
	}
	__atomic_store_n(&sh_mem->ready[me], 1, __ATOMIC_RELEASE);
	drive(UINT64_MAX);
}

static void nap(uint64_t until)
{
	uint64_t now = bk_now_us();

	if (until > now)
		usleep((useconds_t)(until - now > 1000000 ? 1000000 : until - now));
	while (bk_now_us() < until)
		usleep(200);
}

static uint64_t sum(const uint64_t *v, int n)
{
	uint64_t t = 0;

	for (int i = 0; i < n; i++)
		t += __atomic_load_n(&v[i], __ATOMIC_RELAXED);
	return t;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "redis", required_argument, 0, 'r' }, { "agent", required_argument, 0, 'a' },
		{ "nodes", required_argument, 0, 'n' }, { "dests", required_argument, 0, 'd' },
		{ "shards", required_argument, 0, 's' }, { "poll-ms", required_argument, 0, 'p' },
		{ "trials", required_argument, 0, 't' }, { "burst", required_argument, 0, 'b' },
		{ "seconds", required_argument, 0, 'T' }, { 0, 0, 0, 0 },
	};
	const char *url_text = NULL, *agent = NULL;
	struct master_stats a[FL_LINKS_MAX], b[FL_LINKS_MAX];
	struct fl_url url;
	struct ns_table t;
	struct rlimit rl;
	char err[256], table[64], shardarg[16];
	uint64_t t0, t1, p0, *delay, seq0[FL_SHARDS_MAX] = { 0 };
	pid_t pid, wpid[WORKERS_MAX];
	int o, busiest = 0, per, workers;

	while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (o) {
		case 'r': url_text = optarg; break;
		case 'a': agent = optarg; break;
		case 'n': nodes = atoi(optarg); break;
		case 'd': dests = atoi(optarg); break;
		case 's': shards = atoi(optarg); break;
		case 'p': poll_ms = atoi(optarg); break;
		case 't': trials = atoi(optarg); break;
		case 'b': burst = atoi(optarg); break;
		case 'T': seconds = atoi(optarg); break;
		default: exit(2);
		}
	}
	if (!url_text || !agent || nodes < 1 || dests < 0 || shards < 1 || shards > FL_SHARDS_MAX || poll_ms < 10 ||
	    trials < 1 || burst < 1 || seconds < 1)
		errx(2, "usage: fleetscale --redis URL --agent PATH [--nodes N] [--dests D] [--shards S] [--poll-ms P] "
		     "[--trials R] [--burst B] [--seconds T]");
	if (ag_redis_url_parse(url_text, &url, err, sizeof(err)) < 0)
		errx(2, "%s: %s", url_text, err);
	signal(SIGPIPE, SIG_IGN);
	snprintf(fleet, sizeof(fleet), "scale-%d", (int)getpid());
	if (ag_fleet_connect(&ctl, &url, fleet, shards, 2000, err, sizeof(err)) != FL_OK)
		errx(1, "redis: %s", err);
	/* a connection to each master and one for hints, per machine: as many
	 * worker processes as the descriptor limit asks */
	getrlimit(RLIMIT_NOFILE, &rl);
	rl.rlim_cur = rl.rlim_max;
	setrlimit(RLIMIT_NOFILE, &rl);
	total = nodes;
	bk_dataset(&ctl, dests, nodes);
	/* the simulated machines have read the data set already (a fleet that
	 * has been running): they poll from each shard's current change */
	for (int k = 0; k < ctl.nshards; k++)
		if (ag_fleet_seq(&ctl, k, &seq0[k], err, sizeof(err)) != FL_OK)
			errx(1, "redis: %s", err);
	per = (int)((rl.rlim_cur - 256) / (rlim_t)(ctl.nlinks + 1));
	workers = (nodes + per - 1) / per;
	if (workers > WORKERS_MAX)
		errx(1, "%d machines need more than %d processes of %d machines", nodes, WORKERS_MAX, per);
	sh_mem = mmap(NULL, sizeof(*sh_mem), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (sh_mem == MAP_FAILED)
		errx(1, "mmap: %s", strerror(errno));
	t0 = bk_now_us();
	for (int w = 0; w < workers; w++) {
		int first = w * per, count = first + per > nodes ? nodes - first : per;

		if ((wpid[w] = fork()) == 0) {
			me = w;
			signal(SIGTERM, on_term);
			worker(first, count, seq0, t0);
			_exit(0);
		}
	}
	for (int w = 0; w < workers; w++)
		while (!__atomic_load_n(&sh_mem->ready[w], __ATOMIC_ACQUIRE))
			usleep(10000);
	printf("nodes %d\ndestinations %d\nshards %d\nmasters %d\npoll_ms %d\nconnect_s %.1f\n", nodes, dests, ctl.nshards,
	       ctl.nlinks, poll_ms, (double)(bk_now_us() - t0) / 1e6);
	fflush(stdout);

	/* the real agent, on a fresh table */
	snprintf(shardarg, sizeof(shardarg), "%d", shards);
	{
		char *extra[] = { "--shards", shardarg, NULL };

		pid = bk_agent(agent, url_text, fleet, poll_ms, &t, table, sizeof(table), extra);
	}
	/* the first full polls, then the steady state */
	nap(bk_now_us() + 3000000 + 2ull * (uint64_t)poll_ms * 1000);
	stats(a);
	p0 = sum(sh_mem->polls, workers);
	t0 = bk_now_us();
	nap(t0 + (uint64_t)seconds * 1000000);
	t1 = bk_now_us();
	stats(b);
	printf("workers %d\npolls_wanted_per_s %.0f\npolls_done_per_s %.0f\npolls_late %llu\n", workers,
	       nodes * 1000.0 / poll_ms, (double)(sum(sh_mem->polls, workers) - p0) / ((double)(t1 - t0) / 1e6),
	       (unsigned long long)sum(sh_mem->late, workers));
	for (int i = 0; i < ctl.nlinks; i++) {
		double s = (double)(t1 - t0) / 1e6;

		printf("master_%d_commands_per_s %.0f\nmaster_%d_cpu %.3f\nmaster_%d_clients %llu\n", ctl.links[i].port,
		       (double)(b[i].cmds - a[i].cmds) / s, ctl.links[i].port, (b[i].cpu - a[i].cpu) / s,
		       ctl.links[i].port, (unsigned long long)b[i].clients);
	}
	fflush(stdout);

	/* propagation, the simulated fleet polling and woken by every hint */
	delay = calloc((size_t)trials, sizeof(*delay));
	for (int k = 0; k < trials; k++) {
		char key[64];
		uint64_t start;

		snprintf(key, sizeof(key), "prop-%d.example:80", k);
		vote(key);
		start = bk_now_us();
		while (!bk_held(&t, key) && bk_now_us() < start + 10000000)
			usleep(500);
		delay[k] = bk_now_us() - start;
		nap(bk_now_us() + (uint64_t)(rand() % poll_ms + 1) * 1000);
	}
	qsort(delay, (size_t)trials, sizeof(*delay), bk_cmp_u64);
	printf("propagation_ms_p50 %.1f\npropagation_ms_p99 %.1f\n", (double)delay[trials / 2] / 1000,
	       (double)delay[(trials * 99 + 99) / 100 - 1] / 1000);

	/* a burst: many destinations at once */
	nap(bk_now_us() + (uint64_t)poll_ms * 1000);
	stats(a);
	t0 = bk_now_us();
	for (int k = 0; k < burst; k++) {
		char key[64];

		snprintf(key, sizeof(key), "burst-%d.example:80", k);
		ag_fleet_append_change(&ctl, FL_VOTE, key, "sim-0", 600000, "consecutive_failures");
		ag_fleet_append_change(&ctl, FL_VOTE, key, "sim-1", 600000, "consecutive_failures");
	}
	if (ag_fleet_collect(&ctl, err, sizeof(err)) != FL_OK)
		errx(1, "vote: %s", err);
	for (int all = 0; !all && bk_now_us() < t0 + 30000000;) {
		nap(bk_now_us() + 1000);
		all = 1;
		for (int k = 0; k < burst && all; k++) {
			char key[64];

			snprintf(key, sizeof(key), "burst-%d.example:80", k);
			all = bk_held(&t, key);
		}
	}
	t1 = bk_now_us();
	printf("burst %d\nburst_all_held_ms %.1f\n", burst, (double)(t1 - t0) / 1000);
	nap(t0 + 2000000);
	stats(b);
	for (int i = 1; i < ctl.nlinks; i++)
		if (b[i].cmds - a[i].cmds > b[busiest].cmds - a[busiest].cmds)
			busiest = i;
	printf("burst_busiest_master_commands_per_s %.0f\nburst_busiest_master_cpu %.3f\n",
	       (double)(b[busiest].cmds - a[busiest].cmds) / ((double)(bk_now_us() - t0) / 1e6),
	       (b[busiest].cpu - a[busiest].cpu) / ((double)(bk_now_us() - t0) / 1e6));
	kill(pid, SIGTERM);
	waitpid(pid, NULL, 0);
	for (int w = 0; w < workers; w++) {
		kill(wpid[w], SIGTERM);
		waitpid(wpid[w], NULL, 0);
	}
	ns_table_close(&t);
	shm_unlink(table);
	return 0;
}

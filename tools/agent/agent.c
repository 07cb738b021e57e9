/* agent.c -- netshim-agent: one per machine, beside the breaker table.
 *
 * Each pass (every --poll-ms) it reads the table (which destinations are
 * open here, from their own failures), publishes this node's votes, polls
 * the fleet's changes, and writes the fleet's verdict into the table: a
 * destination that at least --quorum nodes report open is held open here
 * (fleet_open) until fewer do. Operator resets and forced opens read from
 * the event ring are published as fleet commands and applied on every node.
 * Programs never wait on any of it: the library only reads the table.
 * Redis unreachable: every fleet hold is released (local breakers alone,
 * as without the agent) and the agent reconnects with backoff; the next
 * pass after it is back republishes this node's state. */
#include <err.h>
#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../../policy/hash.h"

#include "../../policy/ocring.h"
#include "../shimctl.h"
#include "agentstate.h"

struct agent_state A;

static volatile sig_atomic_t stopping;

static void on_stop(int sig)
{
	(void)sig;
	stopping = 1;
	fl_stop = 1;   /* a wait for Redis ends too */
}

void ag_log(const char *fmt, ...)
{
	char buf[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	fprintf(stderr, "netshim-agent: %s\n", buf);
}

static uint64_t cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void lost(const char *why)
{
	ag_log("redis %s:%d lost (%s): local breakers only; retrying", A.url.host, A.url.port, why);
	fl_close(&A.c);
	fl_close(&A.sub);
	A.connected = 0;
	release_all("redis unreachable");
	forget_votes();
	A.backoff_ms = BACKOFF_MIN_MS;
	A.next_try = ctl_mono_ms() + A.backoff_ms;
}

static int try_connect(char *err, size_t len)
{
	int rc = fl_connect(&A.c, &A.url, A.fleet, A.shards, CONNECT_TIMEOUT_MS, err, len);

	for (int s = 0; rc == FL_OK && s < A.shards; s++) {
		uint64_t seq = 0;

		if ((rc = fl_seq(&A.c, s, &seq, err, len)) == FL_OK && seq < A.sh[s].high)
			A.sh[s].high = 0;   /* Redis lost the fleet's data: all it holds now is new */
	}
	if (rc != FL_OK) {
		fl_close(&A.c);
		return rc;
	}
	for (int s = 0; s < A.shards; s++) {
		A.sh[s].since = 0;
		A.hinted[s] = 0;   /* a hint from before (maybe another Redis's numbering) is void */
	}
	A.connected = 1;
	A.sub_next_try = 0;
	return FL_OK;
}

/* The hint channel is a shortcut, never needed: without it every change
 * still arrives with the next poll. */
static void hint_connect(uint64_t now)
{
	char err[256];

	if (A.no_hint || A.sub.nlinks || !A.connected || now < A.sub_next_try)
		return;
	A.sub_next_try = now + SUB_RETRY_MS;
	if (fl_subscribe(&A.sub, &A.c, next_rand(), err, sizeof(err)) != FL_OK)
		ag_log("hint channel unavailable (%s): changes arrive with each poll only", err);
}

/* A hint announced a change this agent has not seen, and hints are
 * believed: one that a poll did not bear out (a PUBLISH of a seq Redis
 * never reached) silences them until the next regular poll, so hints can
 * at most double the poll rate, never more than real changes justify. */
static int hint_due(uint64_t now)
{
	int unseen = 0;

	for (int s = 0; s < A.shards; s++)
		unseen |= A.hinted[s] > A.sh[s].high;
	return A.connected && unseen && now >= A.hint_quiet_until;
}

/* The wake-up socket: programs that write an event the agent acts on
 * send it a byte (shim/config.c), so a trip is read at once, not at the
 * next tick. Without it (the name taken), ticks alone. */
static void wake_open(void)
{
	struct sockaddr_un a;
	unsigned len = ns_table_wake_addr(&A.t, &a);

	A.wake_fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (A.wake_fd >= 0 && bind(A.wake_fd, (struct sockaddr *)&a, (socklen_t)len) < 0) {
		ag_log("cannot take the wake-up socket (%s): trips are read every %d ms", strerror(errno), TICK_MS);
		close(A.wake_fd);
		A.wake_fd = -1;
	}
}

/* How long the loop may sleep: a tick, or until a pending change here or a
 * hint may start its pass. */
static int wait_ms(uint64_t now, uint64_t last_early)
{
	int ms = TICK_MS;

	if (A.local_change)
		ms = now >= last_early + LOCAL_GAP_MS ? 0 : (int)(last_early + LOCAL_GAP_MS - now);
	if (hint_due(now)) {
		int h = now >= last_early + HINT_GAP_MS ? 0 : (int)(last_early + HINT_GAP_MS - now);

		ms = h < ms ? h : ms;
	}
	return ms;
}

/* /metrics: the table's series (ctl_metrics.c), then the agent's own. */
static void agent_gauge(FILE *f, const char *metric, const char *help, const char *type, unsigned long long v)
{
	fprintf(f, "# HELP %s %s\n# TYPE %s %s\n%s{node=\"%s\"} %llu\n", metric, help, metric, type, metric, A.node, v);
}

static void agent_metrics(FILE *f, void *arg)
{
	struct dst *d, *tmp;

	(void)arg;
	ctl_metrics_write(f, &A.t);
	agent_gauge(f, "netshim_agent_redis_connected", "1 while the agent's Redis answers.", "gauge", A.connected);
	agent_gauge(f, "netshim_agent_suspect", "1 while this node's votes are withheld (too many destinations open).",
		    "gauge", A.suspect);
	agent_gauge(f, "netshim_agent_polls_total", "Polls of Redis made.", "counter",
		    __atomic_load_n(&A.t.hdr->agent_polls, __ATOMIC_RELAXED));
	fprintf(f, "# HELP netshim_agent_cpu_seconds_total CPU time of the agent's passes.\n"
		"# TYPE netshim_agent_cpu_seconds_total counter\nnetshim_agent_cpu_seconds_total{node=\"%s\"} %.6f\n",
		A.node, (double)__atomic_load_n(&A.t.hdr->agent_cpu_ns, __ATOMIC_RELAXED) / 1e9);
	agent_gauge(f, "netshim_agent_unsigned_ignored_total",
		    "Votes and commands in Redis ignored: not signed with a fleet key (--fleet-key-file), or replayed.",
		    "counter", A.c.unsigned_seen);
	agent_gauge(f, "netshim_agent_destinations", "Destinations in the table at the last pass.", "gauge", A.n_total);
	agent_gauge(f, "netshim_agent_open_destinations", "Destinations open here at the last pass.", "gauge", A.n_open);
	agent_gauge(f, "netshim_agent_hook_runs_total", "--on-event runs started.", "counter", hooks_runs(A.hooks));
	agent_gauge(f, "netshim_agent_hooks_running", "--on-event runs running now.", "gauge",
		    A.hooks ? (unsigned long long)hooks_running(A.hooks) : 0);
	fprintf(f, "# HELP netshim_fleet_votes Live votes that the destination is open, on every node.\n"
		"# TYPE netshim_fleet_votes gauge\n");
	HASH_ITER(hh, A.dests, d, tmp) {
		unsigned live = 0;

		for (int i = 0; i < d->nvotes; i++)
			live += d->votes[i].exp_ms > A.redis_now;
		fputs("netshim_fleet_votes{", f);
		ctl_prom_dest_labels(f, d->key);
		fprintf(f, "} %u\n", live);
	}
	fprintf(f, "# HELP netshim_fleet_held 1 while the fleet holds the destination open here.\n"
		"# TYPE netshim_fleet_held gauge\n");
	HASH_ITER(hh, A.dests, d, tmp) {
		fputs("netshim_fleet_held{", f);
		ctl_prom_dest_labels(f, d->key);
		fprintf(f, "} %d\n", d->held);
	}
}

/* Wait up to ms for a hint or a wake-up; note the highest seq announced. */
static void hint_wait(int ms)
{
	struct pollfd p[3 + 64] = { { .fd = fl_hint_fd(&A.sub), .events = POLLIN },
				    { .fd = A.wake_fd, .events = POLLIN }, { .fd = A.metrics_fd, .events = POLLIN } };
	char drain[64];
	int n = 3 + (A.metrics_fd >= 0 ? msrv_pollfds(p + 3, 64) : 0), r;

	r = poll(p, (nfds_t)n, ms);
	/* the metrics clients move on at every look (their deadlines too),
	 * never waited for */
	if (A.metrics_fd >= 0)
		msrv_serve(A.metrics_fd, agent_metrics, NULL);
	if (r <= 0)
		return;
	if ((p[0].revents & (POLLIN | POLLHUP | POLLERR)) && fl_hint_read(&A.sub, A.hinted) < 0) {
		ag_log("hint channel lost: changes arrive with each poll only until it is back");
		fl_close(&A.sub);
	}
	if (p[1].revents & POLLIN)
		while (recv(A.wake_fd, drain, sizeof(drain), MSG_DONTWAIT) > 0)
			;   /* any number of wake-ups: one look at the event ring */
}

/* One shard's changes since the last poll (light: a hint's, the changes
 * alone, and only where a hint announced one). */
static int poll_shard(int s, int light, char *err, size_t len)
{
	struct shard_state *h = &A.sh[s];
	struct fl_store st;
	uint64_t high;
	int rc;

	if (light) {
		if (A.hinted[s] <= h->high)
			return FL_OK;   /* no hint for this shard */
		rc = fl_poll_changes(&A.c, s, h->since, on_dest, &h->high_before, &A.redis_now, &high, err, len);
		if (rc == FL_OK) {
			h->since = high;
			if (high > h->high)
				h->high = high;
		}
		return rc;
	}
	rc = fl_poll(&A.c, s, h->since, on_dest, &h->high_before, &A.redis_now, &high, &st, err, len);
	if (rc == FL_OK && went_back(s, &st)) {
		/* the store lost its data under a live connection (FLUSHDB,
		 * a restart without it, a lagging replica promoted): what it
		 * holds now is read whole, and this node's votes are
		 * published again */
		char which[24] = "";

		if (A.shards > 1)
			snprintf(which, sizeof(which), "shard %d: ", s);
		ag_log("redis went back (%schange %llu, epoch %s; this agent had seen change %llu, epoch %s): "
		       "reading it whole again", which, (unsigned long long)st.seq, st.epoch[0] ? st.epoch : "none",
		       (unsigned long long)h->since, h->epoch);
		forget_votes();
		h->high = h->high_before = 0;
		h->epoch[0] = '\0';
		rc = fl_poll(&A.c, s, 0, on_dest, &h->high_before, &A.redis_now, &high, &st, err, len);
	}
	if (rc == FL_OK)
		rc = adopt_epoch(s, &st, err, len);
	if (rc == FL_OK) {
		h->since = high;
		if (high > h->high)
			h->high = high;
	}
	return rc;
}

/* A pass failed. A cluster's node lost is most likely a failover: its
 * replica takes over within seconds, so the holds stand (as the votes last
 * read say) while the agent looks for the new master, up to
 * REROUTE_GRACE_MS; a single Redis lost, or a cluster not back by then,
 * and the holds go (local breakers alone). */
static void failed(uint64_t now, const char *why)
{
	if (A.c.cluster && A.synced && !A.reroute_until) {
		ag_log("redis cluster: %s: looking for the slots' new masters; the fleet's holds stand up to %d ms",
		       why, REROUTE_GRACE_MS);
		fl_close(&A.c);
		fl_close(&A.sub);
		A.connected = 0;
		A.reroute_until = now + REROUTE_GRACE_MS;
		A.next_try = now;
		return;
	}
	A.reroute_until = 0;
	lost(why);
}

static void reconnect(uint64_t now)
{
	char err[256];
	uint64_t jitter;

	if (try_connect(err, sizeof(err)) == FL_OK) {
		if (A.reroute_until)
			ag_log("redis cluster routed again (%d link%s): the fleet's state is read again",
			       A.c.nlinks, A.c.nlinks == 1 ? "" : "s");
		else
			ag_log("redis %s:%d connected again: republishing this node's state", A.url.host, A.url.port);
		A.reroute_until = 0;
		return;
	}
	if (A.reroute_until) {
		if (now < A.reroute_until) {
			A.next_try = now + 100;
			return;
		}
		lost(err);
		A.reroute_until = 0;
		return;
	}
	A.backoff_ms = A.backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : A.backoff_ms * 2;
	jitter = next_rand() % (A.backoff_ms / 2 + 1);
	A.next_try = now + A.backoff_ms / 2 + jitter;
}

static void pass(uint64_t now, int light)
{
	char err[256];
	uint64_t c0 = cpu_ns();
	int rc = FL_OK;

	for (int s = 0; s < A.shards; s++)
		A.sh[s].high_before = A.sh[s].high;
	scan_table(now);
	if (!A.connected && now >= A.next_try)
		reconnect(now);
	if (!A.connected && A.reroute_until)
		apply_fleet(now);   /* the holds stand, as last known, while the cluster changes */
	if (A.connected) {
		int quiet = 0;

		rc = publish_ops(err, sizeof(err));
		for (int s = 0; s < A.shards && rc == FL_OK; s++)
			rc = poll_shard(s, light, err, sizeof(err));
		if (A.bad_keys != A.bad_logged && now >= A.bad_log_ms + 60000) {
			ag_log("%llu destination names in Redis that no shim could have written were ignored "
			       "(a writer other than the agents?)", (unsigned long long)(A.bad_keys - A.bad_logged));
			A.bad_logged = A.bad_keys;
			A.bad_log_ms = now;
		}
		if (A.c.unsigned_seen != A.unsigned_logged && now >= A.unsigned_log_ms + 60000) {
			ag_log("%llu votes or commands in Redis not signed with a fleet key (or replayed) were ignored "
			       "(a writer without the key?)", (unsigned long long)(A.c.unsigned_seen - A.unsigned_logged));
			A.unsigned_logged = A.c.unsigned_seen;
			A.unsigned_log_ms = now;
		}
		if (rc == FL_OK) {
			A.synced = 1;
			rc = reconcile(now, err, sizeof(err));
			if (rc == FL_OK && !light)
				rc = membership(err, sizeof(err));
		}
		/* a hint the poll did not bear out (a seq Redis never reached)
		 * is void: it woke one poll, and wakes no more */
		for (int s = 0; s < A.shards && rc == FL_OK; s++)
			if (A.hinted[s] > A.sh[s].high) {
				A.hinted[s] = A.sh[s].high;
				quiet = 1;
			}
		if (quiet)
			A.hint_quiet_until = now + (uint64_t)A.poll_ms;   /* and hints wait for the next tick */
		/* a slot moved (a MOVED was followed): the routes are read again */
		if (rc == FL_OK && A.c.stale) {
			ag_log("redis cluster: a slot moved (%llu redirection%s followed): routes read again",
			       (unsigned long long)A.c.redirects, A.c.redirects == 1 ? "" : "s");
			rc = fl_reroute(&A.c, err, sizeof(err));
		}
		if (rc == FL_OK)
			apply_fleet(now);
		else
			failed(now, err);
		__atomic_fetch_add(&A.t.hdr->agent_polls, 1, __ATOMIC_RELAXED);
	}
	__atomic_store_n(&A.t.hdr->agent_open, A.n_open, __ATOMIC_RELAXED);
	__atomic_store_n(&A.t.hdr->agent_dests, A.n_total, __ATOMIC_RELAXED);
	__atomic_store_n(&A.t.hdr->agent_flags, (A.connected ? NS_AGENT_CONNECTED : 0) |
			 (A.suspect ? NS_AGENT_SUSPECT : 0) | (A.url_text ? 0 : NS_AGENT_NOFLEET) |
			 (A.hist ? NS_AGENT_HISTORY : 0), __ATOMIC_RELAXED);
	__atomic_store_n(&A.t.hdr->agent_beat_ms, ctl_wall_ms(), __ATOMIC_RELAXED);
	__atomic_fetch_add(&A.t.hdr->agent_cpu_ns, cpu_ns() - c0, __ATOMIC_RELAXED);
}

/**** the program ****/

/* --fleet-key-file: one key a line (16 to 127 bytes; the first signs, every
 * one verifies, so keys rotate by adding the new one second, then first,
 * then removing the old), readable by its owner only. Exit 2 otherwise. */
static void load_keys(const char *file)
{
	char line[FL_KEY_MAX + 8];
	struct stat st;
	FILE *f = fopen(file, "re");
	int n = 0;

	if (!f)
		err(2, "--fleet-key-file %s", file);
	if (fstat(fileno(f), &st) == 0 && (st.st_mode & 077))
		errx(2, "--fleet-key-file %s: readable by others (mode %03o): chmod 600 it", file,
		     (unsigned)(st.st_mode & 0777));
	for (int ln = 1; fgets(line, sizeof(line), f); ln++) {
		size_t len = strcspn(line, "\r\n");

		if (len == strlen(line) && !feof(f))
			errx(2, "--fleet-key-file %s:%d: a key longer than %d bytes", file, ln, FL_KEY_MAX - 1);
		if (len == 0)
			continue;
		if (len < 16)
			errx(2, "--fleet-key-file %s:%d: a key of %zu bytes; at least 16 (head -c 32 /dev/urandom | "
			     "base64)", file, ln, len);
		if (n == FL_KEYS_MAX)
			errx(2, "--fleet-key-file %s:%d: more than %d keys", file, ln, FL_KEYS_MAX);
		memcpy(A.c.keys[n], line, len);
		A.c.keylen[n++] = len;
	}
	fclose(f);
	if (!n)
		errx(2, "--fleet-key-file %s: no key in it", file);
	A.c.nkeys = n;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: netshim-agent --redis redis://[[USER]:PASSWORD@]HOST[:PORT][/DB] [--node NAME] [--fleet NAME]\n"
		"                     [--quorum N | N%%] [--suspect-share PERCENT] [--suspect-min N] [--on-event CMD]\n"
		"                     [--table NAME] [--poll-ms MS] [--hook-timeout-ms MS] [--no-hint]\n"
		"                     [--shards N] [--fleet-key-file FILE] [--metrics-listen ADDRESS:PORT]\n"
		"                     [--history FILE [--history-keep SPAN]\n"
		"                     [--history-ring N]]\n"
		"       netshim-agent --history FILE ...   (no fleet: the table's history and hooks alone)\n");
}

static int int_arg(const char *opt, const char *v, long lo, long hi)
{
	char *e;
	long n;

	errno = 0;
	n = strtol(v, &e, 10);
	if (e == v || (*e && strcmp(e, "%") != 0) || errno || n < lo || n > hi) {
		warnx("%s: %s is not a number from %ld to %ld", opt, v, lo, hi);
		usage(stderr);
		exit(2);
	}
	return (int)n;
}

static void parse_args(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "redis", required_argument, 0, 'r' }, { "node", required_argument, 0, 'n' },
		{ "fleet", required_argument, 0, 'f' }, { "quorum", required_argument, 0, 'q' },
		{ "suspect-share", required_argument, 0, 's' }, { "suspect-min", required_argument, 0, 'm' },
		{ "on-event", required_argument, 0, 'e' }, { "table", required_argument, 0, 't' },
		{ "poll-ms", required_argument, 0, 'p' }, { "hook-timeout-ms", required_argument, 0, 'h' },
		{ "no-hint", no_argument, 0, 'N' }, { "help", no_argument, 0, 'H' },
		{ "metrics-listen", required_argument, 0, 'M' }, { "history", required_argument, 0, 'Y' },
		{ "history-keep", required_argument, 0, 'K' }, { "history-ring", required_argument, 0, 'R' },
		{ "shards", required_argument, 0, 'S' }, { "fleet-key-file", required_argument, 0, 'k' },
		{ 0, 0, 0, 0 },
	};
	const char *table = NULL;
	char tbuf[64], uerr[128];
	int o;

	A.quorum = 2;
	A.share = 50;
	A.suspect_min = 4;
	A.poll_ms = 500;
	A.hook_timeout_ms = 10000;
	A.hist_keep_ms = 7 * 86400000ULL;
	A.hist_ring = NS_OC_DEFAULT_CAP;
	A.shards = 1;
	snprintf(A.fleet, sizeof(A.fleet), "default");
	if (gethostname(A.node, sizeof(A.node)) < 0 || !fl_name_ok(A.node))
		snprintf(A.node, sizeof(A.node), "node-%ld", gethostid());
	while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (o) {
		case 'r': A.url_text = optarg; break;
		case 'n': snprintf(A.node, sizeof(A.node), "%s", optarg);
			if (!fl_name_ok(optarg))
				errx(2, "--node %s: 1 to 63 of letters, digits, '.', '_' and '-'", optarg);
			break;
		case 'f': snprintf(A.fleet, sizeof(A.fleet), "%s", optarg);
			if (!fl_name_ok(optarg))
				errx(2, "--fleet %s: 1 to 63 of letters, digits, '.', '_' and '-'", optarg);
			break;
		case 'q':
			if (optarg[0] && optarg[strlen(optarg) - 1] == '%')
				A.quorum_pct = int_arg("--quorum", optarg, 1, 100);
			else
				A.quorum = int_arg("--quorum", optarg, 1, 100000);
			break;
		case 's': A.share = int_arg("--suspect-share", optarg, 1, 100); break;
		case 'm': A.suspect_min = int_arg("--suspect-min", optarg, 1, 1000000); break;
		case 'e': A.on_event = optarg; break;
		case 't': table = optarg; break;
		case 'p': A.poll_ms = int_arg("--poll-ms", optarg, 10, 60000); break;
		case 'h': A.hook_timeout_ms = int_arg("--hook-timeout-ms", optarg, 10, 3600000); break;
		case 'N': A.no_hint = 1; break;
		case 'S': A.shards = int_arg("--shards", optarg, 1, FL_SHARDS_MAX); break;
		case 'k': A.key_file = optarg; break;
		case 'M': A.metrics_at = optarg; break;
		case 'Y': A.hist_file = optarg; break;
		case 'K':
			if (ctl_span_parse(optarg, &A.hist_keep_ms) < 0 || A.hist_keep_ms < 60000)
				errx(2, "--history-keep %s: a span of at least a minute (30m, 24h, 7d)", optarg);
			break;
		case 'R': {
			int n = int_arg("--history-ring", optarg, 1024, (int)NS_OC_MAX_CAP);

			if (n & (n - 1))
				errx(2, "--history-ring %s: a power of two (131072 holds 1.6 s of 80,000 outcomes a second)", optarg);
			A.hist_ring = (uint32_t)n;
			break;
		}
		case 'H': usage(stdout); exit(0);
		default: usage(stderr); exit(2);
		}
	}
	if (optind != argc || (!A.url_text && !A.hist_file)) {
		if (!A.url_text)
			warnx("--redis URL is required (or --history FILE alone, for a machine with no fleet)");
		usage(stderr);
		exit(2);
	}
	if (A.key_file)
		load_keys(A.key_file);
	if (A.url_text && fl_url_parse(A.url_text, &A.url, uerr, sizeof(uerr)) < 0)
		errx(2, "--redis %s: %s (expected redis://[[USER]:PASSWORD@]HOST[:PORT][/DB])", A.url_text, uerr);
	if (A.metrics_at && (A.metrics_fd = msrv_listen(A.metrics_at, uerr, sizeof(uerr))) < 0)
		errx(2, "--metrics-listen %s", uerr);
	table = ctl_table_name(table, tbuf, sizeof(tbuf));
	if (ctl_open_table(table, 1, &A.t) < 0)
		exit(1);
}

int main(int argc, char **argv)
{
	struct sigaction sa;
	char err[256];
	uint32_t other;
	int rc;

	setvbuf(stderr, NULL, _IOLBF, 0);
	A.metrics_fd = A.wake_fd = -1;
	parse_args(argc, argv);
	other = __atomic_load_n(&A.t.hdr->agent_pid, __ATOMIC_ACQUIRE);
	if (other && (pid_t)other != getpid() && kill((pid_t)other, 0) == 0)
		errx(1, "%s: another agent (pid %u) serves this table", A.t.path, other);
	if (A.url_text) {
		rc = try_connect(err, sizeof(err));
		if (rc != FL_OK)
			errx(2, "redis %s:%d: %s%s", A.url.host, A.url.port, err,
			     rc == FL_REFUSED ? " (check the password in --redis)" : "");
	} else {
		A.next_try = UINT64_MAX;   /* no fleet: the table, its hooks and its history alone */
	}
	if (A.hist_file && !(A.hist = hist_open(A.hist_file, &A.t, A.hist_keep_ms, A.hist_ring, err, sizeof(err))))
		errx(1, "--history %s", err);
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_stop;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	A.rng = ((uint64_t)getpid() * 0x9e3779b97f4a7c15ull ^ ctl_wall_ms() * 0xbf58476d1ce4e5b9ull) | 1;
	memset(A.t.hdr->agent_node, 0, sizeof(A.t.hdr->agent_node));
	memcpy(A.t.hdr->agent_node, A.node, strlen(A.node));
	__atomic_store_n(&A.t.hdr->agent_pid, (uint32_t)getpid(), __ATOMIC_RELEASE);
	A.pub_next = ns_table_event_head(&A.t);
	wake_open();
	if (A.on_event && !(A.hooks = hooks_new(&A.t, A.on_event, A.node, A.hook_timeout_ms, 4)))
		errx(1, "out of memory");
	if (A.quorum_pct)
		snprintf(err, sizeof(err), "%d%% of the live callers", A.quorum_pct);
	else
		snprintf(err, sizeof(err), "%d", A.quorum);
	if (A.url_text)
		ag_log("node %s, fleet %s, quorum %s, table %s, redis %s:%d%s, %d shard%s, poll every %d ms", A.node,
		       A.fleet, err, A.t.path, A.url.host, A.url.port, A.c.cluster ? " (a cluster)" : "", A.shards,
		       A.shards == 1 ? "" : "s", A.poll_ms);
	else
		ag_log("node %s, table %s, no fleet (no --redis)", A.node, A.t.path);
	if (A.c.nkeys)
		ag_log("votes and commands signed; only those signed with one of the %d fleet key%s are believed",
		       A.c.nkeys, A.c.nkeys == 1 ? "" : "s");
	if (A.hist)
		ag_log("recording history in %s (kept %llu h)", A.hist_file, (unsigned long long)(A.hist_keep_ms / 3600000));
	/* the gaps count from the last pass a change or a hint started early
	 * (bursts are served together), not from a regular one, which never
	 * delays a change it could not have seen */
	for (uint64_t next_pass = 0, last_early = 0; !stopping;) {
		uint64_t now = ctl_mono_ms();
		int early;

		if (ns_table_broken(&A.t)) {
			ag_log("%s was truncated under the agent: stopping", A.t.path);
			break;
		}
		read_events();
		early = (A.local_change && now >= last_early + LOCAL_GAP_MS) ||
			(hint_due(now) && now >= last_early + HINT_GAP_MS);
		if (now >= next_pass || (A.nops && A.connected) || early) {
			/* a pass started by a hint alone reads the hinted shards'
			 * changes only: a change in a fleet of thousands wakes them
			 * all at once, so that poll is one command, not four a shard */
			int light = now < next_pass && !A.local_change && !A.nops;

			A.local_change = 0;
			pass(now, light);
			if (early)
				last_early = now;
			else
				next_pass = now + (uint64_t)A.poll_ms;
			hint_connect(now);
		}
		if (A.hooks)
			hooks_pass(A.hooks, ctl_mono_ms());
		if (A.hist)
			hist_pass(A.hist, ctl_mono_ms());
		/* a hint that came too soon after an early pass is served when the gap ends */
		now = ctl_mono_ms();
		hint_wait(wait_ms(now, last_early));
	}
	/* nobody renews the holds from now on: local breakers alone */
	release_all("agent stopped");
	__atomic_store_n(&A.t.hdr->agent_flags, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&A.t.hdr->agent_pid, 0, __ATOMIC_RELEASE);
	if (A.hooks && hooks_running(A.hooks))
		ag_log("%d hook run%s left running", hooks_running(A.hooks), hooks_running(A.hooks) == 1 ? "" : "s");
	hooks_free(A.hooks);
	if (A.hist) {
		hist_pass(A.hist, ctl_mono_ms());
		hist_close(A.hist);
	}
	fl_close(&A.sub);
	fl_close(&A.c);
	if (A.wake_fd >= 0)
		close(A.wake_fd);
	if (A.metrics_fd >= 0)
		close(A.metrics_fd);
	ns_table_close(&A.t);
	ag_log("stopped");
	return 0;
}

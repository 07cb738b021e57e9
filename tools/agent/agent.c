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
#include "../common/tablekit.h"
#include "agentstate.h"

static volatile sig_atomic_t stopping;

static void on_stop(int sig)
{
	(void)sig;
	stopping = 1;
	ag_redis_stop = 1;   /* a wait for Redis ends too */
}

static uint64_t cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void lost(const char *why)
{
	ag_log("redis %s:%d lost (%s): local breakers only; retrying", ag_state.url.host, ag_state.url.port, why);
	ag_fleet_close(&ag_state.c);
	ag_fleet_close(&ag_state.sub);
	ag_state.connected = 0;
	ag_release_all("redis unreachable");
	ag_forget_votes();
	ag_state.backoff_ms = BACKOFF_MIN_MS;
	ag_state.next_try = ctl_mono_ms() + ag_state.backoff_ms;
}

static int try_connect(char *err, size_t len)
{
	int rc = ag_fleet_connect(&ag_state.c, &ag_state.url, ag_state.fleet, ag_state.shards, CONNECT_TIMEOUT_MS, err, len);

	for (int s = 0; rc == FL_OK && s < ag_state.shards; s++) {
		uint64_t seq = 0;

		if ((rc = ag_fleet_seq(&ag_state.c, s, &seq, err, len)) == FL_OK && seq < ag_state.sh[s].high)
			ag_state.sh[s].high = 0;   /* Redis lost the fleet's data: all it holds now is new */
	}
	if (rc != FL_OK) {
		ag_fleet_close(&ag_state.c);
		return rc;
	}
	for (int s = 0; s < ag_state.shards; s++) {
		ag_state.sh[s].since = 0;
		ag_state.hinted[s] = 0;   /* a hint from before (maybe another Redis's numbering) is void */
	}
	ag_state.connected = 1;
	ag_state.sub_next_try = 0;
	return FL_OK;
}

/* The hint channel is a shortcut, never needed: without it every change
 * still arrives with the next poll. */
static void hint_connect(uint64_t now)
{
	char err[256];

	if (ag_state.no_hint || ag_state.sub.nlinks || !ag_state.connected || now < ag_state.sub_next_try)
		return;
	ag_state.sub_next_try = now + SUB_RETRY_MS;
	if (ag_fleet_subscribe(&ag_state.sub, &ag_state.c, ag_next_rand(), err, sizeof(err)) != FL_OK)
		ag_log("hint channel unavailable (%s): changes arrive with each poll only", err);
}

/* A hint announced a change this agent has not seen, and hints are
 * believed: one that a poll did not bear out (a PUBLISH of a seq Redis
 * never reached) silences them until the next regular poll, so hints can
 * at most double the poll rate, never more than real changes justify. */
static int hint_due(uint64_t now)
{
	int unseen = 0;

	for (int s = 0; s < ag_state.shards; s++)
		unseen |= ag_state.hinted[s] > ag_state.sh[s].high;
	return ag_state.connected && unseen && now >= ag_state.hint_quiet_until;
}

/* The wake-up socket: programs that write an event the agent acts on
 * send it a byte (shim/config.c), so a trip is read at once, not at the
 * next tick. Without it (the name taken), ticks alone. */
static void wake_open(void)
{
	struct sockaddr_un a;
	unsigned len = ns_table_wake_addr(&ag_state.t, &a);

	ag_state.wake_fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (ag_state.wake_fd >= 0 && bind(ag_state.wake_fd, (struct sockaddr *)&a, (socklen_t)len) < 0) {
		ag_log("cannot take the wake-up socket (%s): trips are read every %d ms", strerror(errno), TICK_MS);
		close(ag_state.wake_fd);
		ag_state.wake_fd = -1;
	}
}

/* How long the loop may sleep: a tick, or until a pending change here or a
 * hint may start its pass. */
static int wait_ms(uint64_t now, uint64_t last_early)
{
	int ms = TICK_MS;

	if (ag_state.local_change)
		ms = now >= last_early + LOCAL_GAP_MS ? 0 : (int)(last_early + LOCAL_GAP_MS - now);
	if (hint_due(now)) {
		int h = now >= last_early + HINT_GAP_MS ? 0 : (int)(last_early + HINT_GAP_MS - now);

		ms = h < ms ? h : ms;
	}
	return ms;
}

/* /metrics: the table's series (tools/common/promtext.c), then the agent's own. */
static void agent_gauge(FILE *f, const char *metric, const char *help, const char *type, unsigned long long v)
{
	fprintf(f, "# HELP %s %s\n# TYPE %s %s\n%s{node=\"%s\"} %llu\n", metric, help, metric, type, metric, ag_state.node, v);
}

static void agent_metrics(FILE *f, void *arg)
{
	struct dst *d, *tmp;

	(void)arg;
	ctl_metrics_write(f, &ag_state.t);
	agent_gauge(f, "netshim_agent_redis_connected", "1 while the agent's Redis answers.", "gauge", ag_state.connected);
	agent_gauge(f, "netshim_agent_suspect", "1 while this node's votes are withheld (too many destinations open).",
		    "gauge", ag_state.suspect);
	agent_gauge(f, "netshim_agent_polls_total", "Polls of Redis made.", "counter",
		    __atomic_load_n(&ag_state.t.hdr->agent_polls, __ATOMIC_RELAXED));
	fprintf(f, "# HELP netshim_agent_cpu_seconds_total CPU time of the agent's passes.\n"
		"# TYPE netshim_agent_cpu_seconds_total counter\nnetshim_agent_cpu_seconds_total{node=\"%s\"} %.6f\n",
		ag_state.node, (double)__atomic_load_n(&ag_state.t.hdr->agent_cpu_ns, __ATOMIC_RELAXED) / 1e9);
	agent_gauge(f, "netshim_agent_unsigned_ignored_total",
		    "Votes and commands in Redis ignored: not signed with a fleet key (--fleet-key-file), or replayed.",
		    "counter", ag_state.c.unsigned_seen);
	agent_gauge(f, "netshim_agent_destinations", "Destinations in the table at the last pass.", "gauge", ag_state.n_total);
	agent_gauge(f, "netshim_agent_open_destinations", "Destinations open here at the last pass.", "gauge", ag_state.n_open);
	agent_gauge(f, "netshim_agent_hook_runs_total", "--on-event runs started.", "counter", ag_hooks_runs(ag_state.hooks));
	agent_gauge(f, "netshim_agent_hooks_running", "--on-event runs running now.", "gauge",
		    ag_state.hooks ? (unsigned long long)ag_hooks_running(ag_state.hooks) : 0);
	fprintf(f, "# HELP netshim_fleet_votes Live votes that the destination is open, on every node.\n"
		"# TYPE netshim_fleet_votes gauge\n");
	HASH_ITER(hh, ag_state.dests, d, tmp) {
		unsigned live = 0;

		for (int i = 0; i < d->nvotes; i++)
			live += d->votes[i].exp_ms > ag_state.redis_now;
		fputs("netshim_fleet_votes{", f);
		ctl_prom_dest_labels(f, d->key);
		fprintf(f, "} %u\n", live);
	}
	fprintf(f, "# HELP netshim_fleet_held 1 while the fleet holds the destination open here.\n"
		"# TYPE netshim_fleet_held gauge\n");
	HASH_ITER(hh, ag_state.dests, d, tmp) {
		fputs("netshim_fleet_held{", f);
		ctl_prom_dest_labels(f, d->key);
		fprintf(f, "} %d\n", d->held);
	}
}

/* Wait up to ms for a hint or a wake-up; note the highest seq announced. */
static void hint_wait(int ms)
{
	struct pollfd p[3 + 64] = { { .fd = ag_fleet_hint_fd(&ag_state.sub), .events = POLLIN },
				    { .fd = ag_state.wake_fd, .events = POLLIN }, { .fd = ag_state.metrics_fd, .events = POLLIN } };
	char drain[64];
	int n = 3 + (ag_state.metrics_fd >= 0 ? ag_metrics_pollfds(p + 3, 64) : 0), r;

	r = poll(p, (nfds_t)n, ms);
	/* the metrics clients move on at every look (their deadlines too),
	 * never waited for */
	if (ag_state.metrics_fd >= 0)
		ag_metrics_serve(ag_state.metrics_fd, agent_metrics, NULL);
	if (r <= 0)
		return;
	if ((p[0].revents & (POLLIN | POLLHUP | POLLERR)) && ag_fleet_hint_read(&ag_state.sub, ag_state.hinted) < 0) {
		ag_log("hint channel lost: changes arrive with each poll only until it is back");
		ag_fleet_close(&ag_state.sub);
	}
	if (p[1].revents & POLLIN)
		while (recv(ag_state.wake_fd, drain, sizeof(drain), MSG_DONTWAIT) > 0)
			;   /* any number of wake-ups: one look at the event ring */
}

/* One shard's changes since the last poll (light: a hint's, the changes
 * alone, and only where a hint announced one). */
static int poll_shard(int s, int light, char *err, size_t len)
{
	struct shard_state *h = &ag_state.sh[s];
	struct fl_store st;
	uint64_t high;
	int rc;

	if (light) {
		if (ag_state.hinted[s] <= h->high)
			return FL_OK;   /* no hint for this shard */
		rc = ag_fleet_poll_changes(&ag_state.c, s, h->since, ag_on_dest, &h->high_before, &ag_state.redis_now, &high, err, len);
		if (rc == FL_OK) {
			h->since = high;
			if (high > h->high)
				h->high = high;
		}
		return rc;
	}
	rc = ag_fleet_poll(&ag_state.c, s, h->since, ag_on_dest, &h->high_before, &ag_state.redis_now, &high, &st, err, len);
	if (rc == FL_OK && ag_went_back(s, &st)) {
		/* the store lost its data under a live connection (FLUSHDB,
		 * a restart without it, a lagging replica promoted): what it
		 * holds now is read whole, and this node's votes are
		 * published again */
		char which[24] = "";

		if (ag_state.shards > 1)
			snprintf(which, sizeof(which), "shard %d: ", s);
		ag_log("redis went back (%schange %llu, epoch %s; this agent had seen change %llu, epoch %s): "
		       "reading it whole again", which, (unsigned long long)st.seq, st.epoch[0] ? st.epoch : "none",
		       (unsigned long long)h->since, h->epoch);
		ag_forget_votes();
		h->high = h->high_before = 0;
		h->epoch[0] = '\0';
		rc = ag_fleet_poll(&ag_state.c, s, 0, ag_on_dest, &h->high_before, &ag_state.redis_now, &high, &st, err, len);
	}
	if (rc == FL_OK)
		rc = ag_adopt_epoch(s, &st, err, len);
	if (rc == FL_OK) {
		h->since = high;
		if (high > h->high)
			h->high = high;
	}
	return rc;
}

/* A cluster's answer that a command's keys are in a slot being moved
 * (TRYAGAIN): the links are sound, the command is asked again next poll. */
static int slot_moving(const char *err)
{
	return ag_state.c.cluster && ag_redis_slot_moving(err);
}

/* A pass failed (moving: on a slot being moved). A cluster's node lost is
 * most likely a failover: its replica takes over within seconds, so the
 * holds stand (as the votes last read say) while the agent looks for the
 * new master, up to REROUTE_GRACE_MS; a single Redis lost, or a cluster
 * not back by then, and the holds go (local breakers alone). */
static void failed(uint64_t now, const char *why, int moving)
{
	if (moving) {
		if (!ag_state.moving_said)
			ag_log("redis cluster: %s: a slot being moved; asked again at the next poll", why);
		ag_state.moving_said = 1;
		return;
	}
	if (ag_state.c.cluster && ag_state.synced && !ag_state.reroute_until) {
		ag_log("redis cluster: %s: looking for the slots' new masters; the fleet's holds stand up to %d ms",
		       why, REROUTE_GRACE_MS);
		ag_fleet_close(&ag_state.c);
		ag_fleet_close(&ag_state.sub);
		ag_state.connected = 0;
		ag_state.reroute_until = now + REROUTE_GRACE_MS;
		ag_state.next_try = now;
		return;
	}
	ag_state.reroute_until = 0;
	lost(why);
}

static void reconnect(uint64_t now)
{
	char err[256];
	uint64_t jitter;

	if (try_connect(err, sizeof(err)) == FL_OK) {
		if (ag_state.reroute_until)
			ag_log("redis cluster routed again (%d link%s): the fleet's state is read again",
			       ag_state.c.nlinks, ag_state.c.nlinks == 1 ? "" : "s");
		else
			ag_log("redis %s:%d connected again: republishing this node's state", ag_state.url.host, ag_state.url.port);
		ag_state.reroute_until = 0;
		return;
	}
	if (ag_state.reroute_until) {
		if (now < ag_state.reroute_until) {
			ag_state.next_try = now + 100;
			return;
		}
		lost(err);
		ag_state.reroute_until = 0;
		return;
	}
	ag_state.backoff_ms = ag_state.backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : ag_state.backoff_ms * 2;
	jitter = ag_next_rand() % (ag_state.backoff_ms / 2 + 1);
	ag_state.next_try = now + ag_state.backoff_ms / 2 + jitter;
}

static void pass(uint64_t now, int light)
{
	char err[256];
	uint64_t c0 = cpu_ns();
	int rc = FL_OK, moving = 0;

	for (int s = 0; s < ag_state.shards; s++)
		ag_state.sh[s].high_before = ag_state.sh[s].high;
	ag_scan_table(now);
	if (!ag_state.connected && now >= ag_state.next_try)
		reconnect(now);
	if (!ag_state.connected && ag_state.reroute_until)
		ag_apply_fleet(now);   /* the holds stand, as last known, while the cluster changes */
	if (ag_state.connected) {
		int quiet = 0;

		rc = ag_publish_ops(err, sizeof(err));
		for (int s = 0; s < ag_state.shards && rc == FL_OK; s++)
			rc = poll_shard(s, light, err, sizeof(err));
		if (ag_state.bad_keys != ag_state.bad_logged && now >= ag_state.bad_log_ms + 60000) {
			ag_log("%llu destination names in Redis that no shim could have written were ignored "
			       "(a writer other than the agents?)", (unsigned long long)(ag_state.bad_keys - ag_state.bad_logged));
			ag_state.bad_logged = ag_state.bad_keys;
			ag_state.bad_log_ms = now;
		}
		if (ag_state.c.unsigned_seen != ag_state.unsigned_logged && now >= ag_state.unsigned_log_ms + 60000) {
			ag_log("%llu votes or commands in Redis not signed with a fleet key (or replayed) were ignored "
			       "(a writer without the key?)", (unsigned long long)(ag_state.c.unsigned_seen - ag_state.unsigned_logged));
			ag_state.unsigned_logged = ag_state.c.unsigned_seen;
			ag_state.unsigned_log_ms = now;
		}
		if (rc == FL_OK) {
			ag_state.synced = 1;
			rc = ag_reconcile(now, err, sizeof(err));
			if (rc == FL_OK && !light)
				rc = ag_membership(err, sizeof(err));
		}
		/* a hint the poll did not bear out (a seq Redis never reached)
		 * is void: it woke one poll, and wakes no more */
		for (int s = 0; s < ag_state.shards && rc == FL_OK; s++)
			if (ag_state.hinted[s] > ag_state.sh[s].high) {
				ag_state.hinted[s] = ag_state.sh[s].high;
				quiet = 1;
			}
		if (quiet)
			ag_state.hint_quiet_until = now + (uint64_t)ag_state.poll_ms;   /* and hints wait for the next tick */
		/* a slot moved (a MOVED was followed): the routes are read again */
		if (rc == FL_OK && ag_state.c.stale) {
			ag_log("redis cluster: a slot moved (%llu redirection%s followed): routes read again",
			       (unsigned long long)ag_state.c.redirects, ag_state.c.redirects == 1 ? "" : "s");
			rc = ag_fleet_reroute(&ag_state.c, err, sizeof(err));
		}
		if (rc == FL_OK)
			ag_apply_fleet(now);
		if (rc == FL_OK) {
			rc = ag_lease_pass(now, 1, err, sizeof(err));
			moving = rc != FL_OK && slot_moving(err);
		} else if ((moving = slot_moving(err)) != 0) {
			char lerr[256];

			/* the links sound: the leases asked all the same (a share
			 * kept where the lease, too, meets the slot half moved) */
			ag_lease_pass(now, 1, lerr, sizeof(lerr));
		}
		if (rc != FL_OK)
			failed(now, err, moving);
		else
			ag_state.moving_said = 0;
		__atomic_fetch_add(&ag_state.t.hdr->agent_polls, 1, __ATOMIC_RELAXED);
	}
	if (!ag_state.connected && ag_state.url_text)
		ag_lease_pass(now, 0, err, sizeof(err)); /* the shares kept as they were, renewed here */
	__atomic_store_n(&ag_state.t.hdr->agent_open, ag_state.n_open, __ATOMIC_RELAXED);
	__atomic_store_n(&ag_state.t.hdr->agent_dests, ag_state.n_total, __ATOMIC_RELAXED);
	__atomic_store_n(&ag_state.t.hdr->agent_flags, (ag_state.connected ? NS_AGENT_CONNECTED : 0) |
			 (ag_state.suspect ? NS_AGENT_SUSPECT : 0) | (ag_state.url_text ? 0 : NS_AGENT_NOFLEET) |
			 (ag_state.hist ? NS_AGENT_HISTORY : 0), __ATOMIC_RELAXED);
	__atomic_store_n(&ag_state.t.hdr->agent_beat_ms, ctl_wall_ms(), __ATOMIC_RELAXED);
	__atomic_fetch_add(&ag_state.t.hdr->agent_cpu_ns, cpu_ns() - c0, __ATOMIC_RELAXED);
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
		memcpy(ag_state.c.keys[n], line, len);
		ag_state.c.keylen[n++] = len;
	}
	fclose(f);
	if (!n)
		errx(2, "--fleet-key-file %s: no key in it", file);
	ag_state.c.nkeys = n;
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

	ag_state.quorum = 2;
	ag_state.share = 50;
	ag_state.suspect_min = 4;
	ag_state.poll_ms = 500;
	ag_state.hook_timeout_ms = 10000;
	ag_state.hist_keep_ms = 7 * 86400000ULL;
	ag_state.hist_ring = NS_OC_DEFAULT_CAP;
	ag_state.shards = 1;
	snprintf(ag_state.fleet, sizeof(ag_state.fleet), "default");
	if (gethostname(ag_state.node, sizeof(ag_state.node)) < 0 || !ag_fleet_name_ok(ag_state.node))
		snprintf(ag_state.node, sizeof(ag_state.node), "node-%ld", gethostid());
	while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (o) {
		case 'r': ag_state.url_text = optarg; break;
		case 'n': snprintf(ag_state.node, sizeof(ag_state.node), "%s", optarg);
			if (!ag_fleet_name_ok(optarg))
				errx(2, "--node %s: 1 to 63 of letters, digits, '.', '_' and '-'", optarg);
			break;
		case 'f': snprintf(ag_state.fleet, sizeof(ag_state.fleet), "%s", optarg);
			if (!ag_fleet_name_ok(optarg))
				errx(2, "--fleet %s: 1 to 63 of letters, digits, '.', '_' and '-'", optarg);
			break;
		case 'q':
			if (optarg[0] && optarg[strlen(optarg) - 1] == '%')
				ag_state.quorum_pct = int_arg("--quorum", optarg, 1, 100);
			else
				ag_state.quorum = int_arg("--quorum", optarg, 1, 100000);
			break;
		case 's': ag_state.share = int_arg("--suspect-share", optarg, 1, 100); break;
		case 'm': ag_state.suspect_min = int_arg("--suspect-min", optarg, 1, 1000000); break;
		case 'e': ag_state.on_event = optarg; break;
		case 't': table = optarg; break;
		case 'p': ag_state.poll_ms = int_arg("--poll-ms", optarg, 10, 60000); break;
		case 'h': ag_state.hook_timeout_ms = int_arg("--hook-timeout-ms", optarg, 10, 3600000); break;
		case 'N': ag_state.no_hint = 1; break;
		case 'S': ag_state.shards = int_arg("--shards", optarg, 1, FL_SHARDS_MAX); break;
		case 'k': ag_state.key_file = optarg; break;
		case 'M': ag_state.metrics_at = optarg; break;
		case 'Y': ag_state.hist_file = optarg; break;
		case 'K':
			if (ctl_span_parse(optarg, &ag_state.hist_keep_ms) < 0 || ag_state.hist_keep_ms < 60000)
				errx(2, "--history-keep %s: a span of at least a minute (30m, 24h, 7d)", optarg);
			break;
		case 'R': {
			int n = int_arg("--history-ring", optarg, 1024, (int)NS_OC_MAX_CAP);

			if (n & (n - 1))
				errx(2, "--history-ring %s: a power of two (131072 holds 1.6 s of 80,000 outcomes a second)", optarg);
			ag_state.hist_ring = (uint32_t)n;
			break;
		}
		case 'H': usage(stdout); exit(0);
		default: usage(stderr); exit(2);
		}
	}
	if (optind != argc || (!ag_state.url_text && !ag_state.hist_file)) {
		if (!ag_state.url_text)
			warnx("--redis URL is required (or --history FILE alone, for a machine with no fleet)");
		usage(stderr);
		exit(2);
	}
	if (ag_state.key_file)
		load_keys(ag_state.key_file);
	if (ag_state.url_text && ag_redis_url_parse(ag_state.url_text, &ag_state.url, uerr, sizeof(uerr)) < 0)
		errx(2, "--redis %s: %s (expected redis://[[USER]:PASSWORD@]HOST[:PORT][/DB])", ag_state.url_text, uerr);
	if (ag_state.metrics_at && (ag_state.metrics_fd = ag_metrics_listen(ag_state.metrics_at, uerr, sizeof(uerr))) < 0)
		errx(2, "--metrics-listen %s", uerr);
	table = ctl_table_name(table, tbuf, sizeof(tbuf));
	if (ctl_open_table(table, 1, &ag_state.t) < 0)
		exit(1);
}

int main(int argc, char **argv)
{
	struct sigaction sa;
	char err[256];
	uint32_t other;
	int rc;

	setvbuf(stderr, NULL, _IOLBF, 0);
	ag_state.metrics_fd = ag_state.wake_fd = -1;
	parse_args(argc, argv);
	other = __atomic_load_n(&ag_state.t.hdr->agent_pid, __ATOMIC_ACQUIRE);
	if (other && (pid_t)other != getpid() && kill((pid_t)other, 0) == 0)
		errx(1, "%s: another agent (pid %u) serves this table", ag_state.t.path, other);
	if (ag_state.url_text) {
		rc = try_connect(err, sizeof(err));
		if (rc != FL_OK)
			errx(2, "redis %s:%d: %s%s", ag_state.url.host, ag_state.url.port, err,
			     rc == FL_REFUSED ? " (check the password in --redis)" : "");
	} else {
		ag_state.next_try = UINT64_MAX;   /* no fleet: the table, its hooks and its history alone */
	}
	if (ag_state.hist_file && !(ag_state.hist = ag_hist_open(ag_state.hist_file, &ag_state.t, ag_state.hist_keep_ms, ag_state.hist_ring, err, sizeof(err))))
		errx(1, "--history %s", err);
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_stop;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	ag_state.rng = ((uint64_t)getpid() * 0x9e3779b97f4a7c15ull ^ ctl_wall_ms() * 0xbf58476d1ce4e5b9ull) | 1;
	memset(ag_state.t.hdr->agent_node, 0, sizeof(ag_state.t.hdr->agent_node));
	memcpy(ag_state.t.hdr->agent_node, ag_state.node, strlen(ag_state.node));
	__atomic_store_n(&ag_state.t.hdr->agent_pid, (uint32_t)getpid(), __ATOMIC_RELEASE);
	ag_state.pub_next = ns_table_event_head(&ag_state.t);
	wake_open();
	if (ag_state.on_event && !(ag_state.hooks = ag_hooks_new(&ag_state.t, ag_state.on_event, ag_state.node, ag_state.hook_timeout_ms, 4)))
		errx(1, "out of memory");
	if (ag_state.quorum_pct)
		snprintf(err, sizeof(err), "%d%% of the live callers", ag_state.quorum_pct);
	else
		snprintf(err, sizeof(err), "%d", ag_state.quorum);
	if (ag_state.url_text)
		ag_log("node %s, fleet %s, quorum %s, table %s, redis %s:%d%s, %d shard%s, poll every %d ms", ag_state.node,
		       ag_state.fleet, err, ag_state.t.path, ag_state.url.host, ag_state.url.port, ag_state.c.cluster ? " (a cluster)" : "", ag_state.shards,
		       ag_state.shards == 1 ? "" : "s", ag_state.poll_ms);
	else
		ag_log("node %s, table %s, no fleet (no --redis)", ag_state.node, ag_state.t.path);
	if (ag_state.c.nkeys)
		ag_log("votes and commands signed; only those signed with one of the %d fleet key%s are believed",
		       ag_state.c.nkeys, ag_state.c.nkeys == 1 ? "" : "s");
	if (ag_state.hist)
		ag_log("recording history in %s (kept %llu h)", ag_state.hist_file, (unsigned long long)(ag_state.hist_keep_ms / 3600000));
	/* the gaps count from the last pass a change or a hint started early
	 * (bursts are served together), not from a regular one, which never
	 * delays a change it could not have seen */
	for (uint64_t next_pass = 0, last_early = 0, fleet_asked = 0; !stopping;) {
		uint64_t now = ctl_mono_ms();
		int early;

		if (ns_table_broken(&ag_state.t)) {
			ag_log("%s was truncated under the agent: stopping", ag_state.t.path);
			break;
		}
		ag_read_events();
		/* a program waits for a destination's first fleet share: lease now */
		if (__atomic_load_n(&ag_state.t.hdr->fleet_asked, __ATOMIC_RELAXED) != fleet_asked) {
			fleet_asked = __atomic_load_n(&ag_state.t.hdr->fleet_asked, __ATOMIC_RELAXED);
			ag_state.local_change = 1;
		}
		early = (ag_state.local_change && now >= last_early + LOCAL_GAP_MS) ||
			(hint_due(now) && now >= last_early + HINT_GAP_MS);
		if (now >= next_pass || (ag_state.nops && ag_state.connected) || early) {
			/* a pass started by a hint alone reads the hinted shards'
			 * changes only: a change in a fleet of thousands wakes them
			 * all at once, so that poll is one command, not four a shard */
			int light = now < next_pass && !ag_state.local_change && !ag_state.nops;

			ag_state.local_change = 0;
			pass(now, light);
			if (early)
				last_early = now;
			else
				next_pass = now + (uint64_t)ag_state.poll_ms;
			hint_connect(now);
		} else if (ag_state.connected && ag_lease_due(now, next_pass - (uint64_t)ag_state.poll_ms)) {
			if (ag_lease_pass(now, 1, err, sizeof(err)) != FL_OK)
				failed(now, err, slot_moving(err));
		}
		if (ag_state.hooks)
			ag_hooks_pass(ag_state.hooks, ctl_mono_ms());
		if (ag_state.hist)
			ag_hist_pass(ag_state.hist, ctl_mono_ms());
		/* a hint that came too soon after an early pass is served when the gap ends */
		now = ctl_mono_ms();
		hint_wait(wait_ms(now, last_early));
	}
	/* nobody renews the holds from now on: local breakers alone */
	ag_release_all("agent stopped");
	ag_lease_stop();
	__atomic_store_n(&ag_state.t.hdr->agent_flags, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&ag_state.t.hdr->agent_pid, 0, __ATOMIC_RELEASE);
	if (ag_state.hooks && ag_hooks_running(ag_state.hooks))
		ag_log("%d hook run%s left running", ag_hooks_running(ag_state.hooks), ag_hooks_running(ag_state.hooks) == 1 ? "" : "s");
	ag_hooks_free(ag_state.hooks);
	if (ag_state.hist) {
		ag_hist_pass(ag_state.hist, ctl_mono_ms());
		ag_hist_close(ag_state.hist);
	}
	ag_fleet_close(&ag_state.sub);
	ag_fleet_close(&ag_state.c);
	if (ag_state.wake_fd >= 0)
		close(ag_state.wake_fd);
	if (ag_state.metrics_fd >= 0)
		close(ag_state.metrics_fd);
	ns_table_close(&ag_state.t);
	ag_log("stopped");
	return 0;
}

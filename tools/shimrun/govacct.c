/* govacct.c -- the seccomp engine as the core's accounting sees it
 * (govacct.h). Everything an outcome does is policy/account.c's; this file
 * holds only what is shimrun's: its lines (prefix "shimrun:", the level of
 * NETSHIM_LOG), its own mapping of the history ring (one thread: the
 * mapping of an older generation is dropped at once), its wake of the
 * agent, the name of the program's process, and its copy of the shadow
 * policy with the shadow's table. */
#include "govacct.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "../../policy/h1.h"
#include "sockwatch.h"

static int level = 2;        /* warn: shimrun's lines (NETSHIM_LOG as the library reads it) */
static struct ns_gacct *the; /* the engine's one accounting (one thread) */

int ns_gacct_level(void)
{
	return level;
}

static void say_line(int lv, const char *line)
{
	(void)lv;
	fprintf(stderr, "shimrun: %s\n", line);
}

static uint64_t wall_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void wake(struct ns_table *t)
{
	ns_table_wake_agent(t, NULL);
}

/* The ring of the recorder reading now (its generation), mapped once. */
static struct ns_ocring *ring(void)
{
	struct ns_gacct *a = the;
	uint32_t gen;
	char path[320], err[NS_ERRBUF];

	if (!a || !a->t->hdr)
		return NULL;
	gen = __atomic_load_n(&a->t->hdr->hist_gen, __ATOMIC_ACQUIRE);
	if (a->ring_state != 0 && a->ring_gen == gen)
		return a->ring_state == 1 ? &a->ring : NULL;
	if (a->ring_state == 1)
		ns_ocring_close(&a->ring);
	a->ring_gen = gen;
	a->ring_state = -1;
	if (ns_ocring_path(a->t->path, path, sizeof(path)) < 0 || ns_ocring_open(path, &a->ring, err, sizeof(err)) < 0)
		fprintf(stderr, "shimrun: history: %s; outcomes go unrecorded\n", err);
	else
		a->ring_state = 1;
	return a->ring_state == 1 ? &a->ring : NULL;
}

void ns_gacct_init(struct ns_gacct *a, struct ns_table *t, const struct ns_policy *live)
{
	const char *env = getenv("NETSHIM_LOG"), *path = getenv("NETSHIM_SHADOW_POLICY"), *base;
	char err[8192], name[300];

	static const char *const levels[] = { "off", "error", "warn", "info", "debug" };

	for (int i = 0; env && i < 5; i++)
		if (strcmp(env, levels[i]) == 0)
			level = i;
	a->t = t;
	the = a;
	/* said once, at start: the library reads requests; this engine sees
	 * connects and closes only, so a connection is its request */
	if (live->has_max_requests && level >= 2)
		fprintf(stderr,
			"shimrun: max_requests counts this program's connections, not its requests: the "
			"seccomp engine sees its connects, not its requests (a connection holds a request's "
			"place from its connect to its close)\n");
	if (!(path && *path) && live->shadow[0])
		path = live->shadow;
	if (!path || !*path || !t->hdr)
		return;
	if (ns_policy_load(path, &a->shadow, err, sizeof(err)) != 0) {
		char *nl = strchr(err, '\n');

		if (nl)
			*nl = '\0';
		fprintf(stderr, "shimrun: shadow policy ignored (the live policy is not affected): %s\n", err);
		return;
	}
	base = strrchr(t->path, '/');
	snprintf(name, sizeof(name), "%s.shadow", base ? base + 1 : t->path);
	if (ns_table_open(name, 1, t->nslots, 1, &a->stbl, err, sizeof(err)) != NS_TBL_OK) {
		fprintf(stderr, "shimrun: shadow policy: %s; the shadow is off\n", err);
		return;
	}
	a->shadow_on = 1;
}

int ns_gacct_shadow_attempt(struct ns_gacct *a, const struct ns_dest *d, const char *key, uint64_t now_ms,
			    struct ns_settings *set)
{
	if (!a->shadow_on || ns_table_broken(&a->stbl))
		return -1;
	ns_policy_resolve(&a->shadow, d, set, NULL);
	if (set->mode == NS_MODE_BYPASS)
		return -1;
	return ns_shadow_admit(&a->stbl, set, key, now_ms);
}

/* The name of process pid as events give it (its comm), read once a process. */
static const char *program(struct ns_gacct *a, pid_t pid)
{
	char path[64];
	ssize_t n;
	int fd;

	if (pid == a->comm_pid)
		return a->comm;
	a->comm_pid = pid;
	a->comm[0] = '\0';
	snprintf(path, sizeof(path), "/proc/%d/comm", (int)pid);
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) >= 0) {
		n = read(fd, a->comm, sizeof(a->comm) - 1);
		close(fd);
		a->comm[n > 0 ? n : 0] = '\0';
		a->comm[strcspn(a->comm, "\n")] = '\0';
	}
	return a->comm;
}

static const char *program_of_pid(uint32_t pid)
{
	return the ? program(the, (pid_t)pid) : "";
}

/* The process of the thread a notification named (events, history rows:
 * the rare paths that name it). */
static uint32_t tgid_of_tid(uint32_t tid)
{
	return (uint32_t)ns_sw_tgid_of((pid_t)tid);
}

const struct ns_engine ns_seccomp_engine = {
	.id = NS_ENGINE_SECCOMP,
	.log_level = &level,
	.say = say_line,
	.hist_ring = ring,
	.wake = wake,
	.wall_ms = wall_ms,
	.program_of = program_of_pid,
	.pid_of = tgid_of_tid,
};

void ns_gacct_outcome(struct ns_gacct *a, int slot, const struct ns_settings *set, struct ns_outcome *o, pid_t pid,
		      const struct ns_settings *shadow_set, int shadow_slot, struct ns_step *st)
{
	o->pid = (uint32_t)pid;
	o->program = program(a, pid);
	o->shadow.t = a->shadow_on && shadow_slot >= 0 ? &a->stbl : NULL;
	o->shadow.set = shadow_set;
	o->shadow.slot = shadow_slot;
	ns_account(&ns_seccomp_engine, a->t, slot, set, o, st);
}

int ns_gacct_status(struct ns_gacct *a, const struct ns_policy *pol, const struct ns_dest *d, pid_t pid,
		    unsigned status, uint64_t latency_us, const char *retry_after, uint64_t now_ms,
		    struct ns_gostat *go)
{
	struct ns_settings set, sset;
	struct ns_answer ans;
	struct ns_outcome o;
	struct ns_step st;
	char key[NS_KEY_MAX];
	uint64_t own_ms;
	int slot, fails, sslot = -1, honoured = 0;

	if (ns_dest_key(d, key, sizeof(key)) < 0)
		return -1;
	ns_policy_resolve(pol, d, &set, NULL);
	if (set.mode == NS_MODE_BYPASS || (slot = ns_table_find(a->t, key, 1, now_ms)) < 0)
		return -1;
	/* the shadow's breaker judges the answer too (its connect was judged
	 * at the connect) */
	if (a->shadow_on && !ns_table_broken(&a->stbl)) {
		ns_policy_resolve(&a->shadow, d, &sset, NULL);
		if (sset.mode != NS_MODE_BYPASS)
			sslot = ns_table_find(&a->stbl, key, 1, now_ms);
	}
	/* the connection's own success (its first bytes back) is taken back
	 * by its first answer: from then its answers are its outcomes, as the
	 * library counts an exchange */
	if (go && ns_gostat_own_take(go, pid, slot, &own_ms)) {
		ns_table_success_undo(a->t, slot, own_ms, set.window_ms);
		if (sslot >= 0)
			ns_table_success_undo(&a->stbl, sslot, own_ms, sset.window_ms);
	}
	/* a server that says when to come back asks for a cooldown, not for
	 * the breaker (as the library settles an exchange) */
	if ((status == 429 || status == 503) && set.retry_after && retry_after && *retry_after)
		honoured = ns_account_cooldown(&ns_seccomp_engine, a->t, slot, &set, key,
					       ns_retry_after_ms(retry_after, wall_ms()), 0, now_ms, (uint32_t)pid,
					       program(a, pid));
	fails = ns_status_fails(&set, status) && !honoured;
	memset(&ans, 0, sizeof(ans));
	ans.status = ans.http_status = status;
	ans.http_fails = fails;
	memset(&o, 0, sizeof(o));
	o.kind = fails ? NS_OUT_FAILURE : NS_OUT_SUCCESS;
	o.ans = &ans;
	o.sent = 1;
	o.now_ms = now_ms;
	o.now_ns = o.conn_ns = now_ms * 1000000;
	o.latency_us = fails ? 0 : latency_us; /* (as the library's: a success's) */
	if (latency_us) /* (its answer's head, as the library's first byte: status's first_byte_ms) */
		ns_table_latency(a->t, slot, 1, latency_us);
	o.from_ns = o.now_ns - (latency_us * 1000 < o.now_ns ? latency_us * 1000 : 0);
	ns_gacct_outcome(a, slot, &set, &o, pid, &sset, sslot, &st);
	return fails ? slot : -1;
}

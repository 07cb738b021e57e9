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
#include <sys/un.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../../policy/hash.h"

#include "../shimctl.h"
#include "agent.h"

#define CONNECT_TIMEOUT_MS 1000     /* no wait on Redis is longer */
#define BACKOFF_MIN_MS 200
#define BACKOFF_MAX_MS 5000
#define TICK_MS 50                  /* events and hooks are looked at this often */
#define HINT_GAP_MS 20              /* early passes a hint may start, at most one per */
#define LOCAL_GAP_MS 2              /* early passes a change here may start, at most one per */
#define SUB_RETRY_MS 5000           /* the hint channel, when lost, is tried again after */
#define MAX_OPS 4096                /* operator commands waiting for Redis */

struct dst {
	char key[NS_KEY_MAX];
	struct fl_vote *votes;      /* as Redis last said, plus our own writes */
	int nvotes;
	uint64_t cmd_seq;           /* the last operator command seen */
	int slot;                   /* in the table, -1 = none yet */
	int dirty;                  /* votes changed: count them again */
	uint64_t next_exp;          /* the earliest live vote's expiry (Redis ms), 0 = none */
	int held;                   /* the fleet holds it open here */
	uint64_t want_t;            /* this pass: the local open's due time (0 = not open here) */
	int tripped;                /* this pass: open or half-open here by its own failures */
	int manual;                 /* this pass: open here under recovery = manual (until a reset) */
	uint64_t my_t;              /* the local open our vote in Redis stands for */
	uint64_t cool_seen;         /* the fleet's last cooldown applied here (Redis time it ends) */
	char rule[AG_RULE_MAX];     /* the rule of the last local open */
	int no_room;                /* the fleet named it with the table too full: said once */
	uint64_t attempts;          /* --quorum N%: the table's connects to it at the last report, */
	uint64_t called_ms;         /* ...and when that report was (Redis time) */
	UT_hash_handle hh;
};

struct op {
	int op;
	uint64_t ttl_ms;            /* a cooldown: what is left of it */
	char key[NS_KEY_MAX];
};

static struct {
	/* options */
	struct fl_url url;
	const char *url_text;
	char node[AG_NAME_MAX];
	char fleet[AG_NAME_MAX];
	int quorum;
	int quorum_pct;             /* --quorum N%: a share of the live callers (quorum unused), 0 = a count */
	int share;                  /* percent */
	int suspect_min;
	int poll_ms;
	const char *on_event;
	int hook_timeout_ms;
	int no_hint;
	/* state */
	struct ns_table t;
	struct fl_conn c;
	struct fl_conn sub;         /* the hint channel (pub/sub), when it works */
	uint64_t sub_next_try;
	uint64_t hinted;            /* the highest seq a hint announced */
	uint64_t hint_quiet_until;  /* a hint proved false: hints wake no poll before then */
	int wake_fd;                /* the wake-up socket (wake_open), -1 = none */
	uint64_t bad_keys;          /* destinations in Redis that no shim could have written: ignored */
	uint64_t bad_logged, bad_log_ms;   /* ...as many said, at most once a minute */
	const char *metrics_at;     /* --metrics-listen */
	int metrics_fd;             /* its listening socket, -1 = none */
	char epoch[40];             /* the store's epoch, as last seen ("" = not yet) */
	int connected;
	int synced;                 /* a poll has succeeded since the agent started */
	uint64_t since;             /* poll for changes after this seq */
	uint64_t high;              /* the last change this agent has seen */
	uint64_t redis_now;
	uint64_t backoff_ms, next_try;
	struct dst *dests;
	struct op ops[MAX_OPS];
	int nops;
	uint64_t pub_next;          /* the next event to look at for operator actions */
	int suspect;
	int local_change;           /* a breaker here opened or closed since the last pass */
	uint32_t n_open, n_total;
	struct hooks *hooks;
	uint64_t rng;
} A;

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

/**** the local table ****/

static struct dst *dst_get(const char *key, int create)
{
	struct dst *d;

	HASH_FIND_STR(A.dests, key, d);
	if (d || !create)
		return d;
	d = calloc(1, sizeof(*d));
	if (!d) {
		ag_log("out of memory; %s is not followed", key);
		return NULL;
	}
	snprintf(d->key, sizeof(d->key), "%s", key);
	d->slot = -1;
	HASH_ADD_STR(A.dests, key, d);
	return d;
}

static int dst_slot(struct dst *d, int create)
{
	if (d->slot < 0)
		d->slot = ns_table_find(&A.t, d->key, create, ctl_mono_ms());
	return d->slot;
}

/* A slot for a destination the fleet names (a hold, a cooldown, a forced
 * open). Anyone who can write the fleet's Redis can name any number of
 * destinations; a full table turns this machine's own new destinations
 * away (their breakers off), so the fleet may take a new slot only while
 * the table is under FLEET_FILL_PCT full. -1 (said once per destination). */
#define FLEET_FILL_PCT 75
static int fleet_slot(struct dst *d)
{
	uint64_t used = __atomic_load_n(&A.t.hdr->used, __ATOMIC_RELAXED);

	if (d->slot < 0 && dst_slot(d, 0) < 0 && used * 100 >= (uint64_t)A.t.nslots * FLEET_FILL_PCT) {
		if (!d->no_room)
			ag_log("%s: the fleet names it, but the table is %llu%% full: the fleet takes no more of it "
			       "(this machine's own destinations keep the rest)", d->key,
			       (unsigned long long)(used * 100 / A.t.nslots));
		d->no_room = 1;
		return -1;
	}
	d->no_room = 0;
	return dst_slot(d, 1);
}

/* An event the agent writes (the fleet's doing), for the ring, the hooks
 * and shimctl events; its pid tells the agent not to send it back out. */
static void note(int type, const char *key, const char *detail)
{
	ctl_note_event(&A.t, type, key, detail, "netshim-agent");
}

static void queue_op(int op, const char *key, uint64_t ttl_ms)
{
	if (A.nops == MAX_OPS) {
		ag_log("%d operator commands wait for Redis; %s for %s is dropped", MAX_OPS, fl_op_name(op), key);
		return;
	}
	A.ops[A.nops].op = op;
	A.ops[A.nops].ttl_ms = ttl_ms;
	snprintf(A.ops[A.nops].key, sizeof(A.ops[A.nops].key), "%s", key);
	A.nops++;
}

/* New events: an operator's reset or forced open (not the agent's own
 * applying of the fleet's) becomes a fleet command; an open notes its rule;
 * an open or a close here asks for a pass now, not at the next poll. */
static void read_events(void)
{
	uint64_t head = ns_table_event_head(&A.t);
	struct ns_evrec ev;

	if (head > A.t.ev_cap && A.pub_next < head - A.t.ev_cap)
		A.pub_next = head - A.t.ev_cap;
	for (; A.pub_next < head; A.pub_next++) {
		if (ns_table_event_read(&A.t, A.pub_next, &ev) < 0) {
			if (A.pub_next + 1 == head)
				break;   /* being written: next tick */
			continue;
		}
		if (ev.pid == (uint32_t)getpid())
			continue;
		if (ev.type == NS_E_RESET || ev.type == NS_E_FORCED_OPEN) {
			queue_op(ev.type == NS_E_RESET ? FL_RESET : FL_FORCE, ev.dest, 0);
		} else if (ev.type == NS_E_COOLDOWN) {
			/* a server said when to come back: every machine hears it */
			struct dst *d = dst_get(ev.dest, 1);
			struct ns_entry e;
			int slot = d ? dst_slot(d, 0) : -1;

			if (slot >= 0 && ns_table_read(&A.t, slot, ctl_mono_ms(), &e) == 0 && e.cooldown_left_ms)
				queue_op(FL_COOLDOWN, ev.dest, e.cooldown_left_ms);
		} else if (ev.type == NS_E_OPENED || ev.type == NS_E_REOPENED) {
			struct dst *d = dst_get(ev.dest, 1);

			if (d)
				snprintf(d->rule, sizeof(d->rule), "%s", ns_rule_name((int)ev.rule));
			A.local_change = 1;
		} else if (ev.type == NS_E_CLOSED) {
			A.local_change = 1;
		}
	}
}

/* How long a hold or a vote that is renewed every pass lasts unrenewed:
 * three poll intervals and a second (a node killed loses it after that). */
static uint64_t lease_ms(void)
{
	return 3 * (uint64_t)A.poll_ms + 1000;
}

/* What is open here by its own failures: a vote wanted for each
 * destination open and not yet due for a probe (under recovery = manual:
 * open until an operator resets it, the vote renewed on a lease); and
 * whether so much is open that this node's network is the likelier
 * culprit. A forced open is an operator's command, sent as one, never a
 * vote. */
static void scan_table(uint64_t now)
{
	char key[NS_KEY_MAX];
	struct dst *d, *tmp;
	uint32_t open = 0, total = 0;
	int suspect;

	HASH_ITER(hh, A.dests, d, tmp) {
		d->want_t = 0;
		d->tripped = 0;
		d->manual = 0;
	}
	struct ns_scan sc;

	for (uint32_t i = ns_scan_begin(&A.t, &sc); i < A.t.nslots; i = ns_scan_next(&A.t, &sc, i + 1)) {
		struct ns_brk b;
		uint64_t until;

		if (ns_table_state(&A.t, (int)i, key, sizeof(key), &b, &until) < 0)
			continue;
		total++;
		if (A.quorum_pct && (d = dst_get(key, 1)) != NULL)
			d->slot = (int)i;   /* --quorum N%: every destination called here is reported */
		if (b.state == NS_OPEN || b.state == NS_HALF_OPEN) {
			int manual = b.state == NS_OPEN && b.manual;

			open++;
			HASH_FIND_STR(A.dests, key, d);
			if (b.state == NS_OPEN && (b.t_ms > now || manual) && !d)
				d = dst_get(key, 1);
			if (d) {
				d->slot = (int)i;
				d->tripped = 1;
				d->manual = manual;
				d->want_t = manual ? now + lease_ms() : b.state == NS_OPEN && b.t_ms > now ? b.t_ms : 0;
			}
		}
	}
	ns_scan_end(&sc);
	suspect = open >= (uint32_t)A.suspect_min && (uint64_t)open * 100 >= (uint64_t)A.share * total;
	if (suspect != A.suspect)
		ag_log(suspect ? "node %s is suspect: %u of %u destinations open at once (its own network is the likelier "
			 "fault); its votes are withheld" : "node %s is no longer suspect (%u of %u destinations open); "
			 "its votes count again", A.node, open, total);
	A.suspect = suspect;
	A.n_open = open;
	A.n_total = total;
}

/**** the fleet ****/

static int has_vote(const struct dst *d, const char *node)
{
	for (int i = 0; i < d->nvotes; i++)
		if (strcmp(d->votes[i].node, node) == 0)
			return i;
	return -1;
}

static void set_votes(struct dst *d, const struct fl_vote *v, int n)
{
	struct fl_vote *nv = n ? malloc((size_t)n * sizeof(*nv)) : NULL;

	if (n && !nv) {
		ag_log("out of memory; the votes for %s are not kept", d->key);
		n = 0;
	}
	if (n)
		memcpy(nv, v, (size_t)n * sizeof(*nv));
	free(d->votes);
	d->votes = nv;
	d->nvotes = n;
	d->dirty = 1;
}

/* Our own vote, as the script wrote it (near enough until the next poll
 * reads it back). */
static void own_vote(struct dst *d, uint64_t exp, int present)
{
	int i = has_vote(d, A.node);
	struct fl_vote *nv;

	if (!present) {
		if (i >= 0)
			d->votes[i] = d->votes[--d->nvotes];
		d->dirty = 1;
		return;
	}
	if (i < 0) {
		nv = realloc(d->votes, (size_t)(d->nvotes + 1) * sizeof(*nv));
		if (!nv)
			return;
		d->votes = nv;
		i = d->nvotes++;
	}
	snprintf(d->votes[i].node, sizeof(d->votes[i].node), "%s", A.node);
	snprintf(d->votes[i].rule, sizeof(d->votes[i].rule), "%s", d->rule);
	d->votes[i].exp_ms = exp;
	d->dirty = 1;
}

static void apply_command(struct dst *d, int op, const char *by)
{
	char detail[96];
	int slot;

	snprintf(detail, sizeof(detail), "fleet: %s on node %s", op == FL_RESET ? "reset" : "forced open", by);
	if (op == FL_RESET) {
		slot = dst_slot(d, 0);
		if (slot >= 0)
			ns_table_reset(&A.t, slot);
		/* closed now: what this pass's table scan saw open is no vote any more */
		d->held = 0;
		d->my_t = 0;
		d->want_t = 0;
		d->tripped = 0;
		note(NS_E_RESET, d->key, detail);
		ag_log("%s: reset by an operator on node %s: closed here", d->key, by);
	} else {
		slot = fleet_slot(d);
		if (slot < 0)
			return;   /* said once by fleet_slot */
		ns_table_force_open(&A.t, slot, ctl_mono_ms(), ctl_wall_ms());
		d->want_t = 0;   /* held by hand now: no vote */
		note(NS_E_FORCED_OPEN, d->key, detail);
		ag_log("%s: forced open by an operator on node %s: forced open here", d->key, by);
	}
}

static int dest_key_ok(const char *key)
{
	struct ns_dest nd;
	char canon[NS_KEY_MAX];

	return ns_dest_parse(key, &nd) == 0 && ns_dest_key(&nd, canon, sizeof(canon)) > 0 && strcmp(canon, key) == 0;
}

/* A destination whose votes or command changed, from a poll. */
static void on_dest(void *arg, const struct fl_dest *in)
{
	uint64_t high_before = *(uint64_t *)arg;
	struct dst *d;

	/* only what a shim could have written: a destination key as the shim
	 * formats it (never a line break or a terminal escape for the log) */
	if (!dest_key_ok(in->dest)) {
		A.bad_keys++;
		return;
	}
	if (!(d = dst_get(in->dest, 1)))
		return;
	set_votes(d, in->votes, in->nvotes);
	if (in->cool_until > A.redis_now && in->cool_until != d->cool_seen && strcmp(in->cool_node, A.node) != 0) {
		int slot = fleet_slot(d);
		char detail[160];

		d->cool_seen = in->cool_until;
		if (slot >= 0) {
			ns_table_cooldown(&A.t, slot, ctl_mono_ms() + (in->cool_until - A.redis_now));
			snprintf(detail, sizeof(detail), "fleet: Retry-After seen on node %s: %llu ms left", in->cool_node,
				 (unsigned long long)(in->cool_until - A.redis_now));
			note(NS_E_COOLDOWN, d->key, detail);
			ag_log("%s: cooling down here too (%s)", d->key, detail);
		}
	}
	if (in->cmd_seq && in->cmd_seq > d->cmd_seq) {
		d->cmd_seq = in->cmd_seq;
		if (strcmp(in->cmd_node, A.node) == 0)
			return;   /* made here: the operator already did it to this table */
		if (A.synced && in->cmd_seq > high_before) {
			apply_command(d, in->cmd_op, in->cmd_node);
		} else if (!A.synced && in->cmd_op == FL_FORCE) {
			/* joining: a forced open stands until a reset, so it holds here too */
			struct ns_brk b;
			char key[NS_KEY_MAX];
			uint64_t until;
			int slot = fleet_slot(d);

			if (slot >= 0 && ns_table_state(&A.t, slot, key, sizeof(key), &b, &until) == 0 &&
			    b.state != NS_FORCED_OPEN)
				apply_command(d, FL_FORCE, in->cmd_node);
		}
	}
}

static void release(struct dst *d, const char *why)
{
	int slot = dst_slot(d, 0);
	char detail[96];

	if (slot >= 0)
		ns_table_fleet_set(&A.t, slot, 0, NULL, 0);
	d->held = 0;
	snprintf(detail, sizeof(detail), "%s", why);
	note(NS_E_FLEET_CLOSED, d->key, detail);
	ag_log("%s: fleet hold released (%s)", d->key, why);
}

/**** membership (--quorum N%) ****/

#define MEMBERS_MAX 4096
#define CALLED_EVERY_MS 1000        /* a destination's call is reported at most this often */
#define CALLED_WINDOW_MS 600000     /* a caller counts for ten minutes after its last report */
static char live_members[MEMBERS_MAX][AG_NAME_MAX];
static int n_live = -1;             /* -1: not known this pass */
static char callers[MEMBERS_MAX][AG_NAME_MAX];

/* Heartbeat, report the destinations called here since the last report,
 * and read who is alive: silent for three poll intervals is gone. */
static int membership(char *err, size_t len)
{
	struct dst *d, *tmp;
	int rc;

	n_live = -1;
	if (!A.quorum_pct || !A.redis_now)
		return FL_OK;
	if ((rc = fl_heartbeat(&A.c, A.node, A.redis_now, NULL, err, len)) != FL_OK)
		return rc;
	HASH_ITER(hh, A.dests, d, tmp) {
		uint64_t now_attempts = d->slot >= 0 ? ns_table_attempts(&A.t, d->slot) : d->attempts;

		if (now_attempts == d->attempts || A.redis_now < d->called_ms + CALLED_EVERY_MS)
			continue;
		if ((rc = fl_heartbeat(&A.c, A.node, A.redis_now, d->key, err, len)) != FL_OK)
			return rc;
		d->attempts = now_attempts;
		d->called_ms = A.redis_now;
	}
	rc = fl_since(&A.c, "members", A.redis_now - 3 * (uint64_t)A.poll_ms, live_members, MEMBERS_MAX, err, len);
	if (rc < 0)
		return rc;
	n_live = rc;
	return FL_OK;
}

static int is_live(const char *node)
{
	for (int i = 0; i < n_live; i++)
		if (strcmp(live_members[i], node) == 0)
			return 1;
	return 0;
}

/* The votes d needs to be held open here: --quorum N, or N% of the live
 * machines that called it lately (at least one); 0 when unknown now. */
static uint32_t needed(struct dst *d, uint32_t *callers_out)
{
	char what[NS_KEY_MAX + 16], err[160];
	uint32_t count = 0;
	int n;

	*callers_out = 0;
	if (!A.quorum_pct)
		return (uint32_t)A.quorum;
	if (n_live < 0)
		return 0;
	snprintf(what, sizeof(what), "callers:%s", d->key);
	n = fl_since(&A.c, what, A.redis_now > CALLED_WINDOW_MS ? A.redis_now - CALLED_WINDOW_MS : 0, callers,
		     MEMBERS_MAX, err, sizeof(err));
	if (n < 0)
		return 0;
	for (int i = 0; i < n; i++)
		count += (uint32_t)is_live(callers[i]);
	/* a live voter called it too, reported or not yet */
	for (int i = 0; i < d->nvotes; i++) {
		int listed = 0;

		for (int k = 0; k < n && !listed; k++)
			listed = strcmp(callers[k], d->votes[i].node) == 0;
		count += (uint32_t)(!listed && d->votes[i].exp_ms > A.redis_now);
	}
	*callers_out = count;
	return (uint32_t)(((uint64_t)count * (uint64_t)A.quorum_pct + 99) / 100) ?: 1;
}

/* Count the live votes of every destination that changed or whose
 * earliest vote ran out, and hold open here what a quorum reports open. */
static void apply_fleet(uint64_t now)
{
	uint64_t lease = lease_ms();
	struct dst *d, *tmp;

	HASH_ITER(hh, A.dests, d, tmp) {
		char nodes[NS_FLEET_NODES_LEN], q[96];
		size_t o = 0;
		uint32_t live = 0, need, ncallers = 0;
		int slot;

		/* a share quorum moves with the callers: a held destination is
		 * counted again every pass */
		if (!d->dirty && !d->held && !(d->next_exp && d->next_exp <= A.redis_now))
			continue;
		d->next_exp = 0;
		nodes[0] = '\0';
		for (int i = 0; i < d->nvotes; i++) {
			if (d->votes[i].exp_ms <= A.redis_now)
				continue;
			live++;
			if (!d->next_exp || d->votes[i].exp_ms < d->next_exp)
				d->next_exp = d->votes[i].exp_ms;
			if (o + strlen(d->votes[i].node) + 2 < sizeof(nodes))
				o += (size_t)snprintf(nodes + o, sizeof(nodes) - o, "%s%s", o ? "," : "",
						      d->votes[i].node);
		}
		d->dirty = 0;
		need = live ? needed(d, &ncallers) : (uint32_t)A.quorum;
		if (!need) {
			d->dirty = 1;   /* the callers could not be counted: look again next pass */
			continue;
		}
		if (A.quorum_pct)
			snprintf(q, sizeof(q), "quorum %u: %d%% of %u live callers", need, A.quorum_pct, ncallers);
		else
			snprintf(q, sizeof(q), "quorum %d", A.quorum);
		if (live >= need) {
			if ((slot = fleet_slot(d)) < 0)
				continue;   /* said once by fleet_slot */
			ns_table_fleet_set(&A.t, slot, now + lease, nodes, live);
			if (!d->held) {
				char detail[96];

				snprintf(detail, sizeof(detail), "%u nodes: %s", live, nodes);
				note(NS_E_FLEET_OPEN, d->key, detail);
				ag_log("%s: fleet open (%u nodes report it open: %s; %s)", d->key, live, nodes, q);
			}
			d->held = 1;
		} else if (d->held) {
			char why[160];

			snprintf(why, sizeof(why), "%u node%s it open, %s", live, live == 1 ? " reports" : "s report", q);
			release(d, why);
		}
	}
}

static void release_all(const char *why)
{
	struct dst *d, *tmp;

	HASH_ITER(hh, A.dests, d, tmp)
		if (d->held)
			release(d, why);
}

/* Publish what changed here: our votes (a new open, a renewal after a
 * failed probe, a withdrawal when it closed or while suspect). A vote whose
 * open period ran out while the breaker waits for its probe is left to
 * expire in Redis by itself: no command for it. */
static int reconcile(uint64_t now, char *err, size_t len)
{
	struct dst *d, *tmp;
	int rc;

	HASH_ITER(hh, A.dests, d, tmp) {
		int want = !A.suspect && d->want_t > now, mine = has_vote(d, A.node) >= 0;
		/* a manual open's vote is renewed when half its lease is gone */
		int renew = d->manual ? d->my_t < now + lease_ms() / 2 : d->my_t != d->want_t;

		if (want && (!mine || renew)) {
			uint64_t ttl = d->want_t - now;

			if ((rc = fl_change(&A.c, FL_VOTE, d->key, A.node, ttl, d->rule, err, len)) != FL_OK)
				return rc;
			if (!d->my_t)
				ag_log("%s: open here%s%s; vote published (expires in %llu ms)", d->key,
				       d->rule[0] ? ", rule " : "", d->rule, (unsigned long long)ttl);
			d->my_t = d->want_t;
			own_vote(d, A.redis_now + ttl, 1);
		} else if (!want && mine && (A.suspect || !d->tripped)) {
			if ((rc = fl_change(&A.c, FL_UNVOTE, d->key, A.node, 0, NULL, err, len)) != FL_OK)
				return rc;
			ag_log("%s: vote withdrawn (%s)", d->key, A.suspect ? "node suspect" : "no longer open here");
			d->my_t = 0;
			own_vote(d, 0, 0);
		}
	}
	return FL_OK;
}

static int publish_ops(char *err, size_t len)
{
	while (A.nops) {
		struct op *o = &A.ops[0];
		int rc = fl_change(&A.c, o->op, o->key, A.node, o->ttl_ms, NULL, err, len);

		if (rc == FL_DOWN)
			return rc;
		if (rc == FL_OK && o->op == FL_COOLDOWN)
			ag_log("%s: a Retry-After here (%llu ms left): sent to the fleet", o->key,
			       (unsigned long long)o->ttl_ms);
		else if (rc == FL_OK)
			ag_log("%s: %s here by an operator: sent to the fleet", o->key,
			       o->op == FL_RESET ? "reset" : "forced open");
		else
			ag_log("%s: %s not accepted by Redis: %s", o->key, fl_op_name(o->op), err);
		memmove(&A.ops[0], &A.ops[1], (size_t)(--A.nops) * sizeof(A.ops[0]));
	}
	return FL_OK;
}

static uint64_t next_rand(void)
{
	A.rng ^= A.rng << 13;
	A.rng ^= A.rng >> 7;
	A.rng ^= A.rng << 17;
	return A.rng;
}

/* Did the store lose its data since the last poll? Its counter is behind
 * what was seen, or its epoch is not the one it had (even when the counter
 * has since caught up: other agents' changes after the loss). */
static int went_back(const struct fl_store *st)
{
	return st->seq < A.since || (A.epoch[0] && strcmp(st->epoch, A.epoch) != 0);
}

/* The store's epoch, named by the first agent that finds none. */
static int adopt_epoch(const struct fl_store *st, char *err, size_t len)
{
	char mine[20];

	if (st->epoch[0]) {
		snprintf(A.epoch, sizeof(A.epoch), "%s", st->epoch);
		return FL_OK;
	}
	snprintf(mine, sizeof(mine), "%016llx", (unsigned long long)next_rand());
	return fl_set_epoch(&A.c, mine, err, len);   /* the next poll adopts whichever was set first */
}

/* What Redis holds is unknown until the next full poll: no vote is known,
 * and this node's own are to be published again. */
static void forget_votes(void)
{
	struct dst *d, *tmp;

	HASH_ITER(hh, A.dests, d, tmp) {
		set_votes(d, NULL, 0);
		d->my_t = 0;
	}
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
	uint64_t seq = 0;
	int rc = fl_connect(&A.c, &A.url, A.fleet, CONNECT_TIMEOUT_MS, err, len);

	if (rc == FL_OK && (rc = fl_seq(&A.c, &seq, err, len)) != FL_OK)
		fl_close(&A.c);
	if (rc != FL_OK)
		return rc;
	if (seq < A.high)
		A.high = 0;   /* Redis lost the fleet's data: all it holds now is new */
	A.since = 0;
	A.hinted = 0;   /* a hint from before (maybe another Redis's numbering) is void */
	A.connected = 1;
	A.sub_next_try = 0;
	return FL_OK;
}

/* The hint channel is a shortcut, never needed: without it every change
 * still arrives with the next poll. */
static void hint_connect(uint64_t now)
{
	char err[256];

	if (A.no_hint || A.sub.ctx || !A.connected || now < A.sub_next_try)
		return;
	A.sub_next_try = now + SUB_RETRY_MS;
	if (fl_subscribe(&A.sub, &A.url, A.fleet, CONNECT_TIMEOUT_MS, err, sizeof(err)) != FL_OK)
		ag_log("hint channel unavailable (%s): changes arrive with each poll only", err);
}

/* A hint announced a change this agent has not seen, and hints are
 * believed: one that a poll did not bear out (a PUBLISH of a seq Redis
 * never reached) silences them until the next regular poll, so hints can
 * at most double the poll rate, never more than real changes justify. */
static int hint_due(uint64_t now)
{
	return A.connected && A.hinted > A.high && now >= A.hint_quiet_until;
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
	struct pollfd p[3] = { { .fd = fl_hint_fd(&A.sub), .events = POLLIN }, { .fd = A.wake_fd, .events = POLLIN },
			       { .fd = A.metrics_fd, .events = POLLIN } };
	char drain[64];

	if (poll(p, 3, ms) <= 0)
		return;
	if (p[2].revents & POLLIN)
		msrv_serve(A.metrics_fd, agent_metrics, NULL);
	if ((p[0].revents & (POLLIN | POLLHUP | POLLERR)) && fl_hint_read(&A.sub, &A.hinted) < 0) {
		ag_log("hint channel lost: changes arrive with each poll only until it is back");
		fl_close(&A.sub);
	}
	if (p[1].revents & POLLIN)
		while (recv(A.wake_fd, drain, sizeof(drain), MSG_DONTWAIT) > 0)
			;   /* any number of wake-ups: one look at the event ring */
}

static void pass(uint64_t now)
{
	char err[256];
	uint64_t c0 = cpu_ns(), high_before = A.high, high;
	int rc = FL_OK;

	scan_table(now);
	if (!A.connected && now >= A.next_try) {
		if (try_connect(err, sizeof(err)) == FL_OK) {
			ag_log("redis %s:%d connected again: republishing this node's state", A.url.host, A.url.port);
		} else {
			uint64_t jitter;

			A.backoff_ms = A.backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : A.backoff_ms * 2;
			jitter = next_rand() % (A.backoff_ms / 2 + 1);
			A.next_try = now + A.backoff_ms / 2 + jitter;
		}
	}
	if (A.connected) {
		struct fl_store st;

		if ((rc = publish_ops(err, sizeof(err))) == FL_OK &&
		    (rc = fl_poll(&A.c, A.since, on_dest, &high_before, &A.redis_now, &high, &st, err,
				  sizeof(err))) == FL_OK && went_back(&st)) {
			/* the store lost its data under a live connection (FLUSHDB,
			 * a restart without it, a lagging replica promoted): what it
			 * holds now is read whole, and this node's votes are
			 * published again */
			ag_log("redis went back (change %llu, epoch %s; this agent had seen change %llu, epoch %s): "
			       "reading it whole again", (unsigned long long)st.seq, st.epoch[0] ? st.epoch : "none",
			       (unsigned long long)A.since, A.epoch);
			forget_votes();
			A.high = high_before = 0;
			A.epoch[0] = '\0';
			rc = fl_poll(&A.c, 0, on_dest, &high_before, &A.redis_now, &high, &st, err, sizeof(err));
		}
		if (rc == FL_OK)
			rc = adopt_epoch(&st, err, sizeof(err));
		if (A.bad_keys != A.bad_logged && now >= A.bad_log_ms + 60000) {
			ag_log("%llu destination names in Redis that no shim could have written were ignored "
			       "(a writer other than the agents?)", (unsigned long long)(A.bad_keys - A.bad_logged));
			A.bad_logged = A.bad_keys;
			A.bad_log_ms = now;
		}
		if (rc == FL_OK) {
			A.since = high;
			if (high > A.high)
				A.high = high;
			A.synced = 1;
			rc = reconcile(now, err, sizeof(err));
			if (rc == FL_OK)
				rc = membership(err, sizeof(err));
		}
		/* a hint the poll did not bear out (a seq Redis never reached)
		 * is void: it woke one poll, and wakes no more */
		if (rc == FL_OK && A.hinted > A.high) {
			A.hinted = A.high;
			A.hint_quiet_until = now + (uint64_t)A.poll_ms;   /* and hints wait for the next tick */
		}
		if (rc == FL_OK)
			apply_fleet(now);
		else
			lost(err);
		__atomic_fetch_add(&A.t.hdr->agent_polls, 1, __ATOMIC_RELAXED);
	}
	__atomic_store_n(&A.t.hdr->agent_open, A.n_open, __ATOMIC_RELAXED);
	__atomic_store_n(&A.t.hdr->agent_dests, A.n_total, __ATOMIC_RELAXED);
	__atomic_store_n(&A.t.hdr->agent_flags, (A.connected ? NS_AGENT_CONNECTED : 0) |
			 (A.suspect ? NS_AGENT_SUSPECT : 0), __ATOMIC_RELAXED);
	__atomic_store_n(&A.t.hdr->agent_beat_ms, ctl_wall_ms(), __ATOMIC_RELAXED);
	__atomic_fetch_add(&A.t.hdr->agent_cpu_ns, cpu_ns() - c0, __ATOMIC_RELAXED);
}

/**** the program ****/

static void usage(FILE *f)
{
	fprintf(f, "usage: netshim-agent --redis redis://[[USER]:PASSWORD@]HOST[:PORT][/DB] [--node NAME] [--fleet NAME]\n"
		"                     [--quorum N | N%%] [--suspect-share PERCENT] [--suspect-min N] [--on-event CMD]\n"
		"                     [--table NAME] [--poll-ms MS] [--hook-timeout-ms MS] [--no-hint]\n"
		"                     [--metrics-listen ADDRESS:PORT]\n");
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
		{ "metrics-listen", required_argument, 0, 'M' }, { 0, 0, 0, 0 },
	};
	const char *table = NULL;
	char tbuf[64], uerr[128];
	int o;

	A.quorum = 2;
	A.share = 50;
	A.suspect_min = 4;
	A.poll_ms = 500;
	A.hook_timeout_ms = 10000;
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
		case 'M': A.metrics_at = optarg; break;
		case 'H': usage(stdout); exit(0);
		default: usage(stderr); exit(2);
		}
	}
	if (optind != argc || !A.url_text) {
		if (!A.url_text)
			warnx("--redis URL is required");
		usage(stderr);
		exit(2);
	}
	if (fl_url_parse(A.url_text, &A.url, uerr, sizeof(uerr)) < 0)
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
	rc = try_connect(err, sizeof(err));
	if (rc != FL_OK)
		errx(2, "redis %s:%d: %s%s", A.url.host, A.url.port, err,
		     rc == FL_REFUSED ? " (check the password in --redis)" : "");
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
	ag_log("node %s, fleet %s, quorum %s, table %s, redis %s:%d, poll every %d ms", A.node, A.fleet, err,
	       A.t.path, A.url.host, A.url.port, A.poll_ms);
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
			A.local_change = 0;
			pass(now);
			if (early)
				last_early = now;
			else
				next_pass = now + (uint64_t)A.poll_ms;
			hint_connect(now);
		}
		if (A.hooks)
			hooks_pass(A.hooks, ctl_mono_ms());
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

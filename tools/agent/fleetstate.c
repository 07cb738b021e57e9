/* fleetstate.c -- netshim-agent's two sides of a destination: the local
 * table (its breakers, read each pass, and the holds the fleet puts there)
 * and the fleet's votes in Redis (kept per destination, counted against the
 * quorum and the ag_membership). agent.c drives them each pass. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../policy/hash.h"

#include "../common/tablekit.h"
#include "agentstate.h"

/**** the local table ****/

static struct dst *dst_get(const char *key, int create)
{
	struct dst *d;

	HASH_FIND_STR(ag_state.dests, key, d);
	if (d || !create)
		return d;
	d = calloc(1, sizeof(*d));
	if (!d) {
		ag_log("out of memory; %s is not followed", key);
		return NULL;
	}
	snprintf(d->key, sizeof(d->key), "%s", key);
	d->slot = -1;
	HASH_ADD_STR(ag_state.dests, key, d);
	return d;
}

static int dst_slot(struct dst *d, int create)
{
	if (d->slot < 0)
		d->slot = ns_table_find(&ag_state.t, d->key, create, ctl_mono_ms());
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
	uint64_t used = __atomic_load_n(&ag_state.t.hdr->used, __ATOMIC_RELAXED);

	if (d->slot < 0 && dst_slot(d, 0) < 0 && used * 100 >= (uint64_t)ag_state.t.nslots * FLEET_FILL_PCT) {
		if (!d->no_room)
			ag_log("%s: the fleet names it, but the table is %llu%% full: the fleet takes no more of it "
			       "(this machine's own destinations keep the rest)", d->key,
			       (unsigned long long)(used * 100 / ag_state.t.nslots));
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
	ctl_note_event(&ag_state.t, type, key, detail, "netshim-agent");
}

static void queue_op(int op, const char *key, uint64_t ttl_ms)
{
	if (ag_state.nops == MAX_OPS) {
		ag_log("%d operator commands wait for Redis; %s for %s is dropped", MAX_OPS, ag_fleet_op_name(op), key);
		return;
	}
	ag_state.ops[ag_state.nops].op = op;
	ag_state.ops[ag_state.nops].ttl_ms = ttl_ms;
	snprintf(ag_state.ops[ag_state.nops].key, sizeof(ag_state.ops[ag_state.nops].key), "%s", key);
	ag_state.nops++;
}

/* New events: an operator's reset or forced open (not the agent's own
 * applying of the fleet's) becomes a fleet command; an open notes its rule;
 * an open or a close here asks for a pass now, not at the next poll. */
void ag_read_events(void)
{
	uint64_t head = ns_table_event_head(&ag_state.t);
	struct ns_evrec ev;

	if (head > ag_state.t.ev_cap && ag_state.pub_next < head - ag_state.t.ev_cap)
		ag_state.pub_next = head - ag_state.t.ev_cap;
	for (; ag_state.pub_next < head; ag_state.pub_next++) {
		if (ns_table_event_read(&ag_state.t, ag_state.pub_next, &ev) < 0) {
			if (ag_state.pub_next + 1 == head)
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

			if (slot >= 0 && ns_table_read(&ag_state.t, slot, ctl_mono_ms(), &e) == 0 && e.cooldown_left_ms)
				queue_op(FL_COOLDOWN, ev.dest, e.cooldown_left_ms);
		} else if (ev.type == NS_E_OPENED || ev.type == NS_E_REOPENED) {
			struct dst *d = dst_get(ev.dest, 1);

			if (d)
				snprintf(d->rule, sizeof(d->rule), "%s", ns_rule_name((int)ev.rule));
			ag_state.local_change = 1;
		} else if (ev.type == NS_E_CLOSED) {
			ag_state.local_change = 1;
		}
	}
}

/* How long a hold or a vote that is renewed every pass lasts unrenewed:
 * three poll intervals and a second (a node killed loses it after that). */
uint64_t ag_lease_ms(void)
{
	return 3 * (uint64_t)ag_state.poll_ms + 1000;
}

/* What is open here by its own failures: a vote wanted for each
 * destination open and not yet due for a probe (under recovery = manual:
 * open until an operator resets it, the vote renewed on a lease); and
 * whether so much is open that this node's network is the likelier
 * culprit. A forced open is an operator's command, sent as one, never a
 * vote. */
void ag_scan_table(uint64_t now)
{
	char key[NS_KEY_MAX];
	struct dst *d, *tmp;
	uint32_t open = 0, total = 0;
	int suspect;

	HASH_ITER(hh, ag_state.dests, d, tmp) {
		d->want_t = 0;
		d->tripped = 0;
		d->manual = 0;
	}
	struct ns_scan sc;

	for (uint32_t i = ns_scan_begin(&ag_state.t, &sc); i < ag_state.t.nslots; i = ns_scan_next(&ag_state.t, &sc, i + 1)) {
		struct ns_brk b;
		uint64_t until;

		if (ns_table_state(&ag_state.t, (int)i, key, sizeof(key), &b, &until) < 0)
			continue;
		total++;
		if (ag_state.quorum_pct && (d = dst_get(key, 1)) != NULL)
			d->slot = (int)i;   /* --quorum N%: every destination called here is reported */
		if (b.state == NS_OPEN || b.state == NS_HALF_OPEN) {
			int manual = b.state == NS_OPEN && b.manual;

			open++;
			HASH_FIND_STR(ag_state.dests, key, d);
			if (b.state == NS_OPEN && (b.t_ms > now || manual) && !d)
				d = dst_get(key, 1);
			if (d) {
				d->slot = (int)i;
				d->tripped = 1;
				d->manual = manual;
				d->want_t = manual                           ? now + ag_lease_ms()
					: b.state == NS_OPEN && b.t_ms > now ? b.t_ms
									     : 0;
			}
		}
	}
	ns_scan_end(&sc);
	suspect = open >= (uint32_t)ag_state.suspect_min && (uint64_t)open * 100 >= (uint64_t)ag_state.share * total;
	if (suspect != ag_state.suspect)
		ag_log(suspect ? "node %s is suspect: %u of %u destinations open at once (its own network is the likelier "
			 "fault); its votes are withheld" : "node %s is no longer suspect (%u of %u destinations open); "
			 "its votes count again", ag_state.node, open, total);
	ag_state.suspect = suspect;
	ag_state.n_open = open;
	ag_state.n_total = total;
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
	int i = has_vote(d, ag_state.node);
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
	snprintf(d->votes[i].node, sizeof(d->votes[i].node), "%s", ag_state.node);
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
			ns_table_reset(&ag_state.t, slot);
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
		ns_table_force_open(&ag_state.t, slot, ctl_mono_ms(), ctl_wall_ms());
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
void ag_on_dest(void *arg, const struct fl_dest *in)
{
	uint64_t high_before = *(uint64_t *)arg;
	struct dst *d;

	/* only what a shim could have written: a destination key as the shim
	 * formats it (never a line break or a terminal escape for the log) */
	if (!dest_key_ok(in->dest)) {
		ag_state.bad_keys++;
		return;
	}
	if (!(d = dst_get(in->dest, 1)))
		return;
	set_votes(d, in->votes, in->nvotes);
	if (in->cool_until > ag_state.redis_now && in->cool_until != d->cool_seen && strcmp(in->cool_node, ag_state.node) != 0) {
		int slot = fleet_slot(d);
		char detail[160];

		d->cool_seen = in->cool_until;
		if (slot >= 0) {
			ns_table_cooldown(&ag_state.t, slot, ctl_mono_ms() + (in->cool_until - ag_state.redis_now));
			snprintf(detail, sizeof(detail), "fleet: Retry-After seen on node %s: %llu ms left", in->cool_node,
				 (unsigned long long)(in->cool_until - ag_state.redis_now));
			note(NS_E_COOLDOWN, d->key, detail);
			ag_log("%s: cooling down here too (%s)", d->key, detail);
		}
	}
	/* with fleet keys a command is signed with its time (its seq is not:
	 * Redis numbers it), so a command is newer by its time too, and one
	 * older than CMD_FRESH_MS when it reaches a running agent is a replay */
	if (in->cmd_seq && in->cmd_seq > d->cmd_seq && (!ag_state.c.nkeys || in->cmd_at > d->cmd_at)) {
		d->cmd_seq = in->cmd_seq;
		d->cmd_at = in->cmd_at;
		if (strcmp(in->cmd_node, ag_state.node) == 0)
			return;   /* made here: the operator already did it to this table */
		if (ag_state.synced && in->cmd_seq > high_before && ag_state.c.nkeys && in->cmd_at + CMD_FRESH_MS < ag_state.redis_now) {
			ag_state.c.unsigned_seen++;
		} else if (ag_state.synced && in->cmd_seq > high_before) {
			apply_command(d, in->cmd_op, in->cmd_node);
		} else if (!ag_state.synced && in->cmd_op == FL_FORCE) {
			/* joining: a forced open stands until a reset, so it holds here too */
			struct ns_brk b;
			char key[NS_KEY_MAX];
			uint64_t until;
			int slot = fleet_slot(d);

			if (slot >= 0 && ns_table_state(&ag_state.t, slot, key, sizeof(key), &b, &until) == 0 &&
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
		ns_table_fleet_set(&ag_state.t, slot, 0, NULL, 0);
	d->held = 0;
	snprintf(detail, sizeof(detail), "%s", why);
	note(NS_E_FLEET_CLOSED, d->key, detail);
	ag_log("%s: fleet hold released (%s)", d->key, why);
}

/**** ag_membership (--quorum N%) ****/

#define MEMBERS_MAX 4096
#define CALLED_EVERY_MS 1000        /* a destination's call is reported at most this often */
#define CALLED_WINDOW_MS 600000     /* a caller counts for ten minutes after its last report */
static char live_members[MEMBERS_MAX][AG_NAME_MAX];
static int n_live = -1;             /* -1: not known this pass */
static char callers[MEMBERS_MAX][AG_NAME_MAX];

/* Heartbeat, report the destinations called here since the last report,
 * and read who is alive: silent for three poll intervals is gone. */
int ag_membership(char *err, size_t len)
{
	struct dst *d, *tmp;
	int rc;

	n_live = -1;
	if (!ag_state.quorum_pct || !ag_state.redis_now)
		return FL_OK;
	if ((rc = ag_fleet_heartbeat(&ag_state.c, ag_state.node, ag_state.redis_now, NULL, err, len)) != FL_OK)
		return rc;
	HASH_ITER(hh, ag_state.dests, d, tmp) {
		uint64_t now_attempts = d->slot >= 0 ? ns_table_attempts(&ag_state.t, d->slot) : d->attempts;

		if (now_attempts == d->attempts || ag_state.redis_now < d->called_ms + CALLED_EVERY_MS)
			continue;
		if ((rc = ag_fleet_heartbeat(&ag_state.c, ag_state.node, ag_state.redis_now, d->key, err, len)) != FL_OK)
			return rc;
		d->attempts = now_attempts;
		d->called_ms = ag_state.redis_now;
	}
	rc = ag_fleet_since(&ag_state.c, "members", ag_state.redis_now - 3 * (uint64_t)ag_state.poll_ms, live_members, MEMBERS_MAX, err, len);
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
	if (!ag_state.quorum_pct)
		return (uint32_t)ag_state.quorum;
	/* not countable now (Redis away: a cluster's failover): the last count */
	if (n_live < 0 || !ag_state.connected)
		return d->need;
	snprintf(what, sizeof(what), "callers:%s", d->key);
	n = ag_fleet_since(&ag_state.c, what, ag_state.redis_now > CALLED_WINDOW_MS ? ag_state.redis_now - CALLED_WINDOW_MS : 0, callers,
		     MEMBERS_MAX, err, sizeof(err));
	if (n < 0)
		return d->need;
	for (int i = 0; i < n; i++)
		count += (uint32_t)is_live(callers[i]);
	/* a live voter called it too, reported or not yet */
	for (int i = 0; i < d->nvotes; i++) {
		int listed = 0;

		for (int k = 0; k < n && !listed; k++)
			listed = strcmp(callers[k], d->votes[i].node) == 0;
		count += (uint32_t)(!listed && d->votes[i].exp_ms > ag_state.redis_now);
	}
	*callers_out = count;
	d->need = (uint32_t)(((uint64_t)count * (uint64_t)ag_state.quorum_pct + 99) / 100) ?: 1;
	return d->need;
}

/* Count the live votes of every destination that changed or whose
 * earliest vote ran out, and hold open here what a quorum reports open. */
void ag_apply_fleet(uint64_t now)
{
	uint64_t lease = ag_lease_ms();
	struct dst *d, *tmp;

	HASH_ITER(hh, ag_state.dests, d, tmp) {
		char nodes[NS_FLEET_NODES_LEN], q[96];
		size_t o = 0;
		uint32_t live = 0, need, ncallers = 0;
		int slot;

		/* a share quorum moves with the callers: a held destination is
		 * counted again every pass */
		if (!d->dirty && !d->held && !(d->next_exp && d->next_exp <= ag_state.redis_now))
			continue;
		d->next_exp = 0;
		nodes[0] = '\0';
		for (int i = 0; i < d->nvotes; i++) {
			if (d->votes[i].exp_ms <= ag_state.redis_now)
				continue;
			live++;
			if (!d->next_exp || d->votes[i].exp_ms < d->next_exp)
				d->next_exp = d->votes[i].exp_ms;
			if (o + strlen(d->votes[i].node) + 2 < sizeof(nodes))
				o += (size_t)snprintf(nodes + o, sizeof(nodes) - o, "%s%s", o ? "," : "",
						      d->votes[i].node);
		}
		d->dirty = 0;
		need = live ? needed(d, &ncallers) : (uint32_t)ag_state.quorum;
		if (!need) {
			d->dirty = 1;   /* the callers could not be counted: look again next pass */
			continue;
		}
		if (ag_state.quorum_pct)
			snprintf(q, sizeof(q), "quorum %u: %d%% of %u live callers", need, ag_state.quorum_pct, ncallers);
		else
			snprintf(q, sizeof(q), "quorum %d", ag_state.quorum);
		if (live >= need) {
			if ((slot = fleet_slot(d)) < 0)
				continue;   /* said once by fleet_slot */
			ns_table_fleet_set(&ag_state.t, slot, now + lease, nodes, live);
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

void ag_release_all(const char *why)
{
	struct dst *d, *tmp;

	HASH_ITER(hh, ag_state.dests, d, tmp)
		if (d->held)
			release(d, why);
}

/* Publish what changed here: our votes (a new open, a renewal after a
 * failed probe, a withdrawal when it closed or while suspect). A vote whose
 * open period ran out while the breaker waits for its probe is left to
 * expire in Redis by itself: no command for it. */
int ag_reconcile(uint64_t now, char *err, size_t len)
{
	struct dst *d, *tmp;
	int rc;

	HASH_ITER(hh, ag_state.dests, d, tmp) {
		int want = !ag_state.suspect && d->want_t > now, mine = has_vote(d, ag_state.node) >= 0;
		/* a manual open's vote is renewed when half its lease is gone */
		int renew = d->manual ? d->my_t < now + ag_lease_ms() / 2 : d->my_t != d->want_t;

		if (want && (!mine || renew)) {
			uint64_t ttl = d->want_t - now;

			if ((rc = ag_fleet_change(&ag_state.c, FL_VOTE, d->key, ag_state.node, ttl, d->rule, err, len)) != FL_OK)
				return rc;
			if (!d->my_t)
				ag_log("%s: open here%s%s; vote published (expires in %llu ms)", d->key,
				       d->rule[0] ? ", rule " : "", d->rule, (unsigned long long)ttl);
			d->my_t = d->want_t;
			own_vote(d, ag_state.redis_now + ttl, 1);
		} else if (!want && mine && (ag_state.suspect || !d->tripped)) {
			if ((rc = ag_fleet_change(&ag_state.c, FL_UNVOTE, d->key, ag_state.node, 0, NULL, err, len)) != FL_OK)
				return rc;
			ag_log("%s: vote withdrawn (%s)", d->key, ag_state.suspect ? "node suspect" : "no longer open here");
			d->my_t = 0;
			own_vote(d, 0, 0);
		}
	}
	return FL_OK;
}

int ag_publish_ops(char *err, size_t len)
{
	while (ag_state.nops) {
		struct op *o = &ag_state.ops[0];
		int rc = ag_fleet_change(&ag_state.c, o->op, o->key, ag_state.node, o->ttl_ms, NULL, err, len);

		if (rc == FL_DOWN)
			return rc;
		if (rc == FL_OK && o->op == FL_COOLDOWN)
			ag_log("%s: a Retry-After here (%llu ms left): sent to the fleet", o->key,
			       (unsigned long long)o->ttl_ms);
		else if (rc == FL_OK)
			ag_log("%s: %s here by an operator: sent to the fleet", o->key,
			       o->op == FL_RESET ? "reset" : "forced open");
		else
			ag_log("%s: %s not accepted by Redis: %s", o->key, ag_fleet_op_name(o->op), err);
		memmove(&ag_state.ops[0], &ag_state.ops[1], (size_t)(--ag_state.nops) * sizeof(ag_state.ops[0]));
	}
	return FL_OK;
}

uint64_t ag_next_rand(void)
{
	ag_state.rng ^= ag_state.rng << 13;
	ag_state.rng ^= ag_state.rng >> 7;
	ag_state.rng ^= ag_state.rng << 17;
	return ag_state.rng;
}

/* Did the store lose its data since the last poll? Its counter is behind
 * what was seen, or its epoch is not the one it had (even when the counter
 * has since caught up: other agents' changes after the loss). */
int ag_went_back(int shard, const struct fl_store *st)
{
	const struct shard_state *h = &ag_state.sh[shard];

	return st->seq < h->since || (h->epoch[0] && strcmp(st->epoch, h->epoch) != 0);
}

/* The store's epoch, named by the first agent that finds none. */
int ag_adopt_epoch(int shard, const struct fl_store *st, char *err, size_t len)
{
	char mine[20];

	if (st->epoch[0]) {
		snprintf(ag_state.sh[shard].epoch, sizeof(ag_state.sh[shard].epoch), "%s", st->epoch);
		return FL_OK;
	}
	snprintf(mine, sizeof(mine), "%016llx", (unsigned long long)ag_next_rand());
	return ag_fleet_set_epoch(&ag_state.c, shard, mine, err, len);   /* the next poll adopts whichever was set first */
}

/* What Redis holds is unknown until the next full poll: no vote is known,
 * and this node's own are to be published again. */
void ag_forget_votes(void)
{
	struct dst *d, *tmp;

	HASH_ITER(hh, ag_state.dests, d, tmp) {
		set_votes(d, NULL, 0);
		d->my_t = 0;
	}
}

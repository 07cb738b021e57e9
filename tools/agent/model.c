/* model.c -- the fleet's data model in Redis (redislink.c carries its
 * commands).
 *
 * Every key of a fleet carries the hash tag {FLEET}, so a fleet lives in
 * one slot of a Redis Cluster and one script may touch all its keys. With
 * --shards N the keys are in N groups, each a fleet of its own under its
 * tag (shard_tags: {FLEET.i.K}, spread over a cluster's masters), a
 * destination's keys in the group its name hashes to; the members are in
 * group 0. Within a group:
 *
 *   netshim:{F}:seq          counter, one step per change
 *   netshim:{F}:changes      sorted set: destination -> seq of its last change
 *   netshim:{F}:votes:DEST   hash: node -> "EXPIRY_MS RULE" (Redis time); the
 *                            key expires a minute after its latest vote; and
 *                            "~cooldown" -> "UNTIL_MS NODE": a server's
 *                            Retry-After seen on NODE (not a node name, so
 *                            never counted as a vote; a reset clears it too)
 *   netshim:{F}:cmd:DEST     hash: seq, op (reset | forced_open), node, at:
 *                            the last operator command for DEST
 *   netshim:{F}:hint         pub/sub channel: the seq of each change, a hint
 *                            only (messages are lost while a subscriber is
 *                            away): an agent woken by it polls at once
 *
 *   netshim:{F}:members      sorted set: node -> its last heartbeat (Redis ms)
 *   netshim:{F}:callers:DEST sorted set: node -> when it last called DEST
 *                            (--quorum N%: a share of the live callers)
 *   netshim:{F}:epoch        a random name the first agent to find it missing
 *                            sets (SET NX): a store that lost its data
 *                            (FLUSHDB, a restart without it, a lagging replica
 *                            promoted) shows as another epoch or none, even
 *                            when its seq has since caught up
 *
 * A change is one script (atomic): it writes the vote or command, takes the
 * next seq and files the destination under it in changes. A poll is TIME,
 * GET seq and GET epoch (a store that went back) and ZRANGEBYSCORE changes
 * (since +inf: nothing when nothing changed, so
 * its cost follows the changes, not the fleet's size), then HGETALL of the
 * votes and command of each destination that changed. Votes are never
 * trusted to be deleted: a reader counts only those whose expiry is ahead
 * of Redis's own clock, so the nodes' clocks never matter. */
#include <ctype.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#include <hiredis/hiredis.h>

#include "agent.h"
#include "hmac.h"

/* ARGV: op, dest, node, AT (Redis ms, the agent's reckoning: a vote's
 * expiry, a cooldown's end, a command's time), VALUE (what is stored: a
 * vote's "EXPIRY RULE[ SIG]", a cooldown's "UNTIL NODE[ SIG]", a command's
 * signature or "-"), the hint channel. The agent reckons the times so that
 * it can sign them (--fleet-key-file); they are Redis's clock all the same
 * (its last TIME and the agent's monotonic clock since). */
static const char change_script[] =
	"local t = redis.call('TIME')\n"
	"local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
	"local op = ARGV[1]\n"
	"local at = tonumber(ARGV[4])\n"
	"local keep = math.max(at - now, 0) + 60000\n"
	"if op == 'vote' then\n"
	"  redis.call('HSET', KEYS[3], ARGV[3], ARGV[5])\n"
	"  if redis.call('PTTL', KEYS[3]) < keep then redis.call('PEXPIRE', KEYS[3], keep) end\n"
	"elseif op == 'unvote' then\n"
	"  if redis.call('HDEL', KEYS[3], ARGV[3]) == 0 then return 0 end\n"
	"elseif op == 'reset' then\n"
	"  redis.call('DEL', KEYS[3])\n"
	"elseif op == 'cooldown' then\n"
	"  local cur = redis.call('HGET', KEYS[3], '~cooldown')\n"
	"  if cur and tonumber(string.match(cur, '^%d+')) >= at then return 0 end\n"
	"  redis.call('HSET', KEYS[3], '~cooldown', ARGV[5])\n"
	"  if redis.call('PTTL', KEYS[3]) < keep then redis.call('PEXPIRE', KEYS[3], keep) end\n"
	"end\n"
	"local s = redis.call('INCR', KEYS[1])\n"
	"if op == 'reset' or op == 'forced_open' then\n"
	"  redis.call('HSET', KEYS[4], 'seq', s, 'op', op, 'node', ARGV[3], 'at', ARGV[4], 'sig', ARGV[5])\n"
	"end\n"
	"redis.call('ZADD', KEYS[2], s, ARGV[2])\n"
	"redis.call('PUBLISH', ARGV[6], s)\n"
	"return s\n";

static const char *const op_names[] = { "vote", "unvote", "reset", "forced_open", "cooldown" };

const char *ag_fleet_op_name(int op)
{
	return op >= 0 && op <= FL_COOLDOWN ? op_names[op] : "?";
}

int ag_fleet_name_ok(const char *s)
{
	size_t n = strlen(s);

	if (n == 0 || n >= AG_NAME_MAX)
		return 0;
	for (; *s; s++)
		if (!isalnum((unsigned char)*s) && *s != '.' && *s != '_' && *s != '-')
			return 0;
	return 1;
}

static uint64_t num(const char *s)
{
	return s ? strtoull(s, NULL, 10) : 0;
}

/* Redis's clock now, reckoned from its last TIME (0: none yet). */
uint64_t ag_fleet_redis_now(const struct fl_conn *c)
{
	return c->redis_ms ? c->redis_ms + (ctl_mono_ms() - c->redis_mono) : 0;
}

static void saw_time(struct fl_conn *c, const redisReply *t)
{
	if (t->type == REDIS_REPLY_ARRAY && t->elements == 2 && t->element[0]->str && t->element[1]->str) {
		c->redis_ms = num(t->element[0]->str) * 1000 + num(t->element[1]->str) / 1000;
		c->redis_mono = ctl_mono_ms();
	}
}

/**** signatures (--fleet-key-file) ****
 *
 * With fleet keys, what an agent writes carries the first key's HMAC-SHA-256
 * (the first 16 bytes, in hex) of what it means: a vote of the fleet, for a
 * destination, by a node, until a time, by a rule; a cooldown until a time;
 * an operator command at a time. A reader believes only what any of the keys
 * signed: a writer of Redis without the key can delete (which makes the
 * fleet do less, never more) but not vote or command. */
static void sign_with(const struct fl_conn *c, int k, const char *kind, const char *dest, const char *node,
		      const char *a, const char *b, char out[FL_SIG_LEN + 1])
{
	unsigned char mac[SHA256_LEN];
	char msg[16 + AG_NAME_MAX + NS_KEY_MAX + AG_NAME_MAX + 64 + AG_RULE_MAX];
	int n = snprintf(msg, sizeof(msg), "%s%c%s%c%s%c%s%c%s%c%s", kind, 0, c->fleet, 0, dest, 0, node, 0, a, 0, b);

	ag_hmac_sha256(c->keys[k], c->keylen[k], msg, n < 0 ? 0 : (size_t)n < sizeof(msg) ? (size_t)n : sizeof(msg) - 1,
		    mac);
	for (int i = 0; i < FL_SIG_LEN / 2; i++)
		snprintf(out + 2 * i, 3, "%02x", mac[i]);
}

static int signed_ok(struct fl_conn *c, const char *sig, const char *kind, const char *dest, const char *node,
		     const char *a, const char *b)
{
	char want[FL_SIG_LEN + 1];

	if (!c->nkeys)
		return 1;
	for (int k = 0; sig && strlen(sig) == FL_SIG_LEN && k < c->nkeys; k++) {
		unsigned diff = 0;

		sign_with(c, k, kind, dest, node, a, b, want);
		for (int i = 0; i < FL_SIG_LEN; i++)
			diff |= (unsigned)(want[i] ^ sig[i]);
		if (!diff)
			return 1;
	}
	c->unsigned_seen++;
	return 0;
}

/**** shards ****
 *
 * With --shards 1 (the default) a fleet's keys are under the one tag
 * {FLEET}. With N > 1, shard i's tag is FLEET.i.K, K the first number that
 * puts the tag's cluster slot near the middle of the i-th of N equal slot
 * ranges: a cluster whose masters split the slots evenly (redis-cli
 * --cluster create does) serves the shards from all its masters, and every
 * agent computes the same tags without asking anyone. A destination's
 * shard is a hash of its name. */
static void shard_tags(struct fl_conn *c, const char *fleet, int nshards)
{
	c->nshards = nshards < 1 ? 1 : nshards > FL_SHARDS_MAX ? FL_SHARDS_MAX : nshards;
	for (int i = 0; i < c->nshards; i++) {
		char tag[AG_NAME_MAX + 24];

		snprintf(tag, sizeof(tag), "%s", fleet);
		for (unsigned k = 0; c->nshards > 1; k++) {
			int centre = (2 * i + 1) * 16384 / (2 * c->nshards);

			snprintf(tag, sizeof(tag), "%s.%d.%u", fleet, i, k);
			if (abs(ag_redis_slot(tag) - centre) < 16384 / (4 * c->nshards))
				break;
		}
		snprintf(c->shard[i].prefix, sizeof(c->shard[i].prefix), "netshim:{%s}:", tag);
		c->shard[i].slot = ag_redis_slot(tag);
	}
}

int ag_fleet_dest_shard(const struct fl_conn *c, const char *dest)
{
	uint32_t h = 2166136261u;

	for (const unsigned char *p = (const unsigned char *)dest; *p; p++)
		h = (h ^ *p) * 16777619u;
	return c->nshards > 1 ? (int)(h % (uint32_t)c->nshards) : 0;
}

/* Talk to shard s: its link and its keys' prefix. */
static struct fl_link *use(struct fl_conn *c, int s)
{
	if (s < 0 || s >= c->nshards)
		s = 0;
	c->prefix = c->shard[s].prefix;
	return c->cur = &c->links[c->shard[s].link < c->nlinks ? c->shard[s].link : 0];
}

struct fl_link *ag_fleet_use(struct fl_conn *c, const char *dest)
{
	return use(c, ag_fleet_dest_shard(c, dest));
}

static int command(struct fl_conn *c, redisReply **out, char *err, size_t len, int argc, const char **argv)
{
	return ag_redis_command(c, c->cur, out, err, len, argc, argv);
}

void ag_fleet_close(struct fl_conn *c)
{
	ag_redis_close_all(c);
}

int ag_fleet_connect(struct fl_conn *c, const struct fl_url *u, const char *fleet, int nshards, int timeout_ms,
	       char *err, size_t len)
{
	const char *time_argv[] = { "TIME" };
	redisReply *t;
	int rc;

	ag_fleet_close(c);
	c->url = *u;
	c->timeout_ms = timeout_ms;
	c->script = change_script;
	snprintf(c->fleet, sizeof(c->fleet), "%s", fleet);
	shard_tags(c, fleet, nshards);
	if ((rc = ag_redis_route(c, err, len)) != FL_OK)
		return rc;
	/* Redis's clock, for the times this agent writes before its first poll */
	use(c, 0);
	if ((rc = command(c, &t, err, len, 1, time_argv)) != FL_OK) {
		ag_fleet_close(c);
		return rc;
	}
	saw_time(c, t);
	freeReplyObject(t);
	return FL_OK;
}

int ag_fleet_reroute(struct fl_conn *c, char *err, size_t len)
{
	return ag_redis_route(c, err, len);
}

int ag_fleet_seq(struct fl_conn *c, int shard, uint64_t *seq, char *err, size_t len)
{
	char key[FL_PREFIX_MAX + 16];
	const char *argv[] = { "GET", key };
	redisReply *r;
	int rc;

	use(c, shard);
	snprintf(key, sizeof(key), "%sseq", c->prefix);
	if ((rc = command(c, &r, err, len, 2, argv)) != FL_OK)
		return rc;
	*seq = r->type == REDIS_REPLY_STRING ? num(r->str) : 0;
	freeReplyObject(r);
	return FL_OK;
}

int ag_fleet_append_change(struct fl_conn *c, int op, const char *dest, const char *node, uint64_t ttl_ms,
		     const char *rule)
{
	char k[4][FL_PREFIX_MAX + NS_KEY_MAX + 16], at[24], chan[FL_PREFIX_MAX + 8];
	char value[24 + AG_NAME_MAX + FL_SIG_LEN + 4], sig[FL_SIG_LEN + 1] = "-";
	const char *argv[13], *what = rule && *rule ? rule : "-";
	uint64_t now = ag_fleet_redis_now(c);

	/* a command's time is now; a vote's and a cooldown's, when they end */
	snprintf(at, sizeof(at), "%llu", (unsigned long long)(op == FL_RESET || op == FL_FORCE ? now : now + ttl_ms));
	if (op == FL_VOTE) {
		if (c->nkeys)
			sign_with(c, 0, "vote", dest, node, at, what, sig);
		snprintf(value, sizeof(value), "%s %s%s%s", at, what, c->nkeys ? " " : "", c->nkeys ? sig : "");
	} else if (op == FL_COOLDOWN) {
		if (c->nkeys)
			sign_with(c, 0, "cooldown", dest, node, at, "", sig);
		snprintf(value, sizeof(value), "%s %s%s%s", at, node, c->nkeys ? " " : "", c->nkeys ? sig : "");
	} else {
		if (c->nkeys)
			sign_with(c, 0, "cmd", dest, node, at, ag_fleet_op_name(op), sig);
		snprintf(value, sizeof(value), "%s", sig);
	}
	use(c, ag_fleet_dest_shard(c, dest));
	snprintf(k[0], sizeof(k[0]), "%sseq", c->prefix);
	snprintf(k[1], sizeof(k[1]), "%schanges", c->prefix);
	snprintf(k[2], sizeof(k[2]), "%svotes:%s", c->prefix, dest);
	snprintf(k[3], sizeof(k[3]), "%scmd:%s", c->prefix, dest);
	snprintf(chan, sizeof(chan), "%shint", c->prefix);
	argv[0] = "EVALSHA";
	argv[1] = c->sha;
	argv[2] = "4";
	for (int i = 0; i < 4; i++)
		argv[3 + i] = k[i];
	argv[7] = ag_fleet_op_name(op);
	argv[8] = dest;
	argv[9] = node;
	argv[10] = at;
	argv[11] = value;
	argv[12] = chan;
	return ag_redis_append(c->cur, 13, argv);
}

int ag_fleet_collect(struct fl_conn *c, char *err, size_t len)
{
	int rc = FL_OK;

	for (int i = 0; i < c->nlinks; i++) {
		struct fl_link *l = &c->links[i];

		while (l->qn) {
			void *v = NULL;
			redisReply *r;

			if (ag_redis_reply(c, l, &v) != REDIS_OK || !v) {
				snprintf(err, len, "%s", c->why);
				return FL_DOWN;
			}
			r = v;
			if (r->type == REDIS_REPLY_ERROR && rc == FL_OK) {
				snprintf(err, len, "%s", r->str);
				/* the script cache was flushed: a new connection loads it again */
				rc = strncmp(r->str, "NOSCRIPT", 8) == 0 ? FL_DOWN : FL_REFUSED;
			}
			freeReplyObject(r);
		}
	}
	return rc;
}

int ag_fleet_change(struct fl_conn *c, int op, const char *dest, const char *node, uint64_t ttl_ms, const char *rule,
	      char *err, size_t len)
{
	if (ag_fleet_append_change(c, op, dest, node, ttl_ms, rule) != FL_OK) {
		snprintf(err, len, "cannot queue a command");
		return FL_DOWN;
	}
	return ag_fleet_collect(c, err, len);
}

/* The shard in use's changes after since, queued. */
static int append_changes(struct fl_conn *c, uint64_t since)
{
	char key[FL_PREFIX_MAX + 16], min[32];
	const char *z[] = { "ZRANGEBYSCORE", key, min, "+inf", "WITHSCORES" };

	snprintf(key, sizeof(key), "%schanges", c->prefix);
	snprintf(min, sizeof(min), "(%llu", (unsigned long long)since);
	return ag_redis_append(c->cur, 5, z);
}

int ag_fleet_append_poll(struct fl_conn *c, int shard, uint64_t since)
{
	char seq[FL_PREFIX_MAX + 16], epoch[FL_PREFIX_MAX + 16];
	const char *time_argv[] = { "TIME" };
	const char *g[] = { "GET", seq };
	const char *e[] = { "GET", epoch };

	use(c, shard);
	snprintf(seq, sizeof(seq), "%sseq", c->prefix);
	snprintf(epoch, sizeof(epoch), "%sepoch", c->prefix);
	if (ag_redis_append(c->cur, 1, time_argv) != FL_OK || ag_redis_append(c->cur, 2, g) != FL_OK ||
	    ag_redis_append(c->cur, 2, e) != FL_OK || append_changes(c, since) != FL_OK)
		return FL_DOWN;
	return FL_OK;
}

static int get_reply(struct fl_conn *c, redisReply **r, int type, char *err, size_t len)
{
	void *v = NULL;

	if (ag_redis_reply(c, c->cur, &v) != REDIS_OK || !v) {
		snprintf(err, len, "%s", c->why);
		return FL_DOWN;
	}
	*r = v;
	if (type < 0 ? (*r)->type == REDIS_REPLY_ERROR : (*r)->type != type) {
		snprintf(err, len, "unexpected reply%s%s", (*r)->type == REDIS_REPLY_ERROR ? ": " : "",
			 (*r)->type == REDIS_REPLY_ERROR ? (*r)->str : "");
		freeReplyObject(*r);
		*r = NULL;
		return FL_DOWN;
	}
	return FL_OK;
}

/* "A B C": up to three words of a stored value (more is no value of ours). */
static int words(const char *v, char w[3][NS_KEY_MAX])
{
	int n = 0;

	while (*v && n < 3) {
		size_t k = strcspn(v, " ");

		if (k == 0 || k >= NS_KEY_MAX)
			return -1;
		memcpy(w[n], v, k);
		w[n++][k] = '\0';
		v += k;
		if (*v == ' ')
			v++;
	}
	return *v ? -1 : n;
}

/* One destination's votes and command, from its two HGETALL replies; with
 * fleet keys, only what is signed. */
static void parse_dest(struct fl_conn *c, struct fl_dest *d, const redisReply *votes, const redisReply *cmd)
{
	const char *op = NULL, *at = NULL, *sig = NULL;

	d->nvotes = 0;
	d->cool_until = 0;
	d->cool_node[0] = '\0';
	for (size_t i = 0; i + 1 < votes->elements; i += 2) {
		const redisReply *k = votes->element[i], *v = votes->element[i + 1];
		struct fl_vote *w = &d->votes[d->nvotes];
		char f[3][NS_KEY_MAX];
		int n;

		if (k->type != REDIS_REPLY_STRING || v->type != REDIS_REPLY_STRING || (n = words(v->str, f)) < 1)
			continue;
		if (strcmp(k->str, "~cooldown") == 0) {
			/* UNTIL NODE [SIG] */
			if (n >= 2 && ag_fleet_name_ok(f[1]) &&
			    signed_ok(c, n == 3 ? f[2] : NULL, "cooldown", d->dest, f[1], f[0], "")) {
				d->cool_until = num(f[0]);
				snprintf(d->cool_node, sizeof(d->cool_node), "%.*s", (int)sizeof(d->cool_node) - 1, f[1]);
			}
			continue;
		}
		/* EXPIRY [RULE [SIG]] */
		if (!ag_fleet_name_ok(k->str) ||
		    !signed_ok(c, n == 3 ? f[2] : NULL, "vote", d->dest, k->str, f[0], n >= 2 ? f[1] : "-"))
			continue;
		snprintf(w->node, sizeof(w->node), "%s", k->str);
		w->exp_ms = num(f[0]);
		/* a rule is a word of the policy's (logged, and shown): nothing else is kept */
		w->rule[0] = '\0';
		if (n >= 2) {
			size_t r = 0;

			for (const char *p = f[1]; r + 1 < sizeof(w->rule) && (isalnum((unsigned char)*p) || *p == '_'); p++)
				w->rule[r++] = *p;
			w->rule[r] = '\0';
		}
		d->nvotes++;
	}
	d->cmd_seq = 0;
	d->cmd_at = 0;
	d->cmd_op = -1;
	d->cmd_node[0] = '\0';
	for (size_t i = 0; i + 1 < cmd->elements; i += 2) {
		const char *k = cmd->element[i]->str, *v = cmd->element[i + 1]->str;

		if (!k || !v)
			continue;
		if (strcmp(k, "seq") == 0)
			d->cmd_seq = num(v);
		else if (strcmp(k, "op") == 0)
			op = v;
		else if (strcmp(k, "at") == 0)
			at = v;
		else if (strcmp(k, "sig") == 0)
			sig = v;
		else if (strcmp(k, "node") == 0 && ag_fleet_name_ok(v))
			snprintf(d->cmd_node, sizeof(d->cmd_node), "%s", v);
	}
	if (op)
		d->cmd_op = strcmp(op, "reset") == 0 ? FL_RESET : strcmp(op, "forced_open") == 0 ? FL_FORCE : -1;
	d->cmd_at = num(at);
	if (d->cmd_op < 0 || (d->cmd_seq && !signed_ok(c, sig, "cmd", d->dest, d->cmd_node, at ? at : "", op)))
		d->cmd_seq = 0;
}

/* A ZRANGEBYSCORE of the changes read (z, freed here): each destination's
 * two hashes, handed to fn; *high the last change. */
static int read_changes(struct fl_conn *c, redisReply *z, fl_dest_fn fn, void *arg, uint64_t *high, char *err,
			size_t len)
{
	struct fl_vote *votes = NULL;
	size_t nd = z->elements / 2;
	int rc = FL_OK;

	for (size_t i = 0; i < nd; i++) {
		char key[FL_PREFIX_MAX + 16 + NS_KEY_MAX];
		const char *dest = z->element[2 * i]->str;
		const char *hv[] = { "HGETALL", key };

		if (!dest)
			continue;
		snprintf(key, sizeof(key), "%svotes:%s", c->prefix, dest);
		if (ag_redis_append(c->cur, 2, hv) != FL_OK)
			rc = FL_DOWN;
		snprintf(key, sizeof(key), "%scmd:%s", c->prefix, dest);
		if (ag_redis_append(c->cur, 2, hv) != FL_OK)
			rc = FL_DOWN;
	}
	if (rc != FL_OK)
		snprintf(err, len, "cannot queue a command");
	for (size_t i = 0; i < nd && rc == FL_OK; i++) {
		redisReply *v = NULL, *m = NULL;
		struct fl_dest d;

		if (!z->element[2 * i]->str)
			continue;
		if ((rc = get_reply(c, &v, REDIS_REPLY_ARRAY, err, len)) != FL_OK)
			break;
		if ((rc = get_reply(c, &m, REDIS_REPLY_ARRAY, err, len)) != FL_OK) {
			freeReplyObject(v);
			break;
		}
		free(votes);
		votes = calloc(v->elements / 2 + 1, sizeof(*votes));
		if (!votes) {
			snprintf(err, len, "out of memory");
			rc = FL_DOWN;
		} else {
			memset(&d, 0, sizeof(d));
			d.dest = z->element[2 * i]->str;
			d.votes = votes;
			d.seq = num(z->element[2 * i + 1]->str);
			parse_dest(c, &d, v, m);
			if (strlen(d.dest) < NS_KEY_MAX)
				fn(arg, &d);
			if (d.seq > *high)
				*high = d.seq;
		}
		freeReplyObject(v);
		freeReplyObject(m);
	}
	free(votes);
	freeReplyObject(z);
	return rc;
}

int ag_fleet_poll(struct fl_conn *c, int shard, uint64_t since, fl_dest_fn fn, void *arg, uint64_t *redis_now_ms,
	    uint64_t *high, struct fl_store *store, char *err, size_t len)
{
	redisReply *t = NULL, *z = NULL, *q = NULL, *e = NULL;
	int rc;

	*high = since;
	if (ag_fleet_append_poll(c, shard, since) != FL_OK) {
		snprintf(err, len, "cannot queue a command");
		return FL_DOWN;
	}
	if ((rc = get_reply(c, &t, REDIS_REPLY_ARRAY, err, len)) != FL_OK)
		return rc;
	if ((rc = get_reply(c, &q, -1, err, len)) != FL_OK || (rc = get_reply(c, &e, -1, err, len)) != FL_OK ||
	    (rc = get_reply(c, &z, REDIS_REPLY_ARRAY, err, len)) != FL_OK) {
		freeReplyObject(t);
		if (q)
			freeReplyObject(q);
		if (e)
			freeReplyObject(e);
		return rc;
	}
	saw_time(c, t);
	*redis_now_ms = c->redis_ms;
	if (store) {
		store->seq = q->type == REDIS_REPLY_STRING ? num(q->str) : 0;
		snprintf(store->epoch, sizeof(store->epoch), "%.*s",
			 e->type == REDIS_REPLY_STRING && e->len < sizeof(store->epoch) ? (int)e->len : 0,
			 e->type == REDIS_REPLY_STRING ? e->str : "");
	}
	freeReplyObject(t);
	freeReplyObject(q);
	freeReplyObject(e);
	return read_changes(c, z, fn, arg, high, err, len);
}

int ag_fleet_poll_changes(struct fl_conn *c, int shard, uint64_t since, fl_dest_fn fn, void *arg, uint64_t *redis_now_ms,
		    uint64_t *high, char *err, size_t len)
{
	redisReply *r;
	int rc;

	*high = since;
	use(c, shard);
	if (append_changes(c, since) != FL_OK) {
		snprintf(err, len, "cannot queue a command");
		return FL_DOWN;
	}
	if ((rc = get_reply(c, &r, REDIS_REPLY_ARRAY, err, len)) != FL_OK)
		return rc;
	*redis_now_ms = ag_fleet_redis_now(c);
	return read_changes(c, r, fn, arg, high, err, len);
}

int ag_fleet_set_epoch(struct fl_conn *c, int shard, const char *epoch, char *err, size_t len)
{
	char key[FL_PREFIX_MAX + 16];
	const char *argv[] = { "SET", key, epoch, "NX" };
	redisReply *r;
	int rc;

	use(c, shard);
	snprintf(key, sizeof(key), "%sepoch", c->prefix);
	if ((rc = command(c, &r, err, len, 4, argv)) != FL_OK)
		return rc;
	freeReplyObject(r);
	return FL_OK;
}

/**** ag_membership: heartbeats and callers (--quorum N%) ****
 *
 * The members are in shard 0; a destination's callers in its shard. */

int ag_fleet_heartbeat(struct fl_conn *c, const char *node, uint64_t now_ms, const char *dest_called, char *err,
		 size_t len)
{
	char key[FL_PREFIX_MAX + 16 + NS_KEY_MAX], score[24], old[24];
	const char *z[] = { "ZADD", key, score, node };
	redisReply *r;
	int rc;

	snprintf(score, sizeof(score), "%llu", (unsigned long long)now_ms);
	if (dest_called) {
		const char *ex[] = { "PEXPIRE", key, "3600000" };

		use(c, ag_fleet_dest_shard(c, dest_called));
		snprintf(key, sizeof(key), "%scallers:%s", c->prefix, dest_called);
		if (ag_redis_append(c->cur, 4, z) != FL_OK || ag_redis_append(c->cur, 3, ex) != FL_OK)
			return FL_DOWN;
		return ag_fleet_collect(c, err, len);
	}
	use(c, 0);
	snprintf(key, sizeof(key), "%smembers", c->prefix);
	if ((rc = command(c, &r, err, len, 4, z)) != FL_OK)
		return rc;
	freeReplyObject(r);
	/* members silent an hour are gone for good */
	if (now_ms > 3600000) {
		const char *rm[] = { "ZREMRANGEBYSCORE", key, "-inf", old };

		snprintf(old, sizeof(old), "(%llu", (unsigned long long)(now_ms - 3600000));
		if ((rc = command(c, &r, err, len, 4, rm)) != FL_OK)
			return rc;
		freeReplyObject(r);
	}
	return FL_OK;
}

int ag_fleet_since(struct fl_conn *c, const char *what, uint64_t since_ms, char names[][AG_NAME_MAX], int max,
	     char *err, size_t len)
{
	char key[FL_PREFIX_MAX + 16 + NS_KEY_MAX], min[24];
	const char *z[] = { "ZRANGEBYSCORE", key, min, "+inf" };
	redisReply *r;
	int rc, n = 0;

	use(c, strncmp(what, "callers:", 8) == 0 ? ag_fleet_dest_shard(c, what + 8) : 0);
	snprintf(key, sizeof(key), "%s%s", c->prefix, what);
	snprintf(min, sizeof(min), "%llu", (unsigned long long)since_ms);
	if ((rc = command(c, &r, err, len, 4, z)) != FL_OK)
		return rc;
	for (size_t i = 0; r->type == REDIS_REPLY_ARRAY && i < r->elements && n < max; i++)
		if (r->element[i]->type == REDIS_REPLY_STRING && ag_fleet_name_ok(r->element[i]->str))
			snprintf(names[n++], AG_NAME_MAX, "%s", r->element[i]->str);
	freeReplyObject(r);
	return n;
}

/**** the hint channels: one per shard, on one connection ****
 *
 * A cluster delivers a PUBLISH to the subscribers of every node, so the
 * subscription goes to a node picked at random among those the fleet's
 * connection last saw (replicas too): a fleet's subscribers spread over
 * the cluster instead of all landing on one node. */
int ag_fleet_subscribe(struct fl_conn *sub, const struct fl_conn *c, uint64_t pick, char *err, size_t len)
{
	const char *argv[1 + FL_SHARDS_MAX];
	char chan[FL_SHARDS_MAX][FL_PREFIX_MAX + 8];
	int rc = FL_DOWN;

	ag_fleet_close(sub);
	sub->url = c->url;
	sub->timeout_ms = c->timeout_ms;
	sub->script = NULL;
	sub->nshards = c->nshards;
	for (int i = 0; i < c->nshards; i++)
		memcpy(sub->shard[i].prefix, c->shard[i].prefix, sizeof(sub->shard[i].prefix));
	if (c->cluster && c->nknown) {
		int k = (int)(pick % (uint64_t)c->nknown);

		rc = ag_redis_open(sub, &sub->links[0], c->known[k].host, c->known[k].port, err, len);
	}
	if (rc != FL_OK && (rc = ag_redis_open(sub, &sub->links[0], c->url.host, c->url.port, err, len)) != FL_OK)
		return rc;
	sub->nlinks = 1;
	argv[0] = "SUBSCRIBE";
	for (int i = 0; i < c->nshards; i++) {
		snprintf(chan[i], sizeof(chan[i]), "%shint", c->shard[i].prefix);
		argv[1 + i] = chan[i];
	}
	/* one confirmation per channel */
	if (ag_redis_append(&sub->links[0], 1 + c->nshards, argv) != FL_OK)
		rc = FL_DOWN;
	for (int i = 0; i < c->nshards && rc == FL_OK; i++) {
		void *v = NULL;

		if (ag_redis_reply(sub, &sub->links[0], &v) != REDIS_OK || !v ||
		    ((redisReply *)v)->type != REDIS_REPLY_ARRAY) {
			snprintf(err, len, "SUBSCRIBE: %s", sub->why[0] ? sub->why : "unexpected reply");
			rc = FL_DOWN;
		}
		if (v)
			freeReplyObject(v);
		/* the queue holds the command once; the later confirmations have none */
	}
	if (rc != FL_OK)
		ag_fleet_close(sub);
	return rc;
}

int ag_fleet_hint_fd(const struct fl_conn *c)
{
	return c->nlinks && c->links[0].ctx ? ((const redisContext *)c->links[0].ctx)->fd : -1;
}

int ag_fleet_hint_read(struct fl_conn *c, uint64_t *max_seq)
{
	redisContext *x = c->nlinks ? c->links[0].ctx : NULL;
	void *v;
	int n = 0;

	/* the socket is readable: one read, then every whole message it held
	 * (a message larger than any reply may be: the channel is dropped) */
	if (!x || redisBufferRead(x) != REDIS_OK || x->reader->len > FL_REPLY_BYTES_MAX)
		return FL_DOWN;
	for (;;) {
		redisReply *r;

		v = NULL;
		if (redisGetReplyFromReader(x, &v) != REDIS_OK)
			return FL_DOWN;
		if (!v)
			return n;
		r = v;
		/* ["message", channel, seq]: the shard is the channel's */
		if (r->type == REDIS_REPLY_ARRAY && r->elements == 3 && r->element[1]->type == REDIS_REPLY_STRING &&
		    r->element[2]->type == REDIS_REPLY_STRING) {
			uint64_t seq = num(r->element[2]->str);

			for (int s = 0; s < c->nshards; s++) {
				size_t pl = strlen(c->shard[s].prefix);

				if (strncmp(r->element[1]->str, c->shard[s].prefix, pl) == 0 &&
				    strcmp(r->element[1]->str + pl, "hint") == 0) {
					if (seq > max_seq[s])
						max_seq[s] = seq;
					n++;
				}
			}
		}
		freeReplyObject(r);
	}
}

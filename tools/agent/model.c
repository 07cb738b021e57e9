/* model.c -- the fleet's data model in Redis, and the only code that talks
 * to Redis.
 *
 * Every key of a fleet carries the hash tag {FLEET}, so a fleet lives in
 * one slot of a Redis Cluster and one script may touch all its keys:
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

static const char change_script[] =
	"local t = redis.call('TIME')\n"
	"local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
	"local op = ARGV[1]\n"
	"if op == 'vote' then\n"
	"  local ttl = tonumber(ARGV[4])\n"
	"  redis.call('HSET', KEYS[3], ARGV[3], string.format('%d %s', now + ttl, ARGV[5]))\n"
	"  if redis.call('PTTL', KEYS[3]) < ttl + 60000 then redis.call('PEXPIRE', KEYS[3], ttl + 60000) end\n"
	"elseif op == 'unvote' then\n"
	"  if redis.call('HDEL', KEYS[3], ARGV[3]) == 0 then return 0 end\n"
	"elseif op == 'reset' then\n"
	"  redis.call('DEL', KEYS[3])\n"
	"elseif op == 'cooldown' then\n"
	"  local ttl = tonumber(ARGV[4])\n"
	"  local cur = redis.call('HGET', KEYS[3], '~cooldown')\n"
	"  if cur and tonumber(string.match(cur, '^%d+')) >= now + ttl then return 0 end\n"
	"  redis.call('HSET', KEYS[3], '~cooldown', string.format('%d %s', now + ttl, ARGV[3]))\n"
	"  if redis.call('PTTL', KEYS[3]) < ttl + 60000 then redis.call('PEXPIRE', KEYS[3], ttl + 60000) end\n"
	"end\n"
	"local s = redis.call('INCR', KEYS[1])\n"
	"if op == 'reset' or op == 'forced_open' then\n"
	"  redis.call('HSET', KEYS[4], 'seq', s, 'op', op, 'node', ARGV[3], 'at', now)\n"
	"end\n"
	"redis.call('ZADD', KEYS[2], s, ARGV[2])\n"
	"redis.call('PUBLISH', ARGV[6], s)\n"
	"return s\n";

static const char *const op_names[] = { "vote", "unvote", "reset", "forced_open", "cooldown" };

const char *fl_op_name(int op)
{
	return op >= 0 && op <= FL_COOLDOWN ? op_names[op] : "?";
}

int fl_name_ok(const char *s)
{
	size_t n = strlen(s);

	if (n == 0 || n >= AG_NAME_MAX)
		return 0;
	for (; *s; s++)
		if (!isalnum((unsigned char)*s) && *s != '.' && *s != '_' && *s != '-')
			return 0;
	return 1;
}

int fl_url_parse(const char *url, struct fl_url *u, char *err, size_t len)
{
	const char *p, *at, *end, *colon;
	char *e;
	long v;

	memset(u, 0, sizeof(*u));
	u->port = 6379;
	if (strncmp(url, "redis://", 8) != 0) {
		snprintf(err, len, "not a redis:// URL");
		return -1;
	}
	p = url + 8;
	end = p + strcspn(p, "/");
	at = memchr(p, '@', (size_t)(end - p));
	if (at) {
		colon = memchr(p, ':', (size_t)(at - p));
		if (!colon) {
			snprintf(err, len, "credentials must be [USER]:PASSWORD@");
			return -1;
		}
		if ((size_t)(colon - p) >= sizeof(u->user) || (size_t)(at - colon - 1) >= sizeof(u->pass)) {
			snprintf(err, len, "user or password too long");
			return -1;
		}
		memcpy(u->user, p, (size_t)(colon - p));
		memcpy(u->pass, colon + 1, (size_t)(at - colon - 1));
		p = at + 1;
	}
	colon = memchr(p, ':', (size_t)(end - p));
	if (*p == '[') {
		snprintf(err, len, "IPv6 literals are not supported; use a host name");
		return -1;
	}
	if ((colon ? colon : end) == p) {
		snprintf(err, len, "no host");
		return -1;
	}
	if ((size_t)((colon ? colon : end) - p) >= sizeof(u->host)) {
		snprintf(err, len, "host name too long");
		return -1;
	}
	memcpy(u->host, p, (size_t)((colon ? colon : end) - p));
	if (colon) {
		errno = 0;
		v = strtol(colon + 1, &e, 10);
		if (e == colon + 1 || e != end || v < 1 || v > 65535 || errno) {
			snprintf(err, len, "bad port");
			return -1;
		}
		u->port = (int)v;
	}
	if (*end == '/' && end[1]) {
		errno = 0;
		v = strtol(end + 1, &e, 10);
		if (e == end + 1 || *e || v < 0 || v > 1000000 || errno) {
			snprintf(err, len, "bad database number");
			return -1;
		}
		u->db = (int)v;
	}
	return 0;
}

static uint64_t num(const char *s)
{
	return s ? strtoull(s, NULL, 10) : 0;
}

static redisContext *ctx(struct fl_conn *c)
{
	return c->ctx;
}

volatile sig_atomic_t fl_stop;

/**** replies: bounded in time and in size ****
 *
 * Redis is trusted with the fleet's state, not with the agent's life: a
 * reply must arrive whole within the connection's timeout (a reply trickled
 * a byte at a time would otherwise hold every read open for ever, and with
 * it the agent's loop and its SIGTERM), and no reply may hold more than
 * FL_ELEMENTS_MAX elements or FL_BYTES_MAX bytes (a reply claiming 10^9
 * elements would otherwise be allocated as it arrives). Either is a
 * protocol error: the connection is dropped and made again, with backoff. */
#define FL_ELEMENTS_MAX (1 << 21)     /* two per destination of the largest table, and more */
#define FL_BYTES_MAX (64u << 20)      /* bytes of one reply buffered */

static const redisReplyObjectFunctions *base_fns;
static int oversized;                  /* a reader function refused: the reason of the error */

static void *cap_string(const redisReadTask *t, char *str, size_t len)
{
	if (len > FL_BYTES_MAX) {
		oversized = 1;
		return NULL;
	}
	return base_fns->createString(t, str, len);
}

static void *cap_array(const redisReadTask *t, int n)
{
	if (n < 0 || n > FL_ELEMENTS_MAX) {
		oversized = 1;
		return NULL;
	}
	return base_fns->createArray(t, n);
}

static void *cap_integer(const redisReadTask *t, long long v)
{
	return base_fns->createInteger(t, v);
}

static void *cap_nil(const redisReadTask *t)
{
	return base_fns->createNil(t);
}

static void cap_free(void *v)
{
	base_fns->freeObject(v);
}

static const redisReplyObjectFunctions capped = { cap_string, cap_array, cap_integer, cap_nil, cap_free };

static uint64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* The next reply (queued commands are sent first), within the connection's
 * timeout: REDIS_OK and *v, or REDIS_ERR with the reason in c->why. */
static int reply(struct fl_conn *c, void **v)
{
	redisContext *x = ctx(c);
	uint64_t deadline = mono_ms() + (uint64_t)c->timeout_ms;
	int done = 0;

	*v = NULL;
	c->why[0] = '\0';
	oversized = 0;
	while (!done)
		if (redisBufferWrite(x, &done) != REDIS_OK)
			goto fail;
	for (;;) {
		struct pollfd p = { .fd = x->fd, .events = POLLIN };
		uint64_t now;
		int n;

		if (redisGetReplyFromReader(x, v) != REDIS_OK)
			goto fail;
		if (*v)
			return REDIS_OK;
		if (x->reader->len > FL_BYTES_MAX) {
			oversized = 1;
			goto fail;
		}
		if (fl_stop) {
			snprintf(c->why, sizeof(c->why), "stopping");
			return REDIS_ERR;
		}
		now = mono_ms();
		if (now >= deadline) {
			snprintf(c->why, sizeof(c->why), "no whole reply within %d ms", c->timeout_ms);
			return REDIS_ERR;
		}
		n = poll(&p, 1, (int)(deadline - now));
		if (n < 0 && errno != EINTR)
			goto fail;
		if (n > 0 && redisBufferRead(x) != REDIS_OK)
			goto fail;
	}
fail:
	if (oversized)
		snprintf(c->why, sizeof(c->why), "a reply larger than %d elements or %u MiB: a protocol error",
			 FL_ELEMENTS_MAX, FL_BYTES_MAX >> 20);
	else
		snprintf(c->why, sizeof(c->why), "%s", x->errstr[0] ? x->errstr : "no reply");
	return REDIS_ERR;
}

void fl_close(struct fl_conn *c)
{
	if (c->ctx)
		redisFree(ctx(c));
	c->ctx = NULL;
}

/* A command, its reply checked: 0 and the reply (freed by the caller), or
 * FL_DOWN (no answer) / FL_REFUSED (an error reply) with the reason. */
static int command(struct fl_conn *c, redisReply **out, char *err, size_t len, int argc, const char **argv)
{
	void *v = NULL;
	redisReply *r;

	*out = NULL;
	if (redisAppendCommandArgv(ctx(c), argc, argv, NULL) != REDIS_OK || reply(c, &v) != REDIS_OK || !v) {
		snprintf(err, len, "%s", c->why[0] ? c->why : "cannot queue a command");
		return FL_DOWN;
	}
	r = v;
	if (r->type == REDIS_REPLY_ERROR) {
		snprintf(err, len, "%s: %s", argv[0], r->str);
		freeReplyObject(r);
		return FL_REFUSED;
	}
	*out = r;
	return FL_OK;
}

int fl_connect(struct fl_conn *c, const struct fl_url *u, const char *fleet, int timeout_ms, char *err, size_t len)
{
	struct timeval tv = { timeout_ms / 1000, (timeout_ms % 1000) * 1000 };
	char db[16];
	redisReply *r;
	int rc;

	fl_close(c);
	snprintf(c->prefix, sizeof(c->prefix), "netshim:{%s}:", fleet);
	c->ctx = redisConnectWithTimeout(u->host, u->port, tv);
	if (!c->ctx) {
		snprintf(err, len, "out of memory");
		return FL_DOWN;
	}
	if (ctx(c)->err) {
		snprintf(err, len, "%s:%d: %s", u->host, u->port, ctx(c)->errstr);
		fl_close(c);
		return FL_DOWN;
	}
	/* every later wait on this connection is bounded the same way, and
	 * every reply in time and size (reply) */
	redisSetTimeout(ctx(c), tv);
	redisEnableKeepAlive(ctx(c));
	c->timeout_ms = timeout_ms;
	if (!base_fns)
		base_fns = ctx(c)->reader->fn;
	ctx(c)->reader->fn = (redisReplyObjectFunctions *)&capped;
	if (u->pass[0]) {
		const char *a3[] = { "AUTH", u->user, u->pass };
		const char *a2[] = { "AUTH", u->pass };

		rc = u->user[0] ? command(c, &r, err, len, 3, a3) : command(c, &r, err, len, 2, a2);
		if (rc != FL_OK)
			goto fail;
		freeReplyObject(r);
	}
	{
		const char *ping[] = { "PING" };

		if ((rc = command(c, &r, err, len, 1, ping)) != FL_OK)
			goto fail;
		freeReplyObject(r);
	}
	if (u->db) {
		const char *sel[] = { "SELECT", db };

		snprintf(db, sizeof(db), "%d", u->db);
		if ((rc = command(c, &r, err, len, 2, sel)) != FL_OK)
			goto fail;
		freeReplyObject(r);
	}
	{
		const char *load[] = { "SCRIPT", "LOAD", change_script };

		if ((rc = command(c, &r, err, len, 3, load)) != FL_OK)
			goto fail;
		if (r->type != REDIS_REPLY_STRING || r->len >= (int)sizeof(c->sha)) {
			snprintf(err, len, "SCRIPT LOAD: unexpected reply");
			freeReplyObject(r);
			rc = FL_REFUSED;
			goto fail;
		}
		memcpy(c->sha, r->str, (size_t)r->len);
		c->sha[r->len] = '\0';
		freeReplyObject(r);
	}
	return FL_OK;
fail:
	fl_close(c);
	return rc;
}

int fl_seq(struct fl_conn *c, uint64_t *seq, char *err, size_t len)
{
	char key[AG_NAME_MAX + 32];
	const char *argv[] = { "GET", key };
	redisReply *r;
	int rc;

	snprintf(key, sizeof(key), "%sseq", c->prefix);
	if ((rc = command(c, &r, err, len, 2, argv)) != FL_OK)
		return rc;
	*seq = r->type == REDIS_REPLY_STRING ? num(r->str) : 0;
	freeReplyObject(r);
	return FL_OK;
}

int fl_append_change(struct fl_conn *c, int op, const char *dest, const char *node, uint64_t ttl_ms,
		     const char *rule)
{
	char k[4][AG_NAME_MAX + 16 + NS_KEY_MAX + 8], ttl[24], chan[AG_NAME_MAX + 24];
	const char *argv[13];

	snprintf(k[0], sizeof(k[0]), "%sseq", c->prefix);
	snprintf(k[1], sizeof(k[1]), "%schanges", c->prefix);
	snprintf(k[2], sizeof(k[2]), "%svotes:%s", c->prefix, dest);
	snprintf(k[3], sizeof(k[3]), "%scmd:%s", c->prefix, dest);
	snprintf(ttl, sizeof(ttl), "%llu", (unsigned long long)ttl_ms);
	snprintf(chan, sizeof(chan), "%shint", c->prefix);
	argv[0] = "EVALSHA";
	argv[1] = c->sha;
	argv[2] = "4";
	for (int i = 0; i < 4; i++)
		argv[3 + i] = k[i];
	argv[7] = fl_op_name(op);
	argv[8] = dest;
	argv[9] = node;
	argv[10] = ttl;
	argv[11] = rule && *rule ? rule : "-";
	argv[12] = chan;
	return redisAppendCommandArgv(ctx(c), 13, argv, NULL) == REDIS_OK ? FL_OK : FL_DOWN;
}

int fl_collect(struct fl_conn *c, int n, char *err, size_t len)
{
	int rc = FL_OK;

	for (int i = 0; i < n; i++) {
		void *v = NULL;
		redisReply *r;

		if (reply(c, &v) != REDIS_OK || !v) {
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
	return rc;
}

int fl_change(struct fl_conn *c, int op, const char *dest, const char *node, uint64_t ttl_ms, const char *rule,
	      char *err, size_t len)
{
	if (fl_append_change(c, op, dest, node, ttl_ms, rule) != FL_OK) {
		snprintf(err, len, "cannot queue a command");
		return FL_DOWN;
	}
	return fl_collect(c, 1, err, len);
}

int fl_append_poll(struct fl_conn *c, uint64_t since)
{
	char key[AG_NAME_MAX + 32], min[32], seq[AG_NAME_MAX + 32], epoch[AG_NAME_MAX + 32];
	const char *time_argv[] = { "TIME" };
	const char *z[] = { "ZRANGEBYSCORE", key, min, "+inf", "WITHSCORES" };
	const char *g[] = { "GET", seq };
	const char *e[] = { "GET", epoch };

	snprintf(key, sizeof(key), "%schanges", c->prefix);
	snprintf(seq, sizeof(seq), "%sseq", c->prefix);
	snprintf(epoch, sizeof(epoch), "%sepoch", c->prefix);
	snprintf(min, sizeof(min), "(%llu", (unsigned long long)since);
	if (redisAppendCommandArgv(ctx(c), 1, time_argv, NULL) != REDIS_OK ||
	    redisAppendCommandArgv(ctx(c), 2, g, NULL) != REDIS_OK ||
	    redisAppendCommandArgv(ctx(c), 2, e, NULL) != REDIS_OK ||
	    redisAppendCommandArgv(ctx(c), 5, z, NULL) != REDIS_OK)
		return FL_DOWN;
	return FL_OK;
}

static int get_reply(struct fl_conn *c, redisReply **r, int type, char *err, size_t len)
{
	void *v = NULL;

	if (reply(c, &v) != REDIS_OK || !v) {
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

/* One destination's votes and command, from its two HGETALL replies. */
static void parse_dest(struct fl_dest *d, const redisReply *votes, const redisReply *cmd)
{
	d->nvotes = 0;
	d->cool_until = 0;
	d->cool_node[0] = '\0';
	for (size_t i = 0; i + 1 < votes->elements; i += 2) {
		const redisReply *k = votes->element[i], *v = votes->element[i + 1];
		struct fl_vote *w = &d->votes[d->nvotes];
		char *sp;

		if (k->type != REDIS_REPLY_STRING || v->type != REDIS_REPLY_STRING)
			continue;
		if (strcmp(k->str, "~cooldown") == 0) {
			d->cool_until = strtoull(v->str, &sp, 10);
			if (*sp == ' ' && fl_name_ok(sp + 1))
				snprintf(d->cool_node, sizeof(d->cool_node), "%s", sp + 1);
			continue;
		}
		if (!fl_name_ok(k->str))
			continue;
		snprintf(w->node, sizeof(w->node), "%s", k->str);
		w->exp_ms = strtoull(v->str, &sp, 10);
		/* a rule is a word of the policy's (logged, and shown): nothing else is kept */
		w->rule[0] = '\0';
		if (*sp == ' ') {
			size_t r = 0;

			for (sp++; r + 1 < sizeof(w->rule) && (isalnum((unsigned char)*sp) || *sp == '_'); sp++)
				w->rule[r++] = *sp;
			w->rule[r] = '\0';
		}
		d->nvotes++;
	}
	d->cmd_seq = 0;
	d->cmd_op = -1;
	d->cmd_node[0] = '\0';
	for (size_t i = 0; i + 1 < cmd->elements; i += 2) {
		const char *k = cmd->element[i]->str, *v = cmd->element[i + 1]->str;

		if (!k || !v)
			continue;
		if (strcmp(k, "seq") == 0)
			d->cmd_seq = num(v);
		else if (strcmp(k, "op") == 0)
			d->cmd_op = strcmp(v, "reset") == 0 ? FL_RESET : strcmp(v, "forced_open") == 0 ? FL_FORCE : -1;
		else if (strcmp(k, "node") == 0 && fl_name_ok(v))
			snprintf(d->cmd_node, sizeof(d->cmd_node), "%s", v);
	}
	if (d->cmd_op < 0)
		d->cmd_seq = 0;
}

int fl_poll(struct fl_conn *c, uint64_t since, fl_dest_fn fn, void *arg, uint64_t *redis_now_ms,
	    uint64_t *high, struct fl_store *store, char *err, size_t len)
{
	redisReply *t = NULL, *z = NULL, *q = NULL, *e = NULL;
	struct fl_vote *votes = NULL;
	size_t nd;
	int rc;

	*high = since;
	if (fl_append_poll(c, since) != FL_OK) {
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
	*redis_now_ms = t->elements == 2 && t->element[0]->str && t->element[1]->str ?
		num(t->element[0]->str) * 1000 + num(t->element[1]->str) / 1000 : 0;
	if (store) {
		store->seq = q->type == REDIS_REPLY_STRING ? num(q->str) : 0;
		snprintf(store->epoch, sizeof(store->epoch), "%.*s",
			 e->type == REDIS_REPLY_STRING && e->len < sizeof(store->epoch) ? (int)e->len : 0,
			 e->type == REDIS_REPLY_STRING ? e->str : "");
	}
	freeReplyObject(t);
	freeReplyObject(q);
	freeReplyObject(e);
	nd = z->elements / 2;
	for (size_t i = 0; i < nd; i++) {
		char key[AG_NAME_MAX + 32 + NS_KEY_MAX];
		const char *dest = z->element[2 * i]->str;
		const char *hv[] = { "HGETALL", key };

		if (!dest)
			continue;
		snprintf(key, sizeof(key), "%svotes:%s", c->prefix, dest);
		redisAppendCommandArgv(ctx(c), 2, hv, NULL);
		snprintf(key, sizeof(key), "%scmd:%s", c->prefix, dest);
		redisAppendCommandArgv(ctx(c), 2, hv, NULL);
		}
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
			parse_dest(&d, v, m);
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

int fl_set_epoch(struct fl_conn *c, const char *epoch, char *err, size_t len)
{
	char key[AG_NAME_MAX + 32];
	const char *argv[] = { "SET", key, epoch, "NX" };
	redisReply *r;
	int rc;

	snprintf(key, sizeof(key), "%sepoch", c->prefix);
	if ((rc = command(c, &r, err, len, 4, argv)) != FL_OK)
		return rc;
	freeReplyObject(r);
	return FL_OK;
}

/**** membership: heartbeats and callers (--quorum N%) ****/

int fl_heartbeat(struct fl_conn *c, const char *node, uint64_t now_ms, const char *dest_called, char *err,
		 size_t len)
{
	char key[AG_NAME_MAX + 32 + NS_KEY_MAX], score[24], old[24];
	const char *z[] = { "ZADD", key, score, node };
	redisReply *r;
	int rc;

	snprintf(score, sizeof(score), "%llu", (unsigned long long)now_ms);
	if (dest_called) {
		const char *ex[] = { "PEXPIRE", key, "3600000" };

		snprintf(key, sizeof(key), "%scallers:%s", c->prefix, dest_called);
		if (redisAppendCommandArgv(ctx(c), 4, z, NULL) != REDIS_OK ||
		    redisAppendCommandArgv(ctx(c), 3, ex, NULL) != REDIS_OK)
			return FL_DOWN;
		return fl_collect(c, 2, err, len);
	}
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

int fl_since(struct fl_conn *c, const char *what, uint64_t since_ms, char names[][AG_NAME_MAX], int max,
	     char *err, size_t len)
{
	char key[AG_NAME_MAX + 32 + NS_KEY_MAX], min[24];
	const char *z[] = { "ZRANGEBYSCORE", key, min, "+inf" };
	redisReply *r;
	int rc, n = 0;

	snprintf(key, sizeof(key), "%s%s", c->prefix, what);
	snprintf(min, sizeof(min), "%llu", (unsigned long long)since_ms);
	if ((rc = command(c, &r, err, len, 4, z)) != FL_OK)
		return rc;
	for (size_t i = 0; r->type == REDIS_REPLY_ARRAY && i < r->elements && n < max; i++)
		if (r->element[i]->type == REDIS_REPLY_STRING && fl_name_ok(r->element[i]->str))
			snprintf(names[n++], AG_NAME_MAX, "%s", r->element[i]->str);
	freeReplyObject(r);
	return n;
}

int fl_subscribe(struct fl_conn *c, const struct fl_url *u, const char *fleet, int timeout_ms, char *err, size_t len)
{
	char chan[AG_NAME_MAX + 24];
	const char *argv[] = { "SUBSCRIBE", chan };
	redisReply *r;
	int rc = fl_connect(c, u, fleet, timeout_ms, err, len);

	if (rc != FL_OK)
		return rc;
	snprintf(chan, sizeof(chan), "%shint", c->prefix);
	if ((rc = command(c, &r, err, len, 2, argv)) != FL_OK) {
		fl_close(c);
		return rc;
	}
	freeReplyObject(r);
	return FL_OK;
}

int fl_hint_fd(const struct fl_conn *c)
{
	return c->ctx ? ((const redisContext *)c->ctx)->fd : -1;
}

int fl_hint_read(struct fl_conn *c, uint64_t *max_seq)
{
	void *v;
	int n = 0;

	/* the socket is readable: one read, then every whole message it held
	 * (a message larger than any reply may be: the channel is dropped) */
	if (redisBufferRead(ctx(c)) != REDIS_OK || ctx(c)->reader->len > FL_BYTES_MAX)
		return FL_DOWN;
	for (;;) {
		redisReply *r;

		v = NULL;
		if (redisGetReplyFromReader(ctx(c), &v) != REDIS_OK)
			return FL_DOWN;
		if (!v)
			return n;
		r = v;
		/* ["message", channel, seq] */
		if (r->type == REDIS_REPLY_ARRAY && r->elements == 3 && r->element[2]->type == REDIS_REPLY_STRING) {
			uint64_t seq = num(r->element[2]->str);

			if (seq > *max_seq)
				*max_seq = seq;
			n++;
		}
		freeReplyObject(r);
	}
}

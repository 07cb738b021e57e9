/* redislink.c -- the agent's connections to Redis, and a Redis Cluster's
 * routing. model.c (the data model) is its only user.
 *
 * A link is one connection to one Redis node. Every reply on it is bounded
 * in time and in size (a reply trickled a byte at a time, or one claiming
 * 10^9 elements, is a protocol error: the connection is dropped and made
 * again, with backoff). A fleet's keys are in nshards groups, each under a
 * hash tag of its own (model.c); against a single Redis they all go to the
 * one link, against a Redis Cluster each group goes to the master serving
 * its tag's slot, as CLUSTER SLOTS says (hiredis 0.14 knows nothing of a
 * cluster). A MOVED or ASK reply (a failover, a slot being moved) is
 * followed at once: the command is sent again to the node named, after
 * ASKING for an ASK, so the caller sees the real reply; a MOVED also marks
 * the routes stale, read again before the next pass. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#include <hiredis/hiredis.h>

#include "../common/tablekit.h"
#include "agent.h"

volatile sig_atomic_t ag_redis_stop;

#define FL_ELEMENTS_MAX (1 << 21)     /* two per destination of the largest table, and more */
#define FL_BYTES_MAX FL_REPLY_BYTES_MAX
#define SLOTS 16384

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

/* redis://[[USER]:PASSWORD@]HOST[:PORT][/DB] */
int ag_redis_url_parse(const char *url, struct fl_url *u, char *err, size_t len)
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

/**** the commands a link has sent and not had answered ****/

static int q_push(struct fl_link *l, const char *cmd, size_t n)
{
	char *copy;

	if (l->qn == l->qcap) {
		int cap = l->qcap ? 2 * l->qcap : 16;
		struct fl_sent *q = malloc((size_t)cap * sizeof(*q));

		if (!q)
			return -1;
		for (int i = 0; i < l->qn; i++)
			q[i] = l->q[(l->qh + i) % l->qcap];
		free(l->q);
		l->q = q;
		l->qh = 0;
		l->qcap = cap;
	}
	if (!(copy = malloc(n)))
		return -1;
	memcpy(copy, cmd, n);
	l->q[(l->qh + l->qn) % l->qcap] = (struct fl_sent){ copy, n };
	l->qn++;
	return 0;
}

static struct fl_sent q_pop(struct fl_link *l)
{
	struct fl_sent s = { NULL, 0 };

	if (l->qn) {
		s = l->q[l->qh];
		l->qh = (l->qh + 1) % l->qcap;
		l->qn--;
	}
	return s;
}

void ag_redis_close(struct fl_link *l)
{
	if (l->ctx)
		redisFree(l->ctx);
	l->ctx = NULL;
	while (l->qn)
		free(q_pop(l).cmd);
	free(l->q);
	l->q = NULL;
	l->qh = l->qn = l->qcap = 0;
}

static int append_formatted(struct fl_link *l, const char *cmd, size_t n)
{
	if (!l->ctx || q_push(l, cmd, n) < 0)
		return FL_DOWN;
	if (redisAppendFormattedCommand(l->ctx, cmd, n) != REDIS_OK) {
		free(l->q[(l->qh + l->qn - 1) % l->qcap].cmd);
		l->qn--;
		return FL_DOWN;
	}
	return FL_OK;
}

int ag_redis_append(struct fl_link *l, int argc, const char **argv)
{
	char *cmd;
	int n = redisFormatCommandArgv(&cmd, argc, argv, NULL), rc;

	if (n < 0)
		return FL_DOWN;
	rc = append_formatted(l, cmd, (size_t)n);
	redisFreeCommand(cmd);
	return rc;
}

/**** replies: bounded in time and in size, redirections followed ****/

/* The next reply on l as it came, within the connection's timeout. */
static int raw_reply(struct fl_conn *c, struct fl_link *l, void **v)
{
	redisContext *x = l->ctx;
	uint64_t deadline = ctl_mono_ms() + (uint64_t)c->timeout_ms;
	int done = 0;

	*v = NULL;
	c->why[0] = '\0';
	oversized = 0;
	if (!x) {
		snprintf(c->why, sizeof(c->why), "not connected");
		return REDIS_ERR;
	}
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
		if (ag_redis_stop) {
			snprintf(c->why, sizeof(c->why), "stopping");
			return REDIS_ERR;
		}
		now = ctl_mono_ms();
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

/* "MOVED 3999 127.0.0.1:6381" or "ASK 3999 127.0.0.1:6381": the node named,
 * or 0 when the reply is not a redirection. An empty host is the one the
 * reply came from. */
static int redirection(const char *msg, const struct fl_link *from, char *host, size_t hlen, int *port, int *ask)
{
	const char *sp, *colon;

	*ask = strncmp(msg, "ASK ", 4) == 0;
	if (!*ask && strncmp(msg, "MOVED ", 6) != 0)
		return 0;
	if (!(sp = strchr(msg + (*ask ? 4 : 6), ' ')) || !(colon = strrchr(sp + 1, ':')))
		return 0;
	*port = atoi(colon + 1);
	if (*port < 1 || *port > 65535 || (size_t)(colon - sp - 1) >= hlen)
		return 0;
	if (colon == sp + 1)
		snprintf(host, hlen, "%s", from->host);
	else
		snprintf(host, hlen, "%.*s", (int)(colon - sp - 1), sp + 1);
	return 1;
}

static int follow(struct fl_conn *c, const char *host, int port, int ask, const struct fl_sent *s, void **v)
{
	struct fl_link *r = &c->redir;
	const char *asking[] = { "ASKING" };
	char err[160];
	void *a = NULL;

	if (!r->ctx || strcmp(r->host, host) != 0 || r->port != port) {
		ag_redis_close(r);
		if (ag_redis_open(c, r, host, port, err, sizeof(err)) != FL_OK) {
			snprintf(c->why, sizeof(c->why), "redirected: %.*s", (int)sizeof(c->why) - 16, err);
			return REDIS_ERR;
		}
	}
	if ((ask && ag_redis_append(r, 1, asking) != FL_OK) || append_formatted(r, s->cmd, s->len) != FL_OK) {
		snprintf(c->why, sizeof(c->why), "redirected to %.64s:%d: cannot queue", host, port);
		return REDIS_ERR;
	}
	if (ask) {
		if (ag_redis_reply(c, r, &a) != REDIS_OK)
			return REDIS_ERR;
		freeReplyObject(a);
	}
	if (ag_redis_reply(c, r, &a) != REDIS_OK)
		return REDIS_ERR;
	freeReplyObject(*v);
	*v = a;
	c->redirects++;
	if (!ask)
		c->stale = 1;   /* the slot lives elsewhere now: route again before the next pass */
	return REDIS_OK;
}

int ag_redis_reply(struct fl_conn *c, struct fl_link *l, void **v)
{
	struct fl_sent s;
	redisReply *r;
	char host[256];
	int port, ask, rc;

	if (raw_reply(c, l, v) != REDIS_OK)
		return REDIS_ERR;
	s = q_pop(l);
	r = *v;
	rc = REDIS_OK;
	/* followed once: a node that redirects again is a cluster in the middle
	 * of a change, and the error goes to the caller (a pass that fails,
	 * tried again) */
	if (r->type == REDIS_REPLY_ERROR && s.cmd && l != &c->redir &&
	    redirection(r->str, l, host, sizeof(host), &port, &ask))
		rc = follow(c, host, port, ask, &s, v);
	free(s.cmd);
	if (rc != REDIS_OK && *v) {
		freeReplyObject(*v);
		*v = NULL;
	}
	return rc;
}

int ag_redis_slot_moving(const char *err)
{
	return strstr(err, ": TRYAGAIN ") != NULL;
}

int ag_redis_command(struct fl_conn *c, struct fl_link *l, redisReply **out, char *err, size_t len, int argc,
	       const char **argv)
{
	void *v = NULL;
	redisReply *r;

	*out = NULL;
	if (ag_redis_append(l, argc, argv) != FL_OK || ag_redis_reply(c, l, &v) != REDIS_OK || !v) {
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

static int simple(struct fl_conn *c, struct fl_link *l, char *err, size_t len, int argc, const char **argv)
{
	redisReply *r;
	int rc = ag_redis_command(c, l, &r, err, len, argc, argv);

	if (rc == FL_OK)
		freeReplyObject(r);
	return rc;
}

/* The change script loaded on l (when c has one): its SHA in c->sha. */
static int load_script(struct fl_conn *c, struct fl_link *l, char *err, size_t len)
{
	const char *load[] = { "SCRIPT", "LOAD", c->script };
	redisReply *r;
	int rc;

	if (!c->script)
		return FL_OK;
	if ((rc = ag_redis_command(c, l, &r, err, len, 3, load)) != FL_OK)
		return rc;
	if (r->type != REDIS_REPLY_STRING || r->len >= sizeof(c->sha)) {
		snprintf(err, len, "SCRIPT LOAD: unexpected reply");
		freeReplyObject(r);
		return FL_REFUSED;
	}
	memcpy(c->sha, r->str, r->len);
	c->sha[r->len] = '\0';
	freeReplyObject(r);
	return FL_OK;
}

/* Connect to one node: every wait bounded, authenticated, the change script
 * loaded (when c has one). */
int ag_redis_open(struct fl_conn *c, struct fl_link *l, const char *host, int port, char *err, size_t len)
{
	struct timeval tv = { c->timeout_ms / 1000, (c->timeout_ms % 1000) * 1000 };
	redisContext *x;
	int rc;

	ag_redis_close(l);
	snprintf(l->host, sizeof(l->host), "%s", host);
	l->port = port;
	if (!(x = redisConnectWithTimeout(host, port, tv))) {
		snprintf(err, len, "out of memory");
		return FL_DOWN;
	}
	if (x->err) {
		snprintf(err, len, "%s:%d: %s", host, port, x->errstr);
		redisFree(x);
		return FL_DOWN;
	}
	l->ctx = x;
	redisSetTimeout(x, tv);
	redisEnableKeepAlive(x);
	if (!base_fns)
		base_fns = x->reader->fn;
	x->reader->fn = (redisReplyObjectFunctions *)&capped;
	if (c->url.pass[0]) {
		const char *a3[] = { "AUTH", c->url.user, c->url.pass };
		const char *a2[] = { "AUTH", c->url.pass };

		rc = c->url.user[0] ? simple(c, l, err, len, 3, a3) : simple(c, l, err, len, 2, a2);
		if (rc != FL_OK)
			goto fail;
	}
	{
		const char *ping[] = { "PING" };

		if ((rc = simple(c, l, err, len, 1, ping)) != FL_OK)
			goto fail;
	}
	if ((rc = load_script(c, l, err, len)) != FL_OK)
		goto fail;
	return FL_OK;
fail:
	ag_redis_close(l);
	return rc;
}

/**** a Redis Cluster's slots ****/

/* CRC16-CCITT (XMODEM), Redis Cluster's key hash. */
static unsigned crc16(const char *s, size_t n)
{
	unsigned crc = 0;

	for (size_t i = 0; i < n; i++) {
		crc ^= (unsigned)(unsigned char)s[i] << 8;
		for (int b = 0; b < 8; b++)
			crc = (crc & 0x8000 ? (crc << 1) ^ 0x1021 : crc << 1) & 0xffff;
	}
	return crc;
}

int ag_redis_slot(const char *tag)
{
	return (int)(crc16(tag, strlen(tag)) % SLOTS);
}

/* The link to host:port, opened when there is none yet. */
static int link_to(struct fl_conn *c, const char *host, int port, char *err, size_t len)
{
	for (int i = 0; i < c->nlinks; i++)
		if (c->links[i].port == port && strcmp(c->links[i].host, host) == 0)
			return i;
	if (c->nlinks == FL_LINKS_MAX) {
		snprintf(err, len, "more than %d masters to talk to", FL_LINKS_MAX);
		return FL_REFUSED;
	}
	if (ag_redis_open(c, &c->links[c->nlinks], host, port, err, len) != FL_OK)
		return FL_DOWN;
	return c->nlinks++;
}

static int str_el(const redisReply *r, size_t i)
{
	return i < r->elements && r->element[i]->type == REDIS_REPLY_STRING;
}

static int int_el(const redisReply *r, size_t i)
{
	return i < r->elements && r->element[i]->type == REDIS_REPLY_INTEGER;
}

/* One CLUSTER SLOTS entry's node ([host, port, id, ...]): 0, or -1. */
static int slot_node(const redisReply *n, const char *seed_host, char *host, size_t hlen, int *port)
{
	if (n->type != REDIS_REPLY_ARRAY || !str_el(n, 0) || !int_el(n, 1) || n->element[1]->integer < 1 ||
	    n->element[1]->integer > 65535 || n->element[0]->len >= hlen)
		return -1;
	/* "" or "?": the node does not know its address; the seed's host is it */
	snprintf(host, hlen, "%s", n->element[0]->len && strcmp(n->element[0]->str, "?") ? n->element[0]->str : seed_host);
	*port = (int)n->element[1]->integer;
	return 0;
}

static void remember(struct fl_conn *c, const char *host, int port)
{
	for (int i = 0; i < c->nknown; i++)
		if (c->known[i].port == port && strcmp(c->known[i].host, host) == 0)
			return;
	if (c->nknown < FL_KNOWN_MAX && strlen(host) < sizeof(c->known[0].host)) {
		snprintf(c->known[c->nknown].host, sizeof(c->known[0].host), "%s", host);
		c->known[c->nknown++].port = port;
	}
}

/* Every shard to the master serving its slot, from a CLUSTER SLOTS reply. */
static int cluster_routes(struct fl_conn *c, const redisReply *r, const char *seed, char *err, size_t len)
{
	char host[256];
	int port;

	c->nknown = 0;
	for (size_t i = 0; i < r->elements; i++) {
		const redisReply *e = r->element[i];

		for (size_t k = 2; e->type == REDIS_REPLY_ARRAY && k < e->elements; k++)
			if (slot_node(e->element[k], seed, host, sizeof(host), &port) == 0)
				remember(c, host, port);
	}
	for (int s = 0; s < c->nshards; s++) {
		int found = 0, li;

		for (size_t i = 0; i < r->elements && !found; i++) {
			const redisReply *e = r->element[i];

			if (e->type != REDIS_REPLY_ARRAY || !int_el(e, 0) || !int_el(e, 1) || e->elements < 3 ||
			    c->shard[s].slot < e->element[0]->integer || c->shard[s].slot > e->element[1]->integer)
				continue;
			if (slot_node(e->element[2], seed, host, sizeof(host), &port) < 0)
				break;
			found = 1;
		}
		if (!found) {
			snprintf(err, len, "no master serves slot %d (the cluster is down, or changing)", c->shard[s].slot);
			return FL_DOWN;
		}
		if ((li = link_to(c, host, port, err, len)) < 0)
			return li;
		c->shard[s].link = li;
	}
	return FL_OK;
}

void ag_redis_close_all(struct fl_conn *c)
{
	for (int i = 0; i < c->nlinks; i++)
		ag_redis_close(&c->links[i]);
	c->nlinks = 0;
	ag_redis_close(&c->redir);
	c->cur = NULL;
}

/* Find the store: the URL's node, else every node a cluster named last
 * time; then each shard's link (the one node, or its slot's master). */
int ag_redis_route(struct fl_conn *c, char *err, size_t len)
{
	const char *slots[] = { "CLUSTER", "SLOTS" };
	const char *script = c->script;
	struct fl_link seed = { 0 };
	redisReply *r;
	int rc;

	ag_redis_close_all(c);
	c->stale = 0;
	c->script = NULL;   /* the seed may serve no shard: nothing loaded there yet */
	rc = ag_redis_open(c, &seed, c->url.host, c->url.port, err, len);
	for (int k = 0; rc == FL_DOWN && k < c->nknown; k++)
		rc = ag_redis_open(c, &seed, c->known[k].host, c->known[k].port, err, len);
	c->script = script;
	if (rc != FL_OK)
		return rc;
	rc = ag_redis_command(c, &seed, &r, err, len, 2, slots);
	if (rc == FL_REFUSED) {
		/* one Redis (cluster support disabled, a server or a proxy that
		 * has no CLUSTER, an ACL that forbids it): every shard on the
		 * seed's connection */
		char db[16];
		const char *sel[] = { "SELECT", db };

		c->cluster = 0;
		c->links[0] = seed;
		c->nlinks = 1;
		memset(&seed, 0, sizeof(seed));
		for (int s = 0; s < c->nshards; s++)
			c->shard[s].link = 0;
		snprintf(db, sizeof(db), "%d", c->url.db);
		if (c->url.db && (rc = simple(c, &c->links[0], err, len, 2, sel)) != FL_OK)
			goto fail;
		if ((rc = load_script(c, &c->links[0], err, len)) != FL_OK)
			goto fail;
		return FL_OK;
	}
	if (rc != FL_OK)
		goto fail;
	c->cluster = 1;
	if (c->url.db) {
		snprintf(err, len, "a Redis Cluster has database 0 only: drop /%d from the URL", c->url.db);
		rc = FL_REFUSED;
	} else if (r->type != REDIS_REPLY_ARRAY) {
		snprintf(err, len, "CLUSTER SLOTS: unexpected reply");
		rc = FL_DOWN;
	} else {
		rc = cluster_routes(c, r, seed.host, err, len);
	}
	freeReplyObject(r);
fail:
	ag_redis_close(&seed);
	if (rc != FL_OK)
		ag_redis_close_all(c);
	return rc;
}

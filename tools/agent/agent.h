/* agent.h -- netshim-agent: the fleet's breaker state through Redis.
 *
 * From the top: agent.c is the program (options, the loop, Redis's
 * connection); fleetstate.c the local table and the fleet's votes it
 * applies there; model.c the Redis data model over redislink.c (the only
 * code that talks to Redis; the fleet benchmarks in tools/bench/ drive it
 * for simulated nodes too) and hmac.c; hooks.c runs --on-event commands
 * off the table's event ring; recorder.c is the --history recorder,
 * metrics.c serves /metrics; state.c, below them all, holds the one state
 * (agentstate.h) and the log line. Every symbol one file shows another
 * starts with ag_. */
#ifndef NS_AGENT_H
#define NS_AGENT_H

#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

#include "../../policy/table.h"
#include "../common/tablekit.h"   /* ctl_mono_ms: the one clock */

#define AG_NAME_MAX 64          /* node and fleet names, NUL included */
#define AG_RULE_MAX 24

/**** model.c ****/

struct fl_url {
	char host[256];
	int port;
	int db;
	char user[128];
	char pass[256];
};

/* Parse redis://[[USER]:PASS@]HOST[:PORT][/DB]. 0, or -1 with the reason. */
int ag_redis_url_parse(const char *url, struct fl_url *u, char *err, size_t len);
/* A node or fleet name: 1 to 63 of [A-Za-z0-9._-]. */
int ag_fleet_name_ok(const char *s);

#define FL_SHARDS_MAX 64         /* --shards */
#define FL_LINKS_MAX FL_SHARDS_MAX
#define FL_KNOWN_MAX 32
#define FL_KEYS_MAX 4               /* fleet keys at once (a rotation) */
#define FL_KEY_MAX 128
#define FL_SIG_LEN 32               /* hex digits of a signature: 128 bits of HMAC-SHA-256 */
#define FL_PREFIX_MAX (AG_NAME_MAX + 48)   /* "netshim:{FLEET.SHARD.K}:" */
#define FL_REPLY_BYTES_MAX (64u << 20)   /* the most of one reply buffered: more is a protocol error */

struct fl_sent {                /* a command sent, kept until its reply (to send again on a redirection) */
	char *cmd;
	size_t len;
};

/* One connection to one Redis node (redislink.c). */
struct fl_link {
	void *ctx;                  /* redisContext, NULL = closed */
	char host[256];
	int port;
	struct fl_sent *q;          /* the commands whose replies are not read yet */
	int qh, qn, qcap;
};

/* A fleet's connection: its keys are in nshards groups ("shards"), each
 * under a hash tag of its own, each on its link (the one Redis, or the
 * master of its slot in a cluster). */
struct fl_conn {
	struct fl_link links[FL_LINKS_MAX];
	int nlinks;
	struct fl_link redir;       /* where the last MOVED or ASK sent a command */
	struct fl_link *cur;        /* the link of the shard in use */
	const char *prefix;         /* ...and its keys' prefix */
	struct {
		char prefix[FL_PREFIX_MAX];   /* "netshim:{TAG}:" */
		int slot;               /* the tag's cluster slot */
		int link;
	} shard[FL_SHARDS_MAX];
	int nshards;
	int cluster;                /* the store is a Redis Cluster */
	int stale;                  /* a MOVED was followed: route again */
	uint64_t redirects;         /* MOVED and ASK followed */
	struct {
		char host[64];
		int port;
	} known[FL_KNOWN_MAX];      /* a cluster's nodes as last seen: where to find it again */
	int nknown;
	struct fl_url url;
	const char *script;         /* loaded on every link (NULL: the hint channel's) */
	char fleet[AG_NAME_MAX];
	unsigned char keys[FL_KEYS_MAX][FL_KEY_MAX];   /* --fleet-key-file: the first signs, any verifies */
	size_t keylen[FL_KEYS_MAX];
	int nkeys;                  /* 0: nothing signed, everything believed */
	uint64_t unsigned_seen;     /* votes, cooldowns, commands ignored: not signed by a fleet key */
	uint64_t redis_ms, redis_mono;   /* Redis's clock at its last TIME, and the monotonic ms then */
	char sha[48];
	int timeout_ms;             /* the longest wait for a whole reply */
	char why[160];              /* the last reply's error */
};

/* redislink.c: links, bounded replies, a cluster's routes. */
int ag_redis_open(struct fl_conn *c, struct fl_link *l, const char *host, int port, char *err, size_t len);
void ag_redis_close(struct fl_link *l);
void ag_redis_close_all(struct fl_conn *c);
int ag_redis_append(struct fl_link *l, int argc, const char **argv);
int ag_redis_reply(struct fl_conn *c, struct fl_link *l, void **v);
struct redisReply;
int ag_redis_command(struct fl_conn *c, struct fl_link *l, struct redisReply **out, char *err, size_t len, int argc,
	       const char **argv);
int ag_redis_route(struct fl_conn *c, char *err, size_t len);
int ag_redis_slot(const char *tag);
/* A command's error (as ag_redis_command words it) is a Redis Cluster's
 * TRYAGAIN: a command whose keys are on two masters while their slot moves.
 * The links are sound: the command is asked again at the next poll. */
int ag_redis_slot_moving(const char *err);

/* Set from a signal handler: a wait for Redis ends at once (FL_DOWN). */
extern volatile sig_atomic_t ag_redis_stop;

enum { FL_OK = 0, FL_DOWN = -1, FL_REFUSED = -2 };

/* Connect (every wait bounded by timeout_ms), authenticate, select the
 * database, load the script. FL_OK; FL_DOWN (unreachable, lost: try again
 * later) or FL_REFUSED (auth or the server said no: a configuration error),
 * with the reason in err. */
int ag_fleet_connect(struct fl_conn *c, const struct fl_url *u, const char *fleet, int nshards, int timeout_ms,
	       char *err, size_t len);
void ag_fleet_close(struct fl_conn *c);
/* A cluster's slots read again and every link made anew (after a MOVED:
 * c->stale, or a lost master); the shards' state is the caller's. */
int ag_fleet_reroute(struct fl_conn *c, char *err, size_t len);
/* Redis's clock now, reckoned from its last TIME and the monotonic clock
 * since (0: not connected yet). */
uint64_t ag_fleet_redis_now(const struct fl_conn *c);
/* The shard of a destination's keys. */
int ag_fleet_dest_shard(const struct fl_conn *c, const char *dest);
/* ...its link (the one its keys live on), its prefix in c->prefix */
struct fl_link *ag_fleet_use(struct fl_conn *c, const char *dest);
/* A shard's change counter now (0 when there is none: an empty Redis). */
int ag_fleet_seq(struct fl_conn *c, int shard, uint64_t *seq, char *err, size_t len);

/* One change: a node's vote that dest is open (for ttl_ms, the breaker's
 * open duration left, with the rule that opened it), its withdrawal, or an
 * operator's reset or forced open for the whole fleet. */
enum fl_op { FL_VOTE, FL_UNVOTE, FL_RESET, FL_FORCE, FL_COOLDOWN };
const char *ag_fleet_op_name(int op);

/* Queue one change on its shard's link (pipelining); ag_fleet_collect reads the
 * replies of every command queued. 0, or FL_DOWN. */
int ag_fleet_append_change(struct fl_conn *c, int op, const char *dest, const char *node, uint64_t ttl_ms,
		     const char *rule);
int ag_fleet_collect(struct fl_conn *c, char *err, size_t len);
/* ag_fleet_append_change and ag_fleet_collect of one. */
int ag_fleet_change(struct fl_conn *c, int op, const char *dest, const char *node, uint64_t ttl_ms, const char *rule,
	      char *err, size_t len);

struct fl_vote {
	char node[AG_NAME_MAX];
	uint64_t exp_ms;            /* Redis time */
	char rule[AG_RULE_MAX];
};

/* What a poll found for one destination that changed. */
struct fl_dest {
	const char *dest;
	struct fl_vote *votes;
	int nvotes;
	uint64_t cmd_seq;           /* 0 = no operator command (or one not signed by a fleet key) */
	uint64_t cmd_at;            /* its time (Redis ms) */
	int cmd_op;                 /* FL_RESET or FL_FORCE */
	char cmd_node[AG_NAME_MAX];
	uint64_t cool_until;        /* a server's Retry-After seen on a node: Redis time it ends, 0 = none */
	char cool_node[AG_NAME_MAX];
	uint64_t seq;               /* its last change */
};

typedef void (*fl_dest_fn)(void *arg, const struct fl_dest *d);

/* What a poll says of the store itself: its change counter and epoch ("":
 * none; a store that went back has another, or none). */
struct fl_store {
	uint64_t seq;
	char epoch[40];
};

/* A poll of one shard: the Redis time and every destination changed after since,
 * handed to fn in the order of their changes. Four commands when nothing
 * changed (one round trip), two more per changed destination. *high: the
 * last change seen (since when none); *store (may be NULL): the store's
 * counter and epoch. 0, or FL_DOWN. */
int ag_fleet_poll(struct fl_conn *c, int shard, uint64_t since, fl_dest_fn fn, void *arg, uint64_t *redis_now_ms,
	    uint64_t *high, struct fl_store *store, char *err, size_t len);
/* A hint's poll of one shard: the changes alone (one command, and two per
 * changed destination), the Redis time reckoned; the store's counter and
 * epoch are left to the regular polls. */
int ag_fleet_poll_changes(struct fl_conn *c, int shard, uint64_t since, fl_dest_fn fn, void *arg, uint64_t *redis_now_ms,
		    uint64_t *high, char *err, size_t len);
/* Membership (--quorum N%): this node's heartbeat at now_ms (Redis time),
 * or, with dest_called, that it called dest_called then. FL_OK or an error. */
int ag_fleet_heartbeat(struct fl_conn *c, const char *node, uint64_t now_ms, const char *dest_called, char *err,
		 size_t len);
/* The nodes of the sorted set WHAT ("members", "callers:DEST") whose time
 * is since_ms or later, at most max of them: how many, or FL_DOWN. */
int ag_fleet_since(struct fl_conn *c, const char *what, uint64_t since_ms, char names[][AG_NAME_MAX], int max,
	     char *err, size_t len);
/* Name the store's epoch, unless one is there already (SET NX). */
int ag_fleet_set_epoch(struct fl_conn *c, int shard, const char *epoch, char *err, size_t len);
/* The poll's first four commands, queued, and their replies read: for
 * simulated nodes polling together in one round trip. */
int ag_fleet_append_poll(struct fl_conn *c, int shard, uint64_t since);

/* The hint channels (one a shard), on a connection of its own (sub), to
 * the store c is connected to (in a cluster, the node numbered pick % the
 * nodes known): subscribe; the descriptor to wait on; after it is
 * readable, read the hints (the highest seq of each shard in max_seq[]):
 * how many, or FL_DOWN. */
int ag_fleet_subscribe(struct fl_conn *sub, const struct fl_conn *c, uint64_t pick, char *err, size_t len);
int ag_fleet_hint_fd(const struct fl_conn *c);
int ag_fleet_hint_read(struct fl_conn *c, uint64_t *max_seq);

/**** hooks.c ****/

struct hooks;
/* --on-event CMD: start at the table's stored cursor (first run: its head). */
struct hooks *ag_hooks_new(struct ns_table *t, const char *cmd, const char *node, int timeout_ms, int max_running);
/* Reap finished runs, stop late ones, start runs for new events. */
void ag_hooks_pass(struct hooks *h, uint64_t now_ms);
int ag_hooks_running(const struct hooks *h);
uint64_t ag_hooks_runs(const struct hooks *h);   /* runs started since the agent began */

/**** metrics.c ****/

/* --metrics-listen ADDR:PORT: the listening socket (non-blocking), or -1
 * with the reason. */
int ag_metrics_listen(const char *spec, char *err, size_t len);
/* Take new clients and move every client on as far as the kernel allows,
 * waiting for none: GET /metrics gets what body writes. */
void ag_metrics_serve(int lfd, void (*body)(FILE *f, void *arg), void *arg);
/* The clients' descriptors for the loop's poll (at most max): how many. */
struct pollfd;
int ag_metrics_pollfds(struct pollfd *p, int max);
void ag_hooks_free(struct hooks *h);

/* state.c: one line on stderr, "netshim-agent: ..." */
void ag_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/**** recorder.c: --history FILE ****/

struct hist;
/* Open (make) the database and a new outcome ring of ring_cap records
 * beside the table, and tell the programs to write into it. NULL, with the
 * reason in err. */
struct hist *ag_hist_open(const char *file, struct ns_table *t, uint64_t keep_ms, uint32_t ring_cap, char *err,
		       size_t len);
/* Record what the ring and the event ring hold; renew the lease. */
void ag_hist_pass(struct hist *h, uint64_t now_ms);
/* The programs stop writing; the database is closed. */
void ag_hist_close(struct hist *h);

#endif

/* agentstate.h -- what the agent's files share (agent.c: the program and
 * its loop; fleetstate.c: the local table and the fleet's votes): the
 * destinations it knows, and its one state, ag_state (state.c). */
#ifndef NS_AGENTSTATE_H
#define NS_AGENTSTATE_H

#include <stdint.h>
#include <uthash.h>

#include "agent.h"

#define CONNECT_TIMEOUT_MS 1000     /* no wait on Redis is longer */
#define BACKOFF_MIN_MS 200
#define BACKOFF_MAX_MS 5000
#define TICK_MS 50                  /* events and hooks are looked at this often */
#define HINT_GAP_MS 20              /* early passes a hint may start, at most one per */
#define LOCAL_GAP_MS 2              /* early passes a change here may start, at most one per */
#define SUB_RETRY_MS 5000           /* the hint channel, when lost, is tried again after */
#define MAX_OPS 4096                /* operator commands waiting for Redis */
#define CMD_FRESH_MS 600000         /* with fleet keys, a command older than this reaching a running agent is a replay */
#define REROUTE_GRACE_MS 5000       /* a cluster's master lost: the holds stand this long while its replica takes over */

/* What the agent knows of one shard of the fleet's keys (its own changes
 * counter, epoch and hint channel). */
struct shard_state {
	uint64_t since;             /* poll for changes after this seq */
	uint64_t high;              /* the last change this agent has seen */
	uint64_t high_before;       /* ...as it was when this pass began */
	char epoch[40];             /* the store's epoch, as last seen ("" = not yet) */
};

struct dst {
	char key[NS_KEY_MAX];
	struct fl_vote *votes;      /* as Redis last said, plus our own writes */
	int nvotes;
	uint64_t cmd_seq;           /* the last operator command seen */
	uint64_t cmd_at;            /* ...its time (Redis ms) */
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
	uint32_t need;              /* --quorum N%: the votes it needed at the last count (0 = none yet) */
	UT_hash_handle hh;
};

struct op {
	int op;
	uint64_t ttl_ms;            /* a cooldown: what is left of it */
	char key[NS_KEY_MAX];
};

struct agent_state {
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
	int shards;                 /* --shards */
	const char *key_file;       /* --fleet-key-file */
	uint64_t unsigned_logged, unsigned_log_ms;   /* unsigned entries ignored, as many said, at most once a minute */
	/* state */
	struct ns_table t;
	struct fl_conn c;
	struct fl_conn sub;         /* the hint channel (pub/sub), when it works */
	uint64_t sub_next_try;
	uint64_t hint_quiet_until;  /* a hint proved false: hints wake no poll before then */
	int wake_fd;                /* the wake-up socket (wake_open), -1 = none */
	uint64_t bad_keys;          /* destinations in Redis that no shim could have written: ignored */
	uint64_t bad_logged, bad_log_ms;   /* ...as many said, at most once a minute */
	const char *metrics_at;     /* --metrics-listen */
	int metrics_fd;             /* its listening socket, -1 = none */
	struct shard_state sh[FL_SHARDS_MAX];
	uint64_t hinted[FL_SHARDS_MAX];   /* the highest seq a hint announced, a shard */
	uint64_t reroute_until;     /* a cluster's node lost: holds kept, routes sought until then (0 = not) */
	int moving_said;            /* a poll met a slot being moved (TRYAGAIN): said, until a poll passes */
	int connected;
	int synced;                 /* a poll has succeeded since the agent started */
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
	/* --history */
	const char *hist_file;
	uint64_t hist_keep_ms;
	uint32_t hist_ring;
	struct hist *hist;
};

extern struct agent_state ag_state;

/* fleetstate.c */
void ag_read_events(void);
void ag_scan_table(uint64_t now);
void ag_apply_fleet(uint64_t now);
void ag_release_all(const char *why);
int ag_reconcile(uint64_t now, char *err, size_t len);
int ag_publish_ops(char *err, size_t len);
uint64_t ag_next_rand(void);
int ag_went_back(int shard, const struct fl_store *st);
int ag_adopt_epoch(int shard, const struct fl_store *st, char *err, size_t len);
void ag_forget_votes(void);
void ag_on_dest(void *arg, const struct fl_dest *in);
int ag_membership(char *err, size_t len);
/* how long a vote or a fleet share stands unrenewed: 3 polls and a second */
uint64_t ag_lease_ms(void);

/* lease.c: limits for the fleet (fleet_max_requests, _connections,
 * fleet_rate): this machine's share leased each pass (connected: from
 * Redis; not: the last share, at most the limit over the machines last
 * seen) and written into the table; a Redis error: FL_DOWN with err. */
int ag_lease_pass(uint64_t now, int connected, char *err, size_t len);
/* A lease pass is due before the next poll (a share let go, or one held
 * below its share for want of the others'): at most one after the poll
 * that started at last_poll. */
int ag_lease_due(uint64_t now, uint64_t last_poll);
/* The agent stops: its shares handed back (Redis) and lapsed here. */
void ag_lease_stop(void);

#endif

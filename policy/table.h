/* table.h -- the shared breaker table: layout, mapping and atomic operations.
 *
 * Every process on the machine that uses one table maps the same file under
 * /dev/shm. All updates are single atomic instructions or compare-and-swap
 * loops on one word, so counts are exact, no lock exists to be held across a
 * system call, and a process killed at any instruction leaves nothing
 * half-done that the others wait for. Nothing read from the file is trusted:
 * the slot count is checked once at map time and kept in private memory. */
#ifndef NS_TABLE_H
#define NS_TABLE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "breaker.h"
#include "policy.h"

#define NS_TABLE_MAGIC 0x4c42544d4853534eULL   /* "NSSHMTBL" */
#define NS_TABLE_VERSION       4u
#define NS_TABLE_DEFAULT_SLOTS 4096u
#define NS_TABLE_MAX_SLOTS (1u << 20)
#define NS_BUCKETS 32u
#define NS_EVENTS_DEFAULT 1024u
#define NS_EVENTS_MAX (1u << 16)
#define NS_HIST_BUCKETS 20u
#define NS_FRAMES 4u
#define NS_FRAME_LEN 150u
#define NS_FAULT_RECS 64u       /* runtime faults (shimctl inject) a table holds */
#define NS_WAIT_BUCKETS 16u
#define NS_REQ_QUEUE           64u /* requests a destination's queue orders (max_requests) */

/* max_requests (table version 4): the requests in flight to a destination
 * from every process (policy/reqq.h). place: 0 free, else its holder
 * (ns_place_holder), one per request in flight. queue: the requests waiting
 * for a place, each 0 or its holder << 32 | when it began to wait (CLOCK_MONOTONIC
 * us, low 32 bits): a place that frees goes to the one that waited longest. */
struct ns_reqq {
	uint32_t place[NS_PLACES];    /* atomic */
	uint32_t wake;                /* atomic: bumped when a place frees or the queue's first leaves (futex) */
	uint32_t waiters;             /* atomic: threads blocked on wake */
	uint32_t queued;              /* atomic: entries in queue (a dead waiter's is taken out by the next look) */
	uint32_t over;                /* atomic: h2 streams inside TLS let go over the limit (reqs.c) */
	uint64_t throttled;           /* atomic: requests failed at their start after queue_timeout */
	uint64_t held;                /* atomic: requests that waited for a place */
	uint64_t queue[NS_REQ_QUEUE]; /* atomic */
	uint64_t adapt;               /* atomic: max_requests = auto, as the slot's adapt is max_connections' */
};

struct ns_table_hdr {
	uint64_t magic;
	uint32_t version;
	uint32_t hdr_size;
	uint32_t slot_size;
	uint32_t nslots;
	uint64_t total_size;
	uint64_t created_wall_ms;
	uint64_t full_count;        /* atomic: new destinations turned away, table full */
	uint64_t used;              /* atomic: slots claimed */
	uint32_t ev_cap;            /* event records in the ring */
	uint32_t ev_size;           /* bytes per event record */
	uint64_t ev_off;            /* offset of the ring from the start of the file */
	uint64_t ev_seq;            /* atomic: the next event's sequence number */
	uint64_t flt_off;           /* offset of the runtime fault records */
	uint32_t flt_cap;           /* how many */
	uint32_t flt_size;          /* bytes per record */
	uint64_t flt_gen;           /* atomic: bumped by every change of a fault record; 0 = none ever */
	/* the fleet agent's area (netshim-agent; zero = no agent ever ran): one
	 * writer, the agent; readers bound every field */
	uint64_t agent_cursor;      /* atomic: 1 + the next event the agent's hooks take; 0 = unset */
	uint64_t agent_beat_ms;     /* atomic: wall ms of the agent's last pass */
	uint32_t agent_pid;         /* atomic: the running agent, 0 = none */
	uint32_t agent_flags;       /* atomic: NS_AGENT_* */
	uint32_t agent_open;        /* atomic: destinations open here at the last pass */
	uint32_t agent_dests;       /* atomic: destinations in the table at the last pass */
	uint64_t agent_polls;       /* atomic: Redis polls made */
	uint64_t agent_cpu_ns;      /* atomic: the agent's CPU time in those polls */
	char agent_node[64];        /* the agent's node name (written before agent_pid) */
	/* the history recorder (netshim-agent --history, ocring.h): programs
	 * hand their outcomes to the ring beside the table while it reads */
	uint64_t hist_until_ms;     /* atomic: CLOCK_MONOTONIC ms; renewed every pass; 0 = none */
	uint32_t hist_gen;          /* atomic: bumped when the ring file is made anew (map it again) */
	uint32_t hist_pad;
	uint64_t ungoverned;  /* atomic: connects the seccomp engine let go ungoverned (a process it
			      * cannot read: non-dumpable, another user's); a count, nothing indexes by it */
	uint64_t fleet_asked; /* atomic: asks for a destination's first fleet share (its agent leases at once) */
	uint8_t reserved[8];
};

#define NS_AGENT_CONNECTED 1u   /* Redis answers */
#define NS_AGENT_SUSPECT 2u     /* too many destinations open here: votes withheld */
#define NS_AGENT_NOFLEET 4u     /* run without --redis: no fleet (history, hooks) */
#define NS_AGENT_HISTORY 8u     /* recording the history (--history) */
#define NS_FLEET_NODES_LEN 256u

/* A latency histogram: fixed buckets (upper bounds in ns_hist_bounds_us),
 * atomic counts, the last bucket unbounded. */
struct ns_hist {
	uint64_t count[NS_HIST_BUCKETS];
	uint64_t sum_us;
};

struct ns_slot {
	uint64_t tag;               /* atomic: 0 empty, else state|hash|claim time */
	uint64_t word;              /* atomic: packed struct ns_brk */
	uint64_t calls;
	uint64_t successes;
	uint64_t failures;
	uint64_t timeouts;
	uint64_t rejected;
	uint64_t retries;
	uint64_t opened_wall_ms;    /* 0 = never */
	uint64_t half_open_wall_ms; /* 0 = not scheduled */
	uint32_t last_error;        /* errno of the last failure, 0 = none */
	uint32_t window_ms;         /* the window the last writer counted with */
	uint64_t monitor;           /* atomic: 1 when the last connect counted was in monitor mode */
	/* max_connections = auto, in what was reserved (zero in an older table:
	 * no limit yet): limit in thousandths 20 | the interval last counted 41 |
	 * a failure 1 | a connect at half the limit or more 1 | a success 1 */
	uint64_t adapt;             /* atomic */
	uint64_t bucket[NS_BUCKETS];/* atomic: epoch 24 | failures 20 | outcomes 20 */
	char key[NS_KEY_MAX];       /* NUL-terminated once the slot is ready */
	struct ns_hist connect_hist;   /* connect start to connected */
	struct ns_hist first_byte_hist;/* connect start to the first byte received */
	uint64_t injected;          /* atomic: connections (lookups) that got an injected fault */
	uint64_t exchanges;         /* atomic: exchanges with an outcome (connect failures not counted) */
	uint64_t http_failures;     /* atomic: exchanges failed by their HTTP status */
	uint32_t last_status;       /* the last HTTP status seen, 0 = none */
	uint32_t pad1;
	uint64_t stale_reuses;      /* atomic: reused keep-alive connections that ended before the answer
				     * to their next request (the client sends it again anew): no outcome */
	/* HTTP/2 (shim/h2conn.c), in what were reserved bytes (zero in an older table) */
	uint64_t h2_unprocessed; /* atomic: streams the server refused or dropped unprocessed: no outcome */
	uint64_t h2_blind;       /* atomic: h2 connections the reader could not follow: connect outcomes only */
	uint64_t grpc_failures;  /* atomic: streams failed by their grpc-status */
	/* the slow-call and latency rules */
	uint64_t bucket2[NS_BUCKETS];/* atomic: epoch 24 | slow calls 20 | timeouts 20, as bucket */
	uint64_t slow_calls;        /* atomic */
	uint64_t lat_gen[2];        /* atomic: the window number each latency generation holds */
	uint32_t lat[2][NS_HIST_BUCKETS]; /* atomic: first-byte times of the window's exchanges */
	/* the fleet (netshim-agent): while fleet_until_ms is ahead of the
	 * clock a connect through a closed breaker fails fast as if open.
	 * The agent renews it every pass, so a dead agent's hold lapses. */
	uint64_t fleet_until_ms;    /* atomic: CLOCK_MONOTONIC ms; 0 = not held open by the fleet */
	uint64_t fleet_seq;         /* atomic: sequence lock of fleet_nodes, odd while written */
	uint32_t fleet_count;       /* nodes that report it open */
	uint32_t pad2;
	char fleet_nodes[NS_FLEET_NODES_LEN]; /* their names, comma-separated */
	/* shaping (max_connections): the places held, one word each, 0 free,
	 * else its holder (ns_place_holder: pid and a tag of its start time).
	 * A holder that died is found out and its place freed by the next
	 * connect that finds the cap full. */
	uint32_t place[NS_PLACES];  /* atomic */
	uint32_t place_wake;        /* atomic: bumped when a place frees (the blocked waiters' futex) */
	uint32_t place_waiters;     /* atomic: processes blocked waiting for a place */
	uint64_t throttled;         /* atomic: connects turned away by the cap (never a failure) */
	uint64_t throttle_event_ms; /* atomic: CLOCK_MONOTONIC ms of the last throttling event */
	uint32_t waited[NS_WAIT_BUCKETS]; /* atomic: waits for a place by time: [0] under 1 ms, [i] under 2^i ms */
	uint32_t open_level;        /* atomic: failed probes in a row (open_backoff); 0 once closed */
	uint32_t pad3;
	uint64_t cooldown_until_ms; /* atomic: CLOCK_MONOTONIC ms: a Retry-After's connects refused until then */
	uint64_t closed_ms;         /* atomic: CLOCK_MONOTONIC ms of the last close (slow_start); 0 = none */
	uint64_t retry_bucket;      /* atomic: retry_budget's tokens (thousandths) 32 | the ms they were counted 32 */
	uint64_t retry_throttled;   /* atomic: a process's retries turned away by retry_budget */
	uint64_t rate_tat;          /* atomic: rate's bucket (GCRA): CLOCK_MONOTONIC us when it is next full */
	uint64_t paced;             /* atomic: connects and requests that waited for a token */
	uint32_t last_grpc_status;  /* atomic: the last grpc-status seen + 1, 0 = none */
	uint32_t pad4;
	/* in what were reserved bytes (zero in an older table) */
	uint64_t seccomp_calls; /* atomic: connects made by shimrun's seccomp engine (in calls too) */
	/* throttle = adaptive, in what was reserved (zero in an older table):
	 * the requests and accepts of this window and the one before (a
	 * window's number 16 | requests 24 | accepts 24) */
	uint64_t thr[2]; /* atomic */
	/* version 4 */
	struct ns_reqq req; /* max_requests */
	/* the fleet's limits (fleet_max_requests, _connections, fleet_rate),
	 * in what was reserved (zero: no agent ever wrote one): this machine's
	 * share, which netshim-agent leases from the fleet and renews every
	 * poll (tools/agent/lease.c), read by both engines as the limit in
	 * force (ns_table_fleet_share) */
	struct ns_fleetrec {
		uint64_t share[3];   /* atomic, NS_FLEET_K_*: the share + 1 (places; rate in thousandths
					* per hour), 0 = none written */
		uint64_t expires_ms; /* atomic: CLOCK_MONOTONIC ms the shares lapse at (an agent gone) */
		uint64_t tokens;     /* atomic: rate's tokens taken under fleet_rate (the agent's demand) */
		uint32_t live;       /* atomic: the machines the agent last saw sharing it */
		uint32_t pad;
		uint64_t denied[3];  /* atomic, NS_FLEET_K_*: asks the share turned down (the agent's demand) */
		uint64_t whole[3];   /* atomic, NS_FLEET_K_*: the limit the fleet keeps to (the smallest of
				     * the machines' policies), as the agent last leased it */
		uint64_t largest[3]; /* atomic, NS_FLEET_K_*: the largest of the machines' policies (shimctl
				      * check --fleet), 0 = not known */
	} fleet;
	uint8_t reserved[224]; /* zero */
};

enum ns_event_type {
	NS_E_OPENED = 1, NS_E_HALF_OPEN, NS_E_CLOSED, NS_E_REOPENED, NS_E_RESET, NS_E_FORCED_OPEN,
	NS_E_TABLE_FULL, NS_E_POLICY_RELOADED, NS_E_POLICY_REJECTED, NS_E_CONNECT_FAILED,
	NS_E_FAULT_SET, NS_E_FAULT_CLEARED, NS_E_FLEET_OPEN, NS_E_FLEET_CLOSED, NS_E_THROTTLING, NS_E_COOLDOWN,
	NS_E_SHADOW_OPENED, NS_E_SHADOW_CLOSED,   /* the shadow policy's breaker (never enforced) */
};

/* A runtime fault (shimctl inject), in the table for every process to
 * apply. seq is a sequence lock: odd while a writer (shimctl) changes the
 * record; a reader copies it between two equal even values. The faults are
 * kept as their canonical text and parsed again by each reader, so a
 * damaged record is a parse error, never a wild value. */
enum { NS_FLT_FREE = 0, NS_FLT_ACTIVE = 1, NS_FLT_EXPIRED = 2, NS_FLT_CLEARED = 3,
	NS_FLT_CLAIMED = 4 /* being written; the writer's pid in the word's high half (faulttable.c) */ };
struct ns_fltrec {
	uint64_t seq;               /* atomic */
	uint64_t state;             /* atomic NS_FLT_* */
	uint64_t expires_ms;        /* CLOCK_MONOTONIC ms; 0 = until cleared */
	uint64_t set_wall_ms;
	uint64_t applied;           /* atomic: connections (lookups) that got it */
	uint32_t pid;               /* who set it, with NS_FLT_EXISTING */
	uint32_t pad;               /* atomic: the order it was made active in (flt_gen's low half) */
	char dest[NS_KEY_MAX];      /* the pattern: host:port, host, address */
	char text[NS_FAULTS_TEXT];  /* canonical FAULTS text */
};

/* One record of the event ring. seq is written last: a reader takes the
 * record only if seq is the number it expects before and after copying, so
 * a record being written, or left half-written by a killed process, reads
 * as missing, never as garbage. */
struct ns_evrec {
	uint64_t seq;               /* atomic: the event's number; UINT64_MAX while written */
	uint64_t wall_ms;
	uint32_t type;
	uint32_t pid;
	uint32_t rule;
	uint32_t err;
	uint32_t failures_in_window;
	uint32_t consecutive;
	uint32_t nframes;
	uint32_t pad;
	char dest[NS_KEY_MAX];
	char program[16];
	char detail[96];
	char frames[NS_FRAMES][NS_FRAME_LEN];
};

_Static_assert(sizeof(struct ns_table_hdr) == 256, "header layout");
_Static_assert(sizeof(struct ns_slot) == 3072, "slot layout");
_Static_assert(sizeof(struct ns_evrec) == 1024, "event layout");
_Static_assert(sizeof(struct ns_fltrec) == 512, "fault record layout");
/* The top bit of a fault record's pid (no pid reaches it): shimctl inject
 * --existing, the fault reaches connections already open too. A reader
 * without it reads a pid that runs no process, and applies the fault from
 * each next connect, as before. */
#define NS_FLT_EXISTING 0x80000000u

struct ns_table {
	struct ns_table_hdr *hdr;
	struct ns_slot *slots;
	struct ns_evrec *events;
	struct ns_fltrec *faults;
	uint32_t nslots;            /* private copy, validated */
	uint32_t ev_cap;            /* private copy, validated */
	uint32_t flt_cap;           /* private copy, validated */
	size_t size;
	int broken;                 /* atomic: the file shrank under us; the map is now private zeros */
	int moved;                  /* /dev/shm/NAME was another user's: this is /run/user/UID/NAME (err says so) */
	char path[288];
};

/* A consistent-enough copy of one slot, for display. */
struct ns_entry {
	char key[NS_KEY_MAX];
	struct ns_brk brk;
	uint64_t calls, successes, failures, timeouts, rejected, retries;
	uint32_t failures_in_window, outcomes_in_window, slow_in_window, timeouts_in_window;
	uint64_t p99_in_window_us, slow_calls;
	uint32_t last_error;
	uint32_t monitor;
	uint64_t injected, exchanges, http_failures, stale_reuses;
	uint64_t h2_unprocessed, h2_blind, grpc_failures;
	uint64_t seccomp_calls;
	uint32_t limit;                     /* max_connections = auto: the limit now (thousandths), 0 = none yet */
	uint32_t thr_requests, thr_accepts; /* throttle = adaptive: this window's and the one before's */
	uint32_t last_status;
	int32_t last_grpc_status;   /* -1 = none */
	uint32_t inflight;          /* places held (max_connections) */
	uint32_t req_inflight;      /* requests in flight (max_requests' places held) */
	uint32_t req_queued;        /* requests waiting for one */
	uint32_t req_limit;         /* max_requests = auto: the limit now (thousandths), 0 = none yet */
	uint32_t req_over;          /* h2 streams inside TLS let go over max_requests */
	uint64_t req_throttled, req_held;
	uint64_t throttled;
	uint64_t waited_ms_p99;     /* waits for a place: their p99's upper bound, 0 = none */
	uint64_t cooldown_left_ms;  /* a Retry-After's cooldown: what is left of it, 0 = none */
	int64_t fleet_share[3];     /* NS_FLEET_K_*: this machine's share of the fleet's limit, -1 = none written */
	uint64_t fleet_whole[3];    /* ...the fleet's limit (rate: thousandths an hour) */
	uint64_t fleet_largest[3];  /* ...the largest of the machines' policies, 0 = not known */
	uint64_t fleet_left_ms;     /* ...what is left of its lease (0: lapsed) */
	uint32_t fleet_live;        /* ...the machines sharing it, as the agent last saw */
	uint64_t retry_throttled;
	uint64_t paced;             /* connects and requests that waited for rate's token */
	uint64_t opened_wall_ms, half_open_wall_ms;
	struct ns_hist connect_hist, first_byte_hist;
	int fleet_open;             /* the fleet holds it open now */
	uint32_t fleet_count;
	char fleet_nodes[NS_FLEET_NODES_LEN];
};

enum { NS_TBL_OK = 0, NS_TBL_MISSING = 1, NS_TBL_BAD = 2 };

/* Map the table NAME (/dev/shm/NAME). With create, make it (mode 0600,
 * nslots slots, nevents event records; 0 for the defaults) if missing. Returns NS_TBL_OK, NS_TBL_MISSING (and create was
 * 0) or NS_TBL_BAD with a one-line reason in err. When /dev/shm/NAME
 * belongs to another user and /run/user/UID is the caller's own private
 * directory, the table there is used instead: NS_TBL_OK with t->moved set
 * and the warning to print in err. */
int ns_table_open(const char *name, int create, uint32_t nslots, uint32_t nevents,
		  struct ns_table *t, char *err, size_t errlen);
/* A mapped table is guarded against SIGBUS: another process of the same
 * user that truncates the file would otherwise kill every process touching
 * it. The guard (a chained SIGBUS handler) swaps private zero pages in over
 * the table and sets t->broken; callers check ns_table_broken and stop
 * using it. A fault anywhere else goes to the handler that was there. */
static inline int ns_table_broken(const struct ns_table *t)
{
	return __atomic_load_n(&t->broken, __ATOMIC_ACQUIRE);
}
void ns_table_close(struct ns_table *t);

/* Walking a table's slots for a report (shimctl status and metrics, the
 * agent's pass) without touching the pages no one ever wrote: the file's
 * holes (SEEK_DATA/SEEK_HOLE, which count a page in swap as written) are
 * skipped, so a sparse table of a million slots is read in the time its
 * used slots take, and reading it does not fill it (a read of a hole in a
 * shared mapping of /dev/shm allocates the page). A file that cannot say
 * (no SEEK_DATA) is walked slot by slot, as before.
 *
 *   struct ns_scan sc;
 *   for (uint32_t i = ns_scan_begin(t, &sc); i < t->nslots; i = ns_scan_next(t, &sc, i + 1)) ...
 *   ns_scan_end(&sc);
 */
struct ns_scan {
	int fd;                     /* -1: every slot */
	uint64_t data_start, data_end;   /* file offsets known written: [data_start, data_end) */
};
uint32_t ns_scan_begin(const struct ns_table *t, struct ns_scan *sc);
uint32_t ns_scan_next(const struct ns_table *t, struct ns_scan *sc, uint32_t i);
void ns_scan_end(struct ns_scan *sc);

/* A table size from the environment (NETSHIM_TABLE_SLOTS, _EVENTS): NULL or
 * "" gives 0 (the default); else decimal digits only, 1..max. Returns 0, or
 * -1 for anything else. */
int ns_table_size_env(const char *val, uint32_t max, uint32_t *out);
/* 1 when name can name a table (a plain file name, not "." or "..", under
 * 200 bytes), else 0: no process could ever open another. */
int ns_table_name_ok(const char *name);

/* The default table name for this user, "netshim.<uid>". */
void ns_table_default_name(char *buf, size_t len);

/* Check a mapped image: 0 if the header is sane for a file of size bytes,
 * else -1 with the reason. Pure; used by ns_table_open and the tests. */
int ns_table_validate(const void *map, size_t size, char *err, size_t errlen);

/* Find the slot for key; with create, claim one if missing. Returns the
 * slot index, or -1 missing, -2 table full, -3 a claim by another process is
 * in progress. */
#define NS_SLOT_MISSING (-1)
#define NS_SLOT_FULL (-2)
#define NS_SLOT_BUSY (-3)
/* An attempt on slot idx that changes no state (closed: NS_ALLOW; open
 * and not due, or forced open: NS_REJECT, or NS_ALLOW when not enforcing),
 * counted as ns_table_attempt counts it. -1: the breaker must step
 * (ns_table_attempt), nothing done. */
int ns_table_attempt_quick(struct ns_table *t, int idx, int enforce, uint64_t now_ms);
int ns_table_find(struct ns_table *t, const char *key, int create, uint64_t now_ms);
/* A request about to start on a connection already open to slot idx (an
 * HTTP/1 connection's next exchange): NS_REJECT while its breaker is open
 * and not due a probe (or forced, or held open by the fleet), counted
 * rejected, when enforcing; else NS_ALLOW with nothing counted (the
 * connection's call was counted at its connect). A cooldown is not this
 * check's: it holds requests (shape.c), it does not refuse them. */
int ns_table_request_admit(struct ns_table *t, int idx, int enforce, uint64_t now_ms);

/* A connect attempt. Returns the verdict; counts calls or rejected. In
 * monitor mode (enforce == 0) the state still moves but nothing is rejected. */
int ns_table_attempt(struct ns_table *t, int idx, int enforce, uint64_t now_ms,
		     const struct ns_settings *s, struct ns_step *out);

enum { NS_OUT_SUCCESS = 0, NS_OUT_FAILURE = 1, NS_OUT_TIMEOUT = 2 };

/* The outcome of an exchange (or a connect). err is the errno behind a
 * failure. ns_table_outcome_at also takes the first-byte time of a
 * success (us; 0 = not known), for the slow-call and latency rules. */
void ns_table_outcome(struct ns_table *t, int idx, int outcome, int err, uint64_t now_ms,
		      uint64_t wall_ms, const struct ns_settings *s, struct ns_step *out);
void ns_table_outcome_at(struct ns_table *t, int idx, int outcome, int err, uint64_t latency_us, uint64_t now_ms,
			 uint64_t wall_ms, const struct ns_settings *s, struct ns_step *out);

void ns_table_add_retry(struct ns_table *t, int idx);
/* A connect admitted (its call counted) that never went out, for a reason
 * of the shim's own (connect_total_timeout spent): the call taken back. */
void ns_table_uncall(struct ns_table *t, int idx);

/* The fleet (netshim-agent): hold slot idx open until until_ms
 * (CLOCK_MONOTONIC) for the nodes named, or release it (until_ms 0). */
void ns_table_fleet_set(struct ns_table *t, int idx, uint64_t until_ms, const char *nodes, uint32_t count);

/* The key, breaker and fleet hold of slot idx, cheaply (no window count):
 * 0, or -1 when the slot is not ready. For the agent's pass over the table. */
int ns_table_state(const struct ns_table *t, int idx, char *key, size_t keylen, struct ns_brk *b,
		   uint64_t *fleet_until_ms);

/* Connects to slot idx so far, let through or refused (for the agent's
 * report that this machine calls the destination). */
uint64_t ns_table_attempts(const struct ns_table *t, int idx);

/* Operator actions. A reset also releases a fleet hold. */
void ns_table_reset(struct ns_table *t, int idx);
void ns_table_force_open(struct ns_table *t, int idx, uint64_t now_ms, uint64_t wall_ms);

/* Copy slot idx for display; returns 0, or -1 if the slot is not ready. */
int ns_table_read(const struct ns_table *t, int idx, uint64_t now_ms, struct ns_entry *e);

/* Connects to slot idx that succeeded so far (its connect times counted). */
uint64_t ns_table_connected(const struct ns_table *t, int idx);
/* Latency: add one sample (microseconds) to a slot's histogram. */
void ns_table_latency(struct ns_table *t, int idx, int first_byte, uint64_t us);
extern const uint64_t ns_hist_bounds_us[NS_HIST_BUCKETS];   /* the last is UINT64_MAX */
/* The upper bound (us) of the bucket holding the p-th percentile (0..100),
 * or -1 when the histogram is empty. */
int64_t ns_hist_percentile(const struct ns_hist *h, unsigned p);

/* Events. ns_table_event fills seq and wall time itself (wall_ms given).
 * ns_table_event_read copies event number seq; returns 0, or -1 when it was
 * overwritten, is being written, or was never completed. */
void ns_table_event(struct ns_table *t, const struct ns_evrec *ev, uint64_t wall_ms);
int ns_table_event_read(const struct ns_table *t, uint64_t seq, struct ns_evrec *out);
uint64_t ns_table_event_head(const struct ns_table *t);
/* The agent's wake-up socket for table t: an abstract AF_UNIX datagram
 * address ("netshim-agent:" and the table's name) the agent binds and a
 * process that writes an event the agent acts on sends one byte to, so a
 * trip reaches the agent at once rather than at its next tick. Anyone may
 * send to it: a wake-up only makes the agent read the event ring. Returns
 * the address length. */
struct sockaddr_un;
unsigned ns_table_wake_addr(const struct ns_table *t, struct sockaddr_un *out);
/* Wake it: a datagram to that address, never waited for (three system
 * calls). The calls are the caller's to give (the library gives its own
 * that are not intercepted again); NULL: libc's. */
struct ns_sockcalls {
	int (*socket_fn)(int domain, int type, int protocol);
	ssize_t (*sendto_fn)(int fd, const void *buf, size_t n, int flags, const struct sockaddr *to, socklen_t tolen);
	int (*close_fn)(int fd);
};
void ns_table_wake_agent(const struct ns_table *t, const struct ns_sockcalls *k);
/* Does an event of this type want the agent now (a breaker here opened or
 * closed, an operator's command, a Retry-After)? */
int ns_event_wakes_agent(uint32_t type);
const char *ns_event_name(uint32_t type);

/* Runtime faults (faulttable.c). A copy of one record, for readers. */
struct ns_fltview {
	int idx;
	uint64_t state, expires_ms, set_wall_ms, applied;
	uint32_t pid;               /* without NS_FLT_EXISTING */
	uint32_t order;             /* of activation: a later record has a greater one (mod 2^32) */
	int existing;               /* NS_FLT_EXISTING */
	char dest[NS_KEY_MAX];
	char text[NS_FAULTS_TEXT];
};

/* Put FAULTS text for dest (replacing the active record for the same dest).
 * expires_ms: CLOCK_MONOTONIC ms, 0 = until cleared; now_ms: the same
 * clock now (records past their time are expired first). pid: the
 * writer's, which holds its record while it writes (with NS_FLT_EXISTING
 * or'd in: the fault reaches open connections too). Returns the record
 * index, or -1 when all NS_FAULT_RECS are active or being written. */
int ns_table_fault_set(struct ns_table *t, const char *dest, const char *text, uint64_t expires_ms,
		       uint64_t wall_ms, uint32_t pid, uint64_t now_ms);
/* Clear the active record for dest (NULL: every one). Returns how many. */
int ns_table_fault_clear(struct ns_table *t, const char *dest);
/* Copy record i; 0, or -1 when it is free or being written. */
int ns_table_fault_read(const struct ns_table *t, uint32_t i, struct ns_fltview *out);
/* Mark an active record whose time ran out as expired; 1 for the one
 * caller that did it (it writes the fault_cleared event), else 0. */
int ns_table_fault_expire(struct ns_table *t, uint32_t i);
void ns_table_fault_applied(struct ns_table *t, uint32_t i);
void ns_table_add_injected(struct ns_table *t, int idx);
/* An exchange got its outcome; one got an HTTP status (failed: by it). */
void ns_table_exchange(struct ns_table *t, int idx);
void ns_table_http(struct ns_table *t, int idx, unsigned code, int failed);

/* The addresses of a name (addrs.c, address_choice = healthy-first): each
 * in its own slot, keyed "name:port@addr", which ns_table_read and
 * ns_table_state do not read (no destination). */
enum { NS_ADDR_HEALTHY = 0, NS_ADDR_DOWN = 1, NS_ADDR_PROBING = 2 };
struct ns_addr_entry {
	char key[NS_KEY_MAX];
	uint32_t name_len; /* key[0, name_len) is the name's key, then '@' and the address */
	int state;         /* NS_ADDR_* */
	uint32_t fails_in_a_row;
	uint32_t last_error;
	uint64_t next_probe_ms; /* NS_ADDR_DOWN: until a lookup may probe it */
	uint64_t calls, successes, failures;
};
/* The address key of name_key's address addr: its length, or -1 (too long, a bad family). */
int ns_addr_key(const char *name_key, int family, const void *addr, char *out, size_t len);
int ns_key_is_addr(const char *key);
/* A connect to the address: ok, or failed with err (listed last for open_ms). */
void ns_table_addr_outcome(struct ns_table *t, int idx, int ok, int err, uint64_t now_ms, uint64_t open_ms);
/* Its failures forgotten (shimctl reset --all): healthy. */
void ns_table_addr_reset(struct ns_table *t, int idx);
/* Where a lookup lists the address: 0 in its place (healthy, or this
 * lookup takes its probe), 1 after the healthy ones. */
int ns_table_addr_rank(struct ns_table *t, int idx, uint64_t now_ms, uint64_t open_ms);
/* Copy an address slot for display: 0, or -1 (not ready, not an address). */
int ns_table_addr_read(const struct ns_table *t, int idx, uint64_t now_ms, struct ns_addr_entry *e);
const char *ns_addr_state_name(int state);

/* Places (max_connections) of slot idx. take: one of places [0, cap) for
 * holder (never 0): its number, or -1 when all are held. release: place p
 * freed if it holds holder (1, and *waiters: processes blocked waiting to
 * be woken), else 0; a dead holder's place is freed the same way. holder:
 * the holder of place p (0 free, or out of range). wake: the futex word
 * waiters wait on. throttled: a connect turned away, waited: one that waited
 * ms for its place (both counted; a throttled connect is no call); the
 * throttling event is due (1 at most once a minute per destination,
 * now_ms). */
/* A place's holder: pid << NS_PLACE_TAG_BITS | its start time's low bits
 * (a reused pid is another holder). lives: the holder is still running (a
 * signal 0, and /proc/PID/stat; system calls: only where every place is
 * held). */
#define NS_PLACE_TAG_BITS 10u
#define NS_PLACE_PID_MAX ((1u << (32 - NS_PLACE_TAG_BITS)) - 1)
uint32_t ns_place_holder(unsigned pid, uint64_t start);
uint64_t ns_proc_start_time(unsigned pid, char *state);   /* state: its letter (NULL: not wanted) */
/* Field `field` (1-based, as proc(5) numbers them; 20: threads, 22: start
 * time) of /proc/PID/stat, 0 when unreadable. */
uint64_t ns_proc_stat_field(unsigned pid, int field, char *state);
/* deep: also a reused pid or a zombie (/proc read); else kill() alone */
int ns_place_holder_lives(uint32_t holder, int deep);
/* Places of slot idx held by running processes (system calls: for shimctl). */
uint32_t ns_table_inflight_live(const struct ns_table *t, int idx);
static inline struct ns_slot *ns_table_slot_(const struct ns_table *t, int idx)
{
	return idx >= 0 && (uint32_t)idx < t->nslots ? &t->slots[idx] : NULL;
}

/* (inline: a connect under max_connections takes one, its close gives it back) */
/* One of places[0, cap) (at most NS_PLACES) for holder (never 0): its
 * number, or -1 (max_connections' and max_requests' places alike). */
static inline int ns_places_take(uint32_t *place, uint32_t cap, uint32_t holder)
{
	if (!holder)
		return -1;
	if (cap > NS_PLACES)
		cap = NS_PLACES;
	for (uint32_t p = 0; p < cap; p++) {
		uint32_t free_ = 0;

		if (!__atomic_load_n(&place[p], __ATOMIC_RELAXED) &&
		    __atomic_compare_exchange_n(&place[p], &free_, holder, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
			return (int)p;
	}
	return -1;
}

static inline int ns_table_place_take(struct ns_table *t, int idx, uint32_t cap, uint32_t holder)
{
	struct ns_slot *s = ns_table_slot_(t, idx);

	return s ? ns_places_take(s->place, cap, holder) : -1;
}

static inline int ns_table_place_release(struct ns_table *t, int idx, int p, uint32_t holder, uint32_t *waiters)
{
	struct ns_slot *s = ns_table_slot_(t, idx);
	uint32_t h = holder;

	*waiters = 0;
	if (!s || p < 0 || p >= (int)NS_PLACES || !holder ||
	    !__atomic_compare_exchange_n(&s->place[p], &h, 0, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
		return 0;
	__atomic_fetch_add(&s->place_wake, 1, __ATOMIC_SEQ_CST);
	*waiters = __atomic_load_n(&s->place_waiters, __ATOMIC_SEQ_CST);
	return 1;
}

static inline uint32_t ns_table_place_holder(struct ns_table *t, int idx, int p)
{
	struct ns_slot *s = ns_table_slot_(t, idx);

	return s && p >= 0 && p < (int)NS_PLACES ? __atomic_load_n(&s->place[p], __ATOMIC_ACQUIRE) : 0;
}

static inline uint32_t *ns_table_place_wake(struct ns_table *t, int idx)
{
	struct ns_slot *s = ns_table_slot_(t, idx);

	return s ? &s->place_wake : NULL;
}

static inline void ns_table_place_waiting(struct ns_table *t, int idx, int delta)
{
	struct ns_slot *s = ns_table_slot_(t, idx);

	if (s)
		__atomic_fetch_add(&s->place_waiters, (uint32_t)delta, __ATOMIC_SEQ_CST);
}

int ns_table_throttled(struct ns_table *t, int idx, uint64_t now_ms);
/* A process's own once a minute, for the line it says where its operator
 * looks (the table's once a minute, above, is the machine's: its event):
 * 1 when this process said nothing for slot idx in the last minute (it has
 * now), else 0. said: the process's own words, zeroed at first. */
#define NS_SAID_WAYS 64
int ns_said_here(uint64_t said[NS_SAID_WAYS], int idx, uint64_t now_ms);
/* words.c: max_connections as a refusal line names it: the limit in force
 * ("4", "auto: 3 now", "4; 2 now, in slow_start"); the figures of the rule
 * that moved a breaker (st), as its line gives them ("5 failures in the
 * 10000 ms window, threshold 5"). */
void ns_cap_text(const struct ns_table *t, int idx, const struct ns_settings *set, uint64_t now_ms, char *buf,
		 size_t n);
void ns_rule_figures(const struct ns_table *t, int slot, const struct ns_step *st, const struct ns_settings *s,
		     uint64_t now_ms, char *b, size_t n);
/* A Retry-After: connects to slot idx refused (counted as rejected) until
 * until_ms (CLOCK_MONOTONIC ms), or later if a longer one is in force. */
void ns_table_cooldown(struct ns_table *t, int idx, uint64_t until_ms);
/* ...when it ends (CLOCK_MONOTONIC ms; 0 or past: none) */
uint64_t ns_table_cooldown_until(const struct ns_table *t, int idx);
/* ...it ended (seen: the end read): back to none, unless it moved since */
void ns_table_cooldown_over(struct ns_table *t, int idx, uint64_t seen);
/* slow_start: the share (thousandths) of max_connections and rate in force
 * now: from 100 when the breaker closed to 1000 over slow_start_ms. cap_now:
 * max_connections under it (rounded up, at least 1). */
uint32_t ns_table_share_now(const struct ns_table *t, int idx, uint64_t slow_start_ms, uint64_t now_ms);
uint32_t ns_table_cap_now(const struct ns_table *t, int idx, uint32_t cap, uint64_t slow_start_ms, uint64_t now_ms);
/* rate: a token of slot idx's bucket (GCRA), at now_us (CLOCK_MONOTONIC
 * microseconds). Taken: 0, and the next is due step_us later (the
 * interval, spread by rate_jitter, stretched by slow_start); tolerance_us
 * lets (burst - 1) intervals' worth go at once; *tat_out: the bucket's time
 * it left. None: the time (us) the next is due, when the call may ask
 * again. paced: one waited (counted). */
/* (inline: a request under rate takes one on its way out) */
static inline int64_t ns_table_token(struct ns_table *t, int idx, uint64_t step_us, uint64_t tolerance_us,
				     uint64_t now_us, uint64_t *tat_out)
{
	struct ns_slot *s = ns_table_slot_(t, idx);
	uint64_t tat, nw;

	*tat_out = 0;
	if (!s)
		return 0;
	tat = __atomic_load_n(&s->rate_tat, __ATOMIC_ACQUIRE);
	do {
		uint64_t at = tat;

		/* a time left by a rate far slower than this one (a fleet
		 * share of 0.01/s grown to 10/s, slow_start's first steps): the
		 * next is due one step of this one from now, not 100 s on */
		if (__builtin_expect(at > now_us + tolerance_us + 4 * step_us, 0))
			at = now_us + tolerance_us + step_us;
		if (at > now_us + tolerance_us) {
			if (at != tat)
				__atomic_compare_exchange_n(&s->rate_tat, &tat, at, 0, __ATOMIC_ACQ_REL,
							    __ATOMIC_ACQUIRE);
			return (int64_t)(at - tolerance_us); /* none yet: the next is due then */
		}
		nw = (at > now_us ? at : now_us) + step_us;
	} while (!__atomic_compare_exchange_n(&s->rate_tat, &tat, nw, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE));
	*tat_out = nw;
	return 0;
}
/* max_connections = auto (AIMD over the slot, for every process): the cap
 * in force now, from max_connections_min until it has grown; ..._event: a
 * success or a failure of the destination (ns_table_outcome_at and a
 * Retry-After's cooldown count them), or a connect that took place p (the
 * interval had connections in flight at half the limit or more: place is
 * then the places held before it). A
 * failure shrinks it at once by adaptive_backoff (by one connection at
 * least); it grows by one at most
 * once per adaptive_interval, after an interval with a success and such a
 * connect and no failure. */
enum { NS_ADAPT_SUCCESS, NS_ADAPT_FAILURE, NS_ADAPT_PLACE };
uint32_t ns_table_limit(const struct ns_table *t, int idx, const struct ns_settings *set);
void ns_table_limit_event(struct ns_table *t, int idx, const struct ns_settings *set, int ev, int place,
			  uint64_t now_ms);
/* ...max_requests = auto, the same on requests (max_requests_min/_max; held:
 * the requests in flight before one that took a place). ns_table_req_limit:
 * max_requests' limit in force at now_ms (the key's, auto's, under a fleet
 * limit at most this machine's share) */
uint32_t ns_table_req_limit(const struct ns_table *t, int idx, const struct ns_settings *set, uint64_t now_ms);
/* The fleet's share of idx's limit kind (NS_FLEET_K_*) in force at now_ms:
 * the agent's lease while it runs (whole: the policy's fleet value when no
 * agent ever wrote one, so a machine without an agent keeps the whole
 * limit to itself); 0 once a lease lapsed unrenewed (its share went back
 * to the other machines: nothing may start here until an agent renews). */
enum { NS_FLEET_K_REQ, NS_FLEET_K_CONN, NS_FLEET_K_RATE };
/* ...the policy key of limit kind k (its name: ns_key_names[NS_FLEET_KEY(k)]) */
#define NS_FLEET_KEY(k) (NS_K_FLEET_MAX_REQUESTS + (k))
_Static_assert(NS_FLEET_KEY(NS_FLEET_K_CONN) == NS_K_FLEET_MAX_CONNECTIONS &&
		       NS_FLEET_KEY(NS_FLEET_K_RATE) == NS_K_FLEET_RATE,
	       "the fleet's limit kinds in the order of their keys");
/* ...and of its bit in ns_settings.fleet */
#define NS_FLEET_BIT(k) (1u << (k))
_Static_assert(NS_FLEET_BIT(NS_FLEET_K_REQ) == NS_FLEET_REQ && NS_FLEET_BIT(NS_FLEET_K_CONN) == NS_FLEET_CONN &&
		       NS_FLEET_BIT(NS_FLEET_K_RATE) == NS_FLEET_RATE,
	       "the fleet's limit kinds in the order of their bits");
/* ...a destination's limit of kind k as its settings give it (rate in
 * thousandths an hour), 0 where its policy sets none */
static inline uint64_t ns_fleet_limit(const struct ns_settings *set, int k)
{
	if (!(set->fleet & NS_FLEET_BIT(k)))
		return 0;
	return k == NS_FLEET_K_REQ     ? set->fleet_max_requests
		: k == NS_FLEET_K_CONN ? set->fleet_max_connections
				       : set->fleet_rate_mph;
}
uint64_t ns_table_fleet_share(const struct ns_table *t, int idx, int kind, uint64_t whole, uint64_t now_ms);
/* ...a token taken under fleet_rate (the agent's measure of demand) */
void ns_table_fleet_token(struct ns_table *t, int idx);
/* ...an ask (a place, a token) the share turned down: this machine wants more */
void ns_table_fleet_denied(struct ns_table *t, int idx, int kind);
/* What this machine asks of idx's fleet limits now (the agent's demand). */
struct ns_fleet_demand {
	uint32_t req_inflight, req_waiting;   /* max_requests' places held, requests waiting for one */
	uint32_t conn_inflight, conn_waiting; /* max_connections' places held, connects blocked for one */
	uint64_t tokens, paced;               /* rate's tokens taken (fleet_rate) and waits for one, so far */
	uint64_t conn_waits;                  /* connects that waited for a place, so far */
	uint64_t denied[3];                   /* NS_FLEET_K_*: asks the share turned down, so far */
};
void ns_table_fleet_demand(const struct ns_table *t, int idx, struct ns_fleet_demand *d);
/* The agent's share of idx's limit kind until expires_ms (CLOCK_MONOTONIC),
 * of live machines; a share of places that grew wakes the waiters (*wake:
 * the futex word the caller wakes, else NULL). 0, or -1 for no such limit. */
int ns_table_fleet_write(struct ns_table *t, int idx, int kind, uint64_t share, uint64_t whole, uint64_t expires_ms,
			 uint32_t live, uint32_t **wake);
/* The largest limit of kind the machines' policies give idx (the agent's
 * lease saw them all; shimctl check --fleet compares a file with them). */
void ns_table_fleet_largest(struct ns_table *t, int idx, int kind, uint64_t largest);
/* ...as the table holds it: the share (-1: none written), the fleet's
 * limit, its expiry, the machines */
int64_t ns_table_fleet_read(const struct ns_table *t, int idx, int kind, uint64_t *whole, uint64_t *expires_ms,
			    uint32_t *live);
void ns_table_req_limit_event(struct ns_table *t, int idx, const struct ns_settings *set, int ev, int held,
			      uint64_t now_ms);
#define NS_ADAPT_LIMIT(w) ((uint32_t)((w) >> 44)) /* the adapt word's limit (thousandths) */
/* An outcome of the destination for the limits that adapt and the throttle
 * (ns_table_outcome_at, when one of them is set). */
void ns_table_adapt_outcome(struct ns_table *t, int idx, const struct ns_settings *set, int failed, uint64_t now_ms);
/* A place under max_connections = auto: one of [0, span) (span: the
 * places the limit may reach) while fewer than cap are held there, else
 * -1; *held: how many were held before it. A limit that shrank leaves
 * places above it held: a connect may not take a lower one that is free
 * while they are (a place's number is no count). Two connects that count
 * at once may both take one: the limit is a guide there, not a bound. */
/* ...the limit of max_connections = auto (req 0) or max_requests = auto
 * (req 1) read, a place taken under it and the taking counted (half the
 * limit or more in flight grows it), in one look at the slot: its index,
 * or -1 */
int ns_table_place_take_auto(struct ns_table *t, int idx, const struct ns_settings *set, uint32_t holder,
			     uint64_t now_ms, int req);
int ns_table_place_take_under(struct ns_table *t, int idx, uint32_t cap, uint32_t span, uint32_t holder,
			      uint32_t *held);
/* ...counted with the CPU's POPCNT (on 1) or shifts and masks (0), as the
 * CPU was found at load unless a test says (on -1: asked only): the one
 * in use before */
int ns_places_popcnt(int on);
/* max_connections (auto: the limit now), under slow_start's ramp. */
uint32_t ns_table_cap_for(const struct ns_table *t, int idx, const struct ns_settings *set, uint64_t now_ms);
/* throttle = adaptive: should this connect be refused here (with
 * probability max(0, (requests - K accepts) / (requests + 1)) over the
 * window; rng: the caller's ns_rng_next state)? 1: refused (the caller counts it
 * throttled: ns_table_throttled). count: an outcome, a request, accepted
 * when a success (ns_table_outcome_at). The requests are the outcomes, not
 * the connects: a connect refused here is none (were it one, a server that
 * recovered would see the throttle hold on for many windows: few let
 * through, so few accepts against many requests), nor is a connection that
 * ends with no outcome. */
int ns_table_throttle(struct ns_table *t, int idx, const struct ns_settings *set, uint64_t now_ms, uint64_t *rng);
/* A throttle window's word: its number, requests, accepts. */
#define NS_TH_NUM(w) ((uint32_t)((w) >> 48))
#define NS_TH_REQ(w) ((uint32_t)((w) >> 24) & 0xffffffu)
#define NS_TH_ACC(w) ((uint32_t)(w)&0xffffffu)
/* ...each window's words within K accepts a request: so is any share of
 * them, and nothing is refused (a healthy destination: no division, no
 * draw; the connect path asks this inline first) */
static inline int ns_throttle_healthy(const struct ns_slot *s, const struct ns_settings *set)
{
	uint64_t w0 = __atomic_load_n(&s->thr[0], __ATOMIC_RELAXED), w1 = __atomic_load_n(&s->thr[1], __ATOMIC_RELAXED);

	return (uint64_t)NS_TH_REQ(w0) * 1000 <= (uint64_t)NS_TH_ACC(w0) * set->throttle_k_milli &&
		(uint64_t)NS_TH_REQ(w1) * 1000 <= (uint64_t)NS_TH_ACC(w1) * set->throttle_k_milli;
}
/* ...the share it refuses, in millionths, of req requests with acc accepted
 * (K = k_milli / 1000): (req - K acc) / (req + 1), 0 when req <= K acc
 * (shimctl status says it too). */
uint64_t ns_throttle_ppm(uint64_t req, uint64_t acc, uint32_t k_milli);
void ns_table_throttle_count(struct ns_table *t, int idx, const struct ns_settings *set, int accepted, uint64_t now_ms);

/* rate's interval now (us): the settings' own, stretched while
 * slow_start's ramp runs, spread by rate_jitter by a draw (a uniform random
 * number) in [1 - j, 1 + j]. */
uint64_t ns_table_rate_step(const struct ns_table *t, int idx, const struct ns_settings *set, uint64_t now_ms,
			    uint64_t draw);
/* A token taken at base_us (the bucket then at tat) counted from later,
 * now_us, when nobody took one since: the next is due that much later. */
void ns_table_token_later(struct ns_table *t, int idx, uint64_t tat, uint64_t base_us, uint64_t now_us);
void ns_table_paced(struct ns_table *t, int idx);
/* retry_budget: a connect let through (retry: it is a process's retry).
 * Every call earns budget_bp of a retry, time earns min_mps thousandths
 * per second (at most one second's and one retry's worth kept); a retry
 * spends one. 0, or -1 when a retry finds none left (counted
 * retry_throttled; not a call). */
int ns_table_retry_budget(struct ns_table *t, int idx, int retry, uint32_t budget_bp, uint32_t min_mps,
			  uint64_t now_ms);
void ns_table_waited(struct ns_table *t, int idx, uint64_t ms);
/* A reused connection ended before the answer to its request: counted
 * apart, never in the window (the client's new connection decides). */
void ns_table_stale_reuse(struct ns_table *t, int idx);
/* An exchange counted for what turned out to be no exchange's (an h2c
 * server's preface, read before the client's was sent): taken back. */
void ns_table_exchange_undo(struct ns_table *t, int idx);
/* ...and its first-byte time of us, in the histogram and the window's
 * latencies (where it is still there to take back). */
void ns_table_first_byte_undo(struct ns_table *t, int idx, uint64_t us, uint64_t now_ms, uint64_t window_ms);
/* A connection's own success (its TLS handshake, its h2 connect) counted at
 * at_ms, taken back when its first request's outcome is counted: requests
 * are the outcomes of a connection that carries them. From the total, and
 * from the window's bucket of at_ms while that bucket is still its. */
void ns_table_success_undo(struct ns_table *t, int idx, uint64_t at_ms, uint64_t window_ms);
/* An HTTP/2 stream settled unprocessed (REFUSED_STREAM, above a GOAWAY),
 * or an h2 connection lost to the reader: counted, never an outcome. */
enum { NS_H2_COUNT_UNPROCESSED, NS_H2_COUNT_BLIND };
void ns_table_h2_count(struct ns_table *t, int idx, int what);
/* A connect of a program under shimrun's seccomp engine, made. */
void ns_table_seccomp_call(struct ns_table *t, int idx);
/* A gRPC answer's grpc-status, and whether it failed its stream. */
void ns_table_grpc(struct ns_table *t, int idx, unsigned code, int failed);
uint64_t ns_table_fault_gen(const struct ns_table *t);

/* The bucket width for a window, in ms. */
uint64_t ns_bucket_width(uint64_t window_ms);

#endif

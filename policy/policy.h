/* policy.h -- the policy language: parse, validate, match a destination. */
#ifndef NS_POLICY_H
#define NS_POLICY_H

#include <stddef.h>
#include <stdint.h>

#include "faultspec.h"

#define NS_ERRBUF 512
#define NS_HOST_MAX 254   /* a DNS name is at most 253 characters */
#define NS_KEY_MAX 264    /* "name:65535" or "[v6]:65535" plus NUL */
#define NS_PLACES 32      /* max_connections at most: the places a table slot holds */
#define NS_MAXCONN_AUTO 0xffffffffu /* max_connections = auto, as a section holds it */

enum ns_mode { NS_MODE_ENFORCE = 0, NS_MODE_MONITOR = 1, NS_MODE_BYPASS = 2 };
enum ns_recovery { NS_RECOVERY_AUTO = 0, NS_RECOVERY_MANUAL = 1 };
enum ns_address_choice { NS_ADDR_AS_RESOLVED = 0, NS_ADDR_HEALTHY_FIRST = 1 };

/* Every setting a destination can have. Durations in milliseconds, 0 = off. */
struct ns_settings {
	uint64_t connect_timeout_ms;
	uint64_t read_timeout_ms;
	uint64_t total_timeout_ms;
	uint32_t failure_threshold;
	uint64_t window_ms;
	uint32_t consecutive_failures;
	uint32_t failure_rate_bp;   /* basis points: 5000 = 50 % */
	uint32_t min_calls;
	uint32_t recovery;          /* enum ns_recovery */
	uint64_t open_duration_ms;
	uint32_t half_open_probes;
	uint32_t connect_retries;
	uint64_t retry_backoff_ms;
	uint32_t mode;              /* enum ns_mode */
	uint32_t trace;             /* 1: record the calling code of failures */
	uint64_t slow_call_ms;      /* an exchange whose first byte took this long is slow; 0 = off */
	uint32_t slow_call_rate_bp; /* open when slow calls reach this share of the window */
	uint32_t timeout_rate_bp;   /* open when timeouts reach this share of the window */
	uint64_t latency_p99_ms;    /* open when the window's p99 first-byte time reaches this */
	uint64_t failure_status[8]; /* HTTP codes 100-611 (bit code-100) that fail an exchange */
	uint64_t grpc_failure_status; /* gRPC status codes 0-63 (bit code) that fail an exchange */
	/* shaping (docs/design.md, "What each rule promises"): 0 = off */
	uint32_t max_connections;   /* connections open at once, machine-wide (at most NS_PLACES); in a
				     * section NS_MAXCONN_AUTO for auto, which ns_policy_resolve makes
				     * max_connections_max with adaptive set */
	uint32_t adaptive;          /* not a key: max_connections = auto (ns_policy_resolve) */
	uint64_t queue_timeout_ms;  /* how long a connect over the cap waits for a place */
	uint32_t open_backoff_milli;/* each reopen in a row multiplies open_duration: 2000 = x2; 0 = off */
	uint32_t open_jitter_bp;    /* each open period spread by up to this share either way */
	uint64_t open_duration_max_ms; /* the growth stops here; 0 = no bound but the key's maximum */
	uint32_t retry_after;       /* 1: a 429/503 with Retry-After puts the destination in cooldown */
	uint32_t pad_ra;
	uint64_t retry_after_max_ms;/* the longest cooldown a Retry-After may ask */
	uint64_t slow_start_ms;     /* after a breaker closes, max_connections ramps up over this */
	uint32_t retry_budget_bp;   /* a process's retries let through: this share of the destination's calls... */
	uint32_t retry_budget_min_mps; /* ...plus this many per second (in thousandths); both 0: no budget */
	uint64_t rate_mph;          /* rate: new connections and HTTP/1.x requests, thousandths per hour; 0 = off */
	uint32_t burst;             /* rate's bucket: this many at once (0 and 1: one) */
	uint32_t rate_jitter_bp;    /* each wait for a token spread by up to this share either way */
	/* limits that adapt (docs/design.md) */
	uint32_t max_connections_min; /* max_connections = auto: the limit's bounds */
	uint32_t max_connections_max;
	uint32_t adaptive_backoff_milli; /* ...each failure multiplies it by this (thousandths: 900 = 0.9) */
	uint32_t throttle;               /* 1: throttle = adaptive (client-side throttling, Google SRE) */
	uint64_t adaptive_interval_ms;   /* ...it grows by one at most once per this */
	uint32_t throttle_k_milli;       /* throttle_k (thousandths) */
	uint32_t pad_throttle;
	uint64_t throttle_window_ms;       /* the requests and accepts it counts, over this */
	uint64_t connect_total_timeout_ms; /* a name's connects over its addresses, one attempt: 0 = off */
	uint32_t address_choice;           /* NS_ADDR_* (getaddrinfo's order for a governed name) */
	uint32_t max_requests;             /* requests in flight at once, machine-wide (at most NS_PLACES); 0 = off;
					    * in a section NS_MAXCONN_AUTO for auto, which ns_policy_resolve makes
					    * max_requests_max with req_adaptive set */
	uint32_t max_requests_min;         /* max_requests = auto: the limit's bounds */
	uint32_t max_requests_max;
	uint32_t req_adaptive; /* not a key: max_requests = auto */
	uint32_t pad_req;
	/* limits for the fleet (netshim-agent leases this machine a share:
	 * docs/fleet.md, "Limits for the fleet"); 0 = off */
	uint32_t fleet_max_requests;    /* requests in flight from every machine together */
	uint32_t fleet_max_connections; /* connections open from every machine together */
	uint64_t fleet_rate_mph;        /* rate for every machine together, thousandths per hour */
	uint32_t fleet;                 /* not a key: NS_FLEET_* of the fleet keys set (ns_policy_resolve) */
	uint32_t pad_fleet;
	/* not keys (ns_policy_resolve): */
	uint64_t rate_interval_us;  /* rate's interval between tokens, microseconds; 0 = no rate */
	uint32_t shaping;           /* NS_SHAPING_*: max_connections, rate, retry_budget, throttle,
				     * address_choice or connect_total_timeout is set: the connect's slow steps */
	uint32_t shaping_first;     /* retry_budget, throttle or connect_total_timeout: steps before the place */
	uint64_t fault_seed;        /* [defaults] only: repeatable fault choices; 0 = none */
	struct ns_faults fault;     /* faults to inject; n = 0: none. Last: see ns_policy_resolve */
};

/* ns_settings.shaping: any shaping step at all; and max_connections the
 * connect's only wait (no rate, no slow_start): the place's fast try */
#define NS_SHAPING_ANY        1u
#define NS_SHAPING_PLACE_ONLY 2u

enum ns_key_id {
	NS_K_CONNECT_TIMEOUT,
	NS_K_READ_TIMEOUT,
	NS_K_TOTAL_TIMEOUT,
	NS_K_FAILURE_THRESHOLD,
	NS_K_WINDOW,
	NS_K_CONSECUTIVE_FAILURES,
	NS_K_FAILURE_RATE,
	NS_K_MIN_CALLS,
	NS_K_RECOVERY,
	NS_K_OPEN_DURATION,
	NS_K_HALF_OPEN_PROBES,
	NS_K_CONNECT_RETRIES,
	NS_K_RETRY_BACKOFF,
	NS_K_MODE,
	NS_K_TRACE,
	NS_K_FAULT,
	NS_K_FAULT_SEED,
	NS_K_FAILURE_STATUS,
	NS_K_SLOW_CALL,
	NS_K_SLOW_CALL_RATE,
	NS_K_TIMEOUT_RATE,
	NS_K_LATENCY_P99,
	NS_K_MAX_CONNECTIONS,
	NS_K_QUEUE_TIMEOUT,
	NS_K_OPEN_BACKOFF,
	NS_K_OPEN_DURATION_MAX,
	NS_K_OPEN_JITTER,
	NS_K_RETRY_AFTER,
	NS_K_RETRY_AFTER_MAX,
	NS_K_SLOW_START,
	NS_K_RETRY_BUDGET,
	NS_K_RETRY_BUDGET_MIN,
	NS_K_RATE,
	NS_K_BURST,
	NS_K_RATE_JITTER,
	NS_K_GRPC_FAILURE_STATUS,
	NS_K_MAX_CONNECTIONS_MIN,
	NS_K_MAX_CONNECTIONS_MAX,
	NS_K_ADAPTIVE_BACKOFF,
	NS_K_ADAPTIVE_INTERVAL,
	NS_K_THROTTLE,
	NS_K_THROTTLE_K,
	NS_K_THROTTLE_WINDOW,
	NS_K_CONNECT_TOTAL_TIMEOUT,
	NS_K_ADDRESS_CHOICE,
	NS_K_MAX_REQUESTS,
	NS_K_MAX_REQUESTS_MIN,
	NS_K_MAX_REQUESTS_MAX,
	NS_K_FLEET_MAX_REQUESTS,
	NS_K_FLEET_MAX_CONNECTIONS,
	NS_K_FLEET_RATE,
	NS_K_COUNT
};

/* settings' fleet: which limits this machine takes its share of */
enum { NS_FLEET_REQ = 1, NS_FLEET_CONN = 2, NS_FLEET_RATE = 4 };

/* What a section's pattern matches. */
enum ns_match_kind { NS_MATCH_DEFAULTS, NS_MATCH_NAME, NS_MATCH_WILDCARD, NS_MATCH_CIDR };

struct ns_section {
	int kind;                   /* enum ns_match_kind */
	int line;
	char pattern[NS_HOST_MAX + 16]; /* as written, for messages */
	char name[NS_HOST_MAX + 1];     /* lower case, no trailing dot; for a wildcard, the suffix with its dot */
	int family;                 /* AF_INET / AF_INET6 for CIDR */
	uint8_t addr[16];
	int prefix;
	int port;                   /* 0 = any port */
	uint64_t set;               /* bit per enum ns_key_id (NS_KBIT) */
	int key_line[NS_K_COUNT];
	struct ns_settings v;
};

#define NS_KBIT(k) (1ull << (k))
_Static_assert(NS_K_COUNT <= 64, "a section's set keys are one 64-bit word");

struct ns_policy {
	char path[256];
	char shadow[256];           /* [defaults] shadow_policy: the shadow's file, "" = none */
	int nsections;              /* section 0 is [defaults], always present */
	int has_faults;             /* some section sets `fault` */
	int has_addr_choice;        /* some section sets address_choice = healthy-first */
	int has_max_requests;       /* some section sets max_requests */
	struct ns_section *sec;
	/* polimage.c: the index of the sections by name (NULL: every section
	 * is looked at), and the image it lives in (heap or mapped: then sec
	 * is the image's, read-only) */
	const struct ns_pidx *idx;
	void *img;
	size_t img_len;
	int img_mapped;
};

/* A destination as the shim sees it: a host name if the program resolved
 * one (may be empty), the address it connects to, and the port. */
struct ns_dest {
	char name[NS_HOST_MAX + 1];
	int family;                 /* AF_INET or AF_INET6; mapped v4 is AF_INET */
	uint8_t addr[16];
	uint16_t port;
};

/* Where each effective setting came from: a section index, or -1 for built-in. */
struct ns_origin { int sec[NS_K_COUNT]; };

extern const struct ns_settings ns_builtin_settings;
extern const char *const ns_key_names[NS_K_COUNT];

/* Parse policy text. Returns 0 and fills *out, or returns the number of
 * errors (> 0) with each "file:line: message" line appended to err (a
 * caller buffer of errlen bytes, NUL-terminated, truncated if needed).
 * Returns -1 with err set if memory ran out. */
int ns_policy_parse(const char *text, size_t len, const char *fname,
		    struct ns_policy *out, char *err, size_t errlen);

/* The policy file in force by the contract: $NETSHIM_POLICY if set, else
 * /etc/netshim/policy.conf if it exists, else NULL (the built-in defaults). */
const char *ns_policy_path(void);
/* ...with env as NETSHIM_POLICY's value (the shim's copy of its start) */
const char *ns_policy_path_env(const char *env);

/* Read and parse a file: as ns_policy_parse, plus "file: reason" when it
 * cannot be read. */
int ns_policy_load(const char *path, struct ns_policy *out, char *err, size_t errlen);

/* A policy with only the built-in defaults. Returns 0, or -1 on ENOMEM. */
int ns_policy_builtin(struct ns_policy *out);

void ns_policy_free(struct ns_policy *p);

/* The settings for a destination: for each key, the most specific matching
 * section that sets it, then [defaults], then the built-in value. origin may
 * be NULL. */
void ns_policy_resolve(const struct ns_policy *p, const struct ns_dest *d,
		       struct ns_settings *out, struct ns_origin *origin);

/* Parse "127.0.0.1:80", "[::1]:80" or "name:80" into a destination. Returns 0
 * or -1 when it is not of that form. */
int ns_dest_parse(const char *s, struct ns_dest *d);

/* A percentage, "50%" or "2.5%" (at most two decimals), into basis points
 * (0 to 10000): 0, or NS_PCT_FORM (not a number followed by %),
 * NS_PCT_NUMBER (a bad number) or NS_PCT_OVER (over 100%). */
enum { NS_PCT_FORM = -1, NS_PCT_NUMBER = -2, NS_PCT_OVER = -3 };
int ns_pct_parse(const char *s, uint32_t *bp);

/* Is HTTP status code an exchange failure under s->failure_status? */
static inline int ns_status_fails(const struct ns_settings *s, unsigned code)
{
	return code >= 100 && code < 612 && (s->failure_status[(code - 100) / 64] >> ((code - 100) % 64) & 1);
}

/* Is gRPC status code an exchange failure under s->grpc_failure_status? */
static inline int ns_grpc_fails(const struct ns_settings *s, unsigned code)
{
	return code < 64 && (s->grpc_failure_status >> code & 1);
}

/* A gRPC status code's name ("UNAVAILABLE"), or NULL for a code gRPC does
 * not name (17 and up). */
const char *ns_grpc_name(unsigned code);

/* A duration with its unit ("250ms", "3s", "2m", "1h", or "0") into ms.
 * Returns 0, or -1 with the reason in *why. */
int ns_duration_parse(const char *s, uint64_t *ms, const char **why);

/* A destination pattern as shimctl inject and shimrun --inject take it
 * ("host:port", "host", an address, a CIDR, "*.domain"), and whether a
 * destination matches it. Returns NULL, or the reason it is bad. */
const char *ns_pattern_parse(const char *s, struct ns_section *sec);
int ns_pattern_match(const struct ns_section *sec, const struct ns_dest *d);

/* One "DEST=FAULTS" of shimrun --inject (NETSHIM_INJECT holds them, one
 * per line). Returns 0, or -1 with the reason in why. */
int ns_inject_parse(const char *entry, struct ns_section *pat, struct ns_faults *f, char *why, size_t whylen);

/* Format the destination key ("name:port", "1.2.3.4:port", "[v6]:port").
 * Returns the length, or -1 when it does not fit. */
int ns_dest_key(const struct ns_dest *d, char *buf, size_t len);

/* Strings built without the printf family (whose code pages a process's
 * first connect would otherwise fault in, ~11 us each on a sandboxed
 * kernel): src (or v in decimal) written at buf[at], cut to fit len bytes,
 * NUL-terminated. Returns the new end (the next at). */
size_t ns_str_put(char *buf, size_t len, size_t at, const char *src);
size_t ns_uint_put(char *buf, size_t len, size_t at, unsigned v);

/* Format a setting's value the way the policy language writes it. */
void ns_setting_format(int key, const struct ns_settings *s, char *buf, size_t len);

#endif

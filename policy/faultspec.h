/* faultspec.h -- the fault grammar: what an injected fault is, how it is written
 * (policy key `fault`, `shimctl inject`, `shimrun --inject`) and which
 * connections get it. Pure: no system calls.
 *
 *   FAULTS := FAULT [";" FAULT]...
 *   FAULT  := KIND [ARG] ["after" SIZE] [PERCENT]
 */
#ifndef NS_FAULTSPEC_H
#define NS_FAULTSPEC_H

#include <stddef.h>
#include <stdint.h>

#define NS_FAULTS_MAX 4
#define NS_FAULTS_TEXT 200   /* longest FAULTS text kept (and formatted) */
#define NS_FAULT_SIZE_MAX (1ULL << 50)   /* largest SIZE or rate (1 PiB): kept values format back exactly */

enum ns_fault_kind {
	NS_F_NONE = 0,
	/* at connect */
	NS_F_REFUSE, NS_F_UNREACHABLE, NS_F_BLACKHOLE, NS_F_DELAY,
	/* on the data of a live connection */
	NS_F_LATENCY, NS_F_BANDWIDTH, NS_F_STALL, NS_F_RESET, NS_F_CLOSE, NS_F_STATUS,
	/* at name lookup */
	NS_F_NXDOMAIN,
	/* on the data (after the lookup kind: kinds are numbered for good) */
	NS_F_FRAGMENT,
	/* at name lookup, more */
	NS_F_SERVFAIL, NS_F_DNSDELAY, NS_F_RESOLVE,
	/* on the TLS handshake: the server's certificate is rejected */
	NS_F_TLSFAIL,
	NS_F_KINDS
};

/* When a kind acts. */
enum ns_fault_phase { NS_FP_CONNECT, NS_FP_DATA, NS_FP_LOOKUP };

struct ns_fault {
	uint32_t kind;               /* enum ns_fault_kind */
	uint32_t pct_bp;             /* share of connections (lookups), basis points; 10000 = all */
	uint64_t arg;                /* delay/latency/dnsdelay: ms; bandwidth: bytes/s; status: the
				      * code; fragment: the most bytes a read returns; resolve: the
				      * IPv4 address (network order, in the low 32 bits) */
	uint64_t after;              /* stall/reset/close: bytes that arrive first; status: the
				      * Retry-After its answer carries, seconds + 1 (0: none) */
	uint64_t jitter;             /* latency: the standard deviation of each delay, ms (0: none) */
	uint32_t first;              /* only the first N connections (lookups) get it; 0 = all */
	uint32_t every;              /* only every Nth gets it; 0 = all */
	uint32_t for_ms;             /* in force only for_ms of every period_ms (wall clock, from */
	uint32_t period_ms;          /* ...the epoch: every process agrees); 0 = always */
};

struct ns_faults {
	uint32_t n;
	uint32_t pad;
	struct ns_fault f[NS_FAULTS_MAX];
};

/* Parse FAULTS text. Returns 0, or -1 with the reason in why (no prefix:
 * the caller adds "file:line: fault: " or "bad fault 'x': "). */
int ns_faults_parse(const char *s, struct ns_faults *out, char *why, size_t whylen);

/* The canonical text of a list ("reset after 1KiB 30%; latency 800ms"). */
void ns_faults_format(const struct ns_faults *f, char *buf, size_t len);

int ns_fault_phase(uint32_t kind);

/* The faults of list f that act in phase and that this connection (or
 * lookup) gets: each fault with a percentage below 100 draws once from
 * *rng, in list order, so one seed and one sequence of connections give
 * the same choices. Returns a bit mask over f->f[]. */
uint32_t ns_faults_choose(const struct ns_faults *f, int phase, uint64_t *rng);

/* One draw of the fault random source (xorshift64*), uniform in [0, 10000). */
uint32_t ns_fault_roll(uint64_t *rng);

#endif

/* gostat.h -- the rings of the Go programs shimrun hooked, read in its
 * loop (gostat.c); the hook itself is gohook.h's. */
#ifndef NS_GOSTAT_H
#define NS_GOSTAT_H

#include <stdint.h>
#include <sys/types.h>

#include "../../policy/policy.h"
#include "gohook.h"

#define NS_GOSTAT_PROCS 64

struct ns_goproc {
	pid_t tgid;
	int fd; /* the memfd, until the program mapped it */
	int hooked;
	struct ns_goring *ring; /* NULL: a free place */
	uint64_t tail;          /* answers read */
};

#define NS_GOSTAT_OWNS 256

struct ns_gostat {
	unsigned n; /* rings in use */
	unsigned nown;
	struct {
		pid_t tgid;
		int slot;
		uint64_t at_ms;
	} own[NS_GOSTAT_OWNS]; /* hooked programs' connections' own successes, not yet taken back */
	uint64_t lost;         /* answers overwritten before they were read */
	unsigned said_dns;     /* an answer from a host only DNS names: said once */
	unsigned said_ra;      /* a 429's or 503's headers not read: said once */
	unsigned said_lost;    /* answers lost: said once, and their number at the end */
	uint64_t tsc0, ns0;    /* the TSC and CLOCK_MONOTONIC at the first ring: its rate since */
	struct ns_goproc p[NS_GOSTAT_PROCS];
};

/* A ring for program tgid: the memfd it is to open, or -1 (no room). */
int ns_gostat_ring(struct ns_gostat *s, pid_t tgid);
/* tgid's hook is in place (ok) or failed: the memfd closed; a failed
 * one's ring freed. */
void ns_gostat_hooked(struct ns_gostat *s, pid_t tgid, int ok);

typedef void ns_gostat_fn(void *ctx, pid_t tgid, const struct ns_goslot *answer);
/* Every answer written since the last drain, in order per program; reap:
 * also free the rings of programs gone (a system call per ring). */
void ns_gostat_drain(struct ns_gostat *s, ns_gostat_fn *fn, void *ctx, int reap);

/* ticks of the TSC (an answer's time in roundTrip) in microseconds, at
 * the rate the TSC kept against CLOCK_MONOTONIC since the first ring (0:
 * not known, or not yet 2 ms of it) */
uint64_t ns_gostat_us(const struct ns_gostat *s, uint64_t ticks);

/* Is tgid a hooked program? */
int ns_gostat_is_hooked(const struct ns_gostat *s, pid_t tgid);
/* A connection of hooked program tgid has its own success on slot at
 * at_ms (its first bytes back): 1 when an answer of (tgid, slot) was
 * counted already (the success is then not counted: from its first
 * answer on, a program's answers are its outcomes at a destination, as
 * the library counts exchanges), else 0: kept, for the next answer there
 * to take back (ns_gostat_own_take: 1 and *at_ms; else 0, and the
 * destination is marked answered). */
int ns_gostat_own_add(struct ns_gostat *s, pid_t tgid, int slot, uint64_t at_ms);
int ns_gostat_own_take(struct ns_gostat *s, pid_t tgid, int slot, uint64_t *at_ms);

/* An answer's destination (its URL host: an address, or a name of
 * /etc/hosts; no port: the scheme's): 0, 1 for a name only DNS knows, -1
 * for a host that is none. */
int ns_gostat_dest(const struct ns_goslot *answer, struct ns_dest *d);
/* An answer's Retry-After, with a NUL, at ra ("" none; only a 429's or a
 * 503's is read): 1, or 0 when its headers could not be read. */
int ns_gostat_retry_after(const struct ns_goslot *answer, char ra[NS_GORA_MAX + 1]);

#endif

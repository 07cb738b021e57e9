/* engine.c -- this engine (the preloaded library) as the core borrows it
 * (policy/account.h): the table it counts in, its lines, the history
 * recorder's ring mapped in this process, its stack frames, its wake of the
 * agent; and ns_emit, its one way to write an event.
 *
 * The history ring: the core writes every outcome into it while a
 * recorder reads, one record, no system call, no lock. It is mapped at the
 * first outcome after the recorder started (and again when it makes a new
 * one); a ring that cannot be mapped is said once and outcomes go
 * unrecorded, never delayed. */
#include "engine.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "conn.h"
#include "real.h"
#include "trace.h"

struct ns_table ns_breakers;
int ns_breakers_ok;

/* The rings this process mapped. An old one stays mapped (another thread
 * may be writing into it): a recorder started anew 8 times in one process's
 * life ends its recording there, said once. */
#define RINGS 8
static struct ns_ocring rings[RINGS];
static struct ns_ocring *cur; /* atomic: the ring in use, NULL = none */
static uint32_t cur_gen;      /* atomic: the table's hist_gen it was mapped for */
static int mapping;           /* atomic: a thread is mapping one */
static uint32_t failed_gen;   /* atomic: the generation that could not be mapped (+1) */
static unsigned used;

/* A child forked while another thread mapped a ring: that thread is not
 * in the child, so the child clears its mark and maps the ring itself. */
static void mapping_child(void)
{
	__atomic_store_n(&mapping, 0, __ATOMIC_RELAXED);
}

static __attribute__((noinline, cold)) struct ns_ocring *remap(uint32_t gen)
{
	static int atfork_set;
	char path[320], err[NS_ERRBUF];
	struct ns_ocring *r = NULL;
	int zero = 0, saved = errno;

	if (!__atomic_exchange_n(&atfork_set, 1, __ATOMIC_RELAXED))
		(void)ns_fork_hook(NULL, NULL, mapping_child);
	if (__atomic_load_n(&failed_gen, __ATOMIC_RELAXED) == gen + 1 ||
	    !__atomic_compare_exchange_n(&mapping, &zero, 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
		return NULL; /* another thread maps it: this outcome goes unrecorded */
	if (used >= RINGS) {
		ns_log(NS_LOG_ERROR,
		       "the history recorder was started anew %d times in this process: outcomes "
		       "from here on go unrecorded",
		       RINGS);
	} else if (ns_ocring_path(ns_breakers.path, path, sizeof(path)) < 0 ||
		   ns_ocring_open(path, &rings[used], err, sizeof(err)) < 0) {
		ns_log(NS_LOG_ERROR, "history: %s; outcomes go unrecorded", used < RINGS ? err : path);
	} else {
		r = &rings[used++];
		__atomic_store_n(&cur_gen, gen, __ATOMIC_RELAXED);
		__atomic_store_n(&cur, r, __ATOMIC_RELEASE);
	}
	if (!r)
		__atomic_store_n(&failed_gen, gen + 1, __ATOMIC_RELAXED);
	__atomic_store_n(&mapping, 0, __ATOMIC_RELEASE);
	errno = saved;
	return r;
}

struct ns_ocring *ns_hist_ring(void)
{
	uint32_t gen = __atomic_load_n(&ns_breakers.hdr->hist_gen, __ATOMIC_ACQUIRE);
	struct ns_ocring *r = __atomic_load_n(&cur, __ATOMIC_ACQUIRE);

	if (r && __atomic_load_n(&cur_gen, __ATOMIC_RELAXED) == gen)
		return r;
	return remap(gen);
}

/* An event the agent acts on wakes it at once (a datagram to its socket,
 * never waited for): a trip reaches the fleet without waiting for the
 * agent's next tick. Three system calls, on a breaker's change only, and
 * only while an agent serves the table. */
static void wake_agent(struct ns_table *t)
{
	struct ns_sockcalls k = { REAL(socket), REAL(sendto), REAL(close) }; /* (not intercepted again) */

	ns_table_wake_agent(t, &k);
}

static void say_line(int level, const char *line)
{
	ns_log(level, "%s", line);
}

static uint64_t wall_ms(void)
{
	return ns_wall_ms();
}

static const char *program_of(uint32_t pid)
{
	(void)pid; /* (always this process) */
	return program_invocation_short_name;
}

/* What the core (policy/account.c) borrows from this engine. */
const struct ns_engine ns_engine = {
	.id = NS_ENGINE_PRELOAD,
	.log_level = &ns_log_level,
	.say = say_line,
	.hist_ring = ns_hist_ring,
	.frames = ns_trace_frames,
	.wake = wake_agent,
	.wall_ms = wall_ms,
	.program_of = program_of,
};

/* Write one event into the shared ring: a transition, a traced failure, or
 * a process-wide happening (key may then be ""). */
void ns_emit(int type, int slot, const char *key, const struct ns_step *st, int err, const char *detail, int trace)
{
	if (ns_breakers_ok)
		ns_event_write(&ns_engine, &ns_breakers, type, slot, key, st, err, detail, (uint32_t)ns_own_pid,
			       program_invocation_short_name, trace);
}

/* base.h -- what every file of the preload library uses: visibility, branch
 * hints, the clock, logging. */
#ifndef NS_BASE_H
#define NS_BASE_H

#include <stdint.h>
#include <time.h>

#define NS_HIDDEN __attribute__((visibility("hidden")))
#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)

/* Every field of a record is read and written with these (or with explicit
 * __atomic calls): a thread that read a record's pointer may still read it
 * while another ends the connection and the pool hands the record to the
 * next one. Relaxed atomics are plain moves on x86-64: they cost nothing and
 * keep such reads defined (and ThreadSanitizer quiet). */
#define LD(x) __atomic_load_n(&(x), __ATOMIC_RELAXED)
#define ST(x, v) __atomic_store_n(&(x), (v), __ATOMIC_RELAXED)

/**** time ****/

/* Monotonic nanoseconds: the only clock deadline arithmetic uses. */
typedef int64_t monotime;

static inline monotime ns_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (monotime)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static inline uint64_t ns_wall_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/**** logging ****/

enum { NS_LOG_OFF, NS_LOG_ERROR, NS_LOG_WARN, NS_LOG_INFO, NS_LOG_DEBUG };
extern int ns_log_level NS_HIDDEN;
NS_HIDDEN void ns_log_init(void);
/* A NETSHIM_ variable as the process started with it (config.c). */
NS_HIDDEN const char *ns_getenv(const char *name);
/* ...kept by the constructor, before anything reads one (env.c). */
NS_HIDDEN void ns_env_keep(void);
NS_HIDDEN void ns_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* startup.c: NETSHIM_STARTUP=1, the one-time steps of a first connect
 * timed: a step's start (0 when off), its end (how: what the policy step
 * did; the table's end says the line) */
enum { NS_SU_POLICY, NS_SU_TABLE, NS_SU_N };
extern NS_HIDDEN monotime ns_fdtab_made_ns; /* fdtab.c: the fd table's making */
NS_HIDDEN monotime ns_startup_begin(void);
NS_HIDDEN void ns_startup_end(int step, monotime t0, const char *how);
#define NS_LOG(level, ...) do { if (unlikely(ns_log_level >= (level))) ns_log((level), __VA_ARGS__); } while (0)

#endif

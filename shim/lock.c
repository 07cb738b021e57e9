/* lock.c -- the per-thread word of the locks this thread holds, and the
 * one-time set-ups a signal handler can reach (lock.h). */
#include "lock.h"

#include <sched.h>
#include <time.h>

__thread unsigned ns_locks_held __attribute__((tls_model("initial-exec")));

static unsigned once_gen; /* atomic: fork generation, 16 bits of it in an owner word */

void ns_once_forked(void)
{
	__atomic_fetch_add(&once_gen, 1, __ATOMIC_RELAXED);
}

/**** fork hooks (lock.h) ****/

struct fork_hook {
	void (*prepare)(void), (*parent)(void), (*child)(void);
};

static struct fork_hook hooks[NS_FORK_HOOKS];
static unsigned hooks_taken; /* atomic: places handed out */
static unsigned hooks_ready; /* atomic: a bit per place whose pointers are written */
static unsigned forking;     /* the places ready at this fork's prepare (its parent and child run those) */

/* this thread is inside fork(), past its prepare: glibc holds malloc's
 * locks there, so a handler's set-up (which allocates: the policy) does
 * without (ns_once_slow) */
static __thread int in_fork __attribute__((tls_model("initial-exec")));

int ns_fork_hook(void (*prepare)(void), void (*parent)(void), void (*child)(void))
{
	unsigned i = __atomic_fetch_add(&hooks_taken, 1, __ATOMIC_RELAXED);

	if (i >= NS_FORK_HOOKS)
		return -1;
	hooks[i].prepare = prepare;
	hooks[i].parent = parent;
	hooks[i].child = child;
	__atomic_fetch_or(&hooks_ready, 1u << i, __ATOMIC_RELEASE);
	return 0;
}

void ns_fork_run(int phase)
{
	unsigned ready;

	if (phase == NS_FORK_PREPARE) {
		in_fork = 1;
		__atomic_signal_fence(__ATOMIC_SEQ_CST);
		ready = __atomic_load_n(&hooks_ready, __ATOMIC_ACQUIRE);
		forking = ready;
		for (int i = NS_FORK_HOOKS - 1; i >= 0; i--)
			if ((ready >> i & 1) && hooks[i].prepare)
				hooks[i].prepare();
		return;
	}
	ready = forking;
	for (int i = 0; i < NS_FORK_HOOKS; i++) {
		void (*fn)(void) = phase == NS_FORK_PARENT ? hooks[i].parent : hooks[i].child;

		if ((ready >> i & 1) && fn)
			fn();
	}
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	in_fork = 0;
}

static uint64_t once_me(void)
{
	/* pthread_self reads the thread pointer: no call, safe in a handler;
	 * a user-space address fits in 48 bits on x86-64 and arm64 */
	return ((uint64_t)(uintptr_t)pthread_self() & 0xffffffffffffULL) |
		(uint64_t)(__atomic_load_n(&once_gen, __ATOMIC_RELAXED) & 0xffffu) << 48;
}

int ns_once_slow(uint64_t *w, void (*fn)(void))
{
	uint64_t me = once_me(), v = __atomic_load_n(w, __ATOMIC_ACQUIRE);
	struct timespec t0 = { 0, 0 }, t;
	unsigned spins = 0;

	for (;;) {
		if (v == NS_ONCE_DONE)
			return 1;
		if (v == me || in_fork)
			return 0; /* a handler inside its own thread's set-up, or its fork() */
		if (v == 0 || (v >> 48) != (me >> 48)) {
			/* not begun, or begun before a fork by a thread this child lacks */
			if (__atomic_compare_exchange_n(w, &v, me, 0, __ATOMIC_ACQUIRE, __ATOMIC_ACQUIRE)) {
				fn();
				__atomic_store_n(w, NS_ONCE_DONE, __ATOMIC_RELEASE);
				return 1;
			}
			continue;
		}
		/* another thread's: it is short (a mapping, a file read), so
		 * spin, then yield, and give up after NS_ONCE_WAIT_MS */
		if (++spins > 64) {
			clock_gettime(CLOCK_MONOTONIC, &t);
			if (!t0.tv_sec && !t0.tv_nsec)
				t0 = t;
			else if ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 > NS_ONCE_WAIT_MS)
				return 0; /* (not logged here: the log is above this file, which everything uses) */
			sched_yield();
		}
		v = __atomic_load_n(w, __ATOMIC_ACQUIRE);
	}
}

/* lock.h -- the few locks the connect and data paths take, made safe
 * against a signal handler that calls in on the thread that holds one.
 *
 * A handler that connects (or closes, or waits) while its thread was
 * inside one of these locks would wait for itself for ever. Each lock has
 * a bit in a per-thread word, set before it is taken and cleared after it
 * is given back: a call that finds its bit set is a handler that
 * interrupted its own thread in there (or between the bit and the lock),
 * so it does not wait: it goes on without what the lock guards (no host
 * name for the key, no runtime fault, no frames for the trace, no epoll
 * bookkeeping), which is the shim's fail-safe answer everywhere. Another
 * thread's hold is waited for as before: that thread gives it back. */
#ifndef NS_LOCK_H
#define NS_LOCK_H

#include <pthread.h>
#include <stdint.h>

#include "base.h"

enum { NS_LOCK_NAMES = 1u, NS_LOCK_RT = 2u, NS_LOCK_TRACE = 4u, NS_LOCK_EPOLL = 8u, NS_LOCK_H2 = 16u };

extern __thread unsigned ns_locks_held __attribute__((tls_model("initial-exec"))) NS_HIDDEN;

/* 1: bit is this thread's now (the caller takes its lock, then gives both
 * back); 0: this thread holds it already (a handler inside): do without. */
static inline int ns_lock_mine(unsigned bit)
{
	if (__atomic_load_n(&ns_locks_held, __ATOMIC_RELAXED) & bit)
		return 0;
	__atomic_store_n(&ns_locks_held, ns_locks_held | bit, __ATOMIC_RELAXED);
	__atomic_signal_fence(__ATOMIC_SEQ_CST);   /* the bit is set before the lock is taken */
	return 1;
}

static inline void ns_lock_done(unsigned bit)
{
	__atomic_signal_fence(__ATOMIC_SEQ_CST);   /* ...and cleared after it is given back */
	__atomic_store_n(&ns_locks_held, ns_locks_held & ~bit, __ATOMIC_RELAXED);
}

/* The same for a pthread mutex: take (1) or do without (0); give back. */
static inline int ns_mutex_take(pthread_mutex_t *m, unsigned bit)
{
	if (!ns_lock_mine(bit))
		return 0;
	pthread_mutex_lock(m);
	return 1;
}

static inline void ns_mutex_give(pthread_mutex_t *m, unsigned bit)
{
	pthread_mutex_unlock(m);
	ns_lock_done(bit);
}

/* A one-time set-up a signal handler can reach (a first socket, connect,
 * lookup or fault), in place of pthread_once, which waits for ever when
 * the handler interrupted its own thread inside it. The word is 0 (not
 * begun), NS_ONCE_DONE, or the thread under way in it with the process's
 * fork generation above: its own thread's handler finds itself there and
 * does without (0: the caller passes its call through untracked, the
 * shim's fail-safe answer); another thread's set-up is waited for, at most
 * NS_ONCE_WAIT_MS (past it the call goes on without: that thread may itself
 * wait on a lock the interrupted caller holds, malloc's for one); a set-up
 * a fork left behind in a thread the child lacks is begun again; a
 * handler inside its own thread's fork() (where glibc holds malloc's
 * locks, and the set-ups allocate) does without as well. 1: done, the
 * caller may use what it made. */
#define NS_ONCE_DONE    1u
#define NS_ONCE_WAIT_MS 5000
NS_HIDDEN int ns_once_slow(uint64_t *w, void (*fn)(void));

static inline __attribute__((always_inline)) int ns_once(uint64_t *w, void (*fn)(void))
{
	if (likely(__atomic_load_n(w, __ATOMIC_ACQUIRE) == NS_ONCE_DONE))
		return 1;
	return ns_once_slow(w, fn);
}

/* the fork generation (bumped in every fork child: lock.c) */
NS_HIDDEN void ns_once_forked(void);

/* In place of pthread_atfork for what a one-time set-up registers: a
 * handler's first lookup, fault or place must not take glibc's atfork lock,
 * which the thread it interrupted may hold inside fork(). The hooks are
 * kept here without a lock or a call, and run by the one pthread_atfork
 * the constructor registers (config.c): prepare in reverse order, parent
 * and child in order, as pthread_atfork runs them; a hook added while a
 * fork is under way waits for the next (its prepare did not run). 0, or -1
 * past NS_FORK_HOOKS (eight set-ups register one each today). */
#define NS_FORK_HOOKS 16
NS_HIDDEN int ns_fork_hook(void (*prepare)(void), void (*parent)(void), void (*child)(void));
enum { NS_FORK_PREPARE, NS_FORK_PARENT, NS_FORK_CHILD };
NS_HIDDEN void ns_fork_run(int phase);

#endif

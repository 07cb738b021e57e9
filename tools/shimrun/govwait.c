/* govwait.c -- the places a seccomp-governed connection holds (govwait.h). */
#include "govwait.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

static void futex_wake(uint32_t *word)
{
	if (word) /* (preloaded processes blocked for a place) */
		syscall(SYS_futex, word, FUTEX_WAKE, INT32_MAX, NULL, NULL, 0);
}

void ns_gw_init(struct ns_gwait *w)
{
	w->place = w->rq = w->qi = -1;
	w->qword = 0;
}

int ns_gw_request(struct ns_gwait *w, struct ns_admitter *a, struct ns_table *t, int slot,
		  const struct ns_settings *set, uint32_t holder, uint64_t now_us)
{
	struct ns_reqq *q = ns_reqq_of(t, slot);

	if (w->rq >= 0 || !q)
		return 1;
	if (!w->qword && !__atomic_load_n(&q->queued, __ATOMIC_ACQUIRE) &&
	    (w->rq = ns_admit_request_now(t, slot, q, set, holder, now_us / 1000)) >= 0)
		return 1; /* (no one waits, one is free) */
	if (!w->qword) {  /* its wait begins: an entry in the machine's queue */
		w->qword = (uint64_t)holder << 32 | (uint32_t)now_us;
		w->qi = ns_reqq_enqueue(q, w->qword);
		__atomic_fetch_add(&q->held, 1, __ATOMIC_RELAXED);
	}
	if ((w->rq = ns_admit_request(a, t, slot, set, holder, w->qi, w->qword, now_us * 1000)) < 0)
		return 0;
	futex_wake(ns_admit_request_release(t, slot, -1, holder, w->qi, w->qword));
	w->qi = -1;
	w->qword = 0;
	return 1;
}

void ns_gw_release(struct ns_gwait *w, struct ns_table *t, int slot, uint32_t holder)
{
	futex_wake(ns_admit_release(t, slot, w->place, holder));
	if (w->rq >= 0 || w->qword)
		futex_wake(ns_admit_request_release(t, slot, w->rq, holder, w->qi, w->qword));
	ns_gw_init(w);
}

int ns_gw_wanted(const struct ns_gwait *w, struct ns_table *t, int slot)
{
	struct ns_slot *s = ns_table_slot_(t, slot);

	return s &&
		((w->place >= 0 && __atomic_load_n(&s->place_waiters, __ATOMIC_RELAXED) > 0) ||
		 (w->rq >= 0 && __atomic_load_n(&s->req.queued, __ATOMIC_RELAXED) > 0));
}

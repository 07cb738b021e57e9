/* reqq.c -- max_requests' places and queue (reqq.h). */
#include "reqq.h"

#define LOAD(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)

/* A place freed, or the queue's first left: the blocked waiters may go
 * on. Each is counted in waiters before it reads the word and looks, so one
 * not counted yet will see what changed; with none, nothing is written. 1:
 * the caller wakes them. */
static int woke(struct ns_reqq *q)
{
	if (!__atomic_load_n(&q->waiters, __ATOMIC_SEQ_CST))
		return 0;
	__atomic_fetch_add(&q->wake, 1, __ATOMIC_SEQ_CST);
	return 1;
}

int ns_reqq_release(struct ns_reqq *q, int p, uint32_t holder)
{
	uint32_t h = holder;

	if (p < 0 || p >= (int)NS_PLACES || !holder ||
	    !__atomic_compare_exchange_n(&q->place[p], &h, 0, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
		return 0;
	return woke(q);
}

int ns_reqq_enqueue(struct ns_reqq *q, uint64_t word)
{
	for (uint32_t i = 0; i < NS_REQ_QUEUE; i++) {
		uint64_t free_ = 0;

		if (!__atomic_load_n(&q->queue[i], __ATOMIC_RELAXED) &&
		    __atomic_compare_exchange_n(&q->queue[i], &free_, word, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
			__atomic_fetch_add(&q->queued, 1, __ATOMIC_SEQ_CST);
			return (int)i;
		}
	}
	return -1;
}

/* Entry i out, if it still holds word: 1 (the count follows). */
static int out(struct ns_reqq *q, int i, uint64_t word)
{
	uint64_t w = word;

	if (i < 0 || i >= (int)NS_REQ_QUEUE || !word ||
	    !__atomic_compare_exchange_n(&q->queue[i], &w, 0, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
		return 0;
	/* (never below 0: a count a killed writer left high only costs the
	 * fast path, until an entry's leaving brings it back) */
	for (uint32_t n = __atomic_load_n(&q->queued, __ATOMIC_RELAXED); n;)
		if (__atomic_compare_exchange_n(&q->queued, &n, n - 1, 0, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED))
			break;
	return 1;
}

int ns_reqq_leave(struct ns_reqq *q, int i, uint64_t word)
{
	return out(q, i, word) && woke(q);
}

int ns_reqq_before(struct ns_reqq *q, int i, uint64_t word, uint32_t now_us, uint32_t stale_us)
{
	uint32_t mine = (uint32_t)word;
	int first = -1;
	uint32_t first_at = 0;

	for (uint32_t j = 0; j < NS_REQ_QUEUE; j++) {
		uint64_t w = LOAD(&q->queue[j]);
		uint32_t at = (uint32_t)w;

		if (!w || (int)j == i)
			continue;
		if ((uint32_t)(now_us - at) > stale_us && (int32_t)(now_us - at) > 0) {
			out(q, (int)j, w); /* no wait lasts this long: its waiter is gone */
			continue;
		}
		/* before this request: it began to wait earlier (the same
		 * microsecond: the lower entry first); any, for one without */
		if (i >= 0 && !((int32_t)(at - mine) < 0 || (at == mine && (int)j < i)))
			continue;
		if (first < 0 || (int32_t)(at - first_at) < 0) {
			first = (int)j;
			first_at = at;
		}
	}
	return first;
}

int ns_reqq_drop_dead(struct ns_reqq *q, int i, uint32_t self, int deep)
{
	uint64_t w;

	if (i < 0 || i >= (int)NS_REQ_QUEUE || !(w = LOAD(&q->queue[i])) || (uint32_t)(w >> 32) == self ||
	    ns_place_holder_lives((uint32_t)(w >> 32), deep))
		return 0;
	return ns_reqq_leave(q, i, w), 1;
}

int ns_reqq_reclaim(struct ns_reqq *q, uint32_t span, uint32_t self, int deep)
{
	int freed = 0;

	for (uint32_t p = 0; p < span && p < NS_PLACES; p++) {
		uint32_t h = LOAD(&q->place[p]);

		if (h && h != self && !ns_place_holder_lives(h, deep)) {
			uint32_t was = h;

			if (__atomic_compare_exchange_n(&q->place[p], &was, 0, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
				freed++;
		}
	}
	if (freed)
		(void)woke(q);
	return freed;
}

uint32_t ns_reqq_inflight(const struct ns_reqq *q)
{
	uint32_t n = 0;

	for (uint32_t p = 0; p < NS_PLACES; p++)
		n += LOAD(&q->place[p]) != 0;
	return n;
}

void ns_reqq_read(const struct ns_reqq *q, struct ns_entry *e)
{
	e->req_inflight = ns_reqq_inflight(q);
	e->req_queued = ns_reqq_queued(q);
	e->req_throttled = LOAD(&q->throttled);
	e->req_held = LOAD(&q->held);
	e->req_over = LOAD(&q->over);
	e->req_limit = NS_ADAPT_LIMIT(LOAD(&q->adapt));
}

uint32_t ns_reqq_inflight_live(const struct ns_reqq *q)
{
	uint32_t n = 0;

	for (uint32_t p = 0; p < NS_PLACES; p++) {
		uint32_t h = LOAD(&q->place[p]);

		n += h && ns_place_holder_lives(h, 1);
	}
	return n;
}

uint32_t ns_reqq_queued(const struct ns_reqq *q)
{
	uint32_t n = 0;

	for (uint32_t j = 0; j < NS_REQ_QUEUE; j++)
		n += LOAD(&q->queue[j]) != 0;
	return n;
}

int ns_reqq_throttled(struct ns_table *t, int idx, uint64_t now_ms)
{
	struct ns_slot *s = ns_table_slot_(t, idx);
	uint64_t last;

	if (!s)
		return 0;
	__atomic_fetch_add(&s->req.throttled, 1, __ATOMIC_RELAXED);
	last = LOAD(&s->throttle_event_ms);
	return (last == 0 || now_ms >= last + 60000) &&
		__atomic_compare_exchange_n(&s->throttle_event_ms, &last, now_ms ? now_ms : 1, 0, __ATOMIC_RELAXED,
					    __ATOMIC_RELAXED);
}

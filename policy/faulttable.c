/* faulttable.c -- runtime faults in the shared table (shimctl inject): set,
 * clear, read, expire.
 *
 * Writers are operators' shimctl runs; readers are every program under the
 * table, at their next connect after flt_gen moved.
 *
 * A record is claimed whole before it is written: its state word goes by
 * compare-and-swap from a reusable state (free, expired, cleared) to
 * NS_FLT_CLAIMED with the writer's pid in its high half, so two writers
 * never pick the same record, and a writer that pauses (stopped, swapped
 * out) keeps its record for as long as it lives: nobody takes over a live
 * writer, so no unrelated record is ever half-written by two. Only a
 * record whose claiming process is gone (kill(pid, 0) says ESRCH) is taken
 * back. The owner writes under a sequence lock (odd while written) that
 * readers copy between two equal even values, then makes the record
 * active; an older active record for the same destination is then cleared.
 * Records whose time ran out are expired before a writer looks for room.
 * No lock is held across a system call, and no reader ever waits. */
#include "table.h"

#include <errno.h>
#include <signal.h>
#include <string.h>

#define LOAD(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define STORE(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)
#define CAS(p, e, d) __atomic_compare_exchange_n((p), (e), (d), 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)
#define STATE(s) ((s) & 0xffffffffu)
#define CLAIM(pid) (NS_FLT_CLAIMED | (uint64_t)(pid) << 32)

static struct ns_fltrec *rec_at(const struct ns_table *t, uint32_t i)
{
	return t->faults && i < t->flt_cap ? &t->faults[i] : NULL;
}

/* The owner of a claimed record writes it: returns the odd seq now held
 * (a record left odd by a writer that died is taken on from there). */
static uint64_t wr_begin(struct ns_fltrec *r)
{
	uint64_t s = LOAD(&r->seq), held = (s & 1) ? s + 2 : s + 1;

	STORE(&r->seq, held);
	return held;
}

static void wr_end(struct ns_table *t, struct ns_fltrec *r, uint64_t held)
{
	STORE(&r->seq, held + 1);
	__atomic_fetch_add(&t->hdr->flt_gen, 1, __ATOMIC_ACQ_REL);
}

static void copy_str(char *dst, const char *src, size_t n)
{
	size_t l = strnlen(src, n - 1);

	memset(dst, 0, n);
	memcpy(dst, src, l);
}

/* Can a writer take the record whose state word is s? */
static int reusable(uint64_t s)
{
	uint32_t st = (uint32_t)STATE(s), pid = (uint32_t)(s >> 32);

	if (st == NS_FLT_FREE || st == NS_FLT_EXPIRED || st == NS_FLT_CLEARED)
		return 1;
	/* claimed by a process that is gone: it died mid-write */
	return st == NS_FLT_CLAIMED && pid && kill((pid_t)pid, 0) < 0 && errno == ESRCH;
}

/* Expire the active records whose time ran out by now_ms (the programs
 * expire them too, when they next look; nobody may have). */
static void expire_due(struct ns_table *t, uint64_t now_ms)
{
	for (uint32_t i = 0; i < t->flt_cap; i++) {
		struct ns_fltrec *r = &t->faults[i];
		uint64_t exp = __atomic_load_n(&r->expires_ms, __ATOMIC_RELAXED);

		if (LOAD(&r->state) == NS_FLT_ACTIVE && exp && exp <= now_ms)
			ns_table_fault_expire(t, i);
	}
}

int ns_table_fault_set(struct ns_table *t, const char *dest, const char *text, uint64_t expires_ms,
		       uint64_t wall_ms, uint32_t pid, uint64_t now_ms)
{
	struct ns_fltrec *r = NULL;
	uint32_t mine = 0, order;
	uint64_t held;
	int saved = errno;

	if (!t->faults)
		return -1;
	expire_due(t, now_ms);
	for (uint32_t i = 0; i < t->flt_cap && !r; i++) {
		uint64_t s = LOAD(&t->faults[i].state);

		if (reusable(s) && CAS(&t->faults[i].state, &s, CLAIM(pid & ~NS_FLT_EXISTING))) {
			r = &t->faults[i];
			mine = i;
		}
	}
	errno = saved;
	if (!r)
		return -1;
	held = wr_begin(r);
	copy_str(r->dest, dest, sizeof(r->dest));
	copy_str(r->text, text, sizeof(r->text));
	r->expires_ms = expires_ms;
	r->set_wall_ms = wall_ms;
	r->pid = pid;
	/* the order of activation, to keep the newest of two for one destination */
	order = (uint32_t)__atomic_add_fetch(&t->hdr->flt_gen, 1, __ATOMIC_ACQ_REL);
	STORE(&r->pad, order);
	STORE(&r->applied, 0);
	STORE(&r->state, (uint64_t)NS_FLT_ACTIVE);
	wr_end(t, r, held);
	/* this replaces an older active record for the same destination */
	for (uint32_t i = 0; i < t->flt_cap; i++) {
		struct ns_fltrec *o = &t->faults[i];
		uint64_t active = NS_FLT_ACTIVE;
		char od[NS_KEY_MAX];

		if (i == mine || LOAD(&o->state) != NS_FLT_ACTIVE)
			continue;
		for (size_t k = 0; k < sizeof(od); k++)
			od[k] = __atomic_load_n(&o->dest[k], __ATOMIC_RELAXED);
		if (strncmp(od, dest, sizeof(od)) != 0 || (int32_t)(LOAD(&o->pad) - order) > 0)
			continue;
		if (CAS(&o->state, &active, (uint64_t)NS_FLT_CLEARED))
			__atomic_fetch_add(&t->hdr->flt_gen, 1, __ATOMIC_ACQ_REL);
	}
	return (int)mine;
}

int ns_table_fault_clear(struct ns_table *t, const char *dest)
{
	int n = 0;

	for (uint32_t i = 0; t->faults && i < t->flt_cap; i++) {
		struct ns_fltrec *r = &t->faults[i];
		uint64_t active = NS_FLT_ACTIVE;
		char d[NS_KEY_MAX];

		if (LOAD(&r->state) != NS_FLT_ACTIVE)
			continue;
		for (size_t k = 0; k < sizeof(d); k++)
			d[k] = __atomic_load_n(&r->dest[k], __ATOMIC_RELAXED);
		if (dest && strncmp(d, dest, sizeof(d)) != 0)
			continue;
		if (CAS(&r->state, &active, (uint64_t)NS_FLT_CLEARED)) {
			__atomic_fetch_add(&t->hdr->flt_gen, 1, __ATOMIC_ACQ_REL);
			n++;
		}
	}
	return n;
}

int ns_table_fault_read(const struct ns_table *t, uint32_t i, struct ns_fltview *out)
{
	struct ns_fltrec *r = rec_at(t, i);

	for (int tries = 0; r && tries < 16; tries++) {
		uint64_t s1 = LOAD(&r->seq), s2;

		if (s1 & 1)
			continue;
		out->idx = (int)i;
		out->state = LOAD(&r->state);
		out->expires_ms = __atomic_load_n(&r->expires_ms, __ATOMIC_RELAXED);
		out->set_wall_ms = __atomic_load_n(&r->set_wall_ms, __ATOMIC_RELAXED);
		out->applied = LOAD(&r->applied);
		out->pid = __atomic_load_n(&r->pid, __ATOMIC_RELAXED);
		out->existing = (out->pid & NS_FLT_EXISTING) != 0;
		out->pid &= ~NS_FLT_EXISTING;
		out->order = LOAD(&r->pad);
		for (size_t k = 0; k < sizeof(out->dest); k++)
			out->dest[k] = __atomic_load_n(&r->dest[k], __ATOMIC_RELAXED);
		for (size_t k = 0; k < sizeof(out->text); k++)
			out->text[k] = __atomic_load_n(&r->text[k], __ATOMIC_RELAXED);
		out->dest[sizeof(out->dest) - 1] = '\0';
		out->text[sizeof(out->text) - 1] = '\0';
		__atomic_thread_fence(__ATOMIC_ACQUIRE);
		s2 = LOAD(&r->seq);
		if (s1 == s2)
			return out->state == NS_FLT_FREE ? -1 : 0;
	}
	return -1;
}

int ns_table_fault_expire(struct ns_table *t, uint32_t i)
{
	struct ns_fltrec *r = rec_at(t, i);
	uint64_t active = NS_FLT_ACTIVE;

	if (!r || !CAS(&r->state, &active, NS_FLT_EXPIRED))
		return 0;
	__atomic_fetch_add(&t->hdr->flt_gen, 1, __ATOMIC_ACQ_REL);
	return 1;
}

void ns_table_fault_applied(struct ns_table *t, uint32_t i)
{
	struct ns_fltrec *r = rec_at(t, i);

	if (r)
		__atomic_fetch_add(&r->applied, 1, __ATOMIC_RELAXED);
}

uint64_t ns_table_fault_gen(const struct ns_table *t)
{
	return t->hdr ? LOAD(&t->hdr->flt_gen) : 0;
}

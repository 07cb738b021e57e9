/* faulttable.c -- runtime faults in the shared table (shimctl inject): set,
 * clear, read, expire.
 *
 * Writers are operators' shimctl runs; readers are every program under the
 * table, at their next connect after flt_gen moved. A record is a sequence
 * lock: a writer makes seq odd, writes, makes it even again and bumps
 * flt_gen; a reader copies between two equal even values. A writer killed
 * with seq odd leaves the record unreadable until the next writer, which
 * takes it over after CLAIM_MS. No lock is held across a system call (the
 * takeover wait is the writer's own, and no reader ever waits). */
#include "table.h"

#include <string.h>
#include <time.h>

#define LOAD(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define STORE(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)
#define CAS(p, e, d) __atomic_compare_exchange_n((p), (e), (d), 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)
#define CLAIM_MS 200

static struct ns_fltrec *rec_at(const struct ns_table *t, uint32_t i)
{
	return t->faults && i < t->flt_cap ? &t->faults[i] : NULL;
}

/* Take record r for writing: returns the odd seq now held. */
static uint64_t wr_begin(struct ns_fltrec *r)
{
	struct timespec pause = { 0, 1000000 };

	for (int waited = 0;; waited++) {
		uint64_t s = LOAD(&r->seq);

		if (!(s & 1)) {
			if (CAS(&r->seq, &s, s + 1))
				return s + 1;
			continue;
		}
		/* another writer, or one killed mid-write: after CLAIM_MS it is dead */
		if (waited >= CLAIM_MS && CAS(&r->seq, &s, s + 2))
			return s + 2;
		nanosleep(&pause, NULL);
	}
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

int ns_table_fault_set(struct ns_table *t, const char *dest, const char *text, uint64_t expires_ms,
		       uint64_t wall_ms, uint32_t pid)
{
	int pick = -1;

	if (!t->faults)
		return -1;
	for (uint32_t i = 0; i < t->flt_cap; i++) {
		struct ns_fltrec *r = &t->faults[i];

		if (LOAD(&r->state) == NS_FLT_ACTIVE && strncmp(r->dest, dest, sizeof(r->dest)) == 0) {
			pick = (int)i;
			break;
		}
		if (pick < 0 && LOAD(&r->state) != NS_FLT_ACTIVE)
			pick = (int)i;
	}
	if (pick < 0)
		return -1;
	{
		struct ns_fltrec *r = &t->faults[pick];
		uint64_t held = wr_begin(r);

		copy_str(r->dest, dest, sizeof(r->dest));
		copy_str(r->text, text, sizeof(r->text));
		r->expires_ms = expires_ms;
		r->set_wall_ms = wall_ms;
		r->pid = pid;
		STORE(&r->applied, 0);
		STORE(&r->state, NS_FLT_ACTIVE);
		wr_end(t, r, held);
	}
	return pick;
}

int ns_table_fault_clear(struct ns_table *t, const char *dest)
{
	int n = 0;

	for (uint32_t i = 0; t->faults && i < t->flt_cap; i++) {
		struct ns_fltrec *r = &t->faults[i];
		uint64_t held;

		if (LOAD(&r->state) != NS_FLT_ACTIVE || (dest && strncmp(r->dest, dest, sizeof(r->dest)) != 0))
			continue;
		held = wr_begin(r);
		STORE(&r->state, NS_FLT_CLEARED);
		wr_end(t, r, held);
		n++;
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

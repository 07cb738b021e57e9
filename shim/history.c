/* history.c -- every outcome handed to the history recorder while one
 * reads (policy/ocring.h): one record in the ring beside the table, no
 * system call, no lock. The ring is mapped at the first outcome after the
 * recorder started (and again when it makes a new one); a ring that cannot
 * be mapped is said once and outcomes go unrecorded, never delayed. */
#include "history.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include "../policy/ocring.h"

/* The rings this process mapped. An old one stays mapped (another thread
 * may be writing into it): a recorder started anew 8 times in one process's
 * life ends its recording there, said once. */
#define RINGS 8
static struct ns_ocring rings[RINGS];
static struct ns_ocring *cur;          /* atomic: the ring in use, NULL = none */
static uint32_t cur_gen;               /* atomic: the table's hist_gen it was mapped for */
static int mapping;                    /* atomic: a thread is mapping one */
static uint32_t failed_gen;            /* atomic: the generation that could not be mapped (+1) */
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
		return NULL;   /* another thread maps it: this outcome goes unrecorded */
	if (used >= RINGS) {
		ns_log(NS_LOG_ERROR, "the history recorder was started anew %d times in this process: outcomes "
		       "from here on go unrecorded", RINGS);
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

static struct ns_ocring *ring(void)
{
	uint32_t gen = __atomic_load_n(&ns_breakers.hdr->hist_gen, __ATOMIC_ACQUIRE);
	struct ns_ocring *r = __atomic_load_n(&cur, __ATOMIC_ACQUIRE);

	if (r && __atomic_load_n(&cur_gen, __ATOMIC_RELAXED) == gen)
		return r;
	return remap(gen);
}

static void put(struct ns_ocring *r, int slot, unsigned kind, monotime now, uint64_t wall_ms, struct ns_ocrec *rec)
{
	rec->at_us = (uint64_t)now / 1000;
	rec->wall_ms = wall_ms;
	rec->slot = (uint32_t)slot;
	rec->pid = (uint32_t)ns_own_pid;
	rec->kind = (uint8_t)kind;
	ns_ocring_put(r, rec);
}

void ns_hist_outcome(const struct ns_conn *c, int slot, int kind, int err, uint64_t latency_us,
		     monotime now, monotime from, uint64_t wall_ms, unsigned status)
{
	struct ns_ocring *r = ring();
	struct ns_ocrec rec;

	if (!r)
		return;
	memset(&rec, 0, sizeof(rec));
	rec.start_us = (uint64_t)from / 1000;
	rec.conn_us = (uint64_t)LD(c->start) / 1000;
	/* the connection within its process: the record's place and its reuse count */
	rec.conn = ((uint32_t)((uintptr_t)c >> 6) ^ (__atomic_load_n(&c->gen, __ATOMIC_RELAXED) << 20)) | 1u;
	rec.err = (uint32_t)err;
	rec.latency_us = latency_us > UINT32_MAX ? UINT32_MAX : (uint32_t)latency_us;
	rec.status = (uint16_t)(status < 1000 ? status : 0);
	put(r, slot, kind == NS_OUT_SUCCESS ? NS_OC_SUCCESS : kind == NS_OUT_TIMEOUT ? NS_OC_TIMEOUT : NS_OC_FAILURE,
	    now, wall_ms, &rec);
}

void ns_hist_rejected(int slot, monotime now)
{
	struct ns_ocring *r = ring();
	struct ns_ocrec rec;

	if (!r || slot < 0)
		return;
	memset(&rec, 0, sizeof(rec));
	rec.start_us = rec.conn_us = (uint64_t)now / 1000;
	put(r, slot, (unsigned)ns_table_reject_kind(&ns_breakers, slot, (uint64_t)(now / 1000000)), now, ns_wall_ms(),
	    &rec);
}

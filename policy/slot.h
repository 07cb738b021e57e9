/* slot.h -- what the files that change table slots share (table.c,
 * shaping.c): the atomics they are changed with, and a slot by index. */
#ifndef NS_POLICY_SLOT_H
#define NS_POLICY_SLOT_H

#include "table.h"

#define LOAD(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define STORE(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)
#define ADD(p, v) __atomic_fetch_add((p), (v), __ATOMIC_RELAXED)
#define CAS(p, oldp, v) __atomic_compare_exchange_n((p), (oldp), (v), 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)

/* A slot's tag: its state (empty 0, being claimed, ready), its key's hash
 * and the time of its claim. */
#define TAG_CLAIMING        1ULL
#define TAG_READY           2ULL
#define TAG_STATE(t)        ((t) >> 62)
#define TAG_HASH(t)         (((t) >> 32) & 0x3fffffffULL)
#define TAG_TIME(t)         ((uint32_t)(t))
#define TAG_MAKE(st, h, tm) (((uint64_t)(st) << 62) | ((uint64_t)(h) << 32) | (uint32_t)(tm))

/* Slot idx of t, or NULL when idx is out of range. */
#define slot_at ns_table_slot_

#endif

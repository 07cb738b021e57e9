/* test_table.c -- the shared table: pinned layout, window, transitions,
 * exact counts from many processes, and the file checks. */
#include <criterion/criterion.h>
#include <sched.h>
#include <signal.h>
#include <pthread.h>
#include <stdint.h>
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../policy/admit.h"
#include "../../policy/table.h"

Test(layout, offsets_and_sizes_are_pinned)
{
	/* Every process on a machine maps the same bytes: a change here is a new
	 * table version, never a silent reshuffle. */
	cr_assert_eq(sizeof(struct ns_table_hdr), 256);
	cr_assert_eq(offsetof(struct ns_table_hdr, magic), 0);
	cr_assert_eq(offsetof(struct ns_table_hdr, version), 8);
	cr_assert_eq(offsetof(struct ns_table_hdr, hdr_size), 12);
	cr_assert_eq(offsetof(struct ns_table_hdr, slot_size), 16);
	cr_assert_eq(offsetof(struct ns_table_hdr, nslots), 20);
	cr_assert_eq(offsetof(struct ns_table_hdr, total_size), 24);
	cr_assert_eq(offsetof(struct ns_table_hdr, created_wall_ms), 32);
	cr_assert_eq(offsetof(struct ns_table_hdr, full_count), 40);
	cr_assert_eq(offsetof(struct ns_table_hdr, used), 48);
	cr_assert_eq(offsetof(struct ns_table_hdr, ev_cap), 56);
	cr_assert_eq(offsetof(struct ns_table_hdr, ev_size), 60);
	cr_assert_eq(offsetof(struct ns_table_hdr, ev_off), 64);
	cr_assert_eq(offsetof(struct ns_table_hdr, ev_seq), 72);
	cr_assert_eq(sizeof(struct ns_slot), 3072);
	cr_assert_eq(offsetof(struct ns_slot, tag), 0);
	cr_assert_eq(offsetof(struct ns_slot, word), 8);
	cr_assert_eq(offsetof(struct ns_slot, calls), 16);
	cr_assert_eq(offsetof(struct ns_slot, successes), 24);
	cr_assert_eq(offsetof(struct ns_slot, failures), 32);
	cr_assert_eq(offsetof(struct ns_slot, timeouts), 40);
	cr_assert_eq(offsetof(struct ns_slot, rejected), 48);
	cr_assert_eq(offsetof(struct ns_slot, retries), 56);
	cr_assert_eq(offsetof(struct ns_slot, opened_wall_ms), 64);
	cr_assert_eq(offsetof(struct ns_slot, half_open_wall_ms), 72);
	cr_assert_eq(offsetof(struct ns_slot, last_error), 80);
	cr_assert_eq(offsetof(struct ns_slot, window_ms), 84);
	cr_assert_eq(offsetof(struct ns_slot, bucket), 104);
	cr_assert_eq(offsetof(struct ns_slot, key), 360);
	cr_assert_eq(offsetof(struct ns_slot, connect_hist), 624);
	cr_assert_eq(offsetof(struct ns_slot, first_byte_hist), 792);
	cr_assert_eq(sizeof(struct ns_evrec), 1024);
	cr_assert_eq(offsetof(struct ns_evrec, seq), 0);
	cr_assert_eq(offsetof(struct ns_evrec, wall_ms), 8);
	cr_assert_eq(offsetof(struct ns_evrec, type), 16);
	cr_assert_eq(offsetof(struct ns_evrec, dest), 48);
	cr_assert_eq(offsetof(struct ns_evrec, program), 312);
	cr_assert_eq(offsetof(struct ns_evrec, detail), 328);
	cr_assert_eq(offsetof(struct ns_evrec, frames), 424);
	cr_assert_eq(NS_TABLE_MAGIC, 0x4c42544d4853534eULL);
	cr_assert_eq(offsetof(struct ns_slot, monitor), 88);
	cr_assert_eq(offsetof(struct ns_slot, injected), 960);
	cr_assert_eq(offsetof(struct ns_slot, exchanges), 968);
	cr_assert_eq(offsetof(struct ns_slot, last_status), 984);
	cr_assert_eq(offsetof(struct ns_slot, stale_reuses), 992);   /* in what was reserved: old tables read 0 */
	cr_assert_eq(offsetof(struct ns_slot, bucket2), 1024);
	cr_assert_eq(offsetof(struct ns_slot, lat), 1304);
	/* the places (max_connections) are in what was reserved: old tables read free */
	cr_assert_eq(offsetof(struct ns_slot, place), 1744);
	cr_assert_eq(offsetof(struct ns_slot, waited), 1896);
	cr_assert_eq(offsetof(struct ns_slot, seccomp_calls), 2024); /* in what was reserved: old tables read 0 */
	cr_assert_eq(offsetof(struct ns_table_hdr, flt_off), 80);
	cr_assert_eq(offsetof(struct ns_table_hdr, flt_gen), 96);
	cr_assert_eq(sizeof(struct ns_fltrec), 512);
	cr_assert_eq(offsetof(struct ns_fltrec, dest), 48);
	cr_assert_eq(offsetof(struct ns_fltrec, text), 312);
	cr_assert_eq(NS_TABLE_VERSION, 4);
}

/* A table in shared anonymous memory, so forked children update it too. */
static void mem_table(struct ns_table *t, uint32_t nslots)
{
	size_t size = sizeof(struct ns_table_hdr) + nslots * sizeof(struct ns_slot);
	void *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);

	cr_assert_neq(m, MAP_FAILED);
	memset(t, 0, sizeof(*t));
	t->hdr = m;
	t->hdr->magic = NS_TABLE_MAGIC;
	t->hdr->version = NS_TABLE_VERSION;
	t->hdr->hdr_size = sizeof(struct ns_table_hdr);
	t->hdr->slot_size = sizeof(struct ns_slot);
	t->hdr->nslots = nslots;
	t->hdr->total_size = size;
	t->slots = (struct ns_slot *)((char *)m + sizeof(struct ns_table_hdr));
	t->nslots = nslots;
	t->size = size;
}

Test(table, find_creates_once_and_finds_again)
{
	struct ns_table t;
	int a, b;

	mem_table(&t, 8);
	cr_assert_eq(ns_table_find(&t, "127.0.0.1:80", 0, 1000), NS_SLOT_MISSING);
	a = ns_table_find(&t, "127.0.0.1:80", 1, 1000);
	cr_assert_geq(a, 0);
	b = ns_table_find(&t, "127.0.0.1:80", 1, 1000);
	cr_assert_eq(a, b);
	cr_assert_neq(ns_table_find(&t, "127.0.0.1:81", 1, 1000), a);
	cr_assert_eq(t.hdr->used, 2);
}

Test(table, full_table_is_visible_and_harmless)
{
	struct ns_table t;
	char key[32];

	mem_table(&t, 4);
	for (int i = 0; i < 4; i++) {
		snprintf(key, sizeof(key), "10.0.0.%d:80", i);
		cr_assert_geq(ns_table_find(&t, key, 1, 1), 0);
	}
	cr_assert_eq(ns_table_find(&t, "10.0.0.99:80", 1, 1), NS_SLOT_FULL);
	cr_assert_eq(t.hdr->full_count, 1);
	cr_assert_geq(ns_table_find(&t, "10.0.0.2:80", 1, 1), 0);
}

Test(table, a_claim_abandoned_by_a_killed_process_is_taken_over)
{
	struct ns_table t;
	int a;

	mem_table(&t, 1);
	a = ns_table_find(&t, "k:1", 1, 1000);
	/* pretend the writer died mid-claim: state claiming, old claim time */
	__atomic_store_n(&t.slots[a].tag, (t.slots[a].tag & ~(3ULL << 62)) | (1ULL << 62), __ATOMIC_RELEASE);
	cr_assert_eq(ns_table_find(&t, "k:1", 1, 1500), NS_SLOT_BUSY);
	cr_assert_eq(ns_table_find(&t, "k:1", 1, 1000 + 2001), a);
}

Test(table, places_are_taken_up_to_the_cap_and_given_back_by_their_holder_only)
{
	struct ns_table t;
	struct ns_entry e;
	uint32_t waiters;
	int a, p[3];

	mem_table(&t, 2);
	a = ns_table_find(&t, "k:1", 1, 1000);
	p[0] = ns_table_place_take(&t, a, 2, 111 << NS_PLACE_TAG_BITS);
	p[1] = ns_table_place_take(&t, a, 2, 222 << NS_PLACE_TAG_BITS);
	p[2] = ns_table_place_take(&t, a, 2, 333 << NS_PLACE_TAG_BITS);
	cr_assert(p[0] >= 0 && p[1] >= 0 && p[0] != p[1]);
	cr_assert_eq(p[2], -1, "a third place under a cap of 2");
	cr_assert_geq(ns_table_place_take(&t, a, 3, 333 << NS_PLACE_TAG_BITS), 0, "another process's cap of 3");
	cr_assert_eq(ns_table_place_take(&t, a, 99, 0), -1, "holder 0 is no holder");
	/* only the holder's word gives a place back; a second release is nothing */
	cr_assert_eq(ns_table_place_release(&t, a, p[0], 222 << NS_PLACE_TAG_BITS, &waiters), 0);
	ns_table_place_waiting(&t, a, 1);
	cr_assert_eq(ns_table_place_release(&t, a, p[0], 111 << NS_PLACE_TAG_BITS, &waiters), 1);
	cr_assert_eq(waiters, 1);
	cr_assert_eq(ns_table_place_release(&t, a, p[0], 111 << NS_PLACE_TAG_BITS, &waiters), 0);
	cr_assert_eq(ns_table_place_release(&t, a, 99, 111 << NS_PLACE_TAG_BITS, &waiters), 0, "out of range");
	cr_assert_eq(ns_table_read(&t, a, 1000, &e), 0);
	cr_assert_eq(e.inflight, 2);
	/* throttled: counted, no call; the event once a minute */
	cr_assert_eq(ns_table_throttled(&t, a, 5000), 1);
	cr_assert_eq(ns_table_throttled(&t, a, 6000), 0);
	cr_assert_eq(ns_table_throttled(&t, a, 65000), 1);
	ns_table_waited(&t, a, 0);
	ns_table_waited(&t, a, 300);
	cr_assert_eq(ns_table_read(&t, a, 1000, &e), 0);
	cr_assert_eq(e.throttled, 3);
	cr_assert_eq(e.waited_ms_p99, 512, "p99 of {0, 300} ms: the 256-512 bucket");
}

Test(table, a_retry_budget_spends_what_calls_and_time_earn)
{
	struct ns_table t;
	struct ns_entry e;
	int a;

	mem_table(&t, 2);
	a = ns_table_find(&t, "k:1", 1, 1000);
	/* 20 %, 1/s: a fresh bucket holds one second and one retry */
	cr_assert_eq(ns_table_retry_budget(&t, a, 1, 2000, 1000, 10000), 0);
	cr_assert_eq(ns_table_retry_budget(&t, a, 1, 2000, 1000, 10000), 0);
	cr_assert_eq(ns_table_retry_budget(&t, a, 1, 2000, 1000, 10000), -1, "0.4 of a retry left");
	/* three calls earn 0.6: with the 0.4, one retry */
	for (int i = 0; i < 3; i++)
		cr_assert_eq(ns_table_retry_budget(&t, a, 0, 2000, 1000, 10000), 0);
	cr_assert_eq(ns_table_retry_budget(&t, a, 1, 2000, 1000, 10000), 0);
	cr_assert_eq(ns_table_retry_budget(&t, a, 1, 2000, 1000, 10000), -1);
	/* a second later, the minimum rate's one */
	cr_assert_eq(ns_table_retry_budget(&t, a, 1, 2000, 1000, 11000), 0);
	cr_assert_eq(ns_table_read(&t, a, 11000, &e), 0);
	cr_assert_eq(e.retry_throttled, 2);
}

Test(table, a_token_bucket_lets_burst_go_then_one_per_step)
{
	struct ns_table t;
	uint64_t tat;
	int a;

	mem_table(&t, 2);
	a = ns_table_find(&t, "k:1", 1, 1000);
	/* 200 ms a token, a burst of 3 (tolerance: two steps) */
	for (int i = 0; i < 3; i++)
		cr_assert_eq(ns_table_token(&t, a, 200000, 400000, 10000000, &tat), 0, "token %d of the burst", i);
	cr_assert_eq(tat, 10600000);
	cr_assert_eq(ns_table_token(&t, a, 200000, 400000, 10000000, &tat), 10200000, "the next is due 200 ms on");
	cr_assert_eq(tat, 0);
	cr_assert_eq(ns_table_token(&t, a, 200000, 400000, 10199999, &tat), 10200000);
	cr_assert_eq(ns_table_token(&t, a, 200000, 400000, 10200000, &tat), 0);
	cr_assert_eq(tat, 10800000);
	/* a token taken at 10.8 s counted from its first bytes at 10.85 s:
	 * the next is due 50 ms later; not when another was taken since */
	cr_assert_eq(ns_table_token(&t, a, 200000, 0, 11000000, &tat), 0);
	cr_assert_eq(tat, 11200000);
	ns_table_token_later(&t, a, 11200000, 11000000, 11050000);
	cr_assert_eq(ns_table_token(&t, a, 200000, 0, 11200000, &tat), 11250000);
	ns_table_token_later(&t, a, 11200000, 11000000, 11100000);   /* stale: the bucket moved on */
	cr_assert_eq(ns_table_token(&t, a, 200000, 0, 11200000, &tat), 11250000);
	/* a slot out of range has no bucket: never held */
	cr_assert_eq(ns_table_token(&t, 99, 200000, 0, 0, &tat), 0);
}

/* A rate that grows (a fleet share of 0.01/s, then 7.5/s): the time the
 * slow rate left (100 s on) holds the next token one step of the new rate
 * at most, not 100 s; a rate a few times slower keeps its time. */
Test(table, a_token_bucket_left_by_a_far_slower_rate_waits_one_step_of_the_new)
{
	struct ns_table t;
	uint64_t tat;
	int a;

	mem_table(&t, 2);
	a = ns_table_find(&t, "k:1", 1, 1000);
	cr_assert_eq(ns_table_token(&t, a, 100000000, 0, 10000000, &tat), 0);
	cr_assert_eq(tat, 110000000);
	cr_assert_eq(ns_table_token(&t, a, 133333, 0, 10500000, &tat), 10633333, "one step of 7.5/s on");
	cr_assert_eq(ns_table_token(&t, a, 133333, 0, 10633333, &tat), 0);
	cr_assert_eq(tat, 10766666);
	/* 4 steps of the new rate or less ahead: as it was (a share halved
	 * and doubled again waits out the slower step) */
	cr_assert_eq(ns_table_token(&t, a, 500000, 0, 10766666, &tat), 0);
	cr_assert_eq(ns_table_token(&t, a, 250000, 0, 10800000, &tat), 11266666);
}

/* A token under a fleet_rate share (policy/admit.c): a wait under a small
 * share (0.01/s: the next token 100 s on) asks again within 100 ms, since
 * the share may grow at any lease, and once it has grown (7.5/s: 133 ms a
 * token) the bucket holds it one of its steps at most from then. Red before: a client that met the small share slept
 * 100 s, its machine's demand read as none, its share lost. */
Test(table, a_token_under_a_small_fleet_rate_share_is_asked_again_within_100_ms)
{
	struct ns_table t;
	struct ns_settings set = ns_builtin_settings;
	uint64_t rng = 1, tat, base;
	uint32_t *wake;
	int a;

	mem_table(&t, 2);
	a = ns_table_find(&t, "k:1", 1, 1000);
	set.fleet = NS_FLEET_RATE;
	set.fleet_rate_mph = set.rate_mph = 50ull * 3600000; /* 50/s */
	set.rate_interval_us = 3600000000000ULL / set.rate_mph;
	t.hdr->agent_pid = 1234;
	cr_assert_eq(ns_table_fleet_write(&t, a, NS_FLEET_K_RATE, 36000, set.fleet_rate_mph, 1000000, 5, &wake), 0);
	cr_assert_eq(ns_admit_token(&t, a, &set, 10000000, &rng, &tat, &base), 0, "the first token");
	cr_assert_eq(ns_admit_token(&t, a, &set, 10000000, &rng, &tat, &base), 10100000, "asked again 100 ms on");
	cr_assert_eq(ns_table_fleet_write(&t, a, NS_FLEET_K_RATE, 27000000, set.fleet_rate_mph, 1000000, 5, &wake), 0);
	cr_assert_eq(ns_admit_token(&t, a, &set, 10100000, &rng, &tat, &base), 10200000, "asked again 100 ms on");
	cr_assert_eq(ns_admit_token(&t, a, &set, 10200000, &rng, &tat, &base), 10233333, "one step of 7.5/s on");
	cr_assert_eq(ns_admit_token(&t, a, &set, 10233333, &rng, &tat, &base), 0);
}

/* The settings of max_connections = auto and throttle = adaptive, as
 * ns_policy_resolve makes them. */
static struct ns_settings adaptive_set(void)
{
	struct ns_settings set = ns_builtin_settings;

	set.adaptive = 1;
	set.max_connections = set.max_connections_max = 8;
	set.max_connections_min = 2;
	set.throttle = 1;
	set.throttle_window_ms = 10000;
	return set;
}

Test(table, an_adaptive_limit_starts_at_its_minimum_grows_by_one_a_busy_interval_and_shrinks_at_once)
{
	struct ns_table t;
	struct ns_settings set = adaptive_set();
	int a;

	mem_table(&t, 2);
	a = ns_table_find(&t, "k:1", 1, 1000);
	cr_assert_eq(ns_table_limit(&t, a, &set), 2, "a fresh destination starts at max_connections_min");
	/* an interval with a success and a connect at half the limit: +1 at the next */
	ns_table_limit_event(&t, a, &set, NS_ADAPT_PLACE, 0, 10000);
	ns_table_limit_event(&t, a, &set, NS_ADAPT_SUCCESS, 0, 10100);
	cr_assert_eq(ns_table_limit(&t, a, &set), 2, "not within the interval");
	ns_table_limit_event(&t, a, &set, NS_ADAPT_SUCCESS, 0, 11000);
	cr_assert_eq(ns_table_limit(&t, a, &set), 3);
	/* successes alone (nothing in flight at half the limit) earn nothing */
	ns_table_limit_event(&t, a, &set, NS_ADAPT_SUCCESS, 0, 12000);
	ns_table_limit_event(&t, a, &set, NS_ADAPT_PLACE, 0, 12500); /* place 0 of 3: under half */
	ns_table_limit_event(&t, a, &set, NS_ADAPT_SUCCESS, 0, 13000);
	cr_assert_eq(ns_table_limit(&t, a, &set), 3);
	/* up to the maximum, one a second */
	for (uint64_t ms = 14000; ms < 30000; ms += 1000) {
		ns_table_limit_event(&t, a, &set, NS_ADAPT_PLACE, 7, ms);
		ns_table_limit_event(&t, a, &set, NS_ADAPT_SUCCESS, 0, ms + 1);
	}
	cr_assert_eq(ns_table_limit(&t, a, &set), 8, "bounded by max_connections_max");
	/* a failure: x 0.9, and one connection at least (8 -> 7, not 7.2) */
	ns_table_limit_event(&t, a, &set, NS_ADAPT_FAILURE, 0, 30500);
	cr_assert_eq(ns_table_limit(&t, a, &set), 7);
	/* an interval with a failure earns nothing, though it had successes */
	ns_table_limit_event(&t, a, &set, NS_ADAPT_PLACE, 6, 30600);
	ns_table_limit_event(&t, a, &set, NS_ADAPT_SUCCESS, 0, 30700);
	ns_table_limit_event(&t, a, &set, NS_ADAPT_SUCCESS, 0, 31000);
	cr_assert_eq(ns_table_limit(&t, a, &set), 7);
	for (int i = 0; i < 20; i++)
		ns_table_limit_event(&t, a, &set, NS_ADAPT_FAILURE, 0, 31100);
	cr_assert_eq(ns_table_limit(&t, a, &set), 2, "bounded by max_connections_min");
	cr_assert_eq(ns_table_cap_for(&t, a, &set, 31200), 2, "the cap in force is the limit");
	set.adaptive = 0;
	cr_assert_eq(ns_table_cap_for(&t, a, &set, 31200), 8, "a fixed cap is max_connections");
}

Test(table, the_adaptive_throttle_refuses_in_proportion_and_stops_as_accepts_return)
{
	struct ns_table t;
	struct ns_settings set = adaptive_set();
	uint64_t rng = 1;
	int a, refused = 0;

	mem_table(&t, 2);
	a = ns_table_find(&t, "k:1", 1, 1000);
	/* healthy: every outcome accepted, nothing refused */
	for (int i = 0; i < 100; i++)
		ns_table_throttle_count(&t, a, &set, 1, 100000 + (uint64_t)i);
	for (int i = 0; i < 1000; i++)
		refused += ns_table_throttle(&t, a, &set, 101000, &rng);
	cr_assert_eq(refused, 0);
	/* 1,000 outcomes in the next window, 200 accepted: (1000 - 2 x 200) /
	 * 1001, about 0.6 of the connects refused (the window before is gone) */
	for (int i = 0; i < 1000; i++)
		ns_table_throttle_count(&t, a, &set, i % 5 == 0, 120000 + (uint64_t)i);
	refused = 0;
	for (int i = 0; i < 10000; i++)
		refused += ns_table_throttle(&t, a, &set, 121000, &rng);
	cr_assert(refused > 5700 && refused < 6300, "%d of 10000 refused", refused);
	/* a window later, all accepted again: the window before weighs less
	 * and less, and once it outweighs nothing, none is refused */
	for (int i = 0; i < 500; i++)
		ns_table_throttle_count(&t, a, &set, 1, 130000 + (uint64_t)i * 10);
	refused = 0;
	for (int i = 0; i < 1000; i++)
		refused += ns_table_throttle(&t, a, &set, 139000, &rng);
	cr_assert_eq(refused, 0, "%d refused", refused);
	/* a slot out of range refuses nothing */
	cr_assert_eq(ns_table_throttle(&t, 99, &set, 139000, &rng), 0);
}

Test(table, the_throttles_counts_stop_at_their_ceiling_and_keep_their_window)
{
	struct ns_table t;
	struct ns_settings set = adaptive_set();
	uint64_t n = 100000 / set.throttle_window_ms, w;
	int a;

	mem_table(&t, 2);
	a = ns_table_find(&t, "k:1", 1, 1000);
	/* below the ceiling each count is one add (the common case), at it the
	 * 24-bit counts stay at 0xffffff and never carry into the window's
	 * number or each other */
	t.slots[a].thr[0] = (n & 0xffff) << 48 | (uint64_t)0xfffffd << 24 | 0xfffffc;
	for (int i = 0; i < 4; i++)
		ns_table_throttle_count(&t, a, &set, 1, 100000 + (uint64_t)i);
	w = t.slots[a].thr[0];
	cr_assert_eq(NS_TH_NUM(w), (uint32_t)(n & 0xffff));
	cr_assert_eq(NS_TH_REQ(w), 0xffffffu);
	cr_assert_eq(NS_TH_ACC(w), 0xffffffu);
	ns_table_throttle_count(&t, a, &set, 0, 100010);
	w = t.slots[a].thr[0];
	cr_assert_eq(NS_TH_REQ(w), 0xffffffu);
	cr_assert_eq(NS_TH_ACC(w), 0xffffffu);
	cr_assert_eq(NS_TH_NUM(w), (uint32_t)(n & 0xffff));
	cr_assert_eq(t.slots[a].thr[1], 0);
}

Test(table, slow_start_ramps_the_share_from_a_tenth)
{
	struct ns_table t;
	int a;

	mem_table(&t, 2);
	a = ns_table_find(&t, "k:1", 1, 1000);
	cr_assert_eq(ns_table_share_now(&t, a, 5000, 2000), 1000, "never closed: all of it");
	t.slots[a].closed_ms = 10000;
	cr_assert_eq(ns_table_share_now(&t, a, 5000, 10000), 100);
	cr_assert_eq(ns_table_share_now(&t, a, 5000, 12500), 550);
	cr_assert_eq(ns_table_share_now(&t, a, 5000, 15000), 1000);
	cr_assert_eq(ns_table_cap_now(&t, a, 10, 5000, 10000), 1);
	cr_assert_eq(ns_table_cap_now(&t, a, 10, 5000, 12500), 6, "5.5 rounded up");
	cr_assert_eq(ns_table_cap_now(&t, a, 10, 5000, 16000), 10);
}

Test(table, a_dead_holder_is_told_from_a_living_one)
{
	uint32_t me = ns_place_holder((unsigned)getpid(), ns_proc_start_time((unsigned)getpid(), NULL));
	pid_t child = fork();
	int st;

	if (child == 0)
		_exit(0);
	/* a zombie (dead, not reaped) is no holder either */
	for (int i = 0; i < 500; i++) {
		char state = 0;

		ns_proc_start_time((unsigned)child, &state);
		if (state == 'Z')
			break;
		usleep(10000);
	}
	cr_assert_not(ns_place_holder_lives(ns_place_holder((unsigned)child, ns_proc_start_time((unsigned)child, NULL)), 1),
		      "a zombie");
	waitpid(child, &st, 0);
	cr_assert(ns_place_holder_lives(me, 1));
	cr_assert_not(ns_place_holder_lives(ns_place_holder((unsigned)child, 0), 1), "a reaped child");
	/* this pid, but another start time: a reused pid is another process */
	cr_assert_not(ns_place_holder_lives(me ^ 1, 1));
	cr_assert(ns_place_holder_lives(me ^ 1, 0), "without the deep look, a live pid is taken as the holder");
	cr_assert_not(ns_place_holder_lives(0, 1));
}

Test(table, window_counts_and_expires)
{
	struct ns_settings s = ns_builtin_settings;
	struct ns_table t;
	struct ns_entry e;
	struct ns_step st;
	int i;

	s.failure_threshold = 3;
	s.window_ms = 3200;   /* 32 buckets of 100 ms */
	mem_table(&t, 4);
	i = ns_table_find(&t, "d:1", 1, 0);
	ns_table_outcome(&t, i, NS_OUT_FAILURE, 111, 10000, 1, &s, &st);
	ns_table_outcome(&t, i, NS_OUT_TIMEOUT, 110, 10100, 1, &s, &st);
	ns_table_read(&t, i, 10100, &e);
	cr_assert_eq(e.failures_in_window, 2);
	ns_table_read(&t, i, 10000 + 3200, &e);
	cr_assert_eq(e.failures_in_window, 1, "the first failure left the window");
	/* a third failure after the first expired does not open it */
	ns_table_outcome(&t, i, NS_OUT_FAILURE, 111, 13250, 1, &s, &st);
	cr_assert_eq(st.transition, NS_TR_NONE);
	ns_table_outcome(&t, i, NS_OUT_FAILURE, 111, 13260, 7, &s, &st);
	cr_assert_eq(st.transition, NS_TR_OPENED);
	ns_table_read(&t, i, 13260, &e);
	cr_assert_eq(e.brk.state, NS_OPEN);
	cr_assert_eq(e.failures, 4);
	cr_assert_eq(e.timeouts, 1);
	cr_assert_eq(e.last_error, 111);
	cr_assert_eq(e.opened_wall_ms, 7);
	cr_assert_eq(e.half_open_wall_ms, 7 + s.open_duration_ms);
	cr_assert_eq(ns_table_attempt(&t, i, 1, 13261, &s, NULL), NS_REJECT);
	cr_assert_eq(ns_table_attempt(&t, i, 0, 13261, &s, NULL), NS_ALLOW, "monitor mode never rejects");
	ns_table_read(&t, i, 13262, &e);
	cr_assert_eq(e.rejected, 1);
	cr_assert_eq(e.calls, 1);
	ns_table_reset(&t, i);
	ns_table_read(&t, i, 13262, &e);
	cr_assert_eq(e.brk.state, NS_CLOSED);
	cr_assert_eq(e.failures_in_window, 0);
	cr_assert_eq(e.opened_wall_ms, 0);
}

Test(table, a_connections_own_success_is_taken_back_from_the_total_and_its_bucket)
{
	struct ns_settings s = ns_builtin_settings;
	struct ns_table t;
	struct ns_entry e;
	struct ns_step st;
	int i;

	s.window_ms = 3200; /* 32 buckets of 100 ms */
	mem_table(&t, 4);
	i = ns_table_find(&t, "d:1", 1, 0);
	/* a handshake at 10000, a request's failure at 10050: one failure */
	ns_table_outcome(&t, i, NS_OUT_SUCCESS, 0, 10000, 1, &s, &st);
	ns_table_outcome(&t, i, NS_OUT_FAILURE, 111, 10050, 1, &s, &st);
	ns_table_success_undo(&t, i, 10000, s.window_ms);
	ns_table_read(&t, i, 10060, &e);
	cr_assert_eq(e.successes, 0);
	cr_assert_eq(e.failures, 1);
	cr_assert_eq(e.outcomes_in_window, 1, "the bucket's success went too");
	cr_assert_eq(e.failures_in_window, 1, "never a failure taken back");
	/* a bucket that moved on keeps its outcomes; the total never wraps */
	ns_table_outcome(&t, i, NS_OUT_SUCCESS, 0, 20000, 1, &s, &st);
	ns_table_outcome(&t, i, NS_OUT_SUCCESS, 0, 20000 + 3200, 1, &s, &st);
	ns_table_success_undo(&t, i, 20000, s.window_ms);
	ns_table_read(&t, i, 20000 + 3200, &e);
	cr_assert_eq(e.successes, 1);
	cr_assert_eq(e.outcomes_in_window, 1);
	ns_table_success_undo(&t, i, 20000 + 3200, s.window_ms);
	ns_table_success_undo(&t, i, 20000 + 3200, s.window_ms);
	ns_table_read(&t, i, 20000 + 3200, &e);
	cr_assert_eq(e.successes, 0);
	cr_assert_eq(e.outcomes_in_window, 0);
}

Test(table, probe_success_closes_and_clears_window)
{
	struct ns_settings s = ns_builtin_settings;
	struct ns_table t;
	struct ns_entry e;
	int i;

	s.failure_threshold = 1;
	s.open_duration_ms = 100;
	mem_table(&t, 4);
	i = ns_table_find(&t, "d:1", 1, 0);
	ns_table_outcome(&t, i, NS_OUT_FAILURE, 111, 1000, 1, &s, NULL);
	cr_assert_eq(ns_table_attempt(&t, i, 1, 1050, &s, NULL), NS_REJECT);
	cr_assert_eq(ns_table_attempt(&t, i, 1, 1100, &s, NULL), NS_ALLOW_PROBE);
	cr_assert_eq(ns_table_attempt(&t, i, 1, 1101, &s, NULL), NS_REJECT);
	ns_table_outcome(&t, i, NS_OUT_SUCCESS, 0, 1102, 1, &s, NULL);
	ns_table_read(&t, i, 1102, &e);
	cr_assert_eq(e.brk.state, NS_CLOSED);
	cr_assert_eq(e.failures_in_window, 0);
}

Test(table, fleet_hold_refuses_a_closed_breaker_until_it_lapses_or_a_reset)
{
	struct ns_settings s = ns_builtin_settings;
	struct ns_table t;
	struct ns_entry e;
	int i;

	s.failure_threshold = 1;
	s.open_duration_ms = 100;
	mem_table(&t, 4);
	i = ns_table_find(&t, "d:1", 1, 0);
	cr_assert_eq(ns_table_attempt_quick(&t, i, 1, 10), NS_ALLOW);
	ns_table_fleet_set(&t, i, 500, "n1,n2", 2);
	cr_assert_eq(ns_table_attempt_quick(&t, i, 1, 20), NS_REJECT);
	cr_assert_eq(ns_table_attempt(&t, i, 1, 21, &s, NULL), NS_REJECT, "the stepping path agrees");
	cr_assert_eq(ns_table_attempt_quick(&t, i, 0, 22), NS_ALLOW, "monitor mode never rejects");
	ns_table_read(&t, i, 30, &e);
	cr_assert(e.fleet_open);
	cr_assert_str_eq(e.fleet_nodes, "n1,n2");
	cr_assert_eq(e.fleet_count, 2);
	cr_assert_eq(e.brk.state, NS_CLOSED, "the fleet's hold is not the local breaker");
	cr_assert_eq(e.rejected, 2);
	/* the hold lapses when the agent stops renewing it */
	cr_assert_eq(ns_table_attempt_quick(&t, i, 1, 500), NS_ALLOW);
	ns_table_read(&t, i, 500, &e);
	cr_assert(!e.fleet_open);
	cr_assert_str_eq(e.fleet_nodes, "");
	/* a reset releases it at once */
	ns_table_fleet_set(&t, i, 5000, "n1,n2", 2);
	ns_table_reset(&t, i);
	cr_assert_eq(ns_table_attempt_quick(&t, i, 1, 600), NS_ALLOW);
	/* half-open probing stays local: a tripped node probes through a hold */
	ns_table_outcome(&t, i, NS_OUT_FAILURE, 111, 1000, 1, &s, NULL);
	ns_table_fleet_set(&t, i, 5000, "n1,n2", 2);
	cr_assert_eq(ns_table_attempt(&t, i, 1, 1050, &s, NULL), NS_REJECT);
	cr_assert_eq(ns_table_attempt(&t, i, 1, 1100, &s, NULL), NS_ALLOW_PROBE);
	/* and a release (until 0) ends it */
	ns_table_fleet_set(&t, i, 0, NULL, 0);
	ns_table_read(&t, i, 1101, &e);
	cr_assert(!e.fleet_open);
}

#define PROCS 8
#define PER 2000

Test(table, concurrent_updates_from_forked_processes_are_exact)
{
	struct ns_settings s = ns_builtin_settings;
	struct ns_table t;
	struct ns_entry e;
	int i, status;

	s.failure_threshold = 0;   /* never open: every attempt is a call */
	mem_table(&t, 16);
	for (int p = 0; p < PROCS; p++) {
		pid_t pid = fork();

		cr_assert_geq(pid, 0, "fork: %s", strerror(errno));
		if (pid == 0) {
			for (int k = 0; k < PER; k++) {
				int idx;

				/* a claimer descheduled between its two stores leaves
				 * the slot busy for a moment (the shim passes that call
				 * through); the count asked here is of calls that found it */
				while ((idx = ns_table_find(&t, "shared:1", 1, 5)) == NS_SLOT_BUSY)
					sched_yield();

				ns_table_attempt(&t, idx, 1, 5, &s, NULL);
				ns_table_outcome(&t, idx, k % 2 ? NS_OUT_FAILURE : NS_OUT_SUCCESS, 111, 5, 1, &s, NULL);
				ns_table_add_retry(&t, idx);
			}
			_exit(0);
		}
	}
	for (int p = 0; p < PROCS; p++) {
		cr_assert_gt(wait(&status), 0, "a child is missing: %s", strerror(errno));
		cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	}
	i = ns_table_find(&t, "shared:1", 0, 5);
	cr_assert_geq(i, 0);
	cr_assert_eq(t.hdr->used, 1, "one key, one slot, whatever the race");
	ns_table_read(&t, i, 5, &e);
	cr_assert_eq(e.calls, PROCS * PER);
	cr_assert_eq(e.successes, PROCS * PER / 2);
	cr_assert_eq(e.failures, PROCS * PER / 2);
	cr_assert_eq(e.retries, PROCS * PER);
	cr_assert_eq(e.outcomes_in_window, PROCS * PER < 0xffff ? PROCS * PER : 0xffff);
}

Test(table, only_one_process_opens_and_rejections_are_exact)
{
	struct ns_settings s = ns_builtin_settings;
	struct ns_table t;
	struct ns_entry e;
	int i, status;

	s.failure_threshold = 5;
	s.recovery = NS_RECOVERY_MANUAL;
	mem_table(&t, 16);
	i = ns_table_find(&t, "x:1", 1, 5);
	for (int k = 0; k < 5; k++)
		ns_table_outcome(&t, i, NS_OUT_FAILURE, 111, 5, 1, &s, NULL);
	for (int p = 0; p < PROCS; p++)
		if (fork() == 0) {
			for (int k = 0; k < PER; k++)
				if (ns_table_attempt(&t, i, 1, 6, &s, NULL) != NS_REJECT)
					_exit(1);
			_exit(0);
		}
	for (int p = 0; p < PROCS; p++) {
		wait(&status);
		cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	}
	ns_table_read(&t, i, 6, &e);
	cr_assert_eq(e.rejected, PROCS * PER);
	cr_assert_eq(e.calls, 0);
}

/**** the file ****/

static char name[64], path[128];

static void fresh(void)
{
	snprintf(name, sizeof(name), "nsunit.%d", getpid());
	snprintf(path, sizeof(path), "/dev/shm/%s", name);
	unlink(path);
}

static void gone(void)
{
	unlink(path);
}

TestSuite(tablefile, .init = fresh, .fini = gone);

Test(tablefile, created_0600_and_reopened)
{
	struct ns_table t, u;
	struct stat st;
	char e[256];

	cr_assert_eq(ns_table_open(name, 0, 0, 0, &t, e, sizeof(e)), NS_TBL_MISSING);
	cr_assert(strstr(e, "no such table"), "got: %s", e);
	umask(0);
	cr_assert_eq(ns_table_open(name, 1, 64, 0, &t, e, sizeof(e)), NS_TBL_OK, "%s", e);
	umask(022);
	cr_assert_eq(stat(path, &st), 0);
	cr_assert_eq(st.st_mode & 0777, 0600);
	cr_assert_eq(t.nslots, 64);
	cr_assert_eq(ns_table_open(name, 1, 4096, 0, &u, e, sizeof(e)), NS_TBL_OK, "%s", e);
	cr_assert_eq(u.nslots, 64, "an existing table keeps its size");
	ns_table_close(&t);
	ns_table_close(&u);
}

static void expect_refused(const char *why)
{
	struct ns_table t;
	char e[256];

	cr_assert_eq(ns_table_open(name, 1, 0, 0, &t, e, sizeof(e)), NS_TBL_BAD);
	cr_assert(strstr(e, why), "got: %s", e);
	cr_assert(strstr(e, path), "names the file: %s", e);
}

Test(tablefile, bad_tables_are_refused_with_the_reason)
{
	struct ns_table t;
	char e[256];
	int fd;

	cr_assert_eq(ns_table_open(name, 1, 16, 0, &t, e, sizeof(e)), NS_TBL_OK, "%s", e);
	t.hdr->magic ^= 1;
	expect_refused("bad magic");
	t.hdr->magic ^= 1;
	t.hdr->version = 99;
	expect_refused("table version 99");
	t.hdr->version = 3;
	expect_refused(
		"table version 3, this build reads version 4 (a table from an older netshim: stop the programs using it and remove the file");
	t.hdr->version = NS_TABLE_VERSION;
	t.hdr->nslots = 100000000;
	expect_refused("corrupt slot count");
	t.hdr->nslots = 16;
	ns_table_close(&t);

	cr_assert_eq(chmod(path, 0622), 0);
	expect_refused("writable by group or others");
	cr_assert_eq(chmod(path, 0600), 0);
	cr_assert_eq(chown(path, 65534, 65534), 0);
	expect_refused("owned by another user");
	cr_assert_eq(chown(path, 0, 0), 0);
	fd = open(path, O_RDWR);
	cr_assert_eq(ftruncate(fd, 300), 0);
	close(fd);
	expect_refused("too short");
	cr_assert_eq(truncate(path, 10), 0);
	expect_refused("too short");
	unlink(path);
	cr_assert_eq(symlink("/etc/passwd", path), 0);
	expect_refused("symbolic link");
}

Test(tablefile, bad_names_are_refused)
{
	struct ns_table t;
	char e[256];

	cr_assert_eq(ns_table_open("../etc/x", 1, 0, 0, &t, e, sizeof(e)), NS_TBL_BAD);
	cr_assert_eq(ns_table_open("", 1, 0, 0, &t, e, sizeof(e)), NS_TBL_BAD);
}

/**** events and latency ****/

static void mem_table_events(struct ns_table *t, uint32_t nslots, uint32_t nev)
{
	size_t size = sizeof(struct ns_table_hdr) + nslots * sizeof(struct ns_slot) + nev * sizeof(struct ns_evrec);
	void *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);

	cr_assert_neq(m, MAP_FAILED);
	memset(t, 0, sizeof(*t));
	t->hdr = m;
	t->slots = (struct ns_slot *)((char *)m + sizeof(struct ns_table_hdr));
	t->nslots = nslots;
	t->events = (struct ns_evrec *)((char *)t->slots + nslots * sizeof(struct ns_slot));
	t->ev_cap = nev;
	t->size = size;
}

Test(events, ring_keeps_the_newest_and_never_returns_a_torn_record)
{
	struct ns_table t;
	struct ns_evrec ev, out;

	mem_table_events(&t, 4, 8);
	memset(&ev, 0, sizeof(ev));
	for (int i = 0; i < 20; i++) {
		ev.type = NS_E_OPENED;
		snprintf(ev.dest, sizeof(ev.dest), "d:%d", i);
		ns_table_event(&t, &ev, 1000 + (uint64_t)i);
	}
	cr_assert_eq(ns_table_event_head(&t), 20);
	cr_assert_eq(ns_table_event_read(&t, 11, &out), -1, "overwritten");
	for (uint64_t s = 12; s < 20; s++) {
		cr_assert_eq(ns_table_event_read(&t, s, &out), 0);
		cr_assert_eq(out.wall_ms, 1000 + s);
	}
	/* a writer killed mid-record leaves it marked busy: read as missing */
	__atomic_store_n(&t.events[19 % 8].seq, UINT64_MAX, __ATOMIC_RELEASE);
	cr_assert_eq(ns_table_event_read(&t, 19, &out), -1);
	/* garbage in shared memory is bounded on the way out */
	memset(&t.events[18 % 8], 'A', sizeof(struct ns_evrec));
	t.events[18 % 8].seq = 18;
	t.events[18 % 8].nframes = 1000;
	cr_assert_eq(ns_table_event_read(&t, 18, &out), 0);
	cr_assert_eq(out.nframes, NS_FRAMES);
	cr_assert_eq(strlen(out.dest), NS_KEY_MAX - 1);
}

Test(events, concurrent_writers_from_forked_processes_lose_no_sequence_number)
{
	struct ns_table t;
	struct ns_evrec ev;
	int status;

	mem_table_events(&t, 4, 64);
	memset(&ev, 0, sizeof(ev));
	for (int p = 0; p < 4; p++)
		if (fork() == 0) {
			for (int k = 0; k < 1000; k++)
				ns_table_event(&t, &ev, 1);
			_exit(0);
		}
	for (int p = 0; p < 4; p++)
		wait(&status);
	cr_assert_eq(ns_table_event_head(&t), 4000);
}

Test(latency, percentiles_are_bucket_upper_bounds)
{
	struct ns_table t;
	struct ns_entry e;
	int i;

	mem_table(&t, 4);
	i = ns_table_find(&t, "d:1", 1, 0);
	ns_table_read(&t, i, 0, &e);
	cr_assert_eq(ns_hist_percentile(&e.connect_hist, 50), -1);
	for (int k = 0; k < 98; k++)
		ns_table_latency(&t, i, 1, 120000);     /* 120 ms */
	ns_table_latency(&t, i, 1, 3000000);        /* 3 s */
	ns_table_latency(&t, i, 1, 999999999999ULL);/* beyond the last bound */
	ns_table_read(&t, i, 0, &e);
	cr_assert_eq(ns_hist_percentile(&e.first_byte_hist, 50), 250000);
	cr_assert_eq(ns_hist_percentile(&e.first_byte_hist, 98), 250000);
	cr_assert_eq(ns_hist_percentile(&e.first_byte_hist, 99), 5000000);
	cr_assert_eq(ns_hist_percentile(&e.first_byte_hist, 100), 300000000);
	cr_assert_eq(e.first_byte_hist.sum_us, 98 * 120000ULL + 3000000ULL + 999999999999ULL);
}

Test(table, window_counts_past_65535_in_one_bucket)
{
	struct ns_settings s = ns_builtin_settings;
	struct ns_table t;
	struct ns_entry e;
	int i;

	s.failure_threshold = 0;    /* never open: count only */
	mem_table(&t, 4);
	i = ns_table_find(&t, "busy:1", 1, 0);
	for (int n = 0; n < 70000; n++)
		ns_table_outcome(&t, i, n & 1 ? NS_OUT_SUCCESS : NS_OUT_FAILURE, 111, 5000, 1, &s, NULL);
	ns_table_read(&t, i, 5000, &e);
	cr_assert_eq(e.outcomes_in_window, 70000);
	cr_assert_eq(e.failures_in_window, 35000);
}

Test(table, window_epochs_wrap_without_losing_the_window)
{
	struct ns_settings s = ns_builtin_settings;
	struct ns_table t;
	struct ns_entry e;
	uint64_t w = ns_bucket_width(s.window_ms), wrap = (1ULL << 24) * w;
	int i;

	s.failure_threshold = 0;
	mem_table(&t, 4);
	i = ns_table_find(&t, "wrap:1", 1, 0);
	/* failures on both sides of the 24-bit epoch wrap all count */
	ns_table_outcome(&t, i, NS_OUT_FAILURE, 111, wrap - 2 * w, 1, &s, NULL);
	ns_table_outcome(&t, i, NS_OUT_FAILURE, 111, wrap + w, 1, &s, NULL);
	ns_table_read(&t, i, wrap + w, &e);
	cr_assert_eq(e.failures_in_window, 2);
	/* and an event older than the bucket's owner stays out */
	ns_table_outcome(&t, i, NS_OUT_FAILURE, 111, wrap + w - 32 * w, 1, &s, NULL);
	ns_table_read(&t, i, wrap + w, &e);
	cr_assert_eq(e.failures_in_window, 2);
}

Test(tablefile, sizes_from_the_environment_are_checked)
{
	uint32_t v;

	cr_assert_eq(ns_table_size_env(NULL, NS_TABLE_MAX_SLOTS, &v), 0);
	cr_assert_eq(v, 0);
	cr_assert_eq(ns_table_size_env("64", NS_TABLE_MAX_SLOTS, &v), 0);
	cr_assert_eq(v, 64);
	cr_assert_eq(ns_table_size_env("1048576", NS_TABLE_MAX_SLOTS, &v), 0);
	cr_assert_eq(ns_table_size_env("1048577", NS_TABLE_MAX_SLOTS, &v), -1);
	cr_assert_eq(ns_table_size_env("4294967297", NS_TABLE_MAX_SLOTS, &v), -1, "2^32 + 1 must not wrap to 1");
	cr_assert_eq(ns_table_size_env("99999999999999999999999", NS_TABLE_MAX_SLOTS, &v), -1);
	cr_assert_eq(ns_table_size_env("0", NS_TABLE_MAX_SLOTS, &v), -1);
	cr_assert_eq(ns_table_size_env("-1", NS_TABLE_MAX_SLOTS, &v), -1);
	cr_assert_eq(ns_table_size_env("12k", NS_TABLE_MAX_SLOTS, &v), -1);
	cr_assert_eq(ns_table_size_env(" 12", NS_TABLE_MAX_SLOTS, &v), -1);
}

Test(tablefile, a_table_truncated_under_us_reads_as_zeros_not_sigbus)
{
	struct ns_table t;
	struct ns_entry en;
	char e[256];
	int i;

	cr_assert_eq(ns_table_open(name, 1, 16, 0, &t, e, sizeof(e)), NS_TBL_OK, "%s", e);
	i = ns_table_find(&t, "a:1", 1, 1);
	cr_assert_geq(i, 0);
	cr_assert_eq(ns_table_broken(&t), 0);
	cr_assert_eq(truncate(path, 0), 0);
	/* this read would be a SIGBUS without the guard */
	cr_assert_eq(ns_table_read(&t, i, 1, &en), -1, "the slot now reads as empty");
	cr_assert_eq(ns_table_broken(&t), 1);
	ns_table_close(&t);
}

/* A table with only runtime fault records, in private memory. */
static struct ns_fltrec flt_recs[NS_FAULT_RECS];
static struct ns_table_hdr flt_hdr;

static void flt_table(struct ns_table *t)
{
	memset(t, 0, sizeof(*t));
	memset(flt_recs, 0, sizeof(flt_recs));
	memset(&flt_hdr, 0, sizeof(flt_hdr));
	t->hdr = &flt_hdr;
	t->faults = flt_recs;
	t->flt_cap = NS_FAULT_RECS;
}

static int active_for(const struct ns_table *t, const char *dest)
{
	struct ns_fltview v;
	int n = 0;

	for (uint32_t i = 0; i < t->flt_cap; i++)
		if (ns_table_fault_read(t, i, &v) == 0 && v.state == NS_FLT_ACTIVE && !strcmp(v.dest, dest))
			n++;
	return n;
}

/* issue 20, defect 14: a writer that pauses mid-write is never taken over
 * (its record, and everyone else's, stay whole) */
Test(faulttable, a_paused_writer_keeps_its_record)
{
	struct ns_table t;
	int i;

	flt_table(&t);
	/* a live writer (this process) holds record 0, half-written */
	__atomic_store_n(&flt_recs[0].state, 4 /* NS_FLT_CLAIMED */ | (uint64_t)getpid() << 32, __ATOMIC_RELEASE);
	__atomic_store_n(&flt_recs[0].seq, 1, __ATOMIC_RELEASE);
	strcpy(flt_recs[0].dest, "paused.example");
	i = ns_table_fault_set(&t, "other.example", "blackhole", 0, 1, 2, 1000);
	cr_assert_eq(i, 1);
	cr_assert_str_eq(flt_recs[0].dest, "paused.example");
	cr_assert_eq(flt_recs[0].seq, 1);
	cr_assert_eq(active_for(&t, "other.example"), 1);
	cr_assert_eq(active_for(&t, "paused.example"), 0);
}

Test(faulttable, a_writer_that_died_mid_write_gives_its_record_back)
{
	struct ns_table t;
	pid_t dead = fork();
	char d[32];

	if (dead == 0)
		_exit(0);
	waitpid(dead, NULL, 0);
	flt_table(&t);
	for (int k = 1; k < (int)NS_FAULT_RECS; k++) {
		snprintf(d, sizeof(d), "h%d.example", k);
		cr_assert_eq(ns_table_fault_set(&t, d, "refuse", 0, 1, 2, 1000), k - 1);
	}
	/* the last record: claimed by a process that is gone, left odd */
	__atomic_store_n(&flt_recs[NS_FAULT_RECS - 1].state, 4 /* NS_FLT_CLAIMED */ | (uint64_t)dead << 32,
			 __ATOMIC_RELEASE);
	__atomic_store_n(&flt_recs[NS_FAULT_RECS - 1].seq, 7, __ATOMIC_RELEASE);
	cr_assert_eq(ns_table_fault_set(&t, "late.example", "refuse", 0, 1, 2, 1000), (int)NS_FAULT_RECS - 1);
	cr_assert_eq(active_for(&t, "late.example"), 1);
	cr_assert_eq(ns_table_fault_set(&t, "full.example", "refuse", 0, 1, 2, 1000), -1);
}

Test(faulttable, records_past_their_time_make_room_and_one_destination_keeps_one)
{
	struct ns_table t;
	char d[32];

	flt_table(&t);
	for (int k = 0; k < (int)NS_FAULT_RECS; k++) {
		snprintf(d, sizeof(d), "h%d.example", k);
		cr_assert_geq(ns_table_fault_set(&t, d, "refuse", 1500, 1, 2, 1000), 0);
	}
	cr_assert_eq(ns_table_fault_set(&t, "new.example", "refuse", 0, 1, 2, 1000), -1);   /* all in force */
	cr_assert_geq(ns_table_fault_set(&t, "new.example", "refuse", 0, 1, 2, 2000), 0);   /* all expired by now */
	cr_assert_geq(ns_table_fault_set(&t, "new.example", "blackhole", 0, 1, 2, 2000), 0);
	cr_assert_eq(active_for(&t, "new.example"), 1);
	cr_assert_eq(ns_table_fault_clear(&t, "new.example"), 1);
	cr_assert_eq(active_for(&t, "new.example"), 0);
}

/* Writers lined up on a barrier set their faults at the same instant: every
 * one lands (they used to pick the same free record and overwrite each
 * other). */
#define RACERS 8
static pthread_barrier_t racers_go;
static struct ns_table racers_t;
static int racers_round;

static void *racer(void *arg)
{
	char d[32];

	snprintf(d, sizeof(d), "r%d-%ld.example", racers_round, (long)(intptr_t)arg);
	pthread_barrier_wait(&racers_go);
	return (void *)(intptr_t)ns_table_fault_set(&racers_t, d, "refuse", 0, 1, 2, 1000);
}

Test(faulttable, simultaneous_writers_all_land)
{
	pthread_t th[RACERS];
	char d[32];

	flt_table(&racers_t);
	pthread_barrier_init(&racers_go, NULL, RACERS);
	for (racers_round = 0; racers_round < 200; racers_round++) {
		for (long k = 0; k < RACERS; k++)
			pthread_create(&th[k], NULL, racer, (void *)(intptr_t)k);
		for (int k = 0; k < RACERS; k++) {
			void *r;

			pthread_join(th[k], &r);
			cr_assert_geq((intptr_t)r, 0);
		}
		for (int k = 0; k < RACERS; k++) {
			snprintf(d, sizeof(d), "r%d-%d.example", racers_round, k);
			cr_assert_eq(active_for(&racers_t, d), 1, "round %d: %s lost", racers_round, d);
		}
		ns_table_fault_clear(&racers_t, NULL);
	}
	pthread_barrier_destroy(&racers_go);
}

/* address_choice = healthy-first: an address's state in its own slot */
Test(table, an_address_that_failed_goes_last_until_one_lookup_takes_its_probe)
{
	struct ns_table t;
	struct ns_addr_entry e;
	struct ns_entry d;
	uint8_t a4[4] = { 127, 0, 0, 2 };
	char key[NS_KEY_MAX];
	int a;

	mem_table(&t, 8);
	cr_assert_eq(ns_addr_key("multi.test:80", AF_INET, a4, key, sizeof(key)), 23);
	cr_assert_str_eq(key, "multi.test:80@127.0.0.2");
	a = ns_table_find(&t, key, 1, 1000);
	cr_assert_geq(a, 0);
	cr_assert_eq(ns_table_read(&t, a, 1000, &d), -1, "no destination: status and the agent skip it");
	cr_assert_eq(ns_table_addr_rank(&t, a, 1000, 5000), 0, "nothing known: in its place");
	ns_table_addr_outcome(&t, a, 0, ECONNREFUSED, 1000, 5000);
	ns_table_addr_outcome(&t, a, 0, ECONNREFUSED, 1100, 5000);
	cr_assert_eq(ns_table_addr_rank(&t, a, 2000, 5000), 1);
	cr_assert_eq(ns_table_addr_read(&t, a, 2000, &e), 0);
	cr_assert_eq(e.state, NS_ADDR_DOWN);
	cr_assert_eq(e.fails_in_a_row, 2);
	cr_assert_eq(e.next_probe_ms, 4100);
	cr_assert_eq(e.name_len, 13);
	cr_assert_eq(e.last_error, ECONNREFUSED);
	/* due: the first lookup takes the probe, the next ones wait for it */
	cr_assert_eq(ns_table_addr_rank(&t, a, 6100, 5000), 0);
	cr_assert_eq(ns_table_addr_rank(&t, a, 6101, 5000), 1);
	cr_assert_eq(ns_table_addr_read(&t, a, 6101, &e), 0);
	cr_assert_eq(e.state, NS_ADDR_PROBING);
	/* the probe fails: down again for open_duration; it succeeds: healthy */
	ns_table_addr_outcome(&t, a, 0, ETIMEDOUT, 6200, 5000);
	cr_assert_eq(ns_table_addr_rank(&t, a, 11100, 5000), 1);
	ns_table_addr_outcome(&t, a, 1, 0, 11300, 5000);
	cr_assert_eq(ns_table_addr_rank(&t, a, 11301, 5000), 0);
	cr_assert_eq(ns_table_addr_read(&t, a, 11301, &e), 0);
	cr_assert_eq(e.state, NS_ADDR_HEALTHY);
	cr_assert_eq(e.calls, 4);
	cr_assert_eq(e.failures, 3);
	cr_assert_eq(e.successes, 1);
	ns_table_addr_outcome(&t, a, 0, ECONNREFUSED, 12000, 5000);
	ns_table_addr_reset(&t, a);
	cr_assert_eq(ns_table_addr_rank(&t, a, 12001, 5000), 0, "reset: its failures forgotten");
	cr_assert_eq(ns_addr_key("x", AF_UNIX, a4, key, sizeof(key)), -1);
}

/* Limits that adapt, machine-wide (issue 38 item 5): the limit and the
 * throttle's counts are compare-and-swap words of the slot, exact under 16
 * processes at once, and whole after processes killed anywhere. */
#define ADAPT_PROCS 16
#define ADAPT_PER   100000

Test(table, the_adaptive_limit_and_throttle_counts_are_exact_under_16_processes)
{
	struct ns_table t;
	struct ns_settings set = adaptive_set();
	struct ns_entry e;
	uint32_t *go = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	int a, status;

	cr_assert_neq(go, MAP_FAILED);
	set.max_connections = set.max_connections_max = 32;
	set.max_connections_min = 1;
	set.adaptive_backoff_milli = 990; /* 0.99: every failure takes one connection exactly below 100 */
	set.throttle_window_ms = 600000;  /* one window for the whole run */
	mem_table(&t, 4);
	a = ns_table_find(&t, "k:1", 1, 1000);
	for (uint64_t ms = 1000; ms < 40000; ms += 1000) {
		ns_table_limit_event(&t, a, &set, NS_ADAPT_PLACE, 31, ms);
		ns_table_limit_event(&t, a, &set, NS_ADAPT_SUCCESS, 0, ms + 1);
	}
	cr_assert_eq(ns_table_limit(&t, a, &set), 32);
	for (int p = 0; p < ADAPT_PROCS; p++) {
		pid_t pid = fork();

		cr_assert_geq(pid, 0, "fork: %s", strerror(errno));
		if (pid == 0) {
			/* all at once: each waits for the last to be ready */
			__atomic_fetch_add(go, 1, __ATOMIC_ACQ_REL);
			while (__atomic_load_n(go, __ATOMIC_ACQUIRE) < ADAPT_PROCS)
				sched_yield();
			for (int k = 0; k < ADAPT_PER; k++) {
				ns_table_throttle_count(&t, a, &set, k % 4 == 0, 50000);
				if (k == ADAPT_PER / 2)
					ns_table_limit_event(&t, a, &set, NS_ADAPT_FAILURE, 0, 50000);
			}
			_exit(0);
		}
	}
	for (int p = 0; p < ADAPT_PROCS; p++) {
		cr_assert_gt(wait(&status), 0);
		cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	}
	cr_assert_eq(ns_table_read(&t, a, 50000, &e), 0);
	cr_assert_eq(e.thr_requests, ADAPT_PROCS * ADAPT_PER, "%u", e.thr_requests);
	cr_assert_eq(e.thr_accepts, ADAPT_PROCS * ADAPT_PER / 4, "%u", e.thr_accepts);
	cr_assert_eq(ns_table_limit(&t, a, &set), 32 - ADAPT_PROCS, "one failure each, none lost");
	munmap(go, 4096);
}

Test(table, the_adaptive_words_stay_whole_when_processes_are_killed_anywhere)
{
	struct ns_table t;
	struct ns_settings set = adaptive_set();
	struct ns_entry e;
	uint64_t *done = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	pid_t pid[ADAPT_PROCS];
	uint64_t sum = 0, rng = 7;
	int a;

	cr_assert_neq(done, MAP_FAILED);
	set.throttle_window_ms = 600000;
	mem_table(&t, 4);
	a = ns_table_find(&t, "k:1", 1, 1000);
	for (int p = 0; p < ADAPT_PROCS; p++) {
		pid[p] = fork();
		cr_assert_geq(pid[p], 0);
		if (pid[p] == 0) {
			/* (at most 600,000 each: the window's 24-bit counts hold all 16) */
			for (uint64_t k = 0;; k++) {
				if (k >= 600000)
					pause();
				ns_table_throttle_count(&t, a, &set, 1, 50000);
				ns_table_limit_event(&t, a, &set, k % 3 ? NS_ADAPT_SUCCESS : NS_ADAPT_FAILURE, 0,
						     50000 + k);
				__atomic_store_n(&done[p], k + 1, __ATOMIC_RELEASE);
			}
		}
	}
	for (int p = 0; p < ADAPT_PROCS; p++) {
		usleep(200 + (useconds_t)(p * 397 % 800));
		kill(pid[p], SIGKILL);
		waitpid(pid[p], NULL, 0);
	}
	for (int p = 0; p < ADAPT_PROCS; p++)
		sum += __atomic_load_n(&done[p], __ATOMIC_ACQUIRE);
	cr_assert_eq(ns_table_read(&t, a, 50000, &e), 0);
	/* each killed between its count and its record of it, at most */
	cr_assert(e.thr_requests >= sum && e.thr_requests <= sum + ADAPT_PROCS, "%u of %llu", e.thr_requests,
		  (unsigned long long)sum);
	cr_assert_eq(e.thr_requests, e.thr_accepts);
	/* nothing wedged: the next process's count and question go through */
	ns_table_throttle_count(&t, a, &set, 1, 50000);
	cr_assert_eq(ns_table_read(&t, a, 50000, &e), 0);
	cr_assert(e.thr_requests >= sum + 1);
	cr_assert_eq(ns_table_throttle(&t, a, &set, 50000, &rng), 0, "all accepted: nothing refused");
	cr_assert(ns_table_limit(&t, a, &set) >= set.max_connections_min &&
		  ns_table_limit(&t, a, &set) <= set.max_connections_max);
	munmap(done, 4096);
}

/* max_connections = auto counts the places held over its span (as a mask
 * of the free ones, its bits counted by the CPU's POPCNT or by shifts and
 * masks): every span, every pattern of places held, both ways */
Test(table, a_place_under_a_limit_counts_every_place_held_over_its_span)
{
	struct ns_table t;
	uint32_t held;
	int a, cpu = ns_places_popcnt(-1);

	mem_table(&t, 2);
	a = ns_table_find(&t, "k:1", 1, 1000);
	for (int way = 0; way < 1 + !!cpu; way++) { /* (POPCNT only where the CPU has it) */
		ns_places_popcnt(way);
		for (uint32_t span = 1; span <= NS_PLACES; span++)
			for (uint32_t pattern = 0; pattern < 64; pattern++) {
				struct ns_slot *s = &t.slots[a];
				uint32_t want = 0;
				int first = -1, p;

				/* a pattern spread over the span: place i held when its bit (i mod 6) is */
				for (uint32_t i = 0; i < NS_PLACES; i++) {
					s->place[i] = (pattern >> (i % 6) & 1) ? 7u << NS_PLACE_TAG_BITS : 0;
					if (i < span && s->place[i])
						want++;
					else if (i < span && first < 0)
						first = (int)i;
				}
				p = ns_table_place_take_under(&t, a, NS_PLACES, span, 9u << NS_PLACE_TAG_BITS, &held);
				cr_assert_eq(held, want, "span %u pattern %u", span, pattern);
				cr_assert_eq(p, first, "span %u pattern %u: the first free place", span, pattern);
				if (want)
					cr_assert_eq(ns_table_place_take_under(&t, a, want, span,
									       9u << NS_PLACE_TAG_BITS, &held),
						     -1, "a limit of what is held: none");
			}
	}
	ns_places_popcnt(cpu);
}

/* max_connections = auto's inline take (a connect's fast path,
 * policy/places.h) does what the table's own take does: the same place
 * taken or none, the same adapt word after, over limits (whole and
 * fractional), the interval's flags and patterns of places held, places
 * above a limit that shrank counted too. */
Test(table, autos_inline_take_is_the_tables_take)
{
	static const uint32_t limits[] = { 0, 1000, 1500, 2000, 3000, 4700, 8000, 31000 };
	static const uint64_t flags[] = { 0, 1, 2, 3, 4, 5 };
	struct ns_table t;
	struct ns_settings set = adaptive_set();
	int a, n = 0;

	mem_table(&t, 2);
	a = ns_table_find(&t, "k:1", 1, 1000);
	set.max_connections = set.max_connections_max = 16;
	set.max_connections_min = 1;
	for (size_t li = 0; li < sizeof(limits) / sizeof(limits[0]); li++)
		for (size_t fi = 0; fi < sizeof(flags) / sizeof(flags[0]); fi++)
			for (int same_iv = 0; same_iv < 2; same_iv++)
				for (uint32_t pattern = 0; pattern < 128; pattern++) {
					struct ns_slot *s = &t.slots[a], before, fast;
					uint64_t now = 50000, iv = now / 1000 - !same_iv;
					int pf, pt;

					for (uint32_t i = 0; i < NS_PLACES; i++)
						s->place[i] = (pattern >> (i % 7) & 1) ? 7u << NS_PLACE_TAG_BITS : 0;
					s->adapt = (uint64_t)limits[li] << 44 | (iv & NS_AD_IV_MASK) << 3 | flags[fi];
					before = *s;
					pf = ns_admit_place_now(&t, a, &set, 9u << NS_PLACE_TAG_BITS, now);
					fast = *s;
					*s = before;
					pt = ns_table_place_take_auto(&t, a, &set, 9u << NS_PLACE_TAG_BITS, now, 0);
					cr_assert_eq(pf, pt, "limit %u flags %lu iv %d pattern %u: place", limits[li],
						     (unsigned long)flags[fi], same_iv, pattern);
					cr_assert_eq(fast.adapt, s->adapt, "limit %u flags %lu iv %d pattern %u: word",
						     limits[li], (unsigned long)flags[fi], same_iv, pattern);
					cr_assert(!memcmp(fast.place, s->place, sizeof(s->place)));
					n += pf >= 0;
				}
	cr_assert(n > 100 && n < 8 * 6 * 2 * 128, "both outcomes seen (%d places taken)", n);
}

/* The fleet's limits (policy/fleetshare.c, read by admit.c and shaping.c):
 * the share an agent leased is the limit in force until its lease ends,
 * then 0; none written: the whole when no agent of a fleet serves the
 * table, 0 (the first lease waited for) when one does. */
Test(table, a_fleet_share_is_the_limit_in_force_until_its_lease_lapses)
{
	struct ns_table t;
	struct ns_entry e;
	uint32_t *wake;
	int a;

	mem_table(&t, 2);
	a = ns_table_find(&t, "k:1", 1, 1000);
	cr_assert_eq(ns_table_fleet_share(&t, a, NS_FLEET_K_REQ, 40, 1000), 40, "no agent: the whole");
	t.hdr->agent_pid = 1234;
	cr_assert_eq(ns_table_fleet_share(&t, a, NS_FLEET_K_REQ, 40, 1000), 0, "an agent of a fleet: its first lease");
	cr_assert_eq(t.hdr->fleet_asked, 1, "...asked of the agent at once");
	t.hdr->agent_flags = NS_AGENT_NOFLEET;
	cr_assert_eq(ns_table_fleet_share(&t, a, NS_FLEET_K_REQ, 40, 1000), 40, "an agent without a fleet: the whole");
	cr_assert_eq(ns_table_fleet_write(&t, a, NS_FLEET_K_REQ, 7, 40, 3000, 5, &wake), 0);
	cr_assert_eq(ns_table_fleet_share(&t, a, NS_FLEET_K_REQ, 40, 2999), 7);
	cr_assert_eq(ns_table_fleet_share(&t, a, NS_FLEET_K_REQ, 6, 2999), 6, "never above this policy's own");
	cr_assert_eq(ns_table_fleet_share(&t, a, NS_FLEET_K_REQ, 40, 3000), 0, "lapsed");
	cr_assert_eq(ns_table_fleet_share(&t, a, NS_FLEET_K_CONN, 9, 2000), 9, "another limit: none written");
	cr_assert_eq(ns_table_fleet_write(&t, a, 3, 1, 1, 1, 1, &wake), -1, "no such limit");
	cr_assert_eq(ns_table_fleet_share(&t, a, -1, 5, 2000), 5);
	/* a share that grows wakes the waiters; the agent's word for the
	 * limit and the machines are what status reads */
	ns_table_place_waiting(&t, a, 1);
	cr_assert_eq(ns_table_fleet_write(&t, a, NS_FLEET_K_CONN, 3, 12, 5000, 4, &wake), 0);
	cr_assert_not_null(wake);
	cr_assert_eq(ns_table_fleet_write(&t, a, NS_FLEET_K_CONN, 2, 12, 5000, 4, &wake), 0);
	cr_assert_null(wake, "a share that shrank wakes no one");
	ns_table_fleet_largest(&t, a, NS_FLEET_K_CONN, 20);
	ns_table_fleet_largest(&t, a, 3, 99); /* no such limit: nothing written */
	cr_assert_eq(ns_table_read(&t, a, 2000, &e), 0);
	cr_assert_eq(e.fleet_largest[NS_FLEET_K_CONN], 20);
	cr_assert_eq(e.fleet_largest[NS_FLEET_K_REQ], 0, "not known");
	cr_assert_eq(e.fleet_share[NS_FLEET_K_REQ], 7);
	cr_assert_eq(e.fleet_share[NS_FLEET_K_CONN], 2);
	cr_assert_eq(e.fleet_share[NS_FLEET_K_RATE], -1);
	cr_assert_eq(e.fleet_whole[NS_FLEET_K_CONN], 12);
	cr_assert_eq(e.fleet_live, 4);
	cr_assert_eq(e.fleet_left_ms, 3000);
}

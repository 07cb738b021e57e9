/* max_requests' places and queue (policy/reqq.c), on a zeroed struct as a
 * new table slot has it. */
#include <criterion/criterion.h>
#include <string.h>
#include <unistd.h>

#include "../../policy/reqq.h"

static struct ns_reqq q;

static void fresh(void)
{
	memset(&q, 0, sizeof(q));
}

#define W(holder, us) ((uint64_t)(holder) << 32 | (uint32_t)(us))

/* a holder word no process has (pid 0x3fffff is past any pid_max here) */
#define DEAD (0x3fffffu << NS_PLACE_TAG_BITS | 1u)

TestSuite(reqq, .init = fresh);

Test(reqq, places_up_to_the_cap_then_none_and_a_release_frees_one)
{
	cr_assert_eq(ns_reqq_take(&q, 2, 7), 0);
	cr_assert_eq(ns_reqq_take(&q, 2, 8), 1);
	cr_assert_eq(ns_reqq_take(&q, 2, 9), -1);
	cr_assert_eq(ns_reqq_inflight(&q), 2);
	/* only its holder gives a place back */
	cr_assert_eq(ns_reqq_release(&q, 0, 8), 0);
	cr_assert_eq(q.place[0], 7);
	q.waiters = 1;
	cr_assert_eq(ns_reqq_release(&q, 0, 7), 1, "a blocked waiter is to be woken");
	cr_assert_eq(q.wake, 1);
	cr_assert_eq(ns_reqq_take(&q, 2, 9), 0);
	/* out of range: nothing */
	cr_assert_eq(ns_reqq_release(&q, -1, 9), 0);
	cr_assert_eq(ns_reqq_release(&q, NS_PLACES, 9), 0);
	cr_assert_eq(ns_reqq_take(&q, 1000, 5), 2, "a cap past the places is the places");
}

Test(reqq, the_entry_that_waited_longest_goes_first_and_a_newcomer_after_all)
{
	int a = ns_reqq_enqueue(&q, W(7, 1000)), b = ns_reqq_enqueue(&q, W(8, 900)),
	    c = ns_reqq_enqueue(&q, W(9, 1100));

	cr_assert(a >= 0 && b >= 0 && c >= 0);
	cr_assert_eq(q.queued, 3);
	cr_assert_eq(ns_reqq_before(&q, b, W(8, 900), 2000, 1000000), -1, "b waited longest");
	cr_assert_eq(ns_reqq_before(&q, a, W(7, 1000), 2000, 1000000), b);
	cr_assert_eq(ns_reqq_before(&q, c, W(9, 1100), 2000, 1000000), b);
	cr_assert_eq(ns_reqq_before(&q, -1, W(5, 2000), 2000, 1000000), b, "one with no entry is behind all");
	cr_assert_eq(ns_reqq_leave(&q, b, W(8, 900)), 0, "no one blocked: no one to wake");
	cr_assert_eq(q.queued, 2);
	cr_assert_eq(q.wake, 0, "and the word is left as it is");
	q.waiters = 1;
	cr_assert_eq(ns_reqq_leave(&q, c, W(9, 1100)), 1);
	cr_assert_eq(q.wake, 1, "a blocked waiter: the word moves");
	cr_assert((c = ns_reqq_enqueue(&q, W(9, 1100))) >= 0, "(in the first free entry)");
	cr_assert_eq(ns_reqq_before(&q, a, W(7, 1000), 2000, 1000000), -1);
	/* leaving with another's word: nothing */
	cr_assert_eq(ns_reqq_leave(&q, a, W(8, 1000)), 0);
	cr_assert_eq(q.queued, 2);
}

Test(reqq, the_same_microsecond_goes_by_entry_and_the_clock_may_wrap)
{
	int a = ns_reqq_enqueue(&q, W(7, 0xfffffff0u)), b = ns_reqq_enqueue(&q, W(8, 0x10));

	cr_assert_eq(ns_reqq_before(&q, b, W(8, 0x10), 0x20, 1000000), a, "0xfffffff0 is before 0x10, wrapped");
	fresh();
	a = ns_reqq_enqueue(&q, W(7, 50));
	b = ns_reqq_enqueue(&q, W(8, 50));
	cr_assert_eq(ns_reqq_before(&q, a, W(7, 50), 60, 1000000), -1);
	cr_assert_eq(ns_reqq_before(&q, b, W(8, 50), 60, 1000000), a);
}

Test(reqq, a_stale_entry_is_taken_out_and_a_dead_waiter_dropped)
{
	int a = ns_reqq_enqueue(&q, W(7, 100)), b = ns_reqq_enqueue(&q, W(DEAD, 5000)),
	    c = ns_reqq_enqueue(&q, W(9, 6000));

	/* a is older than any wait may be: out on the way */
	cr_assert_eq(ns_reqq_before(&q, c, W(9, 6000), 1000200, 1000000), b);
	cr_assert_eq(q.queue[a], 0);
	cr_assert_eq(q.queued, 2);
	/* b's process is gone: dropped; one's own entries never are */
	cr_assert_eq(ns_reqq_drop_dead(&q, c, 9, 0), 0);
	cr_assert_eq(ns_reqq_drop_dead(&q, b, 9, 0), 1);
	cr_assert_eq(ns_reqq_before(&q, c, W(9, 6000), 7000, 1000000), -1);
	cr_assert_eq(q.queued, 1);
}

Test(reqq, the_places_of_a_dead_holder_are_reclaimed_and_a_live_ones_kept)
{
	uint32_t me = ns_place_holder((unsigned)getpid(), ns_proc_start_time((unsigned)getpid(), NULL));

	cr_assert_eq(ns_reqq_take(&q, 3, DEAD), 0);
	cr_assert_eq(ns_reqq_take(&q, 3, me), 1);
	cr_assert_eq(ns_reqq_take(&q, 3, DEAD), 2);
	cr_assert_eq(ns_reqq_inflight_live(&q), 1);
	cr_assert_eq(ns_reqq_reclaim(&q, 3, 0, 1), 2);
	cr_assert_eq(ns_reqq_inflight(&q), 1);
	cr_assert_eq(q.place[1], me);
}

Test(reqq, a_full_queue_says_so)
{
	for (uint32_t i = 0; i < NS_REQ_QUEUE; i++)
		cr_assert_eq(ns_reqq_enqueue(&q, W(7, i + 1)), (int)i);
	cr_assert_eq(ns_reqq_enqueue(&q, W(7, 999)), -1);
	cr_assert_eq(ns_reqq_queued(&q), NS_REQ_QUEUE);
}

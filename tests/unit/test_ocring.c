/* test_ocring.c -- the outcome ring: records written and read back, a
 * reader that fell a ring behind told it lost them, a record still being
 * written told apart, and the file checked as the table is. */
#include <criterion/criterion.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../policy/ocring.h"

static void ring_at(char *path, size_t len, uint32_t cap, struct ns_ocring *r)
{
	char err[512];

	snprintf(path, len, "/tmp/nstest-ocring.%d", (int)getpid());
	cr_assert_eq(ns_ocring_create(path, cap, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(ns_ocring_open(path, r, err, sizeof(err)), 0, "%s", err);
}

Test(ocring, layout_is_pinned)
{
	cr_assert_eq(sizeof(struct ns_ocrec), 64);
	cr_assert_eq(offsetof(struct ns_ocrec, seq), 0);
	cr_assert_eq(offsetof(struct ns_ocrec, at_us), 8);
	cr_assert_eq(offsetof(struct ns_ocrec, slot), 40);
	cr_assert_eq(offsetof(struct ns_ocrec, kind), 62);
	cr_assert_eq(offsetof(struct ns_table_hdr, hist_until_ms), 216);
	cr_assert_eq(offsetof(struct ns_table_hdr, hist_gen), 224);
}

Test(ocring, records_come_back_in_order_and_a_lapped_reader_loses_them)
{
	char path[128];
	struct ns_ocring r;
	struct ns_ocrec in, out;

	ring_at(path, sizeof(path), 1024, &r);
	for (uint32_t i = 0; i < 1500; i++) {
		memset(&in, 0, sizeof(in));
		in.slot = i;
		in.latency_us = i * 3;
		in.kind = NS_OC_SUCCESS;
		ns_ocring_put(&r, &in);
	}
	cr_assert_eq(ns_ocring_head(&r), 1500);
	/* the first 476 were overwritten by the last 476 */
	cr_assert_eq(ns_ocring_get(&r, 0, &out), -1);
	cr_assert_eq(ns_ocring_get(&r, 475, &out), -1);
	for (uint64_t p = 476; p < 1500; p++) {
		cr_assert_eq(ns_ocring_get(&r, p, &out), 0);
		cr_assert_eq(out.slot, p);
		cr_assert_eq(out.latency_us, p * 3);
	}
	/* not written yet */
	cr_assert_eq(ns_ocring_get(&r, 1500, &out), 1);
	ns_ocring_close(&r);
	unlink(path);
}

Test(ocring, a_record_being_written_is_not_read)
{
	char path[128];
	struct ns_ocring r;
	struct ns_ocrec in, out;

	ring_at(path, sizeof(path), 1024, &r);
	memset(&in, 0, sizeof(in));
	ns_ocring_put(&r, &in);
	__atomic_store_n(&r.recs[0].seq, 0, __ATOMIC_RELEASE);   /* a writer in the middle (or dead there) */
	cr_assert_eq(ns_ocring_get(&r, 0, &out), 1);
	ns_ocring_close(&r);
	unlink(path);
}

Test(ocring, a_ring_file_is_checked_before_it_is_used)
{
	char path[128], err[512];
	struct ns_ocring r;
	FILE *f;

	cr_assert_eq(ns_ocring_create("/tmp/x", 1000, err, sizeof(err)), -1);   /* not a power of two */
	ring_at(path, sizeof(path), 1024, &r);
	ns_ocring_close(&r);
	chmod(path, 0666);
	cr_assert_eq(ns_ocring_open(path, &r, err, sizeof(err)), -1);
	cr_assert(strstr(err, "writable by group or others"), "%s", err);
	chmod(path, 0600);
	f = fopen(path, "r+");
	cr_assert(f);
	fputs("garbage!", f);
	fclose(f);
	cr_assert_eq(ns_ocring_open(path, &r, err, sizeof(err)), -1);
	cr_assert(strstr(err, "not an outcome ring"), "%s", err);
	cr_assert_eq(truncate(path, 16), 0);
	cr_assert_eq(ns_ocring_open(path, &r, err, sizeof(err)), -1);
	cr_assert(strstr(err, "too short"), "%s", err);
	unlink(path);
}

/* test_hpack.c -- the HPACK decoder (policy/hpack.c): RFC 7541's appendix C
 * examples (requests and responses, raw and Huffman, with their dynamic
 * table sizes), each fed whole, an octet at a time and split at every
 * point; a :status read from the dynamic table; the names an outcome reads
 * as literal names; and every error a block can carry. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "../../policy/hpack.h"

/* "4882 6402" into octets */
static size_t unhex(const char *s, uint8_t *out, size_t cap)
{
	size_t n = 0;
	unsigned v;

	while (*s) {
		if (*s == ' ') {
			s++;
			continue;
		}
		cr_assert(n < cap && sscanf(s, "%2x", &v) == 1, "bad hex at %s", s);
		out[n++] = (uint8_t)v;
		s += 2;
	}
	return n;
}

/* one block fed in pieces of `piece` octets (0: whole); -1 on an error */
static int block(struct ns_hpack *h, const char *hex, size_t piece, struct ns_hfields *out)
{
	uint8_t buf[512];
	size_t n = unhex(hex, buf, sizeof(buf));

	ns_hpack_begin(h, out);
	for (size_t i = 0; i < n;) {
		size_t k = piece && piece < n - i ? piece : n - i;

		if (ns_hpack_feed(h, buf + i, k, out) < 0)
			return -1;
		i += k;
	}
	return ns_hpack_end(h);
}

/* the same block split once at `at` */
static int block_split(struct ns_hpack *h, const char *hex, size_t at, struct ns_hfields *out)
{
	uint8_t buf[512];
	size_t n = unhex(hex, buf, sizeof(buf));

	ns_hpack_begin(h, out);
	if (ns_hpack_feed(h, buf, at, out) < 0 || ns_hpack_feed(h, buf + at, n - at, out) < 0)
		return -1;
	return ns_hpack_end(h);
}

struct step {
	const char *hex;
	uint32_t size;   /* the table's size after it (RFC 7541 appendix C) */
	uint16_t count;  /* its entries */
	uint16_t status; /* the :status read, 0 = none */
};

static const struct step c3[] = {
	/* C.3: requests, raw strings */
	{ "8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d", 57, 1, 0 },
	{ "8286 84be 5808 6e6f 2d63 6163 6865", 110, 2, 0 },
	{ "8287 85bf 400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65", 164, 3, 0 },
};
static const struct step c4[] = {
	/* C.4: the same requests, Huffman */
	{ "8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff", 57, 1, 0 },
	{ "8286 84be 5886 a8eb 1064 9cbf", 110, 2, 0 },
	{ "8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf", 164, 3, 0 },
};
static const struct step c5[] = {
	/* C.5: responses in a table of 256, raw */
	{ "4803 3330 3258 0770 7269 7661 7465 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 2032 303a 3133 3a32 3120 "
	  "474d 546e 1768 7474 7073 3a2f 2f77 7777 2e65 7861 6d70 6c65 2e63 6f6d",
	  222, 4, 302 },
	{ "4803 3330 37c1 c0bf", 222, 4, 307 },
	{ "88c1 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 2032 303a 3133 3a32 3220 474d 54c0 5a04 677a 6970 7738 "
	  "666f 6f3d 4153 444a 4b48 514b 425a 584f 5157 454f 5049 5541 5851 5745 4f49 553b 206d 6178 2d61 6765 3d33 "
	  "3630 303b 2076 6572 7369 6f6e 3d31",
	  215, 3, 200 },
};
static const struct step c6[] = {
	/* C.6: the same responses, Huffman */
	{ "4882 6402 5885 aec3 771a 4b61 96d0 7abe 9410 54d4 44a8 2005 9504 0b81 66e0 82a6 2d1b ff6e 919d 29ad 1718 "
	  "63c7 8f0b 97c8 e9ae 82ae 43d3",
	  222, 4, 302 },
	{ "4883 640e ffc1 c0bf", 222, 4, 307 },
	{ "88c1 6196 d07a be94 1054 d444 a820 0595 040b 8166 e084 a62d 1bff c05a 839b d9ab 77ad 94e7 821d d7f2 e6c7 "
	  "b335 dfdf cd5b 3960 d5af 2708 7f36 72c1 ab27 0fb5 291f 9587 3160 65c0 03ed 4ee5 b106 3d50 07",
	  215, 3, 200 },
};

static void run_steps(const struct step *s, int n, uint32_t table, size_t piece, const char *what)
{
	struct ns_hpack h;
	struct ns_hfields out;

	ns_hpack_init(&h);
	ns_hpack_set_max(&h, table);
	h.need_update = 0; /* appendix C starts from a table of that size */
	for (int i = 0; i < n; i++) {
		cr_assert_eq(block(&h, s[i].hex, piece, &out), 0, "%s.%d (pieces of %zu): an error", what, i + 1,
			     piece);
		cr_assert_eq(h.size, s[i].size, "%s.%d (pieces of %zu): size %u", what, i + 1, piece, h.size);
		cr_assert_eq(h.count, s[i].count, "%s.%d: %u entries", what, i + 1, h.count);
		cr_assert_eq(out.status, s[i].status, "%s.%d: status %u", what, i + 1, out.status);
	}
}

Test(hpack, rfc7541_appendix_c_whole_and_an_octet_at_a_time)
{
	for (size_t piece = 0; piece <= 3; piece++) {
		run_steps(c3, 3, 4096, piece, "C.3");
		run_steps(c4, 3, 4096, piece, "C.4");
		run_steps(c5, 3, 256, piece, "C.5");
		run_steps(c6, 3, 256, piece, "C.6");
	}
}

Test(hpack, every_split_point_reads_the_same)
{
	const struct step *sets[] = { c3, c4, c5, c6 };
	uint32_t tables[] = { 4096, 4096, 256, 256 };

	for (int k = 0; k < 4; k++) {
		for (int i = 0; i < 3; i++) {
			uint8_t buf[512];
			size_t n = unhex(sets[k][i].hex, buf, sizeof(buf));

			for (size_t at = 0; at <= n; at++) {
				struct ns_hpack h;
				struct ns_hfields out;

				ns_hpack_init(&h);
				ns_hpack_set_max(&h, tables[k]);
				h.need_update = 0;
				for (int j = 0; j < i; j++)
					cr_assert_eq(block(&h, sets[k][j].hex, 0, &out), 0);
				cr_assert_eq(block_split(&h, sets[k][i].hex, at, &out), 0, "set %d step %d split %zu",
					     k, i, at);
				cr_assert_eq(h.size, sets[k][i].size, "set %d step %d split %zu", k, i, at);
				cr_assert_eq(out.status, sets[k][i].status, "set %d step %d split %zu", k, i, at);
			}
		}
	}
}

Test(hpack, a_status_from_the_dynamic_table)
{
	struct ns_hpack h;
	struct ns_hfields out;

	ns_hpack_init(&h);
	ns_hpack_set_max(&h, 256);
	h.need_update = 0;
	cr_assert_eq(block(&h, c6[0].hex, 0, &out), 0);
	/* after C.6.1 the table is 62 location, 63 date, 64 cache-control, 65 :status 302 */
	cr_assert_eq(block(&h, "c1", 0, &out), 0);
	cr_assert_eq(out.status, 302);
	cr_assert_eq(block(&h, "c0", 0, &out), 0);
	cr_assert_eq(out.status, 0, "index 64 is cache-control");
	/* a literal with an indexed :status name and a new value */
	cr_assert_eq(block(&h, "4803 3530 33", 0, &out), 0);
	cr_assert_eq(out.status, 503);
	cr_assert_eq(block(&h, "be", 0, &out), 0);
	cr_assert_eq(out.status, 503);
}

Test(hpack, the_names_an_outcome_reads_as_literals)
{
	struct ns_hpack h;
	struct ns_hfields out;

	ns_hpack_init(&h);
	/* literal names, raw: grpc-status: 14, content-type: application/grpc+proto, retry-after: 7 */
	cr_assert_eq(
		block(&h,
		      "400b 6772 7063 2d73 7461 7475 7302 3134 "
		      "400c 636f 6e74 656e 742d 7479 7065 1661 7070 6c69 6361 7469 6f6e 2f67 7270 632b 7072 6f74 6f "
		      "0f26 0137",
		      0, &out),
		0);
	cr_assert_eq(out.grpc_status, 14);
	cr_assert(out.grpc);
	cr_assert_eq(out.ra_len, 1);
	cr_assert_str_eq(out.retry_after, "7");
	cr_assert_eq(h.count, 2); /* retry-after was sent without indexing */
	/* both again from the table: 62 content-type, 63 grpc-status */
	cr_assert_eq(block(&h, "bf be", 0, &out), 0);
	cr_assert_eq(out.grpc_status, 14);
	cr_assert(out.grpc);
	/* a name that only starts like one is not it; nor is a longer one */
	cr_assert_eq(block(&h, "000a 6772 7063 2d73 7461 7475 0131 000c 6772 7063 2d73 7461 7475 7378 0131", 0, &out),
		     0);
	cr_assert_eq(out.grpc_status, -1);
	/* content-type text/plain is not gRPC's; application/grpcx neither */
	cr_assert_eq(block(&h, "5f0a 7465 7874 2f70 6c61 696e", 0, &out), 0);
	cr_assert(!out.grpc);
	cr_assert_eq(block(&h, "0f10 1161 7070 6c69 6361 7469 6f6e 2f67 7270 6378", 0, &out), 0);
	cr_assert(!out.grpc);
}

Test(hpack, grpcs_server_pushback_in_milliseconds)
{
	struct ns_hpack h;
	struct ns_hfields out;

	ns_hpack_init(&h);
	/* grpc-retry-pushback-ms: 1500, a literal added to the table */
	cr_assert_eq(block(&h, "4016677270632d72657472792d707573686261636b2d6d730431353030", 0, &out), 0);
	cr_assert_eq(out.pushback_ms, 1500);
	/* ...again from the table (62), split at every octet */
	for (size_t at = 0; at <= 1; at++) {
		cr_assert_eq(block_split(&h, "be", at, &out), 0);
		cr_assert_eq(out.pushback_ms, 1500);
	}
	/* "-1" (do not retry) and text are no pushback; nor is a block without it */
	cr_assert_eq(block(&h, "0016677270632d72657472792d707573686261636b2d6d73022d31", 0, &out), 0);
	cr_assert_eq(out.pushback_ms, -1);
	cr_assert_eq(block(&h, "0016677270632d72657472792d707573686261636b2d6d7303616263", 0, &out), 0);
	cr_assert_eq(out.pushback_ms, -1);
	cr_assert_eq(block(&h, "88", 0, &out), 0);
	cr_assert_eq(out.pushback_ms, -1);
}

Test(hpack, a_huffman_literal_name)
{
	struct ns_hpack h;
	struct ns_hfields out;

	ns_hpack_init(&h);
	/* "retry-after" Huffman-coded as a literal name (C.4.3's way with custom-key), value "120" raw */
	cr_assert_eq(block(&h, "4088 b0a9 b3d2 c395 25b3 0331 3230", 0, &out), 0, "the name's coding");
	cr_assert_str_eq(out.retry_after, "120");
	cr_assert_eq(h.size, 11 + 3 + 32);
}

Test(hpack, size_updates)
{
	struct ns_hpack h;
	struct ns_hfields out;

	ns_hpack_init(&h);
	ns_hpack_set_max(&h, 256);
	cr_assert_eq(block(&h, c5[0].hex, 0, &out), -1, "a lowered limit not acknowledged");
	ns_hpack_init(&h);
	ns_hpack_set_max(&h, 256);
	cr_assert_eq(block(&h, "3f e1 01", 0, &out), 0); /* 256 */
	cr_assert_eq(block(&h, c5[0].hex, 0, &out), 0);
	cr_assert_eq(h.count, 4);
	/* at a block's start: down to 100 evicts the oldest until it fits */
	cr_assert_eq(block(&h, "3f45 88", 0, &out), 0);
	cr_assert_eq(h.cap, 100);
	cr_assert(h.size <= 100);
	cr_assert_eq(out.status, 200);
	/* to 0: empty */
	cr_assert_eq(block(&h, "20", 0, &out), 0);
	cr_assert_eq(h.count, 0);
	cr_assert_eq(h.size, 0);
	/* an entry larger than the table empties it and is not added */
	cr_assert_eq(block(&h, "3f11 4803 3330 32", 0, &out), 0); /* cap 48, :status 302 is 42: added */
	cr_assert_eq(h.count, 1);
	cr_assert_eq(block(&h, "5804 6162 6364", 0, &out), 0); /* cache-control abcd is 49 */
	cr_assert_eq(h.count, 0);
	cr_assert_eq(h.size, 0);
	/* a table exactly full keeps both */
	cr_assert_eq(block(&h, "3f35 4803 3330 32 4803 3330 33", 0, &out), 0); /* cap 84: 42 + 42 */
	cr_assert_eq(h.count, 2);
	cr_assert_eq(h.size, 84);
	/* the client's smaller limit evicts at once */
	cr_assert_eq(block(&h, "3f81 01 4803 3330 32 4803 3330 33", 0, &out), 0);
	cr_assert_eq(h.count, 3); /* four of 42 exceed 160: the oldest went */
	ns_hpack_set_max(&h, 50);
	cr_assert_eq(h.count, 1);
	cr_assert_eq(block(&h, "3f13 be", 0, &out), 0); /* 50, then index 62 */
	cr_assert_eq(out.status, 303);
}

Test(hpack, errors_are_errors)
{
	static const char *const bad[] = {
		"80",                  /* index 0 */
		"be",                  /* an index past the (empty) dynamic table */
		"ff ff ff ff ff 0f",   /* an index over 2^28 */
		"3f ff ff ff ff 0f",   /* a size over 2^28 (read on, it would wrap to 30) */
		"88 20",               /* a size update after a header */
		"3fe2 1f",             /* a size update over the limit (4097 > 4096) */
		"4084 ffff ffff 0131", /* EOS (30 ones) inside a Huffman name */
		"4083 ffff ff 0131",   /* 24 ones: no symbol, and more than 7 bits of padding */
		"0f26 81 ff",          /* Huffman padding of 8 bits */
		"0f26 81 00",          /* '0' (00000), then padding of zeros, not EOS's ones */
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct ns_hpack h;
		struct ns_hfields out;

		ns_hpack_init(&h);
		cr_assert_eq(block(&h, bad[i], 0, &out), -1, "%s was read", bad[i]);
	}
	{
		struct ns_hpack h;
		struct ns_hfields out;
		uint8_t b[] = { 0x48, 0x03, 0x33 }; /* ends inside a value */

		ns_hpack_init(&h);
		ns_hpack_begin(&h, &out);
		cr_assert_eq(ns_hpack_feed(&h, b, sizeof(b), &out), 0);
		cr_assert_eq(ns_hpack_end(&h), -1);
	}
}

Test(hpack, a_table_of_many_small_entries_beyond_what_it_holds_is_an_error)
{
	struct ns_hpack h;
	struct ns_hfields out;
	int failed = 0;

	/* the client allowed 8192: 200 entries of 33 bytes fit that table but
	 * not ent[] (128): the decoder says so rather than read wrong */
	ns_hpack_init(&h);
	ns_hpack_set_max(&h, 8192);
	cr_assert_eq(block(&h, "3fe1 3f", 0, &out), 0);
	cr_assert_eq(h.cap, 8192);
	for (int i = 0; i < 200 && !failed; i++)
		failed = block(&h, "4000 0161", 0, &out) < 0; /* "" : "a" */
	cr_assert(failed);
	cr_assert_eq(h.count, NS_HPACK_ENTRIES);
}

Test(hpack, kept_values_come_back_when_their_entries_go)
{
	struct ns_hpack h;
	struct ns_hfields out;
	char blk[32];

	/* a table of 256 holds 6 entries of :status NNN (42 each) at once:
	 * 100 in turn each read back right, evictions giving their places back */
	ns_hpack_init(&h);
	ns_hpack_set_max(&h, 256);
	cr_assert_eq(block(&h, "3fe1 01", 0, &out), 0);
	for (int i = 0; i < 100; i++) {
		snprintf(blk, sizeof(blk), "4803 33 3%d 3%d be", (i / 10) % 10, i % 10); /* 3TU, then index 62 */
		cr_assert_eq(block(&h, blk, 0, &out), 0, "status entry %d", i);
		cr_assert_eq(out.status, 300 + (unsigned)((i / 10) % 10) * 10 + (unsigned)(i % 10), "entry %d", i);
	}
}

Test(hpack, more_kept_values_at_once_than_it_holds_is_an_error)
{
	struct ns_hpack h;
	struct ns_hfields out;
	int failed = 0, i;

	ns_hpack_init(&h);
	for (i = 0; i < NS_HPACK_VALS + 1 && !failed; i++)
		failed = block(&h, "4803 3230 30", 0, &out) < 0; /* :status 200, added: 42 each, 4096 holds 97 */
	cr_assert(failed);
	cr_assert_eq(i, NS_HPACK_VALS + 1);
}

Test(hpack, it_fits_the_budget)
{
	/* docs/design.md, "HTTP/2 and gRPC": at most ~5 KiB an h2 connection, the frame reader included */
	cr_assert_leq(sizeof(struct ns_hpack), 2048);
}

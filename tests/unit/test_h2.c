/* test_h2.c -- the HTTP/2 frame reader (policy/h2.c): streams opened,
 * answered and ended, as events, from connections written frame by frame
 * here; each fed whole and split at every octet, which must read the same.
 * Interim answers, trailers and trailers-only gRPC answers, RST_STREAM and
 * GOAWAY, padding and priority, CONTINUATION, PUSH_PROMISE's header block,
 * the client's header table size, and every way to go blind. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "../../policy/h2.h"

/* a connection's two streams of octets, written below */
struct conn {
	uint8_t out[4096], in[4096];
	size_t nout, nin;
};

static void frame(uint8_t *buf, size_t *n, int type, int flags, uint32_t stream, const uint8_t *p, size_t len)
{
	uint8_t h[9] = { (uint8_t)(len >> 16),    (uint8_t)(len >> 8),    (uint8_t)len,
			 (uint8_t)type,           (uint8_t)flags,         (uint8_t)(stream >> 24),
			 (uint8_t)(stream >> 16), (uint8_t)(stream >> 8), (uint8_t)stream };

	cr_assert(*n + 9 + len <= 4096);
	memcpy(buf + *n, h, 9);
	memcpy(buf + *n + 9, p, len);
	*n += 9 + len;
}

static size_t unhex(const char *s, uint8_t *out)
{
	size_t n = 0;
	unsigned v;

	for (; *s; s++) {
		if (*s == ' ')
			continue;
		cr_assert(sscanf(s, "%2x", &v) == 1);
		out[n++] = (uint8_t)v;
		s++;
	}
	return n;
}

static void cframe(struct conn *c, int type, int flags, uint32_t stream, const char *hex)
{
	uint8_t p[1024];

	frame(c->out, &c->nout, type, flags, stream, p, unhex(hex, p));
}

static void sframe(struct conn *c, int type, int flags, uint32_t stream, const char *hex)
{
	uint8_t p[1024];

	frame(c->in, &c->nin, type, flags, stream, p, unhex(hex, p));
}

static void start(struct conn *c)
{
	memset(c, 0, sizeof(*c));
	memcpy(c->out, NS_H2_PREFACE, NS_H2_PREFACE_LEN);
	c->nout = NS_H2_PREFACE_LEN;
	cframe(c, 0x4, 0, 0, ""); /* SETTINGS */
}

/* the events, one word each: O1 F1 H1:200 D1:200 D1:200/g14 X1:2 U3 C1 B */
static char log_[4096];

static void rec(void *arg, const struct ns_h2_event *e)
{
	char w[96];

	(void)arg;
	switch (e->type) {
	case NS_H2_OPEN:
		snprintf(w, sizeof(w), "O%u", e->stream);
		break;
	case NS_H2_FIRST:
		snprintf(w, sizeof(w), "F%u", e->stream);
		break;
	case NS_H2_HEADERS:
		snprintf(w, sizeof(w), "H%u:%u%s%s%s", e->stream, e->status, e->grpc ? "g" : "",
			 e->retry_after[0] ? "/ra=" : "", e->retry_after);
		break;
	case NS_H2_DONE:
		if (e->grpc_status >= 0)
			snprintf(w, sizeof(w), "D%u:%u/g%d", e->stream, e->status, e->grpc_status);
		else
			snprintf(w, sizeof(w), "D%u:%u", e->stream, e->status);
		break;
	case NS_H2_FAILED:
		if (e->code == NS_H2_BLOCK_CUT)
			snprintf(w, sizeof(w), "X%u:cut/%u", e->stream, e->status);
		else
			snprintf(w, sizeof(w), e->code == NS_H2_CONN_ENDED ? "X%u:end" : "X%u:%u", e->stream, e->code);
		break;
	case NS_H2_REJECTED:
		snprintf(w, sizeof(w), "R%u:%u%s", e->stream, e->code, e->goaway ? "g" : "");
		break;
	case NS_H2_UNPROCESSED:
		snprintf(w, sizeof(w), "U%u", e->stream);
		break;
	case NS_H2_CANCELLED:
		snprintf(w, sizeof(w), "C%u", e->stream);
		break;
	default:
		snprintf(w, sizeof(w), "B");
		break;
	}
	if (log_[0])
		strcat(log_, " ");
	strcat(log_, w);
}

/* The client's octets up to each of its requests go first, then the
 * server's: `turns` says how many of each in turn (client, server, client,
 * server, ...), in octets; 0 = the rest. Fed in pieces of `piece`. */
static const char *run(const struct conn *c, const size_t *turns, int nturns, size_t piece, int end)
{
	static struct ns_h2 h;
	size_t o = 0, i = 0;

	log_[0] = '\0';
	ns_h2_init(&h);
	for (int t = 0; t < nturns; t++) {
		int server = t & 1;
		size_t *at = server ? &i : &o, total = server ? c->nin : c->nout;
		size_t upto = turns[t] ? *at + turns[t] : total;
		const uint8_t *buf = server ? c->in : c->out;

		while (*at < upto) {
			size_t k = piece && piece < upto - *at ? piece : upto - *at;

			if (server)
				ns_h2_in(&h, buf + *at, k, rec, NULL);
			else
				ns_h2_out(&h, buf + *at, k, rec, NULL);
			*at += k;
		}
	}
	if (end)
		ns_h2_end(&h, end == 2 ? NS_H2_END_CLOSED : NS_H2_END_BROKEN, rec, NULL);
	return log_;
}

/* every piece size from 1 to 9, and whole: the same events */
static void expect(const struct conn *c, const size_t *turns, int nturns, int end, const char *want)
{
	for (size_t piece = 0; piece <= 9; piece++)
		cr_assert_str_eq(run(c, turns, nturns, piece, end), want, "in pieces of %zu", piece);
}

static const size_t ALL[] = { 0, 0 }; /* the client's octets, then the server's */

Test(h2, one_request_answered)
{
	struct conn c;

	start(&c);
	cframe(&c, 0x1, 0x5, 1, "8286 84");      /* HEADERS END_STREAM|END_HEADERS: GET / http */
	sframe(&c, 0x4, 0, 0, "0003 0000 0064"); /* the server's SETTINGS */
	sframe(&c, 0x4, 0x1, 0, "");             /* ...its ACK of ours */
	sframe(&c, 0x1, 0x4, 1, "88");           /* :status 200 */
	sframe(&c, 0x0, 0x0, 1, "6869");
	sframe(&c, 0x0, 0x1, 1, "21"); /* END_STREAM */
	expect(&c, ALL, 2, 1, "O1 F1 H1:200 D1:200");
}

Test(h2, five_streams_one_after_another)
{
	struct conn c;
	char want[256] = "";

	/* the client's requests all go out before the server answers */
	start(&c);
	strcpy(want, "O1 O3 O5 O7 O9");
	for (uint32_t id = 1; id <= 9; id += 2) {
		char w[64];

		cframe(&c, 0x1, 0x5, id, "8286 84");
		sframe(&c, 0x1, 0x4, id, id == 5 ? "8d" : "88"); /* the third: 404 */
		sframe(&c, 0x0, 0x1, id, "00");
		snprintf(w, sizeof(w), " F%u H%u:%s D%u:%s", id, id, id == 5 ? "404" : "200", id,
			 id == 5 ? "404" : "200");
		strcat(want, w);
	}
	expect(&c, ALL, 2, 1, want);
}

Test(h2, a_503_with_retry_after_and_an_interim_100)
{
	struct conn c;

	start(&c);
	cframe(&c, 0x1, 0x5, 1, "8286 84");
	sframe(&c, 0x1, 0x4, 1, "0803 3130 30");           /* :status 100 (literal, not indexed) */
	sframe(&c, 0x1, 0x5, 1, "0803 3530 33 0f26 0137"); /* :status 503, retry-after: 7, END_STREAM */
	expect(&c, ALL, 2, 1, "O1 F1 H1:503/ra=7 D1:503");
}

Test(h2, grpc_trailers_and_trailers_only)
{
	struct conn c;

	start(&c);
	cframe(&c, 0x1, 0x4, 1, "8387 84"); /* POST, no END_STREAM: a body follows */
	cframe(&c, 0x0, 0x1, 1, "0000 0000 00");
	/* :status 200, content-type: application/grpc (indexed name 31, literal value, incremental) */
	sframe(&c, 0x1, 0x4, 1, "88 5f10 6170 706c 6963 6174 696f 6e2f 6772 7063");
	sframe(&c, 0x0, 0x0, 1, "0000 0000 00");
	/* trailers: grpc-status: 14 (literal name, not indexed), END_STREAM */
	sframe(&c, 0x1, 0x5, 1, "000b 6772 7063 2d73 7461 7475 7302 3134");
	cframe(&c, 0x1, 0x4, 3, "8387 84");
	cframe(&c, 0x0, 0x1, 3, "0000 0000 00");
	/* trailers-only: :status 200, content-type from the table (62), grpc-status 5 */
	sframe(&c, 0x1, 0x5, 3, "88 be 000b 6772 7063 2d73 7461 7475 7301 35");
	expect(&c, ALL, 2, 1, "O1 O3 F1 H1:200g D1:200/g14 F3 H3:200g D3:200/g5");
}

Test(h2, resets_goaway_and_the_end_of_the_connection)
{
	struct conn c;

	start(&c);
	for (uint32_t id = 1; id <= 9; id += 2)
		cframe(&c, 0x1, 0x5, id, "8286 84");
	cframe(&c, 0x3, 0, 9, "0000 0008");           /* the client cancels 9 */
	sframe(&c, 0x3, 0, 1, "0000 0007");           /* REFUSED_STREAM */
	sframe(&c, 0x3, 0, 3, "0000 0002");           /* INTERNAL_ERROR */
	sframe(&c, 0x1, 0x4, 5, "88");                /* 5 answered, not ended */
	sframe(&c, 0x7, 0, 0, "0000 0005 0000 0000"); /* GOAWAY, last stream 5: 7 was not processed */
	expect(&c, ALL, 2, 1, "O1 O3 O5 O7 O9 C9 U1 X3:2 F5 H5:200 U7 X5:end");
}

Test(h2, padding_priority_continuation_and_push)
{
	struct conn c;

	start(&c);
	cframe(&c, 0x1, 0x5, 1, "8286 84");
	/* PUSH_PROMISE (padded: 2 octets) whose block adds "cache-control: x" to the table */
	sframe(&c, 0x5, 0x4 | 0x8, 1, "02 0000 0002 5801 78 0000");
	/* HEADERS padded (3) and with priority, its block cut in two by a CONTINUATION: :status 503 then
	 * index 63 (the pushed cache-control) */
	sframe(&c, 0x1, 0x8 | 0x20, 1, "03 8000 0003 10 4803 3530 3300 0000");
	sframe(&c, 0x9, 0x4, 1, "bf");
	sframe(&c, 0x0, 0x1 | 0x8, 1, "04 6869 0000 0000"); /* padded DATA, END_STREAM */
	expect(&c, ALL, 2, 1, "O1 F1 H1:503 D1:503");
}

Test(h2, a_status_from_the_dynamic_table_on_a_later_stream)
{
	struct conn c;

	start(&c);
	cframe(&c, 0x1, 0x5, 1, "8286 84");
	sframe(&c, 0x1, 0x5, 1, "4803 3530 33"); /* :status 503, added to the table */
	cframe(&c, 0x1, 0x5, 3, "8286 84");
	sframe(&c, 0x1, 0x5, 3, "be"); /* index 62: :status 503 */
	expect(&c, ALL, 2, 1, "O1 O3 F1 H1:503 D1:503 F3 H3:503 D3:503");
}

Test(h2, the_clients_smaller_header_table_holds_once_the_server_acks_it)
{
	struct conn c;
	static const size_t turns[] = { 0, 0 };

	start(&c);
	cframe(&c, 0x4, 0, 0, "0001 0000 0100"); /* SETTINGS_HEADER_TABLE_SIZE 256 */
	cframe(&c, 0x1, 0x5, 1, "8286 84");
	cframe(&c, 0x1, 0x5, 3, "8286 84");
	sframe(&c, 0x4, 0x1, 0, "");           /* the ACK of the preface's SETTINGS */
	sframe(&c, 0x1, 0x5, 1, "88");         /* before the second ACK: the old size */
	sframe(&c, 0x4, 0x1, 0, "");           /* the ACK of the table size */
	sframe(&c, 0x1, 0x5, 3, "3fe1 01 88"); /* a size update to 256 first, as it must */
	expect(&c, turns, 2, 1, "O1 O3 F1 H1:200 D1:200 F3 H3:200 D3:200");
	/* without the size update the reader stops: a table it cannot vouch for */
	start(&c);
	cframe(&c, 0x4, 0, 0, "0001 0000 0100");
	cframe(&c, 0x1, 0x5, 1, "8286 84");
	sframe(&c, 0x4, 0x1, 0, "");
	sframe(&c, 0x4, 0x1, 0, "");
	sframe(&c, 0x1, 0x5, 1, "88");
	expect(&c, turns, 2, 1, "O1 F1 B");
}

Test(h2, blind_and_silent_after)
{
	struct conn c;

	/* a preface that is not one */
	memset(&c, 0, sizeof(c));
	memcpy(c.out, "GET / HTTP/1.1\r\n\r\n", 18);
	c.nout = 18;
	expect(&c, ALL, 2, 1, "B");
	/* a DATA frame in the middle of a header block */
	start(&c);
	cframe(&c, 0x1, 0x5, 1, "8286 84");
	sframe(&c, 0x1, 0x0, 1, "88");
	sframe(&c, 0x0, 0x1, 1, "00");
	expect(&c, ALL, 2, 1, "O1 F1 B");
	/* a CONTINUATION with no header block open */
	start(&c);
	cframe(&c, 0x1, 0x5, 1, "8286 84");
	sframe(&c, 0x9, 0x4, 1, "88");
	expect(&c, ALL, 2, 1, "O1 B");
	/* an HPACK error (index 0) */
	start(&c);
	cframe(&c, 0x1, 0x5, 1, "8286 84");
	sframe(&c, 0x1, 0x5, 1, "80");
	expect(&c, ALL, 2, 1, "O1 F1 B");
	/* padding longer than the frame */
	start(&c);
	cframe(&c, 0x1, 0x5, 1, "8286 84");
	sframe(&c, 0x0, 0x1 | 0x8, 1, "05 00");
	expect(&c, ALL, 2, 1, "O1 F1 B");
}

Test(h2, more_streams_at_once_than_it_follows_is_blind)
{
	struct conn c;
	char want[2048] = "";

	start(&c);
	for (uint32_t i = 0; i <= NS_H2_STREAMS; i++) {
		char w[16];

		cframe(&c, 0x1, 0x5, 2 * i + 1, "8286 84");
		if (i < NS_H2_STREAMS) {
			snprintf(w, sizeof(w), "%sO%u", i ? " " : "", 2 * i + 1);
			strcat(want, w);
		}
	}
	strcat(want, " B");
	cr_assert_str_eq(run(&c, ALL, 2, 0, 1), want);
}

Test(h2, follows_as_many_streams_at_once_as_servers_allow)
{
	/* docs/design.md, "HTTP/2 and gRPC": at least 256 (servers allow 100-250); the places of
	 * streams that ended are taken again */
	struct conn c;
	char want[4096] = "";

	cr_assert_geq(NS_H2_STREAMS, 256);
	start(&c);
	for (uint32_t i = 0; i < NS_H2_STREAMS; i++)
		cframe(&c, 0x1, 0x5, 2 * i + 1, "8286 84");
	for (uint32_t i = 0; i < NS_H2_STREAMS; i += 85)
		sframe(&c, 0x1, 0x5, 2 * i + 1, "88"); /* four of them answered */
	cr_assert_str_neq(run(&c, ALL, 2, 0, 0), "");
	cr_assert_null(strchr(log_, 'B'));
	/* one more than that, after the four ended: followed, as its place
	 * was given back; then the whole lot fails with the connection */
	cframe(&c, 0x1, 0x5, 2 * NS_H2_STREAMS + 1, "8286 84");
	for (uint32_t i = 0; i < NS_H2_STREAMS; i++) {
		char w[16];

		snprintf(w, sizeof(w), "%sO%u", i ? " " : "", 2 * i + 1);
		strcat(want, w);
	}
	strcat(want, " F1 H1:200 D1:200 F171 H171:200 D171:200 F341 H341:200 D341:200 F511 H511:200 D511:200 O513");
	{
		static const size_t turns[] = { NS_H2_PREFACE_LEN + 9 + 12 * NS_H2_STREAMS, 0, 0, 0 };

		cr_assert_str_eq(run(&c, turns, 3, 0, 0), want);
	}
}

Test(h2, a_connection_fits_the_budget)
{
	/* The design said ~5 KiB an h2 connection for 32 streams; 256 take
	 * 8 octets each more (HPACK's table included) */
	cr_assert_leq(sizeof(struct ns_h2), 2200 + 8 * NS_H2_STREAMS);
}

/* The client's own error codes: those that say the answer was wrong fail
 * the stream (a header block it would not take, a flood of CONTINUATION:
 * nghttp2's GOAWAY COMPRESSION_ERROR, its RST_STREAM PROTOCOL_ERROR); the
 * program's own giving up (CANCEL, STREAM_CLOSED, NO_ERROR) is nothing. */
Test(h2, the_clients_error_codes_blame_the_answer_or_not)
{
	struct conn c;

	start(&c);
	for (uint32_t id = 1; id <= 7; id += 2)
		cframe(&c, 0x1, 0x5, id, "8286 84");
	cframe(&c, 0x3, 0, 1, "0000 0001");           /* PROTOCOL_ERROR */
	cframe(&c, 0x3, 0, 3, "0000 0005");           /* STREAM_CLOSED (curl's when it drops a transfer) */
	cframe(&c, 0x7, 0, 0, "0000 0000 0000 0009"); /* GOAWAY COMPRESSION_ERROR: 5 and 7 */
	expect(&c, ALL, 1, 1, "O1 O3 O5 O7 R1:1 C3 R5:9g R7:9g");
	/* a GOAWAY with NO_ERROR: the streams stay the server's to answer */
	start(&c);
	cframe(&c, 0x1, 0x5, 1, "8286 84");
	cframe(&c, 0x7, 0, 0, "0000 0001 0000 0000");
	sframe(&c, 0x1, 0x5, 1, "88");
	expect(&c, ALL, 2, 1, "O1 F1 H1:200 D1:200");
}

/* The program closes the connection inside an answer's header block (it
 * would not take the block): that stream fails, with the :status it read
 * when it read one; a stream answered, or not yet, is the program's own. */
Test(h2, a_close_inside_a_header_block_fails_that_stream)
{
	struct conn c;

	start(&c);
	cframe(&c, 0x1, 0x5, 1, "8286 84");
	cframe(&c, 0x1, 0x5, 3, "8286 84");
	cframe(&c, 0x1, 0x5, 5, "8286 84");
	sframe(&c, 0x1, 0x4, 1, "88");                /* 1: 200, its body still to come */
	sframe(&c, 0x1, 0x0, 3, "0803 3530 33 0000"); /* 3: :status 503, then a block that goes on */
	expect(&c, ALL, 2, 2, "O1 O3 O5 F1 H1:200 F3 X3:cut/503");
	/* cut before its :status was read: no status */
	start(&c);
	cframe(&c, 0x1, 0x5, 1, "8286 84");
	sframe(&c, 0x1, 0x0, 1, "00");
	expect(&c, ALL, 2, 2, "O1 F1 X1:cut/0");
}

/* A caller whose queue holds few events gives the reader a room: a feed
 * stops short of it, and fed again from where it stopped, reads the same
 * events as fed at once; a GOAWAY's sweep and the end go room by room. */
Test(h2, a_feed_stops_where_the_callers_room_ends)
{
	struct conn c;
	static struct ns_h2 h;
	static char whole[4096];
	int calls = 0;

	start(&c);
	for (uint32_t id = 1; id <= 79; id += 2)
		cframe(&c, 0x1, 0x5, id, "8286 84");
	for (uint32_t id = 1; id <= 39; id += 2)
		sframe(&c, 0x1, 0x5, id, "88");
	sframe(&c, 0x7, 0, 0, "0000 0035 0000 0000"); /* GOAWAY, last 53: 55 to 79 not processed */
	strcpy(whole, run(&c, ALL, 2, 0, 1));
	ns_h2_init(&h);
	log_[0] = '\0';
	for (size_t o = 0; o < c.nout;) {
		h.room = NS_H2_ROOM + 1;
		o += ns_h2_out(&h, c.out + o, c.nout - o, rec, NULL);
		calls++;
	}
	for (size_t i = 0; i < c.nin;) {
		h.room = NS_H2_ROOM + 1;
		i += ns_h2_in(&h, c.in + i, c.nin - i, rec, NULL);
		calls++;
	}
	do {
		h.room = NS_H2_ROOM + 1;
		calls++;
	} while (ns_h2_end(&h, NS_H2_END_BROKEN, rec, NULL));
	cr_assert_str_eq(log_, whole);
	cr_assert_gt(calls, 20, "the room made it stop (%d calls)", calls);
}

/* The look ahead (rate, and the streams a write opens before it goes):
 * which new streams a write opens, the connection's first told apart, and
 * where the second begins; fed in pieces it sees what it was shown only. */
Test(h2, the_look_ahead_finds_the_streams_a_write_opens)
{
	struct conn c;
	struct ns_h2_peek k;
	static struct ns_h2 h;
	size_t first_end;

	start(&c);
	cframe(&c, 0x1, 0x5, 1, "8286 84");
	cframe(&c, 0x8, 0, 0, "0000 1000"); /* WINDOW_UPDATE: opens nothing */
	first_end = c.nout;
	cframe(&c, 0x1, 0x5, 3, "8286 84");
	cframe(&c, 0x1, 0x4, 3, "88"); /* the same stream's second block: not a new one */
	cframe(&c, 0x1, 0x5, 5, "8286 84");
	ns_h2_init(&h);
	ns_h2_peek_begin(&h, &k);
	ns_h2_peek(&k, c.out, c.nout);
	cr_assert_eq(k.opened, 3);
	cr_assert_eq(k.firsts, 1);
	cr_assert_eq(k.second_at, first_end);
	cr_assert(k.ids[0] == 1 && k.ids[1] == 3 && k.ids[2] == 5);
	/* the same bytes in pieces of 7: the same streams, the same place */
	ns_h2_peek_begin(&h, &k);
	for (size_t o = 0; o < c.nout; o += 7)
		ns_h2_peek(&k, c.out + o, c.nout - o < 7 ? c.nout - o : 7);
	cr_assert(k.opened == 3 && k.firsts == 1 && k.second_at == first_end);
	/* after the first write went: the next opens 3 and 5, none is a first */
	log_[0] = '\0';
	ns_h2_out(&h, c.out, first_end, rec, NULL);
	ns_h2_peek_begin(&h, &k);
	ns_h2_peek(&k, c.out + first_end, c.nout - first_end);
	cr_assert(k.opened == 2 && k.firsts == 0 && k.second_at == 9 + 3 + 9 + 1, "%u %u %zu", k.opened, k.firsts,
		  k.second_at);
	/* a write split inside a frame header: a stream is counted where its
	 * header is whole, and no place to cut is named in it */
	ns_h2_peek_begin(&h, &k);
	ns_h2_peek(&k, c.out + first_end, 4);
	cr_assert_eq(k.opened, 0);
	ns_h2_peek(&k, c.out + first_end + 4, 5);
	cr_assert(k.opened == 1 && k.second_at == 0);
}

Test(h2, a_stream_opened_before_its_write_is_answered_and_not_opened_twice)
{
	struct conn c;
	static struct ns_h2 h;

	start(&c);
	cframe(&c, 0x1, 0x5, 1, "8286 84");
	sframe(&c, 0x1, 0x5, 1, "88"); /* :status 200, END_STREAM */
	ns_h2_init(&h);
	log_[0] = '\0';
	/* the answer is read (another thread) before the request's bytes are fed */
	ns_h2_open(&h, 1, rec, NULL);
	ns_h2_in(&h, c.in, c.nin, rec, NULL);
	ns_h2_out(&h, c.out, c.nout, rec, NULL);
	cr_assert_str_eq(log_, "O1 F1 H1:200 D1:200");
	/* an even id (the server's), an old one: nothing */
	ns_h2_open(&h, 2, rec, NULL);
	ns_h2_open(&h, 1, rec, NULL);
	cr_assert_str_eq(log_, "O1 F1 H1:200 D1:200");
}

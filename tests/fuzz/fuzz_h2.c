/* fuzz_h2.c -- libFuzzer harness: the HTTP/2 frame reader (policy/h2.c).
 *
 * The input is a split pattern, then the client's octets (after the
 * preface, which is prepended) and the server's, cut at an offset the input
 * gives. Each side is fed twice: whole, and in pieces of the pattern's
 * sizes, interleaved (a piece of the client's, a piece of the server's).
 * Whatever the octets, the reader must not crash or read out of bounds, and
 * the split reading must give exactly the events of the whole one when the
 * client's octets all go first (events are a function of the octets, not
 * of how reads cut them). The look ahead rate uses (ns_h2_peek) must count,
 * piece by piece before each is fed, exactly the streams the reader then
 * opens, and find the second of a piece's new streams where its HEADERS
 * frame begins. The split reading also gives the reader a small room (a
 * caller whose event queue is short): it stops short and is fed the rest,
 * with the same events. The HPACK decoder inside is the one fuzz_hpack
 * checks against libnghttp2's. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../policy/h2.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len);

struct log {
	uint8_t ev[4096];
	size_t n;
};

static void rec(void *arg, const struct ns_h2_event *e)
{
	struct log *l = arg;
	uint8_t w[16] = { e->type,
			  e->grpc,
			  (uint8_t)(e->status >> 8),
			  (uint8_t)e->status,
			  (uint8_t)e->grpc_status,
			  (uint8_t)(e->stream >> 24),
			  (uint8_t)(e->stream >> 16),
			  (uint8_t)(e->stream >> 8),
			  (uint8_t)e->stream,
			  (uint8_t)(e->code >> 24),
			  (uint8_t)e->code,
			  (uint8_t)(e->retry_after ? strlen(e->retry_after) : 0xff) };

	if (l->n + sizeof(w) <= sizeof(l->ev)) {
		memcpy(l->ev + l->n, w, sizeof(w));
		l->n += sizeof(w);
	}
}

/* The streams a piece opened, as the reader's events say. */
static uint32_t opens_in(const struct log *l, size_t from)
{
	uint32_t n = 0;

	for (size_t j = from; j + 16 <= l->n; j += 16)
		n += l->ev[j] == NS_H2_OPEN;
	return n;
}

/* One piece fed whole; with a pattern, a room at a time. */
static void feed_room(struct ns_h2 *h, int server, const uint8_t *p, size_t n, uint8_t pattern, struct log *l)
{
	while (n) {
		size_t used;

		h->room = pattern ? NS_H2_ROOM + pattern % 5 : UINT32_MAX;
		used = server ? ns_h2_in(h, p, n, rec, l) : ns_h2_out(h, p, n, rec, l);
		if (used > n || (!used && !pattern))
			abort(); /* an unbounded room reads it all */
		p += used;
		n -= used;
	}
}

static void read_all(const uint8_t *out, size_t nout, const uint8_t *in, size_t nin, uint8_t pattern, struct log *l)
{
	static struct ns_h2 h;
	size_t o = 0, i = 0, k;

	ns_h2_init(&h);
	ns_h2_out(&h, (const uint8_t *)NS_H2_PREFACE, NS_H2_PREFACE_LEN, rec, l);
	/* the client's octets first, in pieces, then the server's */
	while (o < nout) {
		struct ns_h2_peek pk;
		size_t before = l->n;
		int blind = h.blind;

		k = pattern ? (size_t)(pattern + o) % 13 + 1 : nout;
		k = k < nout - o ? k : nout - o;
		ns_h2_peek_begin(&h, &pk);
		ns_h2_peek(&pk, out + o, k);
		feed_room(&h, 0, out + o, k, pattern, l);
		/* (a reader that went blind in the piece stops opening streams;
		 * a full log stops recording them) */
		if (!blind && !h.blind && l->n + 16 * 40 < sizeof(l->ev)) {
			if (pk.opened != opens_in(l, before))
				abort();
			if (pk.second_at && (pk.second_at >= k || pk.opened < 2 || out[o + pk.second_at + 3] != 0x1))
				abort();
		}
		o += k;
	}
	while (i < nin) {
		k = pattern ? (size_t)(pattern * 7 + i) % 11 + 1 : nin;
		k = k < nin - i ? k : nin - i;
		feed_room(&h, 1, in + i, k, pattern, l);
		i += k;
	}
	do
		h.room = pattern ? NS_H2_ROOM + pattern % 5 : UINT32_MAX;
	while (ns_h2_end(&h, NS_H2_END_BROKEN, rec, l));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
	static struct log whole, split;
	size_t cut;

	if (len < 3)
		return 0;
	cut = ((size_t)data[1] << 8 | data[2]) % (len - 2);
	whole.n = split.n = 0;
	read_all(data + 3, cut, data + 3 + cut, len - 3 - cut, 0, &whole);
	read_all(data + 3, cut, data + 3 + cut, len - 3 - cut, (uint8_t)(data[0] | 1), &split);
	if (whole.n != split.n || memcmp(whole.ev, split.ev, whole.n) != 0)
		abort();
	return 0;
}

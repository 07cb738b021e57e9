/* h2bench.c -- what reading HTTP/2 answers costs (make bench, section 10):
 * the HPACK decoder on RFC 7541's C.6 responses (Huffman, a table of 256,
 * evictions) and the frame reader on a connection of N streams, each a
 * HEADERS (:status and four headers from the table) and a DATA frame of
 * 16 KiB. Prints ns per header block and per stream; the instructions are
 * callgrind's (bench.sh runs it under valgrind too).
 *
 *   h2bench [ROUNDS] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../policy/h2.h"

static size_t unhex(const char *s, uint8_t *out)
{
	size_t n = 0;
	unsigned v;

	for (; *s; s++) {
		if (*s == ' ')
			continue;
		if (sscanf(s, "%2x", &v) != 1)
			exit(2);
		out[n++] = (uint8_t)v;
		s++;
	}
	return n;
}

static double now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static void none(void *arg, const struct ns_h2_event *ev)
{
	(*(unsigned long *)arg) += ev->type;
}

static size_t frame(uint8_t *b, int type, int flags, uint32_t id, const uint8_t *p, size_t n)
{
	uint8_t h[9] = { (uint8_t)(n >> 16),  (uint8_t)(n >> 8),   (uint8_t)n,         (uint8_t)type, (uint8_t)flags,
			 (uint8_t)(id >> 24), (uint8_t)(id >> 16), (uint8_t)(id >> 8), (uint8_t)id };

	memcpy(b, h, 9);
	if (n)
		memcpy(b + 9, p, n);
	return 9 + n;
}

int main(int argc, char **argv)
{
	static const char *const c6[] = {
		"3fe101 4882 6402 5885 aec3 771a 4b61 96d0 7abe 9410 54d4 44a8 2005 9504 0b81 66e0 82a6 2d1b ff6e 919d "
		"29ad 1718 63c7 8f0b 97c8 e9ae 82ae 43d3",
		"4883 640e ffc1 c0bf",
		"88c1 6196 d07a be94 1054 d444 a820 0595 040b 8166 e084 a62d 1bff c05a 839b d9ab 77ad 94e7 821d d7f2 "
		"e6c7 b335 dfdf cd5b 3960 d5af 2708 7f36 72c1 ab27 0fb5 291f 9587 3160 65c0 03ed 4ee5 b106 3d50 07",
	};
	int rounds = argc > 1 ? atoi(argv[1]) : 200000;
	static uint8_t blk[3][256], in[1 << 22], out[1 << 16];
	size_t bl[3], nin = 0, nout = 0;
	static struct ns_hpack hp;
	static struct ns_h2 h2;
	struct ns_hfields f;
	unsigned long sink = 0;
	double t0, t1;
	int streams = 200;

	for (int i = 0; i < 3; i++)
		bl[i] = unhex(c6[i], blk[i]);
	t0 = now_ns();
	for (int r = 0; r < rounds; r++) {
		ns_hpack_init(&hp);
		ns_hpack_set_max(&hp, 256);
		for (int i = 0; i < 3; i++) {
			ns_hpack_begin(&hp, &f);
			if (ns_hpack_feed(&hp, blk[i], bl[i], &f) < 0 || ns_hpack_end(&hp) < 0)
				return 1;
			sink += f.status;
		}
	}
	t1 = now_ns();
	printf("  HPACK, RFC 7541 C.6 (3 Huffman blocks, a table of 256, a new decoder each round): %.0f ns a block\n",
	       (t1 - t0) / rounds / 3);

	/* a connection: the client's streams, then the server's answers */
	memcpy(out, NS_H2_PREFACE, NS_H2_PREFACE_LEN);
	nout = NS_H2_PREFACE_LEN;
	nout += frame(out + nout, 0x4, 0, 0, NULL, 0);
	{
		static uint8_t data[16384];
		uint8_t req[] = { 0x82, 0x87, 0x84 };
		/* :status 200, then content-type, server, date, content-length from the table after the first */
		uint8_t first[] = { 0x88, 0x5f, 0x09, 't',  'e', 'x', 't', '/', 'h',  't',  'm',
				    'l',  0x76, 0x05, 'n',  'g', 'i', 'n', 'x', 0x61, 0x03, 'n',
				    'o',  'w',  0x5c, 0x05, '1', '6', '3', '8', '4' };
		uint8_t later[] = { 0x88, 0xc1, 0xc0, 0xbf, 0xbe };

		int s;

		for (s = 0; s < streams && nin + 2 * 9 + sizeof(data) + sizeof(first) < sizeof(in); s++) {
			uint32_t id = (uint32_t)(2 * s + 1);

			nout += frame(out + nout, 0x1, 0x5, id, req, sizeof(req));
			nin += s ? frame(in + nin, 0x1, 0x4, id, later, sizeof(later))
				 : frame(in + nin, 0x1, 0x4, id, first, sizeof(first));
			nin += frame(in + nin, 0x0, 0x1, id, data, sizeof(data));
			if (nout + 64 > sizeof(out)) {
				s++;
				break;
			}
		}
		streams = s;
	}
	rounds = rounds / 2000 ? rounds / 2000 : 1;
	t0 = now_ns();
	for (int r = 0; r < rounds; r++) {
		size_t o = NS_H2_PREFACE_LEN + 9, i = 0;

		ns_h2_init(&h2);
		ns_h2_out(&h2, out, o, none, &sink);
		/* one stream at a time: its request, then its answer in 16 KiB pieces, as a client reads */
		for (int st = 0; st < streams; st++) {
			size_t end = i + 9 + (st ? 5 : 31) + 9 + 16384;

			ns_h2_out(&h2, out + o, 12, none, &sink);
			o += 12;
			for (; i < end; i += 16384)
				ns_h2_in(&h2, in + i, end - i < 16384 ? end - i : 16384, none, &sink);
			i = end;
		}
		if (h2.blind)
			return 1;
	}
	t1 = now_ns();
	printf("  HTTP/2 frames, %d streams of a HEADERS and 16 KiB of DATA each, read in 16 KiB pieces: %.0f ns a stream"
	       " (%.2f ns a KiB)\n",
	       streams, (t1 - t0) / rounds / streams, (t1 - t0) / rounds / ((double)nin / 1024));
	/* the shim's record (shim/h2conn.c) is the reader, two clocks a
	 * stream and 24 bytes; a static assertion there holds it to the bar */
	printf("  sizes: a decoder %zu bytes, a connection's reader %zu bytes, the shim's record about %zu bytes"
	       " (bar 5120), mapped on first use\n",
	       sizeof(struct ns_hpack), sizeof(struct ns_h2), sizeof(struct ns_h2) + 2 * 8 * NS_H2_STREAMS + 24);
	return sink == 42 ? 3 : 0;
}

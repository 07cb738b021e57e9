/* fuzz_hpack.c -- libFuzzer harness: the HPACK decoder (policy/hpack.c)
 * against a reference, libnghttp2's inflater (linked here only: the shim
 * never links nghttp2).
 *
 * The input is a table limit, a split pattern and a run of header blocks
 * ([length][octets], one after another on one connection). Each block goes
 * whole to the reference and in pieces of the pattern's sizes to ours. Ours
 * may refuse a block the reference reads (it then reads no more of the
 * connection, as the shim goes blind), but a block ours reads must be one
 * the reference reads too, with the same :status, grpc-status, gRPC
 * content-type and retry-after (the last of each in the block) and the same
 * dynamic table size after it. Anything else aborts. */
#include <nghttp2/nghttp2.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../policy/hpack.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len);

/* what the reference read of one block, as ns_hfields keeps it */
static int reference_block(nghttp2_hd_inflater *inf, const uint8_t *p, size_t n, struct ns_hfields *want)
{
	memset(want, 0, sizeof(*want));
	want->grpc_status = -1;
	for (;;) {
		nghttp2_nv nv;
		int flags = 0;
		ssize_t r = nghttp2_hd_inflate_hd2(inf, &nv, &flags, p, n, 1);

		if (r < 0)
			return -1;
		p += r;
		n -= (size_t)r;
		if (flags & NGHTTP2_HD_INFLATE_EMIT) {
			const char *v = (const char *)nv.value;
			size_t vl = nv.valuelen;

#define IS(s) (nv.namelen == sizeof(s) - 1 && memcmp(nv.name, s, sizeof(s) - 1) == 0)
			if (IS(":status")) {
				int ok = vl == 3;

				for (size_t i = 0; ok && i < 3; i++)
					ok = v[i] >= '0' && v[i] <= '9';
				want->status = ok && v[0] != '0'
					? (uint16_t)((v[0] - '0') * 100 + (v[1] - '0') * 10 + (v[2] - '0'))
					: 0;
			} else if (IS("grpc-status")) {
				int g = vl >= 1 && vl <= 3 ? 0 : -1;

				for (size_t i = 0; g >= 0 && i < vl; i++)
					g = v[i] >= '0' && v[i] <= '9' ? g * 10 + (v[i] - '0') : -1;
				want->grpc_status = (int16_t)g;
			} else if (IS("content-type")) {
				want->grpc = vl >= 16 && memcmp(v, "application/grpc", 16) == 0 &&
					(vl == 16 || v[16] == '+' || v[16] == ';');
			} else if (IS("retry-after")) {
				want->ra_len = vl <= NS_HPACK_VAL_MAX ? (uint8_t)vl : 0;
				memcpy(want->retry_after, v, want->ra_len);
				want->retry_after[want->ra_len] = '\0';
			}
#undef IS
		}
		if (flags & NGHTTP2_HD_INFLATE_FINAL) {
			nghttp2_hd_inflate_end_headers(inf);
			return 0;
		}
		if (!(flags & NGHTTP2_HD_INFLATE_EMIT) && n == 0)
			return -1;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
	static const uint32_t limits[] = { 4096, 256, 0, 8192, 100, 4096, 64, 65536 };
	nghttp2_hd_inflater *inf;
	struct ns_hpack h;
	uint32_t limit;
	size_t pos = 2;

	if (len < 2)
		return 0;
	limit = limits[data[0] & 7]; /* data[1]: where ours is split */
	if (nghttp2_hd_inflate_new(&inf) != 0)
		abort();
	ns_hpack_init(&h);
	if (limit != 4096) {
		nghttp2_hd_inflate_change_table_size(inf, limit);
		ns_hpack_set_max(&h, limit);
	}
	while (pos < len) {
		size_t n = data[pos++], k = 0;
		struct ns_hfields got, want;
		int mine = 0, ref;

		if (n > len - pos)
			n = len - pos;
		ns_hpack_begin(&h, &got);
		for (size_t i = 0; i < n && mine == 0; i += k) {
			k = (size_t)(data[1] + i) % 7 + 1;
			if (k > n - i)
				k = n - i;
			mine = ns_hpack_feed(&h, data + pos + i, k, &got);
		}
		if (mine == 0)
			mine = ns_hpack_end(&h);
		ref = reference_block(inf, data + pos, n, &want);
		pos += n;
		if (mine < 0)
			break; /* refused: blind from here, nothing claimed */
		if (ref < 0)
			abort(); /* ours read a block the reference refuses */
		if (got.status != want.status || got.grpc_status != want.grpc_status || got.grpc != want.grpc ||
		    got.ra_len != want.ra_len || memcmp(got.retry_after, want.retry_after, got.ra_len) != 0)
			abort(); /* a different reading */
		if (h.size != nghttp2_hd_inflate_get_dynamic_table_size(inf))
			abort(); /* tables apart: the next block could read wrong */
	}
	nghttp2_hd_inflate_del(inf);
	return 0;
}

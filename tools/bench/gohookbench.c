/* gohookbench.c -- what the Go hook adds to each answer a Go program's
 * net/http returns: the entry's and the return's trampolines
 * (tools/shimrun/gohook.c) run here as machine code on a made-up
 * *Response, against the bare instructions they move (a lea, a ret), for make bench (section 11). The instructions per call come
 * from callgrind over this program (N calls less N = 0); the time from a
 * loop of N calls.
 *
 *   gohookbench hook|bare N [503]   prints "ns_per_call X"
 *
 * With 503 the answer is a 503 whose header map (two buckets of 8) holds
 * 15 headers and a Retry-After last: the walk a 429 or 503 takes. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "../shimrun/gohook.h"

struct gostr {
	const char *p;
	int64_t n;
};

static struct ns_goring ring;

/* a header map of two buckets: 15 headers, then Retry-After: 120 */
static void headers(int64_t *hmap, unsigned char bk[2][NS_GO_BUCKET_SIZE])
{
	static struct gostr val[16];
	static char names[15][9];

	for (int i = 0; i < 16; i++) {
		unsigned char *b = bk[i / 8];
		int c = i % 8;
		struct gostr k = { names[i < 15 ? i : 0], 8 };
		int64_t v[3] = { (int64_t)(uintptr_t)&val[i], 1, 1 };

		if (i < 15)
			snprintf(names[i], sizeof(names[i]), "X-Hdr-%02d", i);
		else
			k = (struct gostr){ "Retry-After", 11 };
		val[i] = (struct gostr){ i < 15 ? "x" : "120", i < 15 ? 1 : 3 };
		b[c] = (unsigned char)(NS_GO_TOPHASH_MIN + i);
		memcpy(b + NS_GO_BUCKET_KEYS + 16 * c, &k, sizeof(k));
		memcpy(b + NS_GO_BUCKET_VALUES + 24 * c, v, sizeof(v));
	}
	hmap[NS_GO_HMAP_COUNT / 8] = 16;
	((unsigned char *)hmap)[NS_GO_HMAP_B] = 1;
	hmap[NS_GO_HMAP_BUCKETS / 8] = (int64_t)(uintptr_t)bk;
}

/* C's call into code for Go's register ABI: r12-r14 kept, g (rsi) into
 * r14, the answer (rdi) into rax; a call to the entry's code at +64, then
 * to the return's at +512 (each ends in a ret back here) */
static const unsigned char prelude[] = {
	0x41, 0x54, 0x41, 0x55, 0x41, 0x56, /* push r12; push r13; push r14 */
	0x49, 0x89, 0xf6,                   /* mov r14, rsi */
	0x48, 0x89, 0xf8,                   /* mov rax, rdi */
	0x57,                               /* push rdi */
	0xe8, 46,   0,    0,    0,          /* call +64 (from 18) */
	0x58,                               /* pop rax */
	0xe8, 232,  1,    0,    0,          /* call +512 (from 24) */
	0x41, 0x5e, 0x41, 0x5d, 0x41, 0x5c, /* pop r14; pop r13; pop r12 */
	0xc3,
};

int main(int argc, char **argv)
{
	static int64_t url[8], req[4], resp[18], hmap[6];
	static unsigned char bk[2][NS_GO_BUCKET_SIZE] __attribute__((aligned(8)));
	typedef uint64_t fn(void *, uint64_t);
	unsigned char *m;
	long n;
	int hook;
	fn *f;
	struct timespec a, b;

	if (argc != 3 && argc != 4)
		return 2;
	hook = strcmp(argv[1], "hook") == 0;
	n = atol(argv[2]);
	m = mmap(NULL, 8192, PROT_READ | PROT_WRITE | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED)
		return 1;
	/* a Go answer: status 200, Request.URL.Host "127.0.0.1:8080" */
	url[NS_GO_URL_HOST / 8] = (int64_t)(uintptr_t) "127.0.0.1:8080";
	url[NS_GO_URL_HOST / 8 + 1] = 14;
	req[NS_GO_REQ_URL / 8] = (int64_t)(uintptr_t)url;
	resp[NS_GO_RESP_STATUS / 8] = 200;
	resp[NS_GO_RESP_REQUEST / 8] = (int64_t)(uintptr_t)req;
	if (argc == 4) {
		resp[NS_GO_RESP_STATUS / 8] = 503;
		resp[NS_GO_RESP_HEADER / 8] = (int64_t)(uintptr_t)hmap;
		headers(hmap, bk);
	}
	memcpy(m, prelude, sizeof(prelude));
	m[4000] = 0xc3;
	if (hook) {
		/* the entry's (its moved lea r12,[rsp+0], back to a ret) and the return's */
		if (ns_gohook_entry(m + 64, 400, (uint64_t)(uintptr_t)(m + 64), (uint64_t)(uintptr_t)&ring,
				    (const unsigned char *)"\x4c\x8d\xa4\x24\x00\x00\x00\x00", 8,
				    (uint64_t)(uintptr_t)(m + 4000)) < 0 ||
		    ns_gohook_tramp(m + 512, 1024, (uint64_t)(uintptr_t)&ring, (const unsigned char *)"\xc3", 1) < 0)
			return 1;
	} else {
		/* the bare function's: the lea, then back; the ret */
		memcpy(m + 64, "\x4c\x8d\xa4\x24\x00\x00\x00\x00\xc3", 9);
		m[512] = 0xc3;
	}
	f = (fn *)(void *)m;
	clock_gettime(CLOCK_MONOTONIC, &a);
	for (long i = 0; i < n; i++)
		f(resp, 0x7000);
	clock_gettime(CLOCK_MONOTONIC, &b);
	printf("ns_per_call %.2f\n",
	       n ? ((b.tv_sec - a.tv_sec) * 1e9 + (double)(b.tv_nsec - a.tv_nsec)) / (double)n : 0.0);
	return ring.head == (hook ? (uint64_t)n : 0) && (!hook || !n || ring.slot[0].ticks) &&
			(argc == 3 || !hook || !n || memcmp(ring.slot[0].ra, "120", 3) == 0)
		? 0
		: 1;
}

/* gohookbench.c -- what the Go hook adds to each answer a Go program's
 * net/http returns: the trampoline (tools/shimrun/gohook.c) run here as
 * machine code on a made-up *Response, against the bare epilogue it moves
 * (a ret), for make bench (section 11). The instructions per call come
 * from callgrind over this program (N calls less N = 0); the time from a
 * loop of N calls.
 *
 *   gohookbench hook|bare N     prints "ns_per_call X" */
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

int main(int argc, char **argv)
{
	static int64_t url[8], req[4], resp[18];
	typedef uint64_t fn(void *);
	unsigned char *m;
	long n;
	int hook;
	fn *f;
	struct timespec a, b;

	if (argc != 3)
		return 2;
	hook = strcmp(argv[1], "hook") == 0;
	n = atol(argv[2]);
	m = mmap(NULL, 4096, PROT_READ | PROT_WRITE | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED)
		return 1;
	/* a Go answer: status 200, Request.URL.Host "127.0.0.1:8080" */
	url[NS_GO_URL_HOST / 8] = (int64_t)(uintptr_t) "127.0.0.1:8080";
	url[NS_GO_URL_HOST / 8 + 1] = 14;
	req[NS_GO_REQ_URL / 8] = (int64_t)(uintptr_t)url;
	resp[NS_GO_RESP_STATUS / 8] = 200;
	resp[NS_GO_RESP_REQUEST / 8] = (int64_t)(uintptr_t)req;
	memcpy(m, "\x48\x89\xf8", 3); /* mov rax, rdi */
	if (hook) {
		if (ns_gohook_tramp(m + 3, 4093, (uint64_t)(uintptr_t)&ring, (const unsigned char *)"\xc3", 1) < 0)
			return 1;
	} else {
		m[3] = 0xc3;
	}
	f = (fn *)(void *)m;
	clock_gettime(CLOCK_MONOTONIC, &a);
	for (long i = 0; i < n; i++)
		f(resp);
	clock_gettime(CLOCK_MONOTONIC, &b);
	printf("ns_per_call %.2f\n",
	       n ? ((b.tv_sec - a.tv_sec) * 1e9 + (double)(b.tv_nsec - a.tv_nsec)) / (double)n : 0.0);
	return ring.head == (hook ? (uint64_t)n : 0) ? 0 : 1;
}

/* test_gohook.c -- the Go hook's trampoline, run here as machine code on
 * a made-up *Response (tools/shimrun/gohook.c), and its ring read back
 * (gostat.c); the instruction walker on the encodings it must know. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>

#include "../../tools/shimrun/gohook.h"
#include "../../tools/shimrun/gostat.h"
#include "../../tools/shimrun/x86len.h"

/* Go's layouts, as far as the trampoline reads them */
struct gostr {
	const char *p;
	int64_t n;
};
struct url {
	struct gostr scheme, opaque;
	void *user;
	struct gostr host;
};
struct request {
	struct gostr method;
	struct url *url;
};
struct goslice {
	struct gostr *p;
	int64_t n, cap;
};
/* a bucket of a map[string][]string, and the map (runtime/map.go) */
struct bucket {
	uint8_t top[8];
	struct gostr key[8];
	struct goslice val[8];
	struct bucket *overflow;
};
struct hmap {
	int64_t count;
	uint8_t flags, b;
	uint16_t noverflow;
	uint32_t hash0;
	struct bucket *buckets, *oldbuckets;
	uintptr_t nevacuate;
	void *extra;
};
struct response {
	char pad0[16];
	int64_t status;
	char pad1[56 - 24];
	struct hmap *header;
	char pad2[128 - 64];
	struct request *req;
	void *tls;
};

_Static_assert(offsetof(struct response, header) == NS_GO_RESP_HEADER, "Header");
_Static_assert(offsetof(struct hmap, b) == NS_GO_HMAP_B, "B");
_Static_assert(offsetof(struct hmap, buckets) == NS_GO_HMAP_BUCKETS, "buckets");
_Static_assert(offsetof(struct hmap, oldbuckets) == NS_GO_HMAP_OLDBUCKETS, "oldbuckets");
_Static_assert(offsetof(struct bucket, key) == NS_GO_BUCKET_KEYS, "keys");
_Static_assert(offsetof(struct bucket, val) == NS_GO_BUCKET_VALUES, "values");
_Static_assert(offsetof(struct bucket, overflow) == NS_GO_BUCKET_OVERFLOW, "overflow");
_Static_assert(sizeof(struct bucket) == NS_GO_BUCKET_SIZE, "a bucket");
_Static_assert(sizeof(struct ns_goslot) == 128, "a slot");

_Static_assert(offsetof(struct response, status) == NS_GO_RESP_STATUS, "StatusCode");
_Static_assert(offsetof(struct response, req) == NS_GO_RESP_REQUEST, "Request");
_Static_assert(offsetof(struct response, tls) == NS_GO_RESP_TLS, "TLS");
_Static_assert(offsetof(struct url, host) == NS_GO_URL_HOST, "Host");

static struct ns_goring ring;
typedef uint64_t hook_fn(struct response *r, uint64_t g);

/* A call from C into code written for Go's register ABI: r12-r14 kept
 * (C's callee-saved registers, which the trampolines may use), g into r14,
 * the answer into rax, then a call to the code at +64 (whose ret comes
 * back here). */
static const unsigned char prelude[] = {
	0x41, 0x54, 0x41, 0x55, 0x41, 0x56, /* push r12; push r13; push r14 */
	0x49, 0x89, 0xf6,                   /* mov r14, rsi */
	0x48, 0x89, 0xf8,                   /* mov rax, rdi */
	0xe8, 47,   0,    0,    0,          /* call +64 */
	0x41, 0x5e, 0x41, 0x5d, 0x41, 0x5c, /* pop r14; pop r13; pop r12 */
	0xc3,
};

static unsigned char *page(void)
{
	unsigned char *m = mmap(NULL, 4096, PROT_READ | PROT_WRITE | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	cr_assert(m != MAP_FAILED);
	memcpy(m, prelude, sizeof(prelude));
	return m;
}

/* the return site's trampoline, whose moved epilogue is a bare ret */
static hook_fn *make_hook(void)
{
	unsigned char *m = page();

	cr_assert(ns_gohook_tramp(m + 64, 4096 - 64, (uint64_t)(uintptr_t)&ring, (const unsigned char *)"\xc3", 1) > 0);
	return (hook_fn *)(void *)m;
}

/* the entry's trampoline: its moved instruction lea r12,[rsp+0], then
 * back to a ret */
static hook_fn *make_entry(void)
{
	unsigned char *m = page();

	m[4000] = 0xc3;
	cr_assert(ns_gohook_entry(m + 64, 512, (uint64_t)(uintptr_t)(m + 64), (uint64_t)(uintptr_t)&ring,
				  (const unsigned char *)"\x4c\x8d\xa4\x24\x00\x00\x00\x00", 8,
				  (uint64_t)(uintptr_t)(m + 4000)) > 0);
	return (hook_fn *)(void *)m;
}

struct got {
	unsigned n;
	pid_t tgid;
	struct ns_goslot last;
};

static void took(void *ctx, pid_t tgid, const struct ns_goslot *a)
{
	struct got *g = ctx;

	g->n++;
	g->tgid = tgid;
	g->last = *a;
}

Test(gohook, a_response_s_status_tls_and_host_land_in_the_ring_and_rax_is_kept)
{
	hook_fn *hook = make_hook();
	struct url u = { .host = { "127.0.0.1:8443", 14 } };
	struct request q = { .url = &u };
	struct response r = { .status = 503, .req = &q, .tls = &u };
	struct ns_gostat s;
	struct got g = { 0 };
	struct ns_dest d;

	memset(&ring, 0, sizeof(ring));
	cr_assert_eq(hook(&r, 0x1000), (uint64_t)(uintptr_t)&r, "RAX, the result, is the program's");
	cr_assert_eq(ring.head, 1);
	cr_assert_eq(ring.slot[0].seq, 1);
	cr_assert_eq(ring.slot[0].status, 503);
	cr_assert_eq(ring.slot[0].flags, 1 | NS_GOSLOT_HDRS | 14 << 8,
		     "TLS, a 503 whose headers (none) were read, the host");
	cr_assert(memcmp(ring.slot[0].host, "127.0.0.1:8443", 14) == 0);
	/* read back as shimrun reads it */
	memset(&s, 0, sizeof(s));
	s.n = 1;
	s.p[0].ring = &ring;
	s.p[0].hooked = 1;
	s.p[0].tgid = 42;
	ns_gostat_drain(&s, took, &g, 0);
	cr_assert_eq(g.n, 1);
	cr_assert_eq(g.tgid, 42);
	cr_assert_eq(ns_gostat_dest(&g.last, &d), 0);
	cr_assert_eq(d.port, 8443);
	cr_assert_eq(d.family, AF_INET);
	ns_gostat_drain(&s, took, &g, 0);
	cr_assert_eq(g.n, 1, "each answer read once");
}

Test(gohook, a_nil_response_writes_nothing_a_long_host_is_cut_a_missing_request_has_no_host)
{
	hook_fn *hook = make_hook();
	char longhost[100];
	struct url u;
	struct request q = { .url = &u };
	struct response r = { .status = 200, .req = &q };
	struct ns_goslot *sl;

	memset(&ring, 0, sizeof(ring));
	cr_assert_eq(hook(NULL, 0x1000), 0);
	cr_assert_eq(ring.head, 0, "an error's nil *Response: nothing");
	memset(longhost, 'a', sizeof(longhost));
	memset(&u, 0, sizeof(u));
	u.host.p = longhost;
	u.host.n = sizeof(longhost);
	hook(&r, 0x1000);
	sl = &ring.slot[0];
	cr_assert_eq(sl->seq, 1);
	cr_assert_eq((sl->flags >> 8) & 0xff, NS_GOHOST_MAX);
	cr_assert_eq(sl->flags & 1, 0, "no TLS");
	cr_assert_eq(sl->host[NS_GOHOST_MAX - 1], 'a');
	cr_assert_eq(sl->host[NS_GOHOST_MAX], 0, "nothing past the 63 bytes");
	r.req = NULL;
	r.status = 404;
	hook(&r, 0x1000);
	cr_assert_eq(ring.slot[1].seq, 2);
	cr_assert_eq(ring.slot[1].status, 404);
	cr_assert_eq(ring.slot[1].flags, 0);
}

Test(gohook, the_time_from_a_goroutines_entry_to_its_answer_is_its_own)
{
	hook_fn *entry = make_entry(), *hook = make_hook();
	struct url u = { .host = { "127.0.0.1:80", 12 } };
	struct request q = { .url = &u };
	struct response r = { .status = 200, .req = &q };
	uint64_t t0;

	memset(&ring, 0, sizeof(ring));
	cr_assert_eq(entry((struct response *)0x1234, 0x7000), 0x1234, "RAX, the receiver, is kept");
	t0 = __builtin_ia32_rdtsc();
	while (__builtin_ia32_rdtsc() - t0 < 1000000)
		;
	hook(&r, 0x7000);
	cr_assert_geq(ring.slot[0].ticks, 1000000, "at least the spin between entry and return");
	cr_assert_lt(ring.slot[0].ticks, 1000000000ull);
	hook(&r, 0x7000);
	cr_assert_eq(ring.slot[1].ticks, 0, "an entry is taken once");
	entry(&r, 0x7000);
	hook(&r, 0x7040); /* another goroutine (its g hashes to another entry) */
	cr_assert_eq(ring.slot[2].ticks, 0, "another goroutine's time is not this one's");
}

/* A header map of 2^b buckets, each with chain - 1 overflow buckets,
 * holding n keys spread over them; Retry-After (value ra, if not NULL) put
 * at the last cell of the last bucket's chain. */
static struct bucket pool[300];
static struct gostr vals[300];

static struct hmap *headers(struct hmap *h, int b, int chain, const char *key, const char *ra)
{
	int nb = 1 << b, used = 0;
	static const char *const names[] = { "Content-Type", "Content-Length", "Date",
					     "Retry-Aftex",  "Server",         "Retry-After-X" };

	memset(h, 0, sizeof(*h));
	memset(pool, 0, sizeof(pool));
	cr_assert(nb * chain <= 300);
	h->b = (uint8_t)b;
	h->buckets = pool;
	used = nb;
	for (int i = 0; i < nb; i++) {
		struct bucket *k = &pool[i];

		for (int c = 1; c < chain; c++) {
			k->overflow = &pool[used++];
			k = k->overflow;
		}
	}
	/* a few other keys, in the first bucket and its first cells */
	for (int i = 0; i < 6; i++) {
		pool[0].top[i] = (uint8_t)(NS_GO_TOPHASH_MIN + i);
		pool[0].key[i] = (struct gostr){ names[i], (int64_t)strlen(names[i]) };
		vals[i] = (struct gostr){ "9", 1 };
		pool[0].val[i] = (struct goslice){ &vals[i], 1, 1 };
		h->count++;
	}
	if (key) {
		struct bucket *k = &pool[nb - 1];

		while (k->overflow)
			k = k->overflow;
		k->top[7] = 200;
		k->key[7] = (struct gostr){ key, (int64_t)strlen(key) };
		vals[299] = (struct gostr){ ra, ra ? (int64_t)strlen(ra) : 0 };
		k->val[7] = (struct goslice){ &vals[299], ra ? 1 : 0, 1 };
		h->count++;
	}
	return h;
}

static struct ns_goslot *answer(hook_fn *hook, int64_t status, struct hmap *h)
{
	struct url u = { .host = { "127.0.0.1:80", 12 } };
	struct request q = { .url = &u };
	struct response r = { .status = status, .req = &q, .header = h };

	memset(&ring, 0, sizeof(ring));
	cr_assert_eq(hook(&r, 0x1000), (uint64_t)(uintptr_t)&r, "RAX, the result, is the program's");
	cr_assert_eq(ring.slot[0].seq, 1);
	return &ring.slot[0];
}

Test(gohook, a_429_s_or_503_s_retry_after_is_read_from_its_header_map_wherever_it_sits)
{
	hook_fn *hook = make_hook();
	struct hmap h;
	struct ns_goslot *sl;
	char ra[NS_GORA_MAX + 1];
	static const char date[] = "Sun, 06 Dec 2026 18:54:45 GMT";

	sl = answer(hook, 503, headers(&h, 0, 1, "Retry-After", "7"));
	cr_assert_eq(sl->flags, NS_GOSLOT_HDRS | 12 << 8 | 1 << 16);
	cr_assert_eq(ns_gostat_retry_after(sl, ra), 1);
	cr_assert_str_eq(ra, "7");
	/* the last bucket of 32, at the end of an overflow chain of 8 */
	sl = answer(hook, 429, headers(&h, NS_GO_MAP_BMAX, NS_GO_MAP_CHAIN, "Retry-After", date));
	cr_assert_eq(sl->flags, NS_GOSLOT_HDRS | 12 << 8 | 29 << 16);
	cr_assert_eq(ns_gostat_retry_after(sl, ra), 1);
	cr_assert_str_eq(ra, date);
	/* a value longer than the slot keeps: its length, 32 of its bytes */
	sl = answer(hook, 429, headers(&h, 1, 2, "Retry-After", "1234567890123456789012345678901234567890"));
	cr_assert_eq((sl->flags >> 16) & 0xff, 40);
	cr_assert_eq(ns_gostat_retry_after(sl, ra), 1);
	cr_assert_str_eq(ra, "12345678901234567890123456789012");
	/* a key with no value */
	sl = answer(hook, 503, headers(&h, 0, 1, "Retry-After", NULL));
	cr_assert_eq(sl->flags, NS_GOSLOT_HDRS | 12 << 8);
	cr_assert_eq(ns_gostat_retry_after(sl, ra), 1);
	cr_assert_str_eq(ra, "");
}

Test(gohook, a_map_without_retry_after_is_read_and_says_none_other_statuses_are_not_walked)
{
	hook_fn *hook = make_hook();
	struct hmap h;
	struct ns_goslot *sl;
	char ra[NS_GORA_MAX + 1];

	/* only keys like it (Retry-Aftex, Retry-After-X) */
	sl = answer(hook, 429, headers(&h, 3, 2, NULL, NULL));
	cr_assert_eq(sl->flags, NS_GOSLOT_HDRS | 12 << 8);
	cr_assert_eq(ns_gostat_retry_after(sl, ra), 1);
	cr_assert_str_eq(ra, "");
	/* a cell emptied (its tophash below 5) keeps its old key: not read */
	headers(&h, 0, 1, "Retry-After", "7");
	pool[0].top[7] = 1;
	sl = answer(hook, 503, &h);
	cr_assert_eq(sl->flags, NS_GOSLOT_HDRS | 12 << 8);
	/* no header map at all; an empty one */
	sl = answer(hook, 503, NULL);
	cr_assert_eq(sl->flags, NS_GOSLOT_HDRS | 12 << 8);
	headers(&h, 0, 1, NULL, NULL);
	h.count = 0;
	h.buckets = NULL;
	sl = answer(hook, 503, &h);
	cr_assert_eq(sl->flags, NS_GOSLOT_HDRS | 12 << 8);
	/* a 200 or a 500 with a Retry-After: its headers are not walked */
	sl = answer(hook, 200, headers(&h, 0, 1, "Retry-After", "7"));
	cr_assert_eq(sl->flags, 12 << 8);
	cr_assert_eq(ns_gostat_retry_after(sl, ra), 1, "nothing to read");
	sl = answer(hook, 500, &h);
	cr_assert_eq(sl->flags, 12 << 8);
}

Test(gohook, a_map_that_grows_or_is_larger_than_any_header_block_is_left_unread)
{
	hook_fn *hook = make_hook();
	struct hmap h;
	struct ns_goslot *sl;
	char ra[NS_GORA_MAX + 1];

	headers(&h, 2, 1, "Retry-After", "7");
	h.oldbuckets = &pool[299];
	sl = answer(hook, 503, &h);
	cr_assert_eq(sl->flags, 12 << 8, "growing: its old buckets are not read");
	cr_assert_eq(ns_gostat_retry_after(sl, ra), 0, "said unread");
	sl = answer(hook, 429, headers(&h, NS_GO_MAP_BMAX, NS_GO_MAP_CHAIN + 1, "Retry-After", "7"));
	cr_assert_eq(sl->flags, 12 << 8, "a chain of 9 buckets");
	headers(&h, 0, 1, "Retry-After", "7");
	h.b = NS_GO_MAP_BMAX + 1;
	sl = answer(hook, 429, &h);
	cr_assert_eq(sl->flags, 12 << 8, "64 buckets");
	headers(&h, 0, 1, "Retry-After", "7");
	h.buckets = NULL;
	sl = answer(hook, 429, &h);
	cr_assert_eq(sl->flags, 12 << 8, "keys and no buckets");
}

Test(gohook, answers_written_past_a_whole_ring_before_a_drain_are_counted_lost_the_rest_read_in_order)
{
	hook_fn *hook = make_hook();
	struct url u = { .host = { "127.0.0.1:80", 12 } };
	struct request q = { .url = &u };
	struct response r = { .status = 200, .req = &q };
	struct ns_gostat s;
	struct got g = { 0 };

	memset(&ring, 0, sizeof(ring));
	memset(&s, 0, sizeof(s));
	s.n = 1;
	s.p[0].ring = &ring;
	s.p[0].hooked = 1;
	for (unsigned i = 0; i < NS_GORING_SLOTS + 10; i++) {
		r.status = 100 + i % 400;
		hook(&r, 0x1000);
	}
	ns_gostat_drain(&s, took, &g, 0);
	cr_assert_eq(s.lost, 10);
	cr_assert_eq(g.n, NS_GORING_SLOTS);
	cr_assert_eq(g.last.status, 100 + (NS_GORING_SLOTS + 9) % 400, "the last written is the last read");
}

Test(gohook, a_host_is_an_address_a_bracketed_v6_or_a_name_of_etc_hosts_else_not_counted)
{
	struct ns_goslot a;
	struct ns_dest d;

	memset(&a, 0, sizeof(a));
	strcpy(a.host, "[::1]:9000");
	a.flags = 10 << 8;
	cr_assert_eq(ns_gostat_dest(&a, &d), 0);
	cr_assert_eq(d.family, AF_INET6);
	cr_assert_eq(d.port, 9000);
	strcpy(a.host, "127.0.0.1");
	a.flags = 1 | 9 << 8; /* TLS: 443 */
	cr_assert_eq(ns_gostat_dest(&a, &d), 0);
	cr_assert_eq(d.port, 443);
	strcpy(a.host, "localhost:81");
	a.flags = 12 << 8;
	cr_assert_eq(ns_gostat_dest(&a, &d), 0);
	cr_assert_eq(d.port, 81);
	strcpy(a.host, "no-such-name.invalid:81");
	a.flags = 23 << 8;
	cr_assert_eq(ns_gostat_dest(&a, &d), 1);
	strcpy(a.host, "1.2.3.4:99999");
	a.flags = 13 << 8;
	cr_assert_eq(ns_gostat_dest(&a, &d), -1);
}

Test(gohook, the_walker_knows_go_s_encodings_and_says_what_it_does_not)
{
	static const struct {
		const char *b;
		int len, branch;
	} cases[] = {
		{ "\x4c\x8d\xa4\x24\x60\xfe\xff\xff", 8, NS_X86_NONE }, /* lea r12,[rsp-0x1a0] */
		{ "\x0f\x86\xf9\x0c\x00\x00", 6, NS_X86_JCC },          /* jbe rel32 */
		{ "\x48\x81\xc4\x20\x02\x00\x00", 7, NS_X86_NONE },     /* add rsp,0x220 */
		{ "\xc3", 1, NS_X86_RET },
		{ "\xe8\x00\x00\x00\x00", 5, NS_X86_CALL },
		{ "\xc5\xf8\x77", 3, NS_X86_NONE },                              /* vzeroupper: no ModRM */
		{ "\xc5\xfe\x6f\x06", 4, NS_X86_NONE },                          /* vmovdqu ymm0,[rsi] */
		{ "\x66\x0f\x3a\x0f\xc1\x08", 6, NS_X86_NONE },                  /* palignr: imm8 */
		{ "\x48\xb8\x01\x02\x03\x04\x05\x06\x07\x08", 10, NS_X86_NONE }, /* mov rax, imm64 */
		{ "\xff\xe1", 2, NS_X86_INDIRECT },                              /* jmp rcx */
		{ "\xf7\x04\x24\x01\x00\x00\x00", 7, NS_X86_NONE },              /* test dword [rsp], 1 */
	};
	struct ns_x86 x;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		cr_assert_eq(ns_x86_insn((const unsigned char *)cases[i].b, 15, &x), cases[i].len, "case %zu", i);
		cr_assert_eq(x.branch, cases[i].branch, "case %zu", i);
	}
	cr_assert_eq(ns_x86_insn((const unsigned char *)"\x62\xf1\x7d\x48\x6f\x06", 15, &x), -1, "EVEX: refused");
	cr_assert_eq(ns_x86_insn((const unsigned char *)"\x48\x81\xc4\x20", 4, &x), -1, "cut short: refused");
}

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
struct response {
	char pad0[16];
	int64_t status;
	char pad1[128 - 24];
	struct request *req;
	void *tls;
};

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
	cr_assert_eq(ring.slot[0].flags, 1 | 14 << 8);
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

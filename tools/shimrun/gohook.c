/* gohook.c -- a Go program's answers read where net/http returns them
 * (gohook.h): the trampolines, and the one stop at the program's exec that
 * puts them in place.
 *
 * At a return of roundTrip, Go's register ABI holds the results in RAX
 * (*Response), RBX and RCX (the error); R14 is g, X15 zero, RSP and RBP the
 * frame; every other register is dead (a Go function's caller keeps
 * nothing in them). So a trampoline uses RDX, RSI, RDI and R8-R11, and the
 * flags, and nothing else; it pushes nothing (the goroutine's stack is not
 * touched). It is not a Go function: the runtime never preempts there (no
 * safe point) and a profiler's traceback of it stops there. */
#include "gohook.h"

#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif

struct emit {
	unsigned char *b;
	size_t n, cap;
	int bad;
};

static void put(struct emit *e, const void *p, size_t n)
{
	if (e->n + n > e->cap) {
		e->bad = 1;
		return;
	}
	memcpy(e->b + e->n, p, n);
	e->n += n;
}

#define PUT(e, ...)                                                \
	do {                                                       \
		static const unsigned char b_[] = { __VA_ARGS__ }; \
		put(e, b_, sizeof(b_));                            \
	} while (0)

/* a jcc rel32 (0f 8x) to be aimed later: its place */
static size_t jcc32(struct emit *e, unsigned char cc)
{
	unsigned char b[6] = { 0x0f, cc, 0, 0, 0, 0 };

	put(e, b, 6);
	return e->n;
}

static void aim32(struct emit *e, size_t after, size_t to)
{
	int32_t rel = (int32_t)((int64_t)to - (int64_t)after);

	if (!e->bad)
		memcpy(e->b + after - 4, &rel, 4);
}

/* a jmp rel32 to be aimed later: its place */
static size_t jmp32(struct emit *e)
{
	PUT(e, 0xe9, 0, 0, 0, 0);
	return e->n;
}

/* copy r10 bytes from [r8] to [rsi+at] (r10, r11 clobbered) */
static void copy_out(struct emit *e, unsigned char at)
{
	PUT(e, 0x4d, 0x85, 0xd2);       /* copy: test r10, r10 */
	PUT(e, 0x74, 0x0e);             /* jz done */
	PUT(e, 0x49, 0xff, 0xca);       /* dec r10 */
	PUT(e, 0x47, 0x8a, 0x1c, 0x10); /* mov r11b, [r8+r10] */
	PUT(e, 0x46, 0x88, 0x5c, 0x16); /* mov [rsi+r10+at], r11b */
	put(e, &at, 1);
	PUT(e, 0xeb, 0xed); /* jmp copy */
} /* done: */

/* A 429 or 503 (RAX: *Response; RSI: its slot; R9: its flags, kept in
 * R9): its header map walked for "Retry-After" (Go's canonical key), the
 * first value copied to the slot, bit 1 set when the whole map was read.
 * Every pointer followed is the map's own, of a map no one writes (the
 * answer was handed to this goroutine whole); a map that grows, or is
 * larger than any header block, is left unread. RDX, R8 and R10-R13 are
 * clobbered. */
static void retry_after(struct emit *e)
{
	size_t walk, flags[6], looked[3], bucket, chain, slot, next[6], nbucket, j;

	PUT(e, 0x4c, 0x8b, 0x40, NS_GO_RESP_STATUS);      /* mov r8, [rax+StatusCode] */
	PUT(e, 0x49, 0x81, 0xf8, 0xad, 0x01, 0x00, 0x00); /* cmp r8, 429 */
	walk = jcc32(e, 0x84);                            /* je walk */
	PUT(e, 0x49, 0x81, 0xf8, 0xf7, 0x01, 0x00, 0x00); /* cmp r8, 503 */
	flags[0] = jcc32(e, 0x85);                        /* jne flags */
	aim32(e, walk, e->n);
	PUT(e, 0x48, 0x8b, 0x50, NS_GO_RESP_HEADER);           /* walk: mov rdx, [rax+Header] */
	PUT(e, 0x48, 0x85, 0xd2);                              /* test rdx, rdx */
	looked[0] = jcc32(e, 0x84);                            /* jz looked: no headers */
	PUT(e, 0x48, 0x83, 0x7a, NS_GO_HMAP_COUNT, 0x00);      /* cmp qword [rdx+count], 0 */
	looked[1] = jcc32(e, 0x84);                            /* je looked */
	PUT(e, 0x48, 0x83, 0x7a, NS_GO_HMAP_OLDBUCKETS, 0x00); /* cmp qword [rdx+oldbuckets], 0 */
	flags[1] = jcc32(e, 0x85);                             /* jne flags: it grows */
	PUT(e, 0x44, 0x0f, 0xb6, 0x52, NS_GO_HMAP_B);          /* movzx r10d, byte [rdx+B] */
	PUT(e, 0x41, 0x83, 0xfa, NS_GO_MAP_BMAX);              /* cmp r10d, BMAX */
	flags[2] = jcc32(e, 0x87);                             /* ja flags */
	PUT(e, 0x45, 0x31, 0xe4);                              /* xor r12d, r12d */
	PUT(e, 0x4d, 0x0f, 0xab, 0xd4);                        /* bts r12, r10: 2^B buckets */
	PUT(e, 0x4c, 0x8b, 0x6a, NS_GO_HMAP_BUCKETS);          /* mov r13, [rdx+buckets] */
	PUT(e, 0x4d, 0x85, 0xed);                              /* test r13, r13 */
	flags[3] = jcc32(e, 0x84);                             /* jz flags */
	bucket = e->n;
	PUT(e, 0x4c, 0x89, 0xea);                     /* bucket: mov rdx, r13 */
	PUT(e, 0x41, 0xba, NS_GO_MAP_CHAIN, 0, 0, 0); /* mov r10d, CHAIN */
	chain = e->n;
	PUT(e, 0x45, 0x31, 0xdb); /* chain: xor r11d, r11d */
	slot = e->n;
	PUT(e, 0x42, 0x80, 0x3c, 0x1a, NS_GO_TOPHASH_MIN);         /* slot: cmp byte [rdx+r11], 5 */
	next[0] = jcc32(e, 0x82);                                  /* jb next: empty or moved */
	PUT(e, 0x4d, 0x89, 0xd8);                                  /* mov r8, r11 */
	PUT(e, 0x49, 0xc1, 0xe0, 0x04);                            /* shl r8, 4 */
	PUT(e, 0x4a, 0x83, 0x7c, 0x02, NS_GO_BUCKET_KEYS + 8, 11); /* cmp qword [rdx+r8+key.len], 11 */
	next[1] = jcc32(e, 0x85);                                  /* jne next */
	PUT(e, 0x4e, 0x8b, 0x44, 0x02, NS_GO_BUCKET_KEYS);         /* mov r8, [rdx+r8+key.ptr] */
	PUT(e, 0x41, 0x81, 0x38, 'R', 'e', 't', 'r');              /* cmp dword [r8], "Retr" */
	next[2] = jcc32(e, 0x85);
	PUT(e, 0x41, 0x81, 0x78, 0x04, 'y', '-', 'A', 'f'); /* cmp dword [r8+4], "y-Af" */
	next[3] = jcc32(e, 0x85);
	PUT(e, 0x66, 0x41, 0x81, 0x78, 0x08, 't', 'e'); /* cmp word [r8+8], "te" */
	next[4] = jcc32(e, 0x85);
	PUT(e, 0x41, 0x80, 0x78, 0x0a, 'r'); /* cmp byte [r8+10], "r" */
	next[5] = jcc32(e, 0x85);
	/* found: its []string (24 bytes a value) */
	PUT(e, 0x4f, 0x8d, 0x04, 0x5b);                                   /* lea r8, [r11+r11*2] */
	PUT(e, 0x4e, 0x8b, 0x94, 0xc2, NS_GO_BUCKET_VALUES + 8, 0, 0, 0); /* mov r10, [rdx+r8*8+values.len] */
	PUT(e, 0x4d, 0x85, 0xd2);                                         /* test r10, r10 */
	looked[2] = jcc32(e, 0x84);                                       /* jz looked */
	PUT(e, 0x4e, 0x8b, 0x84, 0xc2, NS_GO_BUCKET_VALUES, 0, 0, 0);     /* mov r8, [rdx+r8*8+values.ptr] */
	PUT(e, 0x4d, 0x8b, 0x50, 0x08);                                   /* mov r10, [r8+8]: the string's length */
	PUT(e, 0x4d, 0x8b, 0x00);                                         /* mov r8, [r8]: its bytes */
	PUT(e, 0x49, 0x83, 0xc9, NS_GOSLOT_HDRS);                         /* or r9, HDRS */
	PUT(e, 0x49, 0x81, 0xfa, 0xff, 0x00, 0x00, 0x00);                 /* cmp r10, 255 */
	PUT(e, 0x76, 0x06);                                               /* jbe +6 */
	PUT(e, 0x41, 0xba, 0xff, 0x00, 0x00, 0x00);                       /* mov r10d, 255 */
	PUT(e, 0x4d, 0x89, 0xd3);                                         /* mov r11, r10 */
	PUT(e, 0x49, 0xc1, 0xe3, 0x10);                                   /* shl r11, 16 */
	PUT(e, 0x4d, 0x09, 0xd9);                                         /* or r9, r11 */
	PUT(e, 0x49, 0x83, 0xfa, NS_GORA_MAX);                            /* cmp r10, 32 */
	PUT(e, 0x76, 0x06);                                               /* jbe +6 */
	PUT(e, 0x41, 0xba, NS_GORA_MAX, 0, 0, 0);                         /* mov r10d, 32 */
	copy_out(e, offsetof(struct ns_goslot, ra));
	flags[4] = jmp32(e); /* jmp flags */
	for (j = 0; j < 6; j++)
		aim32(e, next[j], e->n);
	PUT(e, 0x49, 0xff, 0xc3);       /* next: inc r11 */
	PUT(e, 0x49, 0x83, 0xfb, 0x08); /* cmp r11, 8 */
	aim32(e, jcc32(e, 0x82), slot); /* jb slot */
	PUT(e, 0x48, 0x8b, 0x92);       /* mov rdx, [rdx+overflow] */
	PUT(e, NS_GO_BUCKET_OVERFLOW & 0xff, NS_GO_BUCKET_OVERFLOW >> 8, 0, 0);
	PUT(e, 0x48, 0x85, 0xd2);        /* test rdx, rdx */
	nbucket = jcc32(e, 0x84);        /* jz nextbucket */
	PUT(e, 0x49, 0xff, 0xca);        /* dec r10 */
	aim32(e, jcc32(e, 0x85), chain); /* jnz chain */
	flags[5] = jmp32(e);             /* jmp flags: a chain too long */
	aim32(e, nbucket, e->n);
	PUT(e, 0x49, 0x81, 0xc5, NS_GO_BUCKET_SIZE & 0xff, NS_GO_BUCKET_SIZE >> 8, 0,
	    0);                           /* nextbucket: add r13, size */
	PUT(e, 0x49, 0xff, 0xcc);         /* dec r12 */
	aim32(e, jcc32(e, 0x85), bucket); /* jnz bucket */
	for (j = 0; j < 3; j++)
		aim32(e, looked[j], e->n);
	PUT(e, 0x49, 0x83, 0xc9, NS_GOSLOT_HDRS); /* looked: or r9, HDRS */
	for (j = 0; j < 6; j++)
		aim32(e, flags[j], e->n); /* flags: */
}

/* rdx = the TSC; rax = the offset of g's (r14's) entry in the ring's
 * starts (rax and rdx clobbered) */
static void tsc_slot(struct emit *e)
{
	PUT(e, 0x0f, 0x31);                                                   /* rdtsc */
	PUT(e, 0x48, 0xc1, 0xe2, 0x20);                                       /* shl rdx, 32 */
	PUT(e, 0x48, 0x09, 0xc2);                                             /* or rdx, rax */
	PUT(e, 0x4c, 0x89, 0xf0);                                             /* mov rax, r14 */
	PUT(e, 0x48, 0xc1, 0xe8, 0x06);                                       /* shr rax, 6 */
	PUT(e, 0x25, (NS_GOSTARTS - 1) & 0xff, (NS_GOSTARTS - 1) >> 8, 0, 0); /* and eax, N-1 */
	PUT(e, 0x48, 0xc1, 0xe0, 0x04);                                       /* shl rax, 4 */
}

int ns_gohook_entry(unsigned char *out, size_t cap, uint64_t out_at, uint64_t ring_at, const unsigned char *first,
		    size_t len, uint64_t back_at)
{
	struct emit e = { out, 0, cap, 0 };
	uint64_t starts = ring_at + offsetof(struct ns_goring, start);
	unsigned char imm[8], j[5] = { 0xe9 };
	int64_t rel;

	/* at a Go function's entry RAX and RBX hold roundTrip's arguments;
	 * RDX (no closure: a method), R12 and R13 are free */
	PUT(&e, 0x49, 0x89, 0xc5); /* mov r13, rax */
	tsc_slot(&e);
	PUT(&e, 0x49, 0xbc); /* mov r12, starts */
	memcpy(imm, &starts, 8);
	put(&e, imm, 8);
	PUT(&e, 0x49, 0x89, 0x54, 0x04, 0x08); /* mov [r12+rax+8], rdx: when */
	PUT(&e, 0x4d, 0x89, 0x34, 0x04);       /* mov [r12+rax], r14: whose */
	PUT(&e, 0x4c, 0x89, 0xe8);             /* mov rax, r13 */
	put(&e, first, len);                   /* the moved first instruction (lea r12, ...) */
	rel = (int64_t)back_at - (int64_t)(out_at + e.n + 5);
	if (rel != (int32_t)rel)
		return -1;
	memcpy(j + 1, &(int32_t){ (int32_t)rel }, 4);
	put(&e, j, 5); /* jmp back */
	return e.bad ? -1 : (int)e.n;
}

int ns_gohook_tramp(unsigned char *out, size_t cap, uint64_t ring_at, const unsigned char *ep, size_t eplen)
{
	struct emit e = { out, 0, cap, 0 };
	size_t j_out, j_noreq, j_nourl, nohost;
	unsigned char imm[8];
	uint64_t starts = ring_at + offsetof(struct ns_goring, start);

	PUT(&e, 0x48, 0x85, 0xc0); /* test rax, rax */
	j_out = jcc32(&e, 0x84);   /* jz out: no answer (an error: counted at the connection) */
	/* the time since this goroutine entered roundTrip (r11; 0: not known) */
	PUT(&e, 0x49, 0x89, 0xc4); /* mov r12, rax */
	tsc_slot(&e);              /* rdx = TSC, rax = this g's entry's offset */
	PUT(&e, 0x49, 0xbd);       /* mov r13, starts */
	memcpy(imm, &starts, 8);
	put(&e, imm, 8);
	PUT(&e, 0x45, 0x31, 0xdb);                         /* xor r11d, r11d */
	PUT(&e, 0x4d, 0x39, 0x74, 0x05, 0x00);             /* cmp [r13+rax], r14 */
	PUT(&e, 0x75, 0x11);                               /* jne +17 */
	PUT(&e, 0x49, 0x89, 0xd3);                         /* mov r11, rdx */
	PUT(&e, 0x4d, 0x2b, 0x5c, 0x05, 0x08);             /* sub r11, [r13+rax+8] */
	PUT(&e, 0x49, 0xc7, 0x44, 0x05, 0x00, 0, 0, 0, 0); /* mov qword [r13+rax], 0: taken */
	PUT(&e, 0x4c, 0x89, 0xe0);                         /* mov rax, r12 */
	PUT(&e, 0x48, 0xba);                               /* mov rdx, ring */
	memcpy(imm, &ring_at, 8);
	put(&e, imm, 8);
	PUT(&e, 0xbf, 0x01, 0x00, 0x00, 0x00);       /* mov edi, 1 */
	PUT(&e, 0xf0, 0x48, 0x0f, 0xc1, 0x7a, 0x08); /* lock xadd [rdx+8], rdi: rdi = the slot's number */
	PUT(&e, 0x48, 0x89, 0xfe);                   /* mov rsi, rdi */
	PUT(&e, 0x81, 0xe6, (NS_GORING_SLOTS - 1) & 0xff, (NS_GORING_SLOTS - 1) >> 8, 0x00, 0x00); /* and esi, N-1 */
	PUT(&e, 0x48, 0xc1, 0xe6, 0x07);                              /* shl rsi, 7 (128 bytes a slot) */
	PUT(&e, 0x48, 0x8d, 0x74, 0x32, 0x40);                        /* lea rsi, [rdx+rsi+64] */
	PUT(&e, 0x4c, 0x89, 0x5e, offsetof(struct ns_goslot, ticks)); /* mov [rsi+ticks], r11 */
	PUT(&e, 0x4c, 0x8b, 0x40, NS_GO_RESP_STATUS);                 /* mov r8, [rax+StatusCode] */
	PUT(&e, 0x4c, 0x89, 0x46, 0x08);                              /* mov [rsi+8], r8 */
	PUT(&e, 0x45, 0x31, 0xc9);                                    /* xor r9d, r9d */
	PUT(&e, 0x48, 0x83, 0xb8, NS_GO_RESP_TLS, 0, 0, 0, 0x00);     /* cmp qword [rax+TLS], 0 */
	PUT(&e, 0x41, 0x0f, 0x95, 0xc1);                              /* setne r9b */
	PUT(&e, 0x4c, 0x8b, 0x80, NS_GO_RESP_REQUEST, 0, 0, 0);       /* mov r8, [rax+Request] */
	PUT(&e, 0x4d, 0x85, 0xc0);                                    /* test r8, r8 */
	j_noreq = jcc32(&e, 0x84);                                    /* jz nohost */
	PUT(&e, 0x4d, 0x8b, 0x40, NS_GO_REQ_URL);                     /* mov r8, [r8+URL] */
	PUT(&e, 0x4d, 0x85, 0xc0);                                    /* test r8, r8 */
	j_nourl = jcc32(&e, 0x84);                                    /* jz nohost */
	PUT(&e, 0x4d, 0x8b, 0x50, NS_GO_URL_HOST + 8);                /* mov r10, [r8+Host.len] */
	PUT(&e, 0x4d, 0x8b, 0x40, NS_GO_URL_HOST);                    /* mov r8, [r8+Host.ptr] */
	PUT(&e, 0x49, 0x83, 0xfa, NS_GOHOST_MAX);                     /* cmp r10, 63 */
	PUT(&e, 0x76, 0x06);                                          /* jbe +6 */
	PUT(&e, 0x41, 0xba, NS_GOHOST_MAX, 0, 0, 0);                  /* mov r10d, 63 */
	PUT(&e, 0x4d, 0x89, 0xd3);                                    /* mov r11, r10 */
	PUT(&e, 0x49, 0xc1, 0xe3, 0x08);                              /* shl r11, 8 */
	PUT(&e, 0x4d, 0x09, 0xd9);                                    /* or r9, r11 */
	copy_out(&e, offsetof(struct ns_goslot, host));
	nohost = e.n;
	retry_after(&e);                 /* nohost: a 429's or 503's Retry-After */
	PUT(&e, 0x4c, 0x89, 0x4e, 0x10); /* mov [rsi+16], r9: the flags */
	PUT(&e, 0x48, 0xff, 0xc7);       /* inc rdi */
	PUT(&e, 0x48, 0x89, 0x3e);       /* mov [rsi], rdi: the slot is whole (x86 keeps stores in order) */
	aim32(&e, j_noreq, nohost);
	aim32(&e, j_nourl, nohost);
	aim32(&e, j_out, e.n);
	put(&e, ep, eplen); /* out: the epilogue, as it was */
	return e.bad ? -1 : (int)e.n;
}

/**** the stop at exec ****/

struct tracee {
	pid_t pid;
	int mem; /* /proc/pid/mem */
	int sig; /* a signal that came during the stop: delivered at the detach */
	struct user_regs_struct saved;
	uint64_t at; /* where the system call instruction was put */
	unsigned char was[2];
};

static int peek(struct tracee *t, uint64_t addr, void *buf, size_t n)
{
	return pread(t->mem, buf, n, (off_t)addr) == (ssize_t)n ? 0 : -1;
}

static int poke(struct tracee *t, uint64_t addr, const void *buf, size_t n)
{
	return pwrite(t->mem, buf, n, (off_t)addr) == (ssize_t)n ? 0 : -1;
}

/* the single step's trap; a signal that comes first is kept for the
 * detach and the step asked again */
static int stepped(struct tracee *t)
{
	int st;

	for (;;) {
		if (waitpid(t->pid, &st, __WALL) < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		if (!WIFSTOPPED(st))
			return -1; /* (it ended) */
		if (WSTOPSIG(st) == SIGTRAP)
			return 0;
		t->sig = WSTOPSIG(st);
		if (ptrace(PTRACE_SINGLESTEP, t->pid, 0, 0) < 0)
			return -1;
	}
}

/* one system call made by the tracee at t->at: its result, or -errno */
static long inject(struct tracee *t, long nr, uint64_t a0, uint64_t a1, uint64_t a2, uint64_t a3, uint64_t a4,
		   uint64_t a5)
{
	struct user_regs_struct r = t->saved;

	r.rip = t->at;
	r.rax = (uint64_t)nr;
	r.orig_rax = (uint64_t)-1;
	r.rdi = a0;
	r.rsi = a1;
	r.rdx = a2;
	r.r10 = a3;
	r.r8 = a4;
	r.r9 = a5;
	if (ptrace(PTRACE_SETREGS, t->pid, 0, &r) < 0 || ptrace(PTRACE_SINGLESTEP, t->pid, 0, 0) < 0 ||
	    stepped(t) < 0 || ptrace(PTRACE_GETREGS, t->pid, 0, &r) < 0)
		return -EIO;
	return (long)r.rax;
}

/* the program's load bias: AT_ENTRY less its file's entry */
static int bias_of(pid_t pid, const struct ns_goelf *g, uint64_t *bias)
{
	char path[64];
	uint64_t av[2 * 64];
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/auxv", (int)pid);
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
		return -1;
	n = read(fd, av, sizeof(av));
	close(fd);
	for (ssize_t i = 0; i + 1 < n / 8; i += 2)
		if (av[i] == AT_ENTRY) {
			*bias = av[i + 1] - g->entry;
			return 0;
		}
	return -1;
}

#define CODE_SIZE 65536

int ns_gohook_inject(pid_t pid, const struct ns_goelf *g, int memfd, int *sig, char *why, size_t wl)
{
	static unsigned char code[CODE_SIZE], have[NS_GOELF_MAX_FUNC];
	struct tracee t = { .pid = pid, .mem = -1 };
	uint64_t bias, fn, page = 0, ring = 0;
	char path[64];
	size_t used = 0, entry_at = SIZE_MAX;
	long r, fd = -1;
	int rc = -1, put_back = 0;
	uint64_t patch_at[NS_GOELF_MAX_SITES];
	unsigned char patch[NS_GOELF_MAX_SITES][16];

	snprintf(path, sizeof(path), "/proc/%d/mem", (int)pid);
	if ((t.mem = open(path, O_RDWR | O_CLOEXEC)) < 0 || bias_of(pid, g, &bias) < 0) {
		snprintf(why, wl, "cannot read the program's memory (%s)", strerror(errno));
		goto out;
	}
	fn = g->addr + bias;
	/* what runs is what was read (the file may have changed since) */
	if (peek(&t, fn, have, g->size) < 0 || memcmp(have, g->code, g->size) != 0) {
		snprintf(why, wl, "the program's code is not its file's");
		goto out;
	}
	/* one instruction of the program's own start run, so that its
	 * registers are a plain stop's (not the exec call's return) */
	if (ptrace(PTRACE_SINGLESTEP, pid, 0, 0) < 0 || stepped(&t) < 0 ||
	    ptrace(PTRACE_GETREGS, pid, 0, &t.saved) < 0) {
		snprintf(why, wl, "cannot stop it at its start (%s)", strerror(errno));
		goto out;
	}
	t.at = t.saved.rip;
	if (peek(&t, t.at, t.was, 2) < 0 || poke(&t, t.at, "\x0f\x05", 2) < 0) {
		snprintf(why, wl, "cannot write its code (%s)", strerror(errno));
		goto out;
	}
	put_back = 1;
	/* the trampolines' page within a jmp rel32 of the function */
	for (int i = 0; i < 4 && !page; i++) {
		static const int64_t off[] = { -0x20000000LL, 0x40000000LL, -0x8000000LL, 0x10000000LL };
		int64_t want = ((int64_t)fn + off[i]) & ~0xffffLL;

		if (want < 0x10000)
			continue;
		r = inject(&t, SYS_mmap, (uint64_t)want, CODE_SIZE, PROT_READ | PROT_EXEC,
			   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, (uint64_t)-1, 0);
		if (r == want)
			page = (uint64_t)r;
		else if (r >= 0) /* (a kernel before 4.17 takes the address as a hint) */
			(void)inject(&t, SYS_munmap, (uint64_t)r, CODE_SIZE, 0, 0, 0, 0);
	}
	if (!page) {
		snprintf(why, wl, "no room for its trampolines within 2 GiB of its code");
		goto out;
	}
	snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)getpid(), memfd);
	if (poke(&t, page + CODE_SIZE - 64, path, strlen(path) + 1) < 0 ||
	    (fd = inject(&t, SYS_open, page + CODE_SIZE - 64, O_RDWR | O_CLOEXEC, 0, 0, 0, 0)) < 0 ||
	    (r = inject(&t, SYS_mmap, 0, sizeof(struct ns_goring), PROT_READ | PROT_WRITE, MAP_SHARED, (uint64_t)fd,
			0)) < 0) {
		snprintf(why, wl, "cannot map its ring (%s)", strerror(fd < 0 ? (int)-fd : (int)-r));
		goto out;
	}
	ring = (uint64_t)r;
	(void)inject(&t, SYS_close, (uint64_t)fd, 0, 0, 0, 0, 0);
	fd = -1;
	for (unsigned i = 0; i < g->nsites; i++) {
		const struct ns_gosite *s = &g->site[i];
		int n = ns_gohook_tramp(code + used, CODE_SIZE - 64 - used, ring, g->code + s->off, s->len);
		int64_t rel = (int64_t)(page + used) - (int64_t)(fn + s->off + 5);

		if (n < 0 || rel != (int32_t)rel) {
			snprintf(why, wl, "its trampolines do not fit");
			goto out;
		}
		patch_at[i] = fn + s->off;
		memset(patch[i], 0xcc, sizeof(patch[i])); /* (int3 past the jmp: never reached) */
		patch[i][0] = 0xe9;
		memcpy(patch[i] + 1, &(int32_t){ (int32_t)rel }, 4);
		used += (size_t)n;
	}
	if (g->entry_len) {
		int n = ns_gohook_entry(code + used, CODE_SIZE - 64 - used, page + used, ring, g->code, g->entry_len,
					fn + g->entry_len);
		int64_t rel = (int64_t)(page + used) - (int64_t)(fn + 5);

		if (n > 0 && rel == (int32_t)rel) {
			entry_at = used;
			used += (size_t)n;
		}
	}
	if (poke(&t, page, code, used) < 0) {
		snprintf(why, wl, "cannot write its trampolines (%s)", strerror(errno));
		goto out;
	}
	if (entry_at != SIZE_MAX) {
		/* the entry's jmp (the rest of the moved instruction int3: never reached) */
		unsigned char j[8];

		memset(j, 0xcc, sizeof(j));
		j[0] = 0xe9;
		memcpy(j + 1, &(int32_t){ (int32_t)((int64_t)(page + entry_at) - (int64_t)(fn + 5)) }, 4);
		if (poke(&t, fn, j, g->entry_len) < 0) {
			snprintf(why, wl, "cannot write its entry (%s)", strerror(errno));
			goto out;
		}
	}
	for (unsigned i = 0; i < g->nsites; i++)
		if (poke(&t, patch_at[i], patch[i], g->site[i].len) < 0) {
			/* (each site is whole: a jmp or its epilogue; those put
			 * already stay, their trampolines in place) */
			snprintf(why, wl, "cannot write its return sites (%s)", strerror(errno));
			goto out;
		}
	rc = 0;
out:
	if (fd >= 0)
		(void)inject(&t, SYS_close, (uint64_t)fd, 0, 0, 0, 0, 0);
	if (put_back) {
		(void)poke(&t, t.at, t.was, 2);
		(void)ptrace(PTRACE_SETREGS, pid, 0, &t.saved);
	}
	if (t.mem >= 0)
		close(t.mem);
	*sig = t.sig;
	return rc;
}

/* fdtab.c -- per-descriptor state: a flat array indexed by fd, and the pool
 * of connection records it points to.
 *
 * The array is reserved once with MAP_NORESERVE, so only the pages of fds in
 * use cost memory, and the data path reads it with one load: no lock, no
 * allocation. */

#include "conn.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include "lock.h"
#include "real.h"

#define FD_CAP (1u << 20)
#define POOL_CHUNK 64

uintptr_t *ns_fdtab;
unsigned ns_fdmax;
unsigned ns_fdhi;
int ns_fdtab_failed;
monotime ns_fdtab_made_ns; /* how long the fd table took to make (once: two clock reads) */
/* the epoll registry's (conn.h) */
unsigned ns_ep_count;
void (*ns_fd_watch_note)(int fd);
void (*ns_fd_watch_forget)(int fd);
void (*ns_conn_end_hook)(struct ns_conn *c);
void (*ns_req_end_hook)(struct ns_conn *c);
void (*ns_conn_h2_hook)(struct ns_conn *c);

/* The pid this copy of the process image belongs to: set at start and in
 * every fork child (atfork). A vfork child runs no atfork handler, so its
 * getpid() differs while it shares every byte of our memory. */
pid_t ns_own_pid;

/* The free records: a lock-free stack whose head word carries a 16-bit
 * count above the 48-bit pointer, so a head popped and pushed back between
 * another thread's read and its exchange is told apart (ABA). Records are
 * never unmapped, so reading a popped record's next_free is always safe. */
static uint64_t pool_head;
#define POOL_PTR(h) ((struct ns_conn *)(uintptr_t)((h) & 0xffffffffffffULL))
#define POOL_NEXT(h, p) ((((h) >> 48) + 1) << 48 | (uint64_t)(uintptr_t)(p))

static void pool_push(struct ns_conn *first, struct ns_conn *last)
{
	uint64_t h = __atomic_load_n(&pool_head, __ATOMIC_RELAXED);

	do
		ST(last->next_free, POOL_PTR(h));
	while (!__atomic_compare_exchange_n(&pool_head, &h, POOL_NEXT(h, first), 1, __ATOMIC_RELEASE,
					    __ATOMIC_RELAXED));
}

static struct ns_conn *pool_pop(void)
{
	uint64_t h = __atomic_load_n(&pool_head, __ATOMIC_ACQUIRE);
	struct ns_conn *c;

	do {
		c = POOL_PTR(h);
		if (!c)
			return NULL;
	} while (!__atomic_compare_exchange_n(&pool_head, &h, POOL_NEXT(h, LD(c->next_free)), 1, __ATOMIC_ACQUIRE,
					      __ATOMIC_ACQUIRE));
	return c;
}

/* Records never used yet: the chunk last mapped and the index of its next
 * record, one word (base 48 bits | index 16 bits), taken one at a time so
 * that a process touches only the pages of the records it uses (a page
 * fault is ~11 us in this sandbox: linking a whole chunk on its first
 * connect cost 13 of them). */
static uint64_t fresh;
#define FRESH_BASE(w) ((struct ns_conn *)(uintptr_t)((w) & 0xffffffffffffULL))
#define FRESH_IDX(w) ((unsigned)((w) >> 48))

static __attribute__((noinline, cold)) struct ns_conn *fresh_take(void)
{
	uint64_t w = __atomic_load_n(&fresh, __ATOMIC_ACQUIRE);

	for (;;) {
		struct ns_conn *base = FRESH_BASE(w), *chunk;
		unsigned i = FRESH_IDX(w);

		if (base && i < POOL_CHUNK) {
			if (__atomic_compare_exchange_n(&fresh, &w, (uint64_t)(i + 1) << 48 | (uint64_t)(uintptr_t)base, 1,
							__ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
				return &base[i];
			continue;
		}
		chunk = mmap(NULL, POOL_CHUNK * sizeof(*chunk), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (chunk == MAP_FAILED)
			return NULL;
		if (__atomic_compare_exchange_n(&fresh, &w, (uint64_t)1 << 48 | (uint64_t)(uintptr_t)chunk, 0,
						__ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
			return &chunk[0];
		munmap(chunk, POOL_CHUNK * sizeof(*chunk));   /* another thread mapped one first: none of ours was handed out */
	}
}

/* A child that shares our memory comes from vfork(): glibc's own
 * posix_spawn, system and popen children run libc's internal calls, never
 * the wrappers. So the exported vfork below notes that one was made, and
 * until then a close needs no getpid (a system call on every close of a
 * socket otherwise). The stub jumps to libc's vfork with the caller's
 * frame untouched, since the child returns through it. The pointer is
 * bound with the others (real.c); a vfork from another library's
 * constructor before that binds it first (vfork takes no arguments to
 * keep), and if libc had no vfork the call becomes fork(), which POSIX
 * allows. */
__attribute__((used)) int ns_vforked;   /* atomic: the program has called vfork */
NS_HIDDEN __attribute__((used)) void *ns_real_vfork;

__attribute__((used)) void *ns_vfork_bind(void)
{
	void *p = dlsym(RTLD_NEXT, "vfork");

	__atomic_store_n(&ns_real_vfork, p, __ATOMIC_RELEASE);
	return p;
}

__asm__(
	".text\n"
	".globl vfork\n"
	".type vfork, @function\n"
	".globl __vfork\n"
	".type __vfork, @function\n"
	"vfork:\n"
	"__vfork:\n"
	"	.cfi_startproc\n"
	"	endbr64\n"
	"	movl $1, ns_vforked(%rip)\n"
	"	movq ns_real_vfork(%rip), %rax\n"
	"	testq %rax, %rax\n"
	"	jz 1f\n"
	"	jmp *%rax\n"
	"1:	subq $8, %rsp\n"
	"	.cfi_adjust_cfa_offset 8\n"
	"	call ns_vfork_bind\n"
	"	addq $8, %rsp\n"
	"	.cfi_adjust_cfa_offset -8\n"
	"	testq %rax, %rax\n"
	"	jz 2f\n"
	"	jmp *%rax\n"
	"2:	jmp fork@PLT\n"
	"	.cfi_endproc\n"
	".size vfork, .-vfork\n"
	".size __vfork, .-__vfork\n");

int ns_vfork_pid_differs(void)
{
	return getpid() != ns_own_pid;
}

static void fd_table_make(void)
{
	monotime t0 = ns_now();
	struct rlimit rl;
	rlim_t n = 65536;
	void *p;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0)
		n = rl.rlim_max;
	if (n == RLIM_INFINITY || n > FD_CAP)
		n = FD_CAP;
	if (n < 1024)
		n = 1024;
	p = mmap(NULL, (size_t)n * sizeof(uintptr_t), PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (p == MAP_FAILED) {
		ns_fdtab_failed = 1; /* said when the policy loads (config.c): logging is above this */
		return;
	}
	ns_fdtab = p;
	ns_own_pid = getpid(); /* (and in every fork child: config.c) */
	__atomic_store_n(&ns_fdmax, (unsigned)n, __ATOMIC_RELEASE);
	ns_fdtab_made_ns = ns_now() - t0; /* (said by NETSHIM_STARTUP: startup.c) */
}

/* Made by the first socket (or connect) of the process, not at start: a
 * process that never touches the network never maps it. Until then every
 * lookup finds no entry (ns_fdmax 0), and so does a signal handler's
 * socket inside its own thread's making of it (lock.h's once: it passes
 * through untracked rather than wait on itself). */
static uint64_t fd_once;

void ns_fd_init(void)
{
	ns_once(&fd_once, fd_table_make);
}

void ns_conn_ref(struct ns_conn *c)
{
	__atomic_fetch_add(&c->refs, 1, __ATOMIC_RELAXED);
}

/* ...through the hook h2conn.c set before it gave a record its first reader */
static __attribute__((noinline, cold)) void h2_release(struct ns_conn *c)
{
	void (*hook)(struct ns_conn *) = __atomic_load_n(&ns_conn_h2_hook, __ATOMIC_ACQUIRE);

	if (hook)
		hook(c);
}

/* The record's last reference went: back to the pool. A call that was
 * blocked on this connection when it ended finds the generation changed
 * and leaves the record alone (see after_io). */
static inline __attribute__((always_inline)) void conn_free(struct ns_conn *c)
{
	if (unlikely(LD(c->h2) != NULL))
		h2_release(c); /* an HTTP/2 connection's reader back to its pool */
	__atomic_fetch_add(&c->gen, 1, __ATOMIC_RELEASE);
	pool_push(c, c);
}

/* ...holding a place: shape.c gives it back first. */
static __attribute__((noinline, cold)) void conn_free_hooked(struct ns_conn *c)
{
	/* each hook where it has something to give back: a connection place
	 * (NS_C_PLACE), a request's (rq, rq_qi) */
	if (LD(c->flags) & NS_C_PLACE) {
		void (*hook)(struct ns_conn *) = __atomic_load_n(&ns_conn_end_hook, __ATOMIC_ACQUIRE);

		if (hook)
			hook(c);
	}
	if (LD(c->rq) | LD(c->rq_qi)) {
		void (*req)(struct ns_conn *) = __atomic_load_n(&ns_req_end_hook, __ATOMIC_ACQUIRE);

		if (req)
			req(c);
	}
	conn_free(c);
}

void ns_conn_unref(struct ns_conn *c)
{
	if (__atomic_sub_fetch(&c->refs, 1, __ATOMIC_ACQ_REL) != 0)
		return;
	if (unlikely((LD(c->flags) & NS_C_PLACE) | LD(c->rq) | LD(c->rq_qi))) {
		conn_free_hooked(c);
		return;
	}
	conn_free(c);
}

struct ns_conn *ns_conn_alloc(void)
{
	struct ns_conn *c = pool_pop();

	if (!c && !(c = fresh_take()))
		return NULL;
	/* field by field, never memset: a thread that still holds the old
	 * pointer may be reading these (it finds gen changed and backs off) */
	__atomic_fetch_add(&c->gen, 1, __ATOMIC_RELEASE);
	ST(c->refs, 1);
	ST(c->fds, 0);
	ST(c->outcome, 0);
	ST(c->flags, 0);
	ST(c->slot, -1);
	ST(c->start, 0);
	ST(c->pre_now, 0);
	ST(c->connect_deadline, 0);
	ST(c->total_deadline, 0);
	ST(c->intr_deadline, 0);
	ST(c->rd_wait_start, 0);
	ST(c->expired, 0);
	ST(c->read_timeout_ns, 0);
	ST(c->follow, 0u);
	ST(c->own_ms, 0);
	ST(c->rq, 0u);
	ST(c->rq_qi, 0u);
	ST(c->rq_qword, 0);
	ST(c->h1end.result, (uint32_t)NS_H1E_NONE);
	for (int d = 0; d < 2; d++) {
		ST(c->dir[d].prog_ns, 0);
		ST(c->dir[d].kernel_ns, 0);
		ST(c->dir[d].src, 0);
	}
	return c;
}

/* A plain copy, not word-by-word atomics: the record is not yet published
 * (the fd table gets it after), and the only other reader is a thread that
 * still held the record's previous use, whose reads are discarded by the
 * generation check. ThreadSanitizer is told not to watch these stores. */
__attribute__((no_sanitize_thread)) void ns_conn_put_key(struct ns_conn *c, const char *key, size_t klen)
{
	if (klen >= NS_KEY_MAX)
		klen = NS_KEY_MAX - 1;
	memcpy(c->key, key, klen);
	c->key[klen] = '\0';
}

int ns_conn_status_fails(const struct ns_conn *c, unsigned code)
{
	return ns_status_fails(ns_conn_set(c), code);
}

void ns_conn_key(const struct ns_conn *c, char out[NS_KEY_MAX])
{
	union { char k[NS_KEY_MAX]; uint64_t w[NS_KEY_MAX / 8]; } ku;

	for (size_t i = 0; i < sizeof(ku.w) / 8; i++)
		ku.w[i] = LD(c->key_w[i]);
	ku.k[NS_KEY_MAX - 1] = '\0';
	memcpy(out, ku.k, NS_KEY_MAX);
}

/* v into fd's entry (< ns_fdmax), its reference already taken; what was
 * there is dropped. */
static inline __attribute__((always_inline)) void fd_put(int fd, uintptr_t v)
{
	uintptr_t old;

	if (v) {
		unsigned hi = __atomic_load_n(&ns_fdhi, __ATOMIC_RELAXED);

		while ((unsigned)fd >= hi &&
		       !__atomic_compare_exchange_n(&ns_fdhi, &hi, (unsigned)fd + 1, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
			;
	}
	old = __atomic_exchange_n(&ns_fdtab[fd], v, __ATOMIC_ACQ_REL);
	if (v && !(v & NS_TAG) && __atomic_load_n(&ns_ep_count, __ATOMIC_RELAXED))
		__atomic_load_n(&ns_fd_watch_note, __ATOMIC_ACQUIRE)(fd);   /* one load when no epoll set is in use */
	/* last, so that it is a jump: nothing here waits for its registers */
	if (old && !(old & NS_TAG)) {
		__atomic_fetch_sub(&((struct ns_conn *)old)->fds, 1, __ATOMIC_RELAXED);
		ns_conn_unref((struct ns_conn *)old);
	}
}

/* fd is past the table: 1, unless there was no table yet and v is worth
 * making it for (the first socket), after which fd may fit. */
int ns_fd_beyond(int fd, uintptr_t v)
{
	if (!v || __atomic_load_n(&ns_fdmax, __ATOMIC_ACQUIRE))
		return 1;
	ns_fd_init();
	return (unsigned)fd >= __atomic_load_n(&ns_fdmax, __ATOMIC_ACQUIRE);
}

/* (out of line and called last, so the common case saves no register) */
static __attribute__((noinline, cold)) void fd_set_first(int fd, uintptr_t v)
{
	if (!ns_fd_beyond(fd, v))
		ns_fd_set(fd, v);
}

void ns_fd_set(int fd, uintptr_t v)
{
	if (unlikely((unsigned)fd >= ns_fdmax)) {
		fd_set_first(fd, v);
		return;
	}
	if (v && !(v & NS_TAG)) {
		ns_conn_ref((struct ns_conn *)v);
		__atomic_fetch_add(&((struct ns_conn *)v)->fds, 1, __ATOMIC_RELAXED);
	}
	fd_put(fd, v);
}

static __attribute__((noinline, cold)) void publish_first(int fd, struct ns_conn *c)
{
	if (!ns_fd_beyond(fd, (uintptr_t)c))
		ns_fd_publish(fd, c);
	else
		ns_conn_unref(c);
}

void ns_fd_publish(int fd, struct ns_conn *c)
{
	if (unlikely((unsigned)fd >= ns_fdmax)) {
		publish_first(fd, c);
		return;
	}
	__atomic_store_n(&c->fds, 1, __ATOMIC_RELAXED);
	fd_put(fd, (uintptr_t)c);
}

void ns_fd_forget_range(unsigned first, unsigned last)
{
	unsigned hi = __atomic_load_n(&ns_fdhi, __ATOMIC_RELAXED);

	if (last >= hi)
		last = hi ? hi - 1 : 0;
	for (unsigned fd = first; fd <= last && fd < hi; fd++) {
		if (!__atomic_load_n(&ns_fdtab[fd], __ATOMIC_RELAXED))
			continue;
		if (__atomic_load_n(&ns_ep_count, __ATOMIC_RELAXED))
			__atomic_load_n(&ns_fd_watch_forget, __ATOMIC_ACQUIRE)((int)fd);
		ns_fd_set((int)fd, 0);
	}
}

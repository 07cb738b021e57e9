/* shim.h -- internals of the preload library: per-fd state, workers, logging. */
#ifndef NS_SHIM_H
#define NS_SHIM_H

#include <stdint.h>
#include <stdio.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/types.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/uio.h>
#include <time.h>

#include "../policy/policy.h"
#include "../policy/table.h"

#define NS_HIDDEN __attribute__((visibility("hidden")))
#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)

/* The fortified entry points, declared here since the headers only declare
 * them under _FORTIFY_SOURCE. */
ssize_t __recv_chk(int, void *, size_t, size_t, int);
ssize_t __recvfrom_chk(int, void *, size_t, size_t, int, struct sockaddr *, socklen_t *);
ssize_t __read_chk(int, void *, size_t, size_t);
int fcntl64(int, int, ...);
int __poll_chk(struct pollfd *, nfds_t, int, size_t);
int __ppoll_chk(struct pollfd *, nfds_t, const struct timespec *, const sigset_t *, size_t);

/**** time ****/

/* Monotonic nanoseconds: the only clock deadline arithmetic uses. */
typedef int64_t monotime;

static inline monotime ns_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (monotime)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static inline uint64_t ns_wall_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/**** per-connection state ****/

/* One direction's receive or send timeout: the program's own, and what the
 * shim put into the kernel (SO_RCVTIMEO/SO_SNDTIMEO) on its behalf. */
enum { NS_SRC_NONE = 0, NS_SRC_PROGRAM, NS_SRC_SHIM_READ, NS_SRC_SHIM_TOTAL };
struct ns_dir {
	int64_t prog_ns;      /* the program's timeout, 0 = none */
	int64_t kernel_ns;    /* what the kernel holds now, 0 = none */
	uint32_t src;         /* whose timeout the kernel holds */
};

enum { NS_IN = 0, NS_OUT = 1 };

/* Which deadline fired while the program waited in poll/select/epoll. From
 * then on the connection answers ETIMEDOUT: SO_ERROR for a connect, every
 * data call otherwise. */
enum { NS_EXP_NONE = 0, NS_EXP_CONNECT, NS_EXP_READ, NS_EXP_TOTAL };
#define NS_EXP_MASK 0xffu
/* Above the kind, in the same word: the connection has injected faults
 * (fault.c). One word, so the data path's one check covers both. */
#define NS_ATTN_FAULT 0x100u

/* conn flags (atomic) */
#define NS_C_NONBLOCK 0x1u
#define NS_C_CONNECTING 0x2u
#define NS_C_ENFORCE 0x4u
#define NS_C_FAILED 0x8u          /* the connect failed: the socket may connect anew */
#define NS_C_ARM_PENDING 0x10u    /* kernel timeouts to set once the socket turns blocking */
#define NS_C_ERR_PENDING 0x20u    /* the connect deadline fired: report ETIMEDOUT once, as the kernel does */
#define NS_C_FAULT 0x40u          /* injected faults: every data call takes the slow path */
/* Mirrors of the other fields the data path must notice, so that its one
 * check before and one after the real call are a single load each. */
#define NS_C_WAITING 0x80u        /* rd_wait_start is set */
#define NS_C_INTR 0x100u          /* intr_deadline is set */
#define NS_C_TOTAL 0x200u         /* total_deadline is set */
#define NS_C_EXPIRED 0x400u       /* a deadline fired in a wait (expired has its kind) */
/* Exchanges (exchange.c): the next send starts one; its answer is being
 * read for an HTTP status; this exchange had a request; what the first
 * bytes sent said about the protocol. */
#define NS_C_XNEXT 0x800u
#define NS_C_PARSE 0x1000u
#define NS_C_SENT 0x2000u
#define NS_C_HTTP 0x4000u
#define NS_C_NOTHTTP 0x8000u
#define NS_C_TLS 0x10000u         /* its plaintext is seen (tls.c): turns are taken there */
#define NS_C_TLSWIRE 0x20000u     /* the first bytes sent were a TLS ClientHello */
#define NS_C_HSDONE 0x40000u      /* the TLS handshake had its outcome (not an exchange) */
/* Keep-alive reuse: an exchange of this connection had its answer; the
 * exchange in progress is not the connection's first. A reused connection
 * that ends before any byte of the answer was closed by the server while
 * idle (the race every keep-alive client loses now and then, and wins by
 * sending again on a new connection): no outcome, counted apart. */
#define NS_C_ANSWERED 0x80000u
#define NS_C_REUSED 0x100000u
/* The first bytes sent so far ("G", "GE") may still begin an HTTP method:
 * the next sends are looked at too (exchange.c), until they tell. */
#define NS_C_SNIFF 0x200000u
/* A send or read that is a turn of the exchange (exchange.c) */
#define NS_C_TURN (NS_C_XNEXT | NS_C_PARSE | NS_C_SNIFF)
#define NS_C_PRE (NS_C_TOTAL | NS_C_INTR | NS_C_EXPIRED | NS_C_FAULT)
#define NS_C_PRE_DIR(d) (NS_C_PRE | ((d) == NS_OUT ? (NS_C_XNEXT | NS_C_SNIFF) : NS_C_PARSE))
#define NS_C_POST (NS_C_CONNECTING | NS_C_FAULT | NS_C_WAITING | NS_C_INTR)

/* Injected faults of one connection (fault.c): set at connect, read only
 * while NS_ATTN_FAULT is set in the connection's expired word. */
struct ns_cfault {
	uint32_t end_kind;          /* NS_F_STALL, _RESET, _CLOSE, _STATUS, or 0 */
	uint32_t status;            /* status: the code */
	uint64_t after;             /* stall/reset/close: bytes that arrive first */
	int64_t latency_ns;         /* latency: 0 = none */
	uint64_t rate;              /* bandwidth: bytes/s, 0 = none */
	uint64_t got;               /* bytes the program has received */
	monotime resp_due;          /* latency: input held until then */
	uint32_t awaiting;          /* latency: sent, the answer not yet begun */
	uint32_t sent;              /* status: the request was sent (and swallowed) */
	monotime bw_start;          /* bandwidth: the clock of the rate */
	monotime delay_until;       /* delay: the real connect starts then; 0 = done */
	uint32_t synth_off;         /* status: bytes of the answer handed out */
	uint32_t end_done;          /* reset: reported (then end of stream) */
	monotime end_at;            /* reset after 0: not before then (see fault.c) */
	int32_t rt_idx;             /* runtime fault record, -1 = policy or shimrun */
	socklen_t real_len;
	struct sockaddr_storage real_sa;   /* delay: the address to connect to */
};

/* A governed connection, shared by every fd dup'ed from the one that
 * connected. Records come from a pool and are never unmapped, so a thread
 * that races a close reads stale fields, never freed memory. */
struct ns_conn {
	uint32_t gen;             /* atomic: bumped when the record is freed and reused */
	uint32_t refs;            /* atomic: holders of the record (fds, epoll registrations) */
	uint32_t fds;             /* atomic: fd table entries pointing here */
	uint32_t outcome;         /* atomic: 1 once the one outcome is counted */
	uint32_t flags;           /* atomic NS_C_* */
	int32_t slot;             /* breaker table slot, -1 = none */
	monotime start;
	monotime connect_deadline;/* absolute, 0 = none; for the event-loop waits */
	monotime total_deadline;  /* absolute, 0 = none */
	monotime intr_deadline;   /* the rest of a read a signal interrupted, 0 = none */
	monotime rd_wait_start;   /* an event loop began waiting for input (or, during that
				   * wait, the program sent): the read clock; 0 = not waiting */
	uint32_t expired;         /* atomic NS_EXP_*: a deadline fired inside a wait */
	int64_t read_timeout_ns;  /* 0 = none */
	struct ns_dir dir[2];
	const struct ns_settings *set;   /* atomic: a kept value (settings.c); NULL until the first connect */
	/* written at once (ns_conn_put_key), read through a copy (ns_conn_key): see LD/ST below */
	union { char key[NS_KEY_MAX]; uint64_t key_w[NS_KEY_MAX / 8]; };
	struct ns_cfault fault;
	/* the destination's address as connect() named it (family << 16 | port,
	 * and 16 bytes), for conn_still: is the number still this socket? */
	uint32_t peer_fp;
	uint64_t peer_a[2];
	/* the exchange in progress (exchange.c; its thread's slow path only) */
	monotime xstart;          /* when its request went out; 0 = the connect's */
	uint32_t hstate;          /* HTTP answer: status line, or 1xx headers to skip */
	uint32_t hlen;            /* bytes of the status line (or of "\r\n\r\n") seen */
	char hbuf[16];            /* "HTTP/1.1 503" */
	struct ns_conn *next_free;
};
_Static_assert(NS_KEY_MAX % 8 == 0, "copied in words");

/* Every field of a record is read and written with these (or with explicit
 * __atomic calls): a thread that read a record's pointer may still read it
 * while another ends the connection and the pool hands the record to the
 * next one. Relaxed atomics are plain moves on x86-64: they cost nothing and
 * keep such reads defined (and ThreadSanitizer quiet). */
#define LD(x) __atomic_load_n(&(x), __ATOMIC_RELAXED)
#define ST(x, v) __atomic_store_n(&(x), (v), __ATOMIC_RELAXED)

/* fd table entries: 0 unknown, a struct ns_conn pointer, or a tag (bit 0 set). */
#define NS_TAG 0x1u
#define NS_TAG_STREAM 0x2u      /* an AF_INET/AF_INET6 stream socket not yet connected */
#define NS_TAG_NONBLOCK 0x4u
#define NS_TAG_EPOLL 0x8u        /* an epoll fd the shim keeps registrations for */
#define NS_TAG_TIMEO 0x10u       /* the program may have set SO_RCVTIMEO/SO_SNDTIMEO: ask the kernel */
#define NS_TAG_REFUSED 0x20u     /* an open breaker refused its non-blocking connect (see refuse_open) */

extern uintptr_t *ns_fdtab NS_HIDDEN;
extern unsigned ns_fdmax NS_HIDDEN;
extern unsigned ns_fdhi NS_HIDDEN;   /* atomic: above the highest fd ever given an entry */

/* The connection behind fd, or NULL: the one lookup every wrapper makes. */
static inline struct ns_conn *ns_conn_of(int fd)
{
	uintptr_t v;

	if ((unsigned)fd >= ns_fdmax)
		return NULL;
	v = __atomic_load_n(&ns_fdtab[fd], __ATOMIC_ACQUIRE);
	return (v & NS_TAG) ? NULL : (struct ns_conn *)v;
}

static inline uintptr_t ns_fd_get(int fd)
{
	return (unsigned)fd < ns_fdmax ? __atomic_load_n(&ns_fdtab[fd], __ATOMIC_ACQUIRE) : 0;
}

/* The shim's own file I/O, straight to libc (see nointercept.h). */
NS_HIDDEN int ns_sys_close(int fd);
NS_HIDDEN ssize_t ns_sys_read(int fd, void *buf, size_t n);

NS_HIDDEN void ns_fd_init(void);
/* Put v at fd (taking a reference if it is a conn) and drop what was there. */
NS_HIDDEN void ns_fd_set(int fd, uintptr_t v);
/* ...for a record from ns_conn_alloc: its one reference passes to fd's entry. */
NS_HIDDEN void ns_fd_publish(int fd, struct ns_conn *c);
/* ...for a tag (or 0) at a number the kernel just handed out: the common
 * case, a free entry below the high-water mark, is one load and a store
 * (the number is the caller's: no other thread writes its entry). */
static inline void ns_fd_tag(int fd, uintptr_t tag)
{
	if ((unsigned)fd < __atomic_load_n(&ns_fdhi, __ATOMIC_RELAXED) &&
	    !__atomic_load_n(&ns_fdtab[fd], __ATOMIC_RELAXED)) {
		if (tag)
			__atomic_store_n(&ns_fdtab[fd], tag, __ATOMIC_RELEASE);
		return;
	}
	ns_fd_set(fd, tag);
}
NS_HIDDEN struct ns_conn *ns_conn_alloc(void);
NS_HIDDEN void ns_conn_ref(struct ns_conn *c);
NS_HIDDEN void ns_conn_unref(struct ns_conn *c);
/* A record's key: set once at connect, copied out whole. */
NS_HIDDEN void ns_conn_put_key(struct ns_conn *c, const char *key, size_t klen);
/* A record's settings: a kept value, never freed, so a record read while
 * it is reused still gives whole settings (the built-in ones before its
 * first connect set any). */
static inline const struct ns_settings *ns_conn_set(const struct ns_conn *c)
{
	const struct ns_settings *s = __atomic_load_n(&c->set, __ATOMIC_ACQUIRE);

	return s ? s : &ns_builtin_settings;
}
NS_HIDDEN void ns_conn_key(const struct ns_conn *c, char out[NS_KEY_MAX]);
/* Is HTTP status code a failure under the record's failure_status? */
NS_HIDDEN int ns_conn_status_fails(const struct ns_conn *c, unsigned code);
/* Drop the entries of fds first..last (both included), as their closing
 * behind the shim's back (close_range, closefrom, fclose) requires. */
NS_HIDDEN void ns_fd_forget_range(unsigned first, unsigned last);
/* 1 inside a vfork child: it must not touch the parent's descriptor
 * state. One load until the program first calls vfork, then a getpid. */
extern int ns_vforked NS_HIDDEN;
NS_HIDDEN void *ns_vfork_bind(void);   /* libc's vfork for the exported stub */
NS_HIDDEN int ns_vfork_pid_differs(void);
static inline int ns_in_vfork_child(void)
{
	return __atomic_load_n(&ns_vforked, __ATOMIC_RELAXED) && ns_vfork_pid_differs();
}

/**** logging ****/

enum { NS_LOG_OFF, NS_LOG_ERROR, NS_LOG_WARN, NS_LOG_INFO, NS_LOG_DEBUG };
extern int ns_log_level NS_HIDDEN;
NS_HIDDEN void ns_log_init(void);
NS_HIDDEN void ns_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#define NS_LOG(level, ...) do { if (unlikely(ns_log_level >= (level))) ns_log((level), __VA_ARGS__); } while (0)

/**** workers (core.c) ****/

/* The one lookup in every data wrapper: a descriptor the shim does not
 * govern goes straight to libc, with no other work and no stack frame. */
#define NS_PASS(fd, fn, args, worker) do { \
	struct ns_conn *c_ = ns_conn_of(fd); \
	if (likely(!c_)) { \
		if (likely(ns_real.fn != NULL)) \
			return ns_real.fn args; \
		return ns_unbound_##fn args;   /* before any binding: see real.c */ \
	} \
	return worker; \
} while (0)

NS_HIDDEN int ns_socket(int domain, int type, int protocol);
NS_HIDDEN int ns_connect(int fd, const struct sockaddr *sa, socklen_t len);
NS_HIDDEN ssize_t ns_send(int fd, const void *buf, size_t n, int flags, struct ns_conn *c);
NS_HIDDEN ssize_t ns_sendto(int fd, const void *buf, size_t n, int flags, const struct sockaddr *sa, socklen_t len, struct ns_conn *c);
NS_HIDDEN ssize_t ns_sendmsg(int fd, const struct msghdr *msg, int flags, struct ns_conn *c);
NS_HIDDEN ssize_t ns_recv(int fd, void *buf, size_t n, int flags, struct ns_conn *c);
NS_HIDDEN ssize_t ns_recvfrom(int fd, void *buf, size_t n, int flags, struct sockaddr *sa, socklen_t *len, struct ns_conn *c);
NS_HIDDEN ssize_t ns_recvmsg(int fd, struct msghdr *msg, int flags, struct ns_conn *c);
NS_HIDDEN ssize_t ns_read(int fd, void *buf, size_t n, struct ns_conn *c);
NS_HIDDEN ssize_t ns_write(int fd, const void *buf, size_t n, struct ns_conn *c);
NS_HIDDEN ssize_t ns_readv(int fd, const struct iovec *iov, int cnt, struct ns_conn *c);
NS_HIDDEN ssize_t ns_writev(int fd, const struct iovec *iov, int cnt, struct ns_conn *c);
NS_HIDDEN ssize_t ns_recv_chk(int fd, void *buf, size_t n, size_t buflen, int flags, struct ns_conn *c);
NS_HIDDEN ssize_t ns_recvfrom_chk(int fd, void *buf, size_t n, size_t buflen, int flags, struct sockaddr *sa, socklen_t *len, struct ns_conn *c);
NS_HIDDEN ssize_t ns_read_chk(int fd, void *buf, size_t n, size_t buflen, struct ns_conn *c);
NS_HIDDEN int ns_close(int fd);
NS_HIDDEN int ns_close_range(unsigned first, unsigned last, int flags);
NS_HIDDEN void ns_closefrom(int lowfd);
NS_HIDDEN int ns_fclose(FILE *fp);
NS_HIDDEN int ns_accept(int fd, struct sockaddr *sa, socklen_t *len);
NS_HIDDEN int ns_accept4(int fd, struct sockaddr *sa, socklen_t *len, int flags);
NS_HIDDEN int ns_recvmmsg(int fd, struct mmsghdr *v, unsigned n, int flags, struct timespec *ts, struct ns_conn *c);
NS_HIDDEN int ns_sendmmsg(int fd, struct mmsghdr *v, unsigned n, int flags, struct ns_conn *c);
NS_HIDDEN ssize_t ns_sendfile(int out, int in, off_t *off, size_t n, struct ns_conn *c);
NS_HIDDEN ssize_t ns_splice(int in, loff_t *offin, int out, loff_t *offout, size_t n, unsigned flags);
NS_HIDDEN int ns_dup(int fd);
NS_HIDDEN int ns_dup2(int fd, int fd2);
NS_HIDDEN int ns_dup3(int fd, int fd2, int flags);
NS_HIDDEN int ns_fcntl(int use64, int fd, int cmd, void *arg);
NS_HIDDEN int ns_ioctl(int fd, unsigned long req, void *arg);
NS_HIDDEN int ns_setsockopt(int fd, int level, int name, const void *val, socklen_t len);
NS_HIDDEN int ns_getsockopt(int fd, int level, int name, void *val, socklen_t *len);

/* For the wait wrappers (wait.c): the nearest deadline a wait for these
 * events must honour on c (0 = none; arms the read-wait clock), and firing
 * it. ns_wait_expire returns the NS_EXP_* kind now in force, or 0. */
NS_HIDDEN void ns_wait_start_clock(struct ns_conn *c, monotime now);
static inline monotime ns_wait_deadline(struct ns_conn *c, int want_in, int want_out, monotime now)
{
	uint32_t f = __atomic_load_n(&c->flags, __ATOMIC_RELAXED);
	monotime d = 0;

	/* the common case first, in one test: a connected socket waited on
	 * for input, its read clock running, no total budget */
	if (likely((f & (NS_C_ENFORCE | NS_C_CONNECTING | NS_C_WAITING | NS_C_TOTAL)) == (NS_C_ENFORCE | NS_C_WAITING)) &&
	    want_in) {
		int64_t rt = LD(c->read_timeout_ns);

		if (likely(rt))
			return LD(c->rd_wait_start) + rt;
	}
	if (!(f & NS_C_ENFORCE))
		return 0;
	if (f & NS_C_CONNECTING) {
		if (want_in || want_out)
			d = LD(c->connect_deadline);
	} else if (want_in && LD(c->read_timeout_ns)) {
		if (unlikely(!(f & NS_C_WAITING)))
			ns_wait_start_clock(c, now);   /* the read clock starts with this wait */
		d = LD(c->rd_wait_start) + LD(c->read_timeout_ns);
	}
	if ((f & NS_C_TOTAL) && (want_in || want_out) && (d == 0 || LD(c->total_deadline) < d))
		d = LD(c->total_deadline);
	return d;
}
NS_HIDDEN int ns_wait_expire(struct ns_conn *c, int fd, int want_in, int want_out, monotime now);
/* A wait reported connected c ready for output only: has its wait for
 * input passed its deadline (then it is marked expired, as ns_wait_expire
 * does)? A connecting socket reported writable has its answer. */
static inline int ns_input_expired(struct ns_conn *c, int fd, monotime now)
{
	return !(__atomic_load_n(&c->flags, __ATOMIC_RELAXED) & NS_C_CONNECTING) && ns_wait_expire(c, fd, 1, 0, now) != 0;
}
/* The nearest time a wait must wake for c: its deadlines, and the moments
 * injected faults change what it may see (fault.c). */
NS_HIDDEN monotime ns_wait_interest_faults(struct ns_conn *c, int want_in, int want_out, monotime now);
/* ...given x, the connection's expired word as the wait just read it. */
static inline monotime ns_wait_interest(struct ns_conn *c, uint32_t x, int want_in, int want_out, monotime now)
{
	return unlikely(x & NS_ATTN_FAULT) ? ns_wait_interest_faults(c, want_in, want_out, now) :
					     ns_wait_deadline(c, want_in, want_out, now);
}
/* The program saw c ready for input or output: it is no longer waiting. */
NS_HIDDEN void ns_wait_ready(struct ns_conn *c, int in, int out, int err);
/* fd closes: its epoll registrations (or, an epoll fd, its set's) go.
 * One load when no epoll registration is held. */
extern unsigned ns_ep_count NS_HIDDEN;
NS_HIDDEN void ns_wait_forget_fd_held(int fd);
static inline void ns_wait_forget_fd(int fd)
{
	if (__atomic_load_n(&ns_ep_count, __ATOMIC_RELAXED))
		ns_wait_forget_fd_held(fd);
}
/* fd now stands for another connection (a connect, a dup onto it): an
 * epoll registration of that number computes its deadline again. */
NS_HIDDEN void ns_wait_note_fd_held(int fd);
static inline void ns_wait_note_fd(int fd)
{
	if (__atomic_load_n(&ns_ep_count, __ATOMIC_RELAXED))
		ns_wait_note_fd_held(fd);
}

static inline uint32_t ns_exp_kind(struct ns_conn *c)
{
	return __atomic_load_n(&c->expired, __ATOMIC_ACQUIRE) & NS_EXP_MASK;
}

/* Is the shim governing this process (not NETSHIM_DISABLE=1, a policy
 * loaded)? Loads the policy on first use. */
NS_HIDDEN int ns_shim_active(void);

/* settings.c: the kept copy of s's value (its faults left out), the same
 * pointer for equal values; NULL when NS_SETTINGS_KEPT_MAX are kept. */
#define NS_SETTINGS_KEPT_MAX 65536u
#define NS_SETTINGS_RESERVE 64u     /* kept back for the fallbacks (one per policy loaded) */
NS_HIDDEN const struct ns_settings *ns_settings_intern(const struct ns_settings *s);
/* ...or, when that is NULL, what fallback() gives (a kept value, made when
 * first needed: the destination is governed by it rather than not at all;
 * the built-in settings if it gives NULL), *full set. */
NS_HIDDEN const struct ns_settings *ns_settings_keep(const struct ns_settings *s,
						     const struct ns_settings *(*fallback)(void), int *full);
/* ns_settings_intern that may take the reserve. */
NS_HIDDEN const struct ns_settings *ns_settings_intern_reserve(const struct ns_settings *s);

/* destcache.c: what the policy pol and the table said about d, per
 * process. find: 0 and *ref (the table slot, the mode) when d is
 * remembered, else -1; copy: the settings (a kept value) and the key
 * (NS_KEY_MAX bytes) of a found entry, 0, or -1 when the entry changed
 * meanwhile. put: remember them (set: a kept value, or NULL not to: the
 * settings have faults to inject, chosen per connection). Lock-free; a
 * racing writer skips. */
struct ns_dcref {
	const void *e;
	uint32_t seq, klen, mode;
	int slot;
};
NS_HIDDEN int ns_destcache_find(const void *pol, const struct ns_dest *d, struct ns_dcref *ref);
NS_HIDDEN int ns_destcache_copy(const struct ns_dcref *ref, const struct ns_settings **set, char *key);
NS_HIDDEN void ns_destcache_put(const void *pol, const struct ns_dest *d, const struct ns_settings *set,
				const char *key, size_t klen, int slot);

/* uring.c: syscall(), io_uring_setup refused while the shim governs. */
NS_HIDDEN long ns_syscall(long n, long a, long b, long c, long d, long e, long f);

/**** exchanges (exchange.c) ****/

/* The data path of a call that starts an exchange (a send after a complete
 * answer, or the first) or reads an answer whose HTTP status is not yet
 * known, after the real call returned r. buf/len: the bytes sent or
 * received (NULL when the call has no plain buffer). Returns r, as after_io. */
NS_HIDDEN ssize_t ns_exchange_io(int fd, struct ns_conn *c, int d, ssize_t r, const void *buf, size_t len,
				 int flags, uint32_t gen);
NS_HIDDEN ssize_t ns_after_io(int fd, struct ns_conn *c, int d, ssize_t r, size_t len, int flags, uint32_t gen);
/* Before a send that starts an exchange (core.c): a request to a forward
 * proxy is given to its target's breaker. 0 to send, or -1 with errno
 * ECONNREFUSED (the target's breaker is open; nothing is sent). */
NS_HIDDEN int ns_exchange_proxied(struct ns_conn *c, const void *buf, size_t n);
/* Is c a reused connection (not its first exchange) whose request went out
 * and no byte of the answer came? Then its end is a stale keep-alive
 * connection's, not a failure. */
NS_HIDDEN int ns_exchange_stale(const struct ns_conn *c);
/* The same on TLS plaintext (tls.c): bytes the program sent or received. */
NS_HIDDEN void ns_exchange_plain(struct ns_conn *c, int d, const void *buf, size_t n);
/* tls.c: the record calls of OpenSSL and GnuTLS (opaque session pointers). */
/* caller: the return address of the exported wrapper's call */
NS_HIDDEN int ns_ssl_read(void *ssl, void *buf, int num, const void *caller);
NS_HIDDEN int ns_ssl_write(void *ssl, const void *buf, int num, const void *caller);
NS_HIDDEN int ns_ssl_read_ex(void *ssl, void *buf, size_t num, size_t *got, const void *caller);
NS_HIDDEN int ns_ssl_write_ex(void *ssl, const void *buf, size_t num, size_t *put, const void *caller);
NS_HIDDEN ssize_t ns_gnutls_record_recv(void *session, void *data, size_t size, const void *caller);
NS_HIDDEN ssize_t ns_gnutls_record_send(void *session, const void *data, size_t size, const void *caller);
/* A TLS socket (a ClientHello went out on it) moved r bytes in direction d:
 * inside a record call, the session's socket; outside, maybe the socket of
 * a memory-BIO session's pending write (tls.c). */
NS_HIDDEN void ns_tls_note_fd(int fd, int d, ssize_t r);
/* The answer's first byte came: its time since the exchange began (core.c). */
NS_HIDDEN void ns_first_byte_latency(struct ns_conn *c);
/* An exchange's outcome from its HTTP status (core.c). */
NS_HIDDEN void ns_conn_http(struct ns_conn *c, unsigned code, int failed);

/**** injected faults (fault.c) ****/

/* From core.c, for fault.c: count an outcome, note an event, the table. */
NS_HIDDEN void ns_conn_outcome(struct ns_conn *c, int kind, int err);
NS_HIDDEN void ns_note_event(int type, int slot, const char *key, const char *detail);
NS_HIDDEN struct ns_table *ns_tbl(void);
NS_HIDDEN void ns_policy_faults_for(const struct ns_dest *d, struct ns_settings *set);

/* The policy in force changed (or was loaded): what fault.c keeps of it. */
NS_HIDDEN void ns_fault_config(const struct ns_policy *pol);
/* Could any fault act in this process? The policy or NETSHIM_INJECT names
 * one (ns_fault_local), or the table's fault generation ever moved (someone
 * ran shimctl inject). Two loads and a test: the whole cost of fault
 * injection to a connect or a lookup when nobody injects anything. */
extern int ns_fault_local NS_HIDDEN;
extern const uint64_t *ns_fault_genp NS_HIDDEN;
static inline int ns_fault_possible(void)
{
	const uint64_t *g = __atomic_load_n(&ns_fault_genp, __ATOMIC_ACQUIRE);

	return __atomic_load_n(&ns_fault_local, __ATOMIC_RELAXED) || (g && __atomic_load_n(g, __ATOMIC_RELAXED));
}
/* At connect, after the breaker let it through. Returns NS_FC_NONE (connect
 * as asked), NS_FC_TARGET (connect to *to instead: the local target that
 * refuses, or that never answers), or NS_FC_FAIL (fail now, errno set). */
enum { NS_FC_NONE, NS_FC_TARGET, NS_FC_FAIL };
NS_HIDDEN int ns_fault_at_connect(struct ns_conn *c, const struct ns_dest *d, const struct ns_settings *set,
				  int slot, const struct sockaddr *sa, socklen_t len,
				  struct sockaddr_storage *to, socklen_t *tolen);
/* The shim's own descriptors (the local targets, the blackhole's filler),
 * which the program's ranged closes must leave open: how many, into out. */
NS_HIDDEN int ns_fault_own_fds(int *out, int max);
/* The local socket that refuses, as an address for family: 0, or -1. */
NS_HIDDEN int ns_fault_refusing_target(int family, struct sockaddr_storage *to, socklen_t *tolen);
/* A delay whose time came: the real connect starts. 1 if it did. */
NS_HIDDEN int ns_fault_delay_due(int fd, struct ns_conn *c, monotime now);
/* Should this lookup of name fail (nxdomain)? */
NS_HIDDEN int ns_fault_nxdomain(const char *name, const char *service);

/* The data path of a connection with faults, before the real call:
 * NS_FAULT_GO to make it (at most *allow bytes), or the call's result
 * (errno set for -1). buf/n: the caller's buffer, for a made-up answer
 * (NULL when the call has no plain buffer). */
#define NS_FAULT_GO (-2)
NS_HIDDEN ssize_t ns_fault_pre(int fd, struct ns_conn *c, int d, int flags, void *buf, size_t n, size_t *allow);
/* ...and after it moved r > 0 bytes. */
NS_HIDDEN void ns_fault_post(struct ns_conn *c, int d, ssize_t r);
/* For the waits: NS_FW_NONE, NS_FW_GATED (input held until *until; 0 =
 * for ever) or NS_FW_READY (input to report now, with *ev of NS_FWE_*). */
enum { NS_FW_NONE, NS_FW_GATED, NS_FW_READY };
#define NS_FWE_ERR 0x1
#define NS_FWE_HUP 0x2
#define NS_FWE_RDHUP 0x4
NS_HIDDEN int ns_fault_wait(struct ns_conn *c, monotime now, monotime *until, int *ev);
/* getsockopt(SO_ERROR): 1 when an injected reset is due and not yet told
 * (it is now, and counted), as the kernel reports a reset there. */
NS_HIDDEN int ns_fault_so_error(struct ns_conn *c);

/* trace.c: up to max frames of the calling code, the shim's own skipped,
 * as "function+0xoff (object)". Returns how many. */
NS_HIDDEN unsigned ns_trace_frames(char frames[][150], unsigned max);

/* names.c */
/* The name the program resolved addr from, into out: 0, or -1 (none). A
 * process that never resolved a name pays one load. now: ns_now(). */
extern unsigned ns_names_used NS_HIDDEN;
extern uint64_t ns_names_gen NS_HIDDEN;   /* atomic: changes whenever a name is remembered */
NS_HIDDEN int ns_names_lookup_map(int family, const void *addr, char *out, size_t len, monotime now);
static inline int ns_names_lookup(int family, const void *addr, char *out, size_t len, monotime now)
{
	if (!__atomic_load_n(&ns_names_used, __ATOMIC_ACQUIRE))
		return -1;
	return ns_names_lookup_map(family, addr, out, len, now);
}
NS_HIDDEN int ns_getaddrinfo(const char *node, const char *service, const struct addrinfo *hints, struct addrinfo **res);
NS_HIDDEN struct hostent *ns_gethostbyname(const char *name);
NS_HIDDEN struct hostent *ns_gethostbyname2(const char *name, int af);
NS_HIDDEN int ns_gethostbyname_r(const char *name, struct hostent *ret, char *buf, size_t buflen, struct hostent **result, int *h_errnop);
NS_HIDDEN int ns_gethostbyname2_r(const char *name, int af, struct hostent *ret, char *buf, size_t buflen, struct hostent **result, int *h_errnop);

NS_HIDDEN int ns_poll(struct pollfd *fds, nfds_t n, int timeout_ms);
NS_HIDDEN int ns_ppoll(struct pollfd *fds, nfds_t n, const struct timespec *ts, const sigset_t *mask);
NS_HIDDEN int ns_poll_chk(struct pollfd *fds, nfds_t n, int timeout_ms, size_t fdslen);
NS_HIDDEN int ns_ppoll_chk(struct pollfd *fds, nfds_t n, const struct timespec *ts, const sigset_t *mask, size_t fdslen);
NS_HIDDEN int ns_select(int nfds, fd_set *r, fd_set *w, fd_set *e, struct timeval *tv);
NS_HIDDEN int ns_pselect(int nfds, fd_set *r, fd_set *w, fd_set *e, const struct timespec *ts, const sigset_t *mask);
NS_HIDDEN int ns_epoll_ctl(int epfd, int op, int fd, struct epoll_event *ev);
NS_HIDDEN int ns_epoll_wait(int epfd, struct epoll_event *ev, int max, int timeout_ms);
NS_HIDDEN int ns_epoll_pwait(int epfd, struct epoll_event *ev, int max, int timeout_ms, const sigset_t *mask);
NS_HIDDEN int ns_epoll_pwait2(int epfd, struct epoll_event *ev, int max, const struct timespec *ts, const sigset_t *mask);

#endif

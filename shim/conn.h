/* conn.h -- a governed connection's record, and the fd table that leads
 * to it (fdtab.c). */
#ifndef NS_CONN_H
#define NS_CONN_H

#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "../policy/policy.h"
#include "../policy/destaddr.h"
#include "../policy/h1.h"
#include "../policy/h1end.h"
#include "base.h"

/**** per-connection state ****/

/* One direction's receive or send timeout: the program's own, and what the
 * shim put into the kernel (SO_RCVTIMEO/SO_SNDTIMEO) on its behalf. READ
 * and TOTAL fire (the kernel's EAGAIN is the shim's ETIMEDOUT). */
enum { NS_SRC_NONE = 0, NS_SRC_PROGRAM, NS_SRC_SHIM_READ, NS_SRC_SHIM_TOTAL };
static inline int ns_src_fires(uint32_t src)
{
	return src == NS_SRC_SHIM_READ || src == NS_SRC_SHIM_TOTAL;
}
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
/* ...a send waits for rate's token (NS_C_PACED): the waits hold its
 * output back until pace_until. Either makes the waits look closer. */
#define NS_ATTN_PACE 0x200u
#define NS_ATTN_GATE (NS_ATTN_FAULT | NS_ATTN_PACE)

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
/* both: HTTP/2 (its preface was sent): never HTTP/1-style turns; its
 * streams are its exchanges (h2conn.c) */
#define NS_C_H2          (NS_C_HTTP | NS_C_NOTHTTP)
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
/* A queued connect (shape.c) ran out of queue_timeout: the kernel refuses
 * it (the local refusing target); the program's next connect() is told so */
#define NS_C_THROTTLED 0x400000u
/* shape.c: the connection holds a place (c->place); a non-blocking connect
 * waits for one (held as an injected delay is: fault.c) */
#define NS_C_PLACE 0x800000u
#define NS_C_QUEUED 0x1000000u
/* The answer is followed past its status line (exchange.c): the headers of
 * a 429 or 503 for Retry-After, its end for a connection holding a place
 * (c->follow says which) */
#define NS_C_HDRS 0x2000000u
/* shape.c: a send that starts a request waits for rate's token until
 * pace_until (a non-blocking one: EAGAIN, and not writable in the waits) */
#define NS_C_PACED 0x4000000u
/* ...its connect took a token (tok_tat): its first bytes out count it from then */
#define NS_C_TOKEN 0x8000000u
/* shimctl inject --existing: a runtime fault this connection may get is
 * new; its next data call looks (faultrt.c, fault.c) */
#define NS_C_RTCHECK 0x10000000u
/* An HTTP/2 connection in clear text whose frames are followed (h2conn.c):
 * every byte it sends and reads, both ways, goes through the reader (over
 * TLS the record calls see them: tls.c) */
#define NS_C_H2READ      0x20000000u
/* shape.c: this idle keep-alive connection gave its place to a connect of
 * the same process that had to wait (shut down: the program sees a
 * server's idle close); a send on it fails EPIPE, a stale reuse */
#define NS_C_GIVENUP 0x40000000u
/* ...a send that starts an exchange on a connection holding a place is on
 * its way to the kernel: its place is not given up under it */
#define NS_C_OUTGOING 0x80000000u
#define NS_FOLLOW_RA     1u
#define NS_FOLLOW_END    2u
#define NS_FOLLOW_NEVER  4u  /* pipelined (a request sent before the last answer's end): never framed again */
#define NS_FOLLOW_FRESH  8u  /* NS_FOLLOW_END's reader not begun: its first read begins it (h1end is MORE) */
#define NS_FOLLOW_HEAD   16u /* ...its request was HEAD */
/* A send or read that is a turn of the exchange (exchange.c) */
#define NS_C_TURN        (NS_C_XNEXT | NS_C_PARSE | NS_C_SNIFF | NS_C_HDRS | NS_C_H2READ)
#define NS_C_PRE (NS_C_TOTAL | NS_C_INTR | NS_C_EXPIRED | NS_C_FAULT | NS_C_RTCHECK | NS_C_GIVENUP)
#define NS_C_PRE_DIR(d) \
	(NS_C_PRE | NS_C_H2READ | ((d) == NS_OUT ? (NS_C_XNEXT | NS_C_SNIFF | NS_C_PACED) : (NS_C_PARSE | NS_C_HDRS)))
#define NS_C_POST (NS_C_CONNECTING | NS_C_FAULT | NS_C_WAITING | NS_C_INTR)

/* Injected faults of one connection (fault.c): set at connect, read only
 * while NS_ATTN_FAULT is set in the connection's expired word. */
struct ns_cfault {
	uint32_t end_kind;          /* NS_F_STALL, _RESET, _CLOSE, _STATUS, or 0 */
	uint32_t status;            /* status: the code */
	uint64_t after;             /* stall/reset/close: bytes that arrive first */
	int64_t latency_ns;         /* latency: 0 = none */
	int64_t jitter_ns;          /* latency: each delay's standard deviation, 0 = none */
	uint64_t rate;              /* bandwidth: bytes/s, 0 = none */
	uint64_t frag;              /* fragment: the most bytes a read returns, 0 = any */
	uint32_t tlsfail;           /* tlsfail: the TLS handshake rejects the server's certificate (tls.c) */
	uint64_t got;               /* bytes the program has received */
	monotime resp_due;          /* latency: input held until then */
	uint32_t awaiting;          /* latency: sent, the answer not yet begun */
	uint32_t sent;              /* status: the request was sent (and swallowed) */
	monotime bw_start;          /* bandwidth: the clock of the rate */
	monotime delay_until;       /* delay: the real connect starts then; 0 = done */
	uint32_t synth_off;         /* status: bytes of the answer handed out */
	uint32_t end_done;          /* reset: reported (then end of stream) */
	uint32_t shut_rd;           /* the program shut its reading (shutdown): what is held ends the stream */
	monotime end_at;            /* reset after 0: not before then (see fault.c) */
	int32_t rt_idx;             /* runtime fault record, -1 = policy or shimrun */
	uint32_t rt_order;          /* ...its order (inject --existing: a later one replaces it) */
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
	uint64_t peer_a[2]; /* word by word (ST/LD): a pooled record is read by a thread that held its last use */
	/* the exchange in progress (exchange.c; its thread's slow path only) */
	monotime xstart;          /* when its request went out; 0 = the connect's */
	monotime pre_now;         /* the clock rate's token was taken by, just before its request's send: the
				   * request's start (exchange.c), no second clock read; 0 = none */
	char sniffed[NS_H1_SNIFF_MAX]; /* the request's first bytes while they may begin a method */
	uint32_t snlen;
	struct ns_h1status h1s;   /* its answer's status line (policy/h1.h) */
	struct ns_h1ra h1ra;      /* a 429/503's Retry-After */
	uint32_t xstatus;         /* a 429/503 whose outcome waits for its headers (Retry-After), 0 = none */
	uint32_t fb_us;           /* the last first-byte time counted (us): an h2c server's preface read
				   * before the client's takes it back (exchange.c) */
	uint64_t own_ms;          /* atomic: when the connection's own success (a TLS handshake, an h2
				   * connect) was counted (ms), taken back by its first request's
				   * outcome (outcome.c); 0 = none */
	uintptr_t xthread;        /* the thread that started the last exchange (pthread_self) */
	/* what the answer is followed for past its status line while NS_C_HDRS
	 * is set (exchange.c): NS_FOLLOW_RA its headers for Retry-After,
	 * NS_FOLLOW_END its end (h1end: a connection holding a place may be
	 * given up only once its answer was read to its framed end) */
	uint32_t follow;
	struct ns_h1end h1end;
	/* shaping (shape.c): the place held under max_connections (valid with
	 * NS_C_PLACE; -1 once given back) */
	int32_t place;            /* atomic */
	int32_t place_slot;       /* the slot it is a place of */
	uint32_t place_holder;    /* the process that took it */
	monotime queue_start;     /* a queued non-blocking connect: since then, */
	monotime queue_deadline;  /* ...until then (with NS_C_QUEUED) */
	monotime queue_seen;      /* atomic: the last time a wait looked for its place */
	monotime pace_until;      /* atomic: rate's next token is due then (a queued connect, NS_C_PACED) */
	uint64_t tok_tat;         /* the connect's token (NS_C_TOKEN): the bucket's time it left, */
	uint64_t tok_base;        /* ...and the time it was counted from (us) */
	/* max_requests (reqs.c): the places of the requests in flight on it,
	 * taken at a request's start (an h2 stream's HEADERS) and given back at
	 * its answer's framed end (the stream's end) or the record's; its queue
	 * entry while it waits */
	uint32_t rq;        /* atomic: the places held, a bit each (HTTP/1: one; h2: one a stream) */
	int32_t rq_slot;    /* the slot it is a place of */
	uint32_t rq_holder; /* the process that took it */
	uint32_t rq_qi;     /* 1 + its queue entry (0: none) */
	uint64_t rq_qword;  /* atomic: that entry's word; 0 = not waiting */
	monotime rq_since;  /* when it began to wait */
	/* the shadow policy (shadow.c): its settings and slot for this
	 * connection, valid while shadow_gen is gen (set at connect only when a
	 * shadow policy is loaded, so a reused record's are ignored) */
	const struct ns_settings *shadow_set;
	int32_t shadow_slot; /* -1: the shadow's breaker turned the connect away */
	uint32_t shadow_gen;
	/* HTTP/2 (h2conn.c): its streams' reader, taken when the preface goes
	 * out, given back when the record is freed; NULL for every other connection */
	struct ns_h2c *h2; /* atomic */
	struct ns_conn *next_free;
};
_Static_assert(NS_KEY_MAX % 8 == 0, "copied in words");
/* datapath.c tells "an h2c connection, or no protocol known yet" by one
 * compare: H2READ above both HTTP bits */
_Static_assert(NS_C_H2READ > (NS_C_HTTP | NS_C_NOTHTTP), "H2READ above the protocol bits");

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

/* The connection behind fd, or NULL: the one lookup every wrapper makes.
 * The table is made by a process's first socket, perhaps while another
 * thread is in a wrapper: its pointer is read after the size that says it
 * is there (a compiler fence, no instruction: x86-64 keeps loads in order;
 * fdtab.c stores the pointer, then the size with release). */
static inline struct ns_conn *ns_conn_of(int fd)
{
	uintptr_t v;

	if ((unsigned)fd >= ns_fdmax)
		return NULL;
	__atomic_signal_fence(__ATOMIC_ACQUIRE);
	v = __atomic_load_n(&ns_fdtab[fd], __ATOMIC_ACQUIRE);
	return (v & NS_TAG) ? NULL : (struct ns_conn *)v;
}

static inline uintptr_t ns_fd_get(int fd)
{
	if ((unsigned)fd >= ns_fdmax)
		return 0;
	__atomic_signal_fence(__ATOMIC_ACQUIRE); /* (as ns_conn_of) */
	return __atomic_load_n(&ns_fdtab[fd], __ATOMIC_ACQUIRE);
}

/* The shim's own file I/O, straight to libc (see nointercept.h). */

NS_HIDDEN void ns_fd_init(void);
/* fd past the table: 1, unless there was none yet and v (nonzero: worth an
 * entry) made it so fd fits now (the table is made by the first socket). */
NS_HIDDEN int ns_fd_beyond(int fd, uintptr_t v);
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
	    (__atomic_signal_fence(__ATOMIC_ACQUIRE), !__atomic_load_n(&ns_fdtab[fd], __ATOMIC_RELAXED))) {
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
/* Is fd still the socket c was made for? (a close the shim could not see
 * may have freed the number). Drops fd's entry when not. errno is kept. */
NS_HIDDEN int ns_conn_still(int fd, struct ns_conn *c);
/* Drop the entries of fds first..last (both included), as their closing
 * behind the shim's back (close_range, closefrom, fclose) requires. */
NS_HIDDEN void ns_fd_forget_range(unsigned first, unsigned last);
/* 1 inside a vfork child: it must not touch the parent's descriptor
 * state. One load until the program first calls vfork, then a getpid. */
extern int ns_vforked NS_HIDDEN;
NS_HIDDEN void *ns_vfork_bind(void);   /* libc's vfork for the exported stub */
NS_HIDDEN int ns_vfork_pid_differs(void);
/* This process's pid, kept across fork (fdtab.c): read with no system call */
extern pid_t ns_own_pid NS_HIDDEN;
static inline int ns_in_vfork_child(void)
{
	return __atomic_load_n(&ns_vforked, __ATOMIC_RELAXED) && ns_vfork_pid_differs();
}

static inline uint32_t ns_exp_kind(struct ns_conn *c)
{
	return __atomic_load_n(&c->expired, __ATOMIC_ACQUIRE) & NS_EXP_MASK;
}

/* Set a time field and the flag bit that says it is set: the field first,
 * so a thread that sees the bit finds the value (or a newer one). */
static inline void ns_set_flagged(struct ns_conn *c, monotime *field, monotime v, uint32_t bit)
{
	__atomic_store_n(field, v, __ATOMIC_RELAXED);
	if (v)
		__atomic_fetch_or(&c->flags, bit, __ATOMIC_RELEASE);
	else
		__atomic_fetch_and(&c->flags, ~bit, __ATOMIC_RELEASE);
}

#define ns_set_rd_wait(c, v) ns_set_flagged((c), &(c)->rd_wait_start, (v), NS_C_WAITING)
#define ns_set_intr(c, v) ns_set_flagged((c), &(c)->intr_deadline, (v), NS_C_INTR)


/* A fired connect deadline is told once (connect() or SO_ERROR), as the
 * kernel tells its own: 1 for the one caller that takes it. */
static inline int ns_take_err_pending(struct ns_conn *c)
{
	return (__atomic_fetch_and(&c->flags, ~NS_C_ERR_PENDING, __ATOMIC_RELAXED) & NS_C_ERR_PENDING) != 0;
}


/* A fresh attempt on c: its clock, deadlines and outcome start over (the
 * total budget runs from the first attempt). */
static inline __attribute__((always_inline)) void ns_conn_clock(struct ns_conn *c, const struct ns_settings *set, monotime now)
{
	ST(c->start, now);
	ST(c->outcome, 0);
	ST(c->xstart, 0);
	ST(c->rd_wait_start, 0);
	ST(c->connect_deadline, (LD(c->flags) & NS_C_ENFORCE) && set->connect_timeout_ms ?
		now + (int64_t)set->connect_timeout_ms * 1000000 : 0);
}

/* The epoll registry (wait_epoll.c) keeps registrations by fd number, so
 * the fd table tells it of a number that now stands for another connection
 * and of one that closed: through these, set before its first registration,
 * and only while ns_ep_count (its registrations) is not 0, one load. */
extern unsigned ns_ep_count NS_HIDDEN;
extern void (*ns_fd_watch_note)(int fd) NS_HIDDEN;
extern void (*ns_fd_watch_forget)(int fd) NS_HIDDEN;
/* A record ends (its last reference gone) holding a place: shape.c gives
 * it back through this, set when the process first takes one. */
extern void (*ns_conn_end_hook)(struct ns_conn *c) NS_HIDDEN;
extern void (*ns_req_end_hook)(struct ns_conn *c) NS_HIDDEN; /* reqs.c: a request's place back */
/* ...holding an HTTP/2 reader: h2conn.c takes it back through this, set
 * before its first reader is given to a record */
extern void (*ns_conn_h2_hook)(struct ns_conn *c) NS_HIDDEN;
/* The table could not be reserved (the shim passes every call through;
 * the configuration's loading says so). */
extern int ns_fdtab_failed NS_HIDDEN;

#endif

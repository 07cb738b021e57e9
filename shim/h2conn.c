/* h2conn.c -- an HTTP/2 connection's streams as its exchanges
 * (docs/design.md, "HTTP/2 and gRPC").
 *
 * Once the client's preface goes out (exchange.c sniffs it, in clear text
 * or in TLS plaintext), every byte the program sends and reads on the
 * connection passes through policy/h2.c's reader, whose events are the
 * streams' outcomes: a stream is an exchange from its request's HEADERS;
 * its first byte is the server's first frame on it; its outcome is its
 * final :status against failure_status (a 429/503's Retry-After cools the
 * destination down), or for gRPC the grpc-status of its trailers against
 * grpc_failure_status. A stream the server refused (REFUSED_STREAM, above a
 * GOAWAY) is h2_unprocessed, no outcome; a reset or the connection's end
 * fails the streams still open. Anything the reader cannot follow makes the
 * connection h2_blind: its connect outcome only, never a guessed status.
 *
 * The reader is about 2.5 KiB; it is taken from a pool mapped on first use
 * (nothing in .bss), held while the connection's record lives. Two threads
 * may send and read one connection at once: the reader is fed under a
 * per-connection spin lock held only over pure code. The events that count
 * (which log and write the table) are queued under it and counted after it
 * is given back. A signal handler that interrupts its own thread inside the
 * reader does not wait for itself: its bytes are lost to the reader, which
 * goes blind. A child forked while another thread fed the reader takes the
 * lock over, and goes blind too. */
#include "h2conn.h"

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

#include "../policy/h2.h"
#include "config.h"
#include "lock.h"
#include "outcome.h"
#include "shape.h"
#include "reqs.h"

struct ns_h2c {
	uint32_t lock; /* atomic: 0, or the pid of the process a thread of which feeds it */
	uint32_t gap;  /* atomic: bytes went by unseen (a handler's, sendfile's): go blind */
	struct ns_h2c *next_free;
	uint32_t decided[NS_H2_STREAMS / 32]; /* a bit per place: the stream's outcome was counted at its headers */
	monotime start[NS_H2_STREAMS];        /* when each place's stream opened */
	uint32_t first_us[NS_H2_STREAMS];     /* ...and 1 + the µs to its first byte, 0 = not yet */
	struct ns_h2 h;
};

/**** the pool ****/

#define CHUNK_BYTES (64u * 1024)

static struct ns_h2c *pool_free;
static uint32_t pool_lock; /* atomic: over the free list only (no system call under it) */

static void pool_take_lock(void)
{
	while (__atomic_exchange_n(&pool_lock, 1u, __ATOMIC_ACQUIRE))
		while (__atomic_load_n(&pool_lock, __ATOMIC_RELAXED))
			__builtin_ia32_pause();
}

static void pool_give_lock(void)
{
	__atomic_store_n(&pool_lock, 0u, __ATOMIC_RELEASE);
}

static void push_free(struct ns_h2c *x)
{
	pool_take_lock();
	x->next_free = pool_free;
	pool_free = x;
	pool_give_lock();
}

/* A reader, or NULL (no memory: the connection is then blind). The lock
 * bit keeps a handler off a list its own thread is changing. */
static struct ns_h2c *take(void)
{
	struct ns_h2c *x = NULL;
	char *m;

	if (!ns_lock_mine(NS_LOCK_H2))
		return NULL;
	pool_take_lock();
	if (pool_free) {
		x = pool_free;
		pool_free = x->next_free;
	}
	pool_give_lock();
	ns_lock_done(NS_LOCK_H2);
	if (x)
		return x;
	/* a new chunk, mapped with no lock held */
	m = mmap(NULL, CHUNK_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED) {
		ns_log(NS_LOG_WARN, "cannot map HTTP/2 readers (%s); h2 connections have connect outcomes only",
		       strerror(errno));
		return NULL;
	}
	for (size_t off = sizeof(*x); off + sizeof(*x) <= CHUNK_BYTES; off += sizeof(*x))
		if (ns_lock_mine(NS_LOCK_H2)) {
			push_free((struct ns_h2c *)(m + off));
			ns_lock_done(NS_LOCK_H2);
		}
	return (struct ns_h2c *)m;
}

/**** feeding it ****/

/* Lock the reader for this thread: 1, or 0 when this thread holds it
 * already (a signal handler inside the feed: its bytes are a gap). */
static int lock_x(struct ns_h2c *x)
{
	uint32_t me = (uint32_t)ns_own_pid;
	unsigned spins = 0;

	if (!ns_lock_mine(NS_LOCK_H2)) {
		__atomic_store_n(&x->gap, 1u, __ATOMIC_RELAXED);
		return 0;
	}
	for (;;) {
		uint32_t v = 0;

		if (__atomic_compare_exchange_n(&x->lock, &v, me, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
			return 1;
		if (v != me && __atomic_compare_exchange_n(&x->lock, &v, me, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) {
			/* held by the process this one was forked from: its
			 * thread is not here, and what it left may be half-done */
			__atomic_store_n(&x->gap, 1u, __ATOMIC_RELAXED);
			return 1;
		}
		if (++spins % 64 == 0)
			sched_yield(); /* (a thread of ours feeds it: pure code, it gives it back soon) */
		else
			__builtin_ia32_pause();
	}
}

static void unlock_x(struct ns_h2c *x)
{
	__atomic_store_n(&x->lock, 0u, __ATOMIC_RELEASE);
	ns_lock_done(NS_LOCK_H2);
}

/* Lock x as c's reader: 1, or 0 when it no longer is (the program's close
 * raced this call and gave it back, maybe to another connection, which a
 * reader's pointer outliving it must not touch) or this thread holds it. */
static int lock_for(struct ns_conn *c, struct ns_h2c *x)
{
	if (!lock_x(x))
		return 0;
	if (__atomic_load_n(&c->h2, __ATOMIC_ACQUIRE) == x)
		return 1;
	unlock_x(x);
	return 0;
}

/* An event that counts, kept from the feed (under the lock) to its count
 * (after it): everything it needs is copied. */
struct qev {
	uint8_t type;
	uint8_t grpc;
	uint8_t decided; /* the stream's outcome was counted at its headers already */
	uint8_t why;     /* BLIND: NS_H2_WHY_* */
	uint8_t goaway;  /* REJECTED: by the client's GOAWAY */
	uint16_t status;
	int16_t grpc_status;
	int32_t pushback_ms; /* DONE: gRPC's server pushback, -1 = none */
	uint32_t code;
	monotime start, first;
	char retry_after[NS_HPACK_VAL_MAX + 1];
};

#define QMAX 32

struct feedctx {
	struct ns_conn *c;
	struct ns_h2c *x;
	int kind, err; /* the connection's end (ns_h2c_end): how its open streams fail */
	int failed;    /* streams failed by it */
	uint32_t ends; /* streams that ended: their places (max_requests) back at the flush */
	unsigned n;
	struct qev q[QMAX];
};

static void count(struct feedctx *fc, const struct qev *e);

static int blind_said; /* atomic: this process said a blind connection at warn */

static const char *const why_text[] = {
	[NS_H2_WHY_NONE] = "?",
	[NS_H2_WHY_STREAMS] = "more than 256 streams open at once",
	[NS_H2_WHY_FRAMING] = "a frame it cannot follow",
	[NS_H2_WHY_HPACK] = "a header block it cannot decode",
	[NS_H2_WHY_PREFACE] = "no client preface",
	[NS_H2_WHY_GAP] = "bytes moved that it was not shown",
	[NS_H2_WHY_LATE] = "the connection began before its reader",
	[NS_H2_WHY_MEMORY] = "no memory for its reader",
};

/* An HTTP/2 error code by name (RFC 9113 7), or its number. */
static const char *code_name(uint32_t code, char *buf, size_t n)
{
	static const char *const names[] = { "NO_ERROR",
					     "PROTOCOL_ERROR",
					     "INTERNAL_ERROR",
					     "FLOW_CONTROL_ERROR",
					     "SETTINGS_TIMEOUT",
					     "STREAM_CLOSED",
					     "FRAME_SIZE_ERROR",
					     "REFUSED_STREAM",
					     "CANCEL",
					     "COMPRESSION_ERROR",
					     "CONNECT_ERROR",
					     "ENHANCE_YOUR_CALM",
					     "INADEQUATE_SECURITY",
					     "HTTP_1_1_REQUIRED" };

	if (code < sizeof(names) / sizeof(names[0]))
		return names[code];
	snprintf(buf, n, "%u", code);
	return buf;
}

/* The reader's events, under the lock: what only marks is done here, what
 * counts is queued (or, with the queue full, counted at once). */
static void on_event(void *arg, const struct ns_h2_event *ev)
{
	struct feedctx *fc = arg;
	struct ns_h2c *x = fc->x;
	unsigned p = ev->place < NS_H2_STREAMS ? ev->place : 0;
	uint32_t bit = 1u << (p % 32), *word = &x->decided[p / 32];
	struct qev e;

	switch (ev->type) {
	case NS_H2_OPEN:
		x->start[p] = ns_now();
		x->first_us[p] = 0;
		*word &= ~bit;
		return;
	case NS_H2_FIRST: {
		uint64_t us = (uint64_t)(ns_now() - x->start[p]) / 1000;

		x->first_us[p] = us < UINT32_MAX - 1 ? (uint32_t)us + 1 : UINT32_MAX;
		if (LD(fc->c->slot) >= 0 && ns_breakers_ok)
			ns_table_latency(&ns_breakers, LD(fc->c->slot), 1, us);
		return;
	}
	case NS_H2_CANCELLED:
		fc->ends++;
		return; /* the program gave up on it: its business */
	}
	if (ev->type != NS_H2_HEADERS && ev->type != NS_H2_BLIND)
		fc->ends++; /* DONE, FAILED, REJECTED, UNPROCESSED: the stream ended */
	memset(&e, 0, sizeof(e));
	e.type = ev->type;
	e.grpc = ev->grpc;
	e.status = ev->status;
	e.grpc_status = ev->grpc_status;
	e.pushback_ms = ev->type == NS_H2_DONE ? ev->pushback_ms : -1;
	e.code = ev->code;
	e.why = ev->why;
	e.goaway = ev->goaway;
	if (ev->type != NS_H2_BLIND) {
		e.start = x->start[p];
		e.first = x->first_us[p] ? x->start[p] + (monotime)(x->first_us[p] - 1) * 1000 : 0;
		e.decided = (*word & bit) != 0;
	}
	if (ev->type == NS_H2_HEADERS) {
		/* a gRPC answer is decided by its trailers; any other by this */
		if (!(ev->grpc && (ev->status == 200 || ev->status == 0)))
			*word |= bit;
		if (ev->retry_after)
			snprintf(e.retry_after, sizeof(e.retry_after), "%s", ev->retry_after);
	}
	if ((ev->type == NS_H2_FAILED || ev->type == NS_H2_REJECTED) && !e.decided)
		fc->failed++;
	if (fc->n < QMAX)
		fc->q[fc->n++] = e;
	else
		count(fc, &e);
}

/* One queued event, counted (no lock held but where the queue was full). */
static void count(struct feedctx *fc, const struct qev *e)
{
	struct ns_conn *c = fc->c;
	const struct ns_settings *set = ns_conn_set(c);
	int slot = LD(c->slot), ok = slot >= 0 && ns_breakers_ok;
	struct ns_answer a = { 0 };
	char said[48];

	switch (e->type) {
	case NS_H2_HEADERS: {
		unsigned code = e->status;
		int fails = ns_status_fails(set, code);

		if (e->grpc && (code == 200 || code == 0))
			return; /* its trailers decide */
		if ((code == 429 || code == 503) && set->retry_after && e->retry_after[0] &&
		    ns_conn_retry_after(c, e->retry_after))
			fails = 0; /* honoured: a cooldown, not a failure */
		a.status = a.http_status = code;
		a.http_fails = fails;
		ns_stream_outcome(c, fails ? NS_OUT_FAILURE : NS_OUT_SUCCESS, 0, &a, e->start, e->first);
		return;
	}
	case NS_H2_DONE: {
		int g = e->grpc_status, fails;

		if (e->decided)
			return;
		if (!e->grpc) {
			/* ended with no final header block: the server answered */
			a.status = e->status;
			ns_stream_outcome(c, NS_OUT_SUCCESS, 0, &a, e->start, e->first);
			return;
		}
		if (g < 0)
			g = 2; /* no grpc-status: UNKNOWN, as gRPC's clients take it */
		fails = ns_grpc_fails(set, (unsigned)g);
		/* the server's pushback (grpc-retry-pushback-ms), honoured as a
		 * Retry-After is: a cooldown, not a failure */
		if (fails && set->retry_after && e->pushback_ms > 0 && ns_conn_cooldown(c, (uint64_t)e->pushback_ms, 1))
			fails = 0;
		a.http_status = e->status ? e->status : 200;
		a.grpc = (unsigned)g + 1;
		a.grpc_fails = fails;
		/* by name, as gRPC's own tools say it: "gRPC UNAVAILABLE (14)" */
		if (ns_grpc_name((unsigned)g))
			snprintf(said, sizeof(said), "gRPC %s (%d)", ns_grpc_name((unsigned)g), g);
		else
			snprintf(said, sizeof(said), "gRPC %d", g);
		a.said = said;
		ns_stream_outcome(c, fails ? NS_OUT_FAILURE : NS_OUT_SUCCESS, 0, &a, e->start, e->first);
		return;
	}
	case NS_H2_FAILED:
		if (e->decided)
			return;
		if (e->code == NS_H2_CONN_ENDED) {
			ns_stream_outcome(c, fc->kind, fc->err, NULL, e->start, e->first);
		} else if (e->code == NS_H2_BLOCK_CUT) {
			/* the program closed inside the answer's header block: what
			 * its :status said, if it came, counts as the status it is */
			a.status = a.http_status = e->status;
			a.http_fails = e->status && ns_status_fails(set, e->status);
			snprintf(said, sizeof(said), "header block cut%s%.0u", e->status ? ", :status " : "",
				 e->status);
			a.said = said;
			ns_stream_outcome(c, NS_OUT_FAILURE, 0, &a, e->start, e->first);
		} else {
			char num[12];

			snprintf(said, sizeof(said), "RST_STREAM %s", code_name(e->code, num, sizeof(num)));
			a.said = said;
			ns_stream_outcome(c, NS_OUT_FAILURE, ECONNRESET, &a, e->start, e->first);
		}
		return;
	case NS_H2_REJECTED: {
		char num[12];

		if (e->decided)
			return;
		/* the client ended it with a code that says the answer was
		 * wrong (a header block it would not take, a flood) */
		snprintf(said, sizeof(said), "client %s %s", e->goaway ? "GOAWAY" : "RST_STREAM",
			 code_name(e->code, num, sizeof(num)));
		a.status = e->status;
		a.said = said;
		ns_stream_outcome(c, NS_OUT_FAILURE, EPROTO, &a, e->start, e->first);
		return;
	}
	case NS_H2_UNPROCESSED:
		if (!e->decided && ok)
			ns_table_h2_count(&ns_breakers, slot, NS_H2_COUNT_UNPROCESSED);
		return;
	case NS_H2_BLIND: {
		/* said once a process at the default level, then at info */
		int level = __atomic_exchange_n(&blind_said, 1, __ATOMIC_RELAXED) ? NS_LOG_INFO : NS_LOG_WARN;

		__atomic_fetch_and(&c->flags, ~NS_C_H2READ, __ATOMIC_RELAXED);
		if (ok)
			ns_table_h2_count(&ns_breakers, slot, NS_H2_COUNT_BLIND);
		if (unlikely(ns_log_level >= level)) {
			char key[NS_KEY_MAX];

			ns_conn_key(c, key);
			ns_log(level, "%s: HTTP/2 connection not followed (h2_blind: %s): its connect outcome only%s",
			       key, e->why < sizeof(why_text) / sizeof(why_text[0]) ? why_text[e->why] : "?",
			       level == NS_LOG_WARN ? " (said once; the others at info)" : "");
		}
		return;
	}
	}
}

static void flush(struct feedctx *fc)
{
	int saved = errno;

	for (unsigned i = 0; i < fc->n; i++)
		count(fc, &fc->q[i]);
	fc->n = 0;
	if (fc->ends) {
		ns_req_streams_done(fc->c, fc->ends); /* (no lock held here: a waiter may be woken) */
		fc->ends = 0;
	}
	errno = saved;
}

/* A gap seen while the lock was held: blind from here. */
static void check_gap(struct feedctx *fc)
{
	struct ns_h2c *x = fc->x;

	if (__atomic_exchange_n(&x->gap, 0u, __ATOMIC_RELAXED) && !x->h.blind) {
		struct ns_h2_event ev = { .type = NS_H2_BLIND,
					  .why = NS_H2_WHY_GAP,
					  .place = NS_H2_STREAMS,
					  .grpc_status = -1,
					  .retry_after = "" };

		on_event(fc, &ev);
		x->h.blind = 1;
	}
}

static void ctx_init(struct feedctx *fc, struct ns_conn *c, struct ns_h2c *x)
{
	fc->c = c;
	fc->x = x;
	fc->kind = NS_OUT_FAILURE;
	fc->err = 0;
	fc->failed = 0;
	fc->ends = 0;
	fc->n = 0;
}

/* The lock is given back to count the queue, and taken again: 1, or 0
 * when it could not be (the lock is then not held). */
static int requeue(struct feedctx *fc)
{
	unlock_x(fc->x);
	flush(fc);
	return lock_for(fc->c, fc->x);
}

/* Bytes fed with the lock held; where the queue fills, what it holds is
 * counted with the lock given back (no system call under it) and the rest
 * fed after. 1 with the lock held, or 0 without it (as requeue). */
static int feed_locked(struct feedctx *fc, int d, const void *buf, size_t n)
{
	const uint8_t *p = buf;

	for (;;) {
		size_t used;

		fc->x->h.room = QMAX - fc->n;
		used = d == NS_OUT ? ns_h2_out(&fc->x->h, p, n, on_event, fc) : ns_h2_in(&fc->x->h, p, n, on_event, fc);
		p += used;
		n -= used;
		if (!n)
			return 1;
		if (!requeue(fc))
			return 0;
	}
}

/**** the entry points ****/

/* A new reader, or NULL (no memory). */
static struct ns_h2c *new_reader(void)
{
	struct ns_h2c *x;

	if (unlikely(!__atomic_load_n(&ns_conn_h2_hook, __ATOMIC_RELAXED))) {
		__atomic_store_n(&ns_conn_h2_hook, ns_h2c_release, __ATOMIC_RELEASE);
	}
	x = take();
	/* made anew under its lock (never reset: a pointer that outlived its
	 * last connection may hold it; it then finds it is not its own) */
	if (x && !lock_x(x))
		return NULL; /* (a handler inside this thread's feed: take() said no first) */
	if (x) {
		x->gap = 0;
		memset(x->decided, 0, sizeof(x->decided));
		ns_h2_init(&x->h);
		unlock_x(x);
	}
	return x;
}

void ns_h2c_start(struct ns_conn *c, const char *held, size_t nheld, const void *buf, size_t n, int tls,
		  int seen_before)
{
	struct ns_h2c *x = __atomic_load_n(&c->h2, __ATOMIC_ACQUIRE), *none = NULL;
	struct feedctx fc;
	int saved = errno, begun = 0;

	/* (one made before this write, ns_h2c_before_write, is this one's) */
	if (x && lock_for(c, x)) {
		begun = x->h.preface || x->h.blind;
		if (!begun && seen_before)
			x->h.blind = 1;
		unlock_x(x);
	}
	if (begun)
		goto out; /* a second preface on one connection: the reader has it */
	if (!x && !seen_before && (x = new_reader()) != NULL &&
	    !__atomic_compare_exchange_n(&c->h2, &none, x, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
		push_free(x);
		goto out; /* another thread's write started it */
	}
	ctx_init(&fc, c, x);
	if (!x || seen_before) {
		/* nothing to read it with, or its beginning was not h2: blind */
		struct qev e = { .type = NS_H2_BLIND, .why = x ? NS_H2_WHY_LATE : NS_H2_WHY_MEMORY };

		count(&fc, &e);
		goto out;
	}
	if (!tls)
		__atomic_fetch_or(&c->flags, NS_C_H2READ, __ATOMIC_RELAXED);
	if (lock_for(c, x) && feed_locked(&fc, NS_OUT, held, nheld) && (!buf || feed_locked(&fc, NS_OUT, buf, n))) {
		check_gap(&fc);
		unlock_x(x);
	}
	flush(&fc);
out:
	errno = saved;
}

void ns_h2c_feed(struct ns_conn *c, int d, const void *buf, size_t n)
{
	struct ns_h2c *x = __atomic_load_n(&c->h2, __ATOMIC_ACQUIRE);
	struct feedctx fc;

	if (!x)
		return;
	ctx_init(&fc, c, x);
	if (!lock_for(c, x))
		return;
	if (!buf)
		__atomic_store_n(&x->gap, 1u, __ATOMIC_RELAXED); /* moved, but not shown to us */
	if (!buf || feed_locked(&fc, d, buf, n)) {
		check_gap(&fc);
		unlock_x(x);
	}
	flush(&fc);
}

void ns_h2c_gap(struct ns_conn *c)
{
	ns_h2c_feed(c, NS_OUT, NULL, 0);
}

/* The connection ended under x (how: NS_H2_END_*), its streams settled
 * a queue at a time. */
static void end_streams(struct feedctx *fc, int how)
{
	int more;

	if (!lock_for(fc->c, fc->x))
		return;
	check_gap(fc);
	do {
		fc->x->h.room = QMAX - fc->n;
		more = ns_h2_end(&fc->x->h, how, on_event, fc);
	} while (more && requeue(fc));
	if (!more)
		unlock_x(fc->x);
	flush(fc);
}

int ns_h2c_end(struct ns_conn *c, int kind, int err)
{
	struct ns_h2c *x = __atomic_load_n(&c->h2, __ATOMIC_ACQUIRE);
	struct feedctx fc;

	if (!x)
		return 0;
	ctx_init(&fc, c, x);
	fc.kind = kind == NS_OUT_SUCCESS ? NS_OUT_FAILURE : kind;
	fc.err = err;
	end_streams(&fc, NS_H2_END_BROKEN);
	if (fc.failed)
		__atomic_store_n(&c->outcome, 1u, __ATOMIC_RELEASE); /* its streams carry it */
	return fc.failed;
}

void ns_h2c_release(struct ns_conn *c)
{
	struct ns_h2c *x = __atomic_load_n(&c->h2, __ATOMIC_ACQUIRE);
	struct feedctx fc;

	if (!x)
		return;
	/* the program closed it: an answer whose header block it was reading
	 * fails (what a client that rejects a block does: it stops reading) */
	ctx_init(&fc, c, x);
	end_streams(&fc, NS_H2_END_CLOSED);
	if (!(x = __atomic_exchange_n(&c->h2, NULL, __ATOMIC_ACQ_REL)))
		return;
	__atomic_fetch_and(&c->flags, ~NS_C_H2READ, __ATOMIC_RELAXED);
	/* a thread still feeding it (the program's race with its close)
	 * finishes first; a handler of ours inside it: the reader is left as
	 * it is (a few KiB), never handed out while in use */
	if (!lock_x(x))
		return;
	unlock_x(x);
	if (ns_lock_mine(NS_LOCK_H2)) {
		push_free(x);
		ns_lock_done(NS_LOCK_H2);
	}
}

/* How many of a vector's buffers hold its first n bytes. */
static size_t iov_segments(const struct iovec *iov, size_t cnt, size_t n)
{
	size_t i = 0;

	for (; iov && i < cnt && n > 0; i++)
		n -= iov[i].iov_len < n ? iov[i].iov_len : n;
	return i;
}

/* A reader for c's first write, which begins with the preface: made
 * before the write, published (the write's own turn starts it: ns_h2c_start). */
static struct ns_h2c *early_reader(struct ns_conn *c, const void *buf, const struct iovec *iov, size_t iovcnt,
				   size_t len)
{
	const void *b0 = buf ? buf : iov && iovcnt ? iov[0].iov_base : NULL;
	size_t n0 = buf ? len : iov && iovcnt ? iov[0].iov_len : 0;
	struct ns_h2c *x, *none = NULL;

	if (!b0 || n0 < NS_H2_PREFACE_LEN || memcmp(b0, NS_H2_PREFACE, NS_H2_PREFACE_LEN) != 0)
		return NULL;
	if (!(x = new_reader()))
		return NULL;
	if (!__atomic_compare_exchange_n(&c->h2, &none, x, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
		push_free(x); /* another thread's write made one first */
		return none;
	}
	return x;
}

int ns_h2c_before_write(int fd, struct ns_conn *c, const void *buf, const struct iovec *iov, size_t iovcnt, size_t *len,
			int nonblock, int tls)
{
	struct ns_h2c *x = __atomic_load_n(&c->h2, __ATOMIC_ACQUIRE);
	uint32_t f = LD(c->flags), opens, placed = 0;
	const struct ns_settings *set = ns_conn_set(c);
	struct ns_h2_peek k;
	struct feedctx fc;
	int e = errno;

	/* a TLS connection's socket carries records, not frames: its streams
	 * are read from its plaintext (tls.c, tls = 1). Its first record goes
	 * out inside the library's write, before that plaintext was looked at
	 * (neither HTTP bit yet): read here as frames, its ciphertext opened
	 * streams of random ids (one record in 512, one of 256-511 bytes in 2),
	 * and no stream after was followed */
	if (!tls && (f & (NS_C_TLS | NS_C_TLSWIRE)))
		return NS_H2C_NOT;
	if (!x && (f & (NS_C_HTTP | NS_C_NOTHTTP)))
		return NS_H2C_NOT;
	if (!x && !(x = early_reader(c, buf, iov, iovcnt, *len)))
		return NS_H2C_NOT;
	/* in clear text the reads are the reader's from now: an answer another
	 * thread reads before this write's bytes are looked at (exchange.c
	 * early_h2) goes to it, not past it */
	if (!tls && !(f & NS_C_H2READ))
		__atomic_fetch_or(&c->flags, NS_C_H2READ, __ATOMIC_RELAXED);
	if (!lock_for(c, x))
		return 0;
	ns_h2_peek_begin(&x->h, &k);
	unlock_x(x);
	if (buf) {
		ns_h2_peek(&k, buf, *len);
	} else {
		for (size_t i = 0; iov && i < iovcnt; i++)
			ns_h2_peek(&k, iov[i].iov_base, iov[i].iov_len);
	}
	opens = k.opened < NS_H2_STREAMS ? k.opened : NS_H2_STREAMS;
	/* a new stream on an open connection while the breaker is open or
	 * the throttle refuses: the whole write fails ECONNREFUSED before a
	 * byte leaves, counted rejected. Not one stream alone: its HEADERS
	 * cannot be held back without breaking the server's HPACK table, nor
	 * a reset be made up for it, so the client's HTTP/2 layer fails the
	 * connection (and the streams still open on it) and its next connect
	 * is refused as any is (docs/policy.md) */
	if (opens > k.firsts && ns_shape_request_admit(c) < 0)
		return -1;
	/* a cooldown (Retry-After) holds new streams on an open connection,
	 * as it holds HTTP/1 requests: until it ends */
	if (opens > k.firsts && unlikely(ns_shape_cooling(c)) && ns_shape_cooldown(fd, c, tls ? 0 : nonblock) < 0)
		return -1;
	/* max_requests: a place for each stream it opens (reqs.c), one a write
	 * where it can be cut (a short write, as the kernel's own) */
	if (set->max_requests && opens) {
		uint32_t i = 0;

		if (!tls && opens >= 2 && k.second_at &&
		    (buf || iov_segments(iov, iovcnt, k.second_at) <= NS_H2C_IOV_CUT)) {
			*len = k.second_at;
			opens = 1;
		}
		for (; i < opens; i++)
			if (ns_req_stream(fd, c, tls ? 0 : nonblock, tls) < 0) {
				ns_req_streams_done(c, i);
				return -1;
			}
		placed = opens;
	}
	if (set->rate_interval_us) {
		uint32_t need;

		if (!tls && k.opened >= 2 && k.second_at &&
		    (buf || iov_segments(iov, iovcnt, k.second_at) <= NS_H2C_IOV_CUT)) {
			/* one new stream a write: the rest goes in the next (a
			 * short write, as the kernel's own) */
			*len = k.second_at;
			opens = 1;
			need = k.firsts ? 0 : 1;
		} else {
			need = k.opened > k.firsts;
		}
		/* the connection's first bytes ride on its connect's token (under
		 * max_requests a connect takes none), a held write takes the one
		 * it waited for, any other a new one */
		if (set->max_requests && k.opened)
			need = 1;
		if (((f & (NS_C_TOKEN | NS_C_PACED)) && ns_shape_request(fd, c, tls ? 0 : nonblock) < 0) ||
		    (need && !(f & NS_C_PACED) && ns_shape_request(fd, c, tls ? 0 : nonblock) < 0)) {
			ns_req_streams_done(c, placed); /* (not gone: their places back) */
			return -1;
		}
	}
	/* the streams it opens are open before it goes: an answer another
	 * thread reads before this write's bytes are fed finds them */
	if (opens && lock_for(c, x)) {
		uint32_t i = 0;

		ctx_init(&fc, c, x);
		for (; i < opens; i++) {
			if (fc.n + NS_H2_ROOM > QMAX && !requeue(&fc))
				break;
			ns_h2_open(&x->h, k.ids[i], on_event, &fc);
		}
		if (i == opens) {
			check_gap(&fc);
			unlock_x(x);
		}
		flush(&fc);
	}
	errno = e;
	return 0;
}

/* The design said ~5 KiB an h2 connection for 32 streams; part 5's 256
 * streams (a start time and a first byte's µs for each) make it ~7.3 KiB */
_Static_assert(sizeof(struct ns_h2c) <= 7680, "an HTTP/2 connection's reader fits in 7.5 KiB");

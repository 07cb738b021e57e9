/* exchange.c -- exchanges on a connection, and the HTTP/1.x status of
 * their answers.
 *
 * An exchange starts when the program sends after a complete answer (or
 * sends first); its outcome is its answer's: success at the first byte,
 * failure when a deadline passes, the peer resets, or the stream ends
 * before a byte. When the first bytes a connection sends are an HTTP/1.x
 * request line, the answer's status line is read as it passes (one byte
 * per read is fine; 1xx interim answers are skipped), and a status in
 * failure_status fails the exchange (the reading itself is policy/h1.c's;
 * this file keeps its state in the connection's record and says what it
 * means). The program's bytes are only looked at, never held or changed.
 * Several requests sent before an answer (pipelining) are one exchange,
 * decided by the first answer.
 *
 * Both ends take the data path's slow branch only at the turns: the send
 * that starts an exchange (NS_C_XNEXT) and the reads of an answer whose
 * status is not known yet (NS_C_PARSE); everything between is the fast
 * path. */
#include "exchange.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>

#include "h2conn.h"
#include "outcome.h"
#include "reqs.h"

/* What the bytes sent so far say of the protocol. While they may still
 * begin a method, they are kept in sniffed (no answer is read before the
 * request is known) and NS_C_SNIFF sends the next send here too. Once HTTP
 * is known during an exchange whose answer has not begun, its status is
 * read. buf NULL (no plain buffer): not HTTP. */
static void sniff(struct ns_conn *c, const char *buf, size_t n)
{
	char p[NS_H1_SNIFF_MAX];
	uint32_t k = (LD(c->flags) & NS_C_SNIFF) ? LD(c->snlen) : 0;
	int v;

	if (k > NS_H1_SNIFF_MAX)
		k = 0;   /* in bounds, whatever another thread did */
	for (uint32_t j = 0; j < k; j++)
		p[j] = LD(c->sniffed[j]);
	for (; buf && k < NS_H1_SNIFF_MAX && n > 0; n--)
		p[k++] = *buf++;
	v = buf ? ns_h1_looks(p, k) : 0;
	if (v < 0 && k < NS_H1_SNIFF_MAX) {
		for (uint32_t j = 0; j < k; j++)
			ST(c->sniffed[j], p[j]);
		ST(c->snlen, k);
		__atomic_fetch_or(&c->flags, NS_C_SNIFF, __ATOMIC_RELAXED);
		return;
	}
	ST(c->snlen, 0);
	__atomic_fetch_or(&c->flags, v == 2 ? NS_C_H2 : v > 0 ? NS_C_HTTP : NS_C_NOTHTTP, __ATOMIC_RELAXED);
	__atomic_fetch_and(&c->flags, ~NS_C_SNIFF, __ATOMIC_RELAXED);
	/* told by a later piece of a request already out, before its answer */
	if (v == 1 && (LD(c->flags) & NS_C_SENT) && !LD(c->outcome))
		__atomic_fetch_or(&c->flags, NS_C_PARSE, __ATOMIC_RELAXED);
}

/* A final status (ns_h1status_feed): the exchange's outcome; an answer
 * that is no HTTP (NS_H1S_NOSTATUS) is decided by its first byte. */
static void decide(struct ns_conn *c, unsigned code)
{
	if (code == NS_H1S_NOSTATUS) {
		__atomic_fetch_and(&c->flags, ~NS_C_PARSE, __ATOMIC_RELAXED);
		ns_conn_outcome(c, NS_OUT_SUCCESS, 0);
		return;
	}
	if (code == 101) {
		/* Switching Protocols: what follows is another protocol, told
		 * anew by the next bytes sent (an h2c Upgrade's preface) */
		ns_conn_http(c, code, 0);
		__atomic_fetch_and(&c->flags, ~(NS_C_HTTP | NS_C_NOTHTTP), __ATOMIC_RELAXED);
		return;
	}
	if ((code == 429 || code == 503) && ns_conn_set(c)->retry_after && ns_conn_status_fails(c, code)) {
		/* a server that says when to come back asks for a cooldown, not
		 * for the breaker: the outcome waits for its headers */
		__atomic_fetch_and(&c->flags, ~NS_C_PARSE, __ATOMIC_RELAXED);
		ST(c->xstatus, code);
	} else {
		ns_conn_http(c, code, ns_conn_status_fails(c, code));
	}
	if ((code == 429 || code == 503) && ns_conn_set(c)->retry_after) {
		/* its headers may say when to come back (Retry-After) */
		ST(c->h1ra.value, 0u);
		ST(c->h1ra.len, 0u); /* inside the status line */
		ST(c->h1ra.vlen, 0u);
		__atomic_fetch_or(&c->follow, NS_FOLLOW_RA, __ATOMIC_RELAXED);
		__atomic_fetch_or(&c->flags, NS_C_HDRS, __ATOMIC_RELAXED);
	}
}

/* A 429/503 whose outcome waited for its headers: a failure, unless its
 * Retry-After was honoured (a cooldown: the server is there, and asked for
 * time). */
static void settle(struct ns_conn *c, int honoured)
{
	unsigned code = __atomic_exchange_n(&c->xstatus, 0u, __ATOMIC_RELAXED);

	if (code)
		ns_conn_http(c, code, !honoured);
}

/* Part of what the answer was followed for is done: NS_C_HDRS goes with
 * the last part (reads take the fast path again). */
static void follow_done(struct ns_conn *c, uint32_t what)
{
	if (!(__atomic_and_fetch(&c->follow, ~what, __ATOMIC_RELAXED) & (NS_FOLLOW_RA | NS_FOLLOW_END)))
		__atomic_fetch_and(&c->flags, ~NS_C_HDRS, __ATOMIC_RELAXED);
}

/* The reader's records, field by field (another thread of the program may
 * read the same connection: its race, never a torn word). */
static void ra_load(const struct ns_conn *c, struct ns_h1ra *r)
{
	r->value = LD(c->h1ra.value);
	r->len = LD(c->h1ra.len);
	r->vlen = LD(c->h1ra.vlen);
	for (uint32_t j = 0; j < NS_H1RA_MAX; j++)
		r->val[j] = LD(c->h1ra.val[j]);
}

static void ra_store(struct ns_conn *c, const struct ns_h1ra *r)
{
	ST(c->h1ra.value, r->value);
	ST(c->h1ra.len, r->len);
	ST(c->h1ra.vlen, r->vlen);
	for (uint32_t j = 0; j < NS_H1RA_MAX; j++)
		ST(c->h1ra.val[j], r->val[j]);
}

static void status_load(const struct ns_conn *c, struct ns_h1status *s)
{
	s->st = LD(c->h1s.st);
	s->len = LD(c->h1s.len);
	for (uint32_t j = 0; j < sizeof(s->buf); j++)
		s->buf[j] = LD(c->h1s.buf[j]);
}

static void status_store(struct ns_conn *c, const struct ns_h1status *s)
{
	ST(c->h1s.st, s->st);
	ST(c->h1s.len, s->len);
	for (uint32_t j = 0; j < sizeof(s->buf); j++)
		ST(c->h1s.buf[j], s->buf[j]);
}

/* The header block of a 429 or 503 answer, read as it passes for its
 * Retry-After (seconds, or an HTTP date), up to the blank line. */
static void headers(struct ns_conn *c, const char *b, size_t n)
{
	struct ns_h1ra r;
	char val[NS_H1RA_MAX + 1];
	int said;

	if (!(LD(c->follow) & NS_FOLLOW_RA))
		return;
	ra_load(c, &r);
	said = ns_h1ra_feed(&r, b, n, val);
	ra_store(c, &r);
	if (said == NS_H1RA_MORE)
		return;
	follow_done(c, NS_FOLLOW_RA);
	settle(c, said == NS_H1RA_VALUE && ns_conn_retry_after(c, val));
}

/**** the answer's end (a connection holding a place) ****/

/* The record's copy, field by field (another thread of the program may
 * read the same connection: its race, never a torn word). */
static void end_load(const struct ns_conn *c, struct ns_h1end *e)
{
	e->left = LD(c->h1end.left);
	e->num = LD(c->h1end.num);
	e->te = LD(c->h1end.te);
	e->result = LD(c->h1end.result);
	e->st = LD(c->h1end.st);
	e->pos = LD(c->h1end.pos);
	e->code = LD(c->h1end.code);
	e->flags = LD(c->h1end.flags);
	e->hdr = LD(c->h1end.hdr);
}

static void end_store(struct ns_conn *c, const struct ns_h1end *e)
{
	ST(c->h1end.left, e->left);
	ST(c->h1end.num, e->num);
	ST(c->h1end.te, e->te);
	ST(c->h1end.st, e->st);
	ST(c->h1end.pos, e->pos);
	ST(c->h1end.code, e->code);
	ST(c->h1end.flags, e->flags);
	ST(c->h1end.hdr, e->hdr);
	__atomic_store_n(&c->h1end.result, e->result, __ATOMIC_RELEASE);
}

/* A new exchange on an HTTP/1 connection: its answer's end is followed
 * when the connection holds a place, or its request waits for one (a TLS
 * request seen at its plaintext's write, whose record then waits at the
 * socket, datapath.c: with the place it takes there, its answer would
 * never give it back), so that the place is given up once that end is
 * read. A request sent before the last answer's end was
 * read (pipelining) stops it for good: ends can no longer be told apart.
 * buf: the request's first n bytes (HEAD has no body in its answer; one
 * whose method came in pieces is taken for another, whose answer then
 * never ends for the reader: the safe side). */
static void end_begin(struct ns_conn *c, const char *buf, size_t n)
{
	uint32_t fw = __atomic_fetch_and(&c->follow, ~(NS_FOLLOW_RA | NS_FOLLOW_END | NS_FOLLOW_FRESH | NS_FOLLOW_HEAD),
					 __ATOMIC_RELAXED);

	if (fw & NS_FOLLOW_END) {
		fw |= NS_FOLLOW_NEVER;
		__atomic_fetch_or(&c->follow, NS_FOLLOW_NEVER, __ATOMIC_RELAXED);
	}
	if ((fw & NS_FOLLOW_NEVER) || (!((LD(c->flags) & NS_C_PLACE) | LD(c->rq)) && !LD(c->rq_qword)) ||
	    (LD(c->flags) & NS_C_H2) != NS_C_HTTP) {
		__atomic_store_n(&c->h1end.result, (fw & NS_FOLLOW_NEVER) ? NS_H1E_UNKNOWN : NS_H1E_NONE,
				 __ATOMIC_RELEASE);
		return;
	}
	/* the reader begins at the answer's first read (end_feed): here only
	 * what says it is due */
	__atomic_store_n(&c->h1end.result, (uint32_t)NS_H1E_MORE, __ATOMIC_RELEASE);
	__atomic_fetch_or(&c->follow,
			  NS_FOLLOW_END | NS_FOLLOW_FRESH |
				  (buf && n >= 5 && memcmp(buf, "HEAD ", 5) == 0 ? NS_FOLLOW_HEAD : 0),
			  __ATOMIC_RELAXED);
	__atomic_fetch_or(&c->flags, NS_C_HDRS, __ATOMIC_RELAXED);
}

/* Bytes the program read of the answer (buf NULL: bytes it was not shown,
 * a vector's or a splice's: its end can no longer be known). Once the
 * answer's end is known only its result is kept. */
static void end_feed(struct ns_conn *c, const char *buf, size_t n)
{
	uint32_t fw = LD(c->follow);
	struct ns_h1end e;

	if (fw & NS_FOLLOW_FRESH) {
		__atomic_fetch_and(&c->follow, ~NS_FOLLOW_FRESH, __ATOMIC_RELAXED);
		ns_h1end_start(&e, (fw & NS_FOLLOW_HEAD) != 0);
	} else {
		end_load(c, &e);
	}
	if (!buf)
		e.result = NS_H1E_UNKNOWN;
	else if (e.result == NS_H1E_MORE)
		ns_h1end_feed(&e, buf, n);
	if (e.result == NS_H1E_MORE) {
		end_store(c, &e);
		return;
	}
	__atomic_store_n(&c->h1end.result, e.result, __ATOMIC_RELEASE);
	follow_done(c, NS_FOLLOW_END);
	if (e.result == NS_H1E_DONE && LD(c->rq))
		ns_req_done(c); /* the request's answer read to its end: its place back (reqs.c) */
}

int ns_exchange_stale(const struct ns_conn *c)
{
	uint32_t f = LD(c->flags);

	if ((f & (NS_C_REUSED | NS_C_SENT)) != (NS_C_REUSED | NS_C_SENT) || LD(c->outcome))
		return 0;
	/* reading a status line: any byte of it is the answer begun */
	return !(f & NS_C_PARSE) || ns_h1status_fresh(LD(c->h1s.st), LD(c->h1s.len));
}

/* Feed bytes of the answer; decides the exchange once the final status
 * line is in, or gives up on a status (plain outcome) if it is not one. */
static void feed(struct ns_conn *c, const char *b, size_t n)
{
	unsigned code;
	size_t used = 12;

	/* the usual case: the whole status line at the start of this read */
	if (!ns_h1status_fresh(LD(c->h1s.st), LD(c->h1s.len)) || (code = ns_h1status_whole(b, n)) == NS_H1S_MORE) {
		struct ns_h1status s;

		status_load(c, &s);
		code = ns_h1status_feed(&s, b, n, &used);
		status_store(c, &s);
		if (code == NS_H1S_MORE)
			return;
	}
	decide(c, code);
	if (unlikely(LD(c->follow) & NS_FOLLOW_RA))
		headers(c, b + used, n - used);
}

/* An h2c server's own preface (SETTINGS) was read before the program sent
 * its: that was the connection's outcome, counted as an exchange with a
 * first byte before the protocol was known. Both are taken back, and its
 * success is the connection's own (its first stream takes it back). */
static __attribute__((noinline, cold)) void server_spoke_first(struct ns_conn *c)
{
	int slot = LD(c->slot);

	if (slot < 0 || !ns_breakers_ok)
		return;
	ns_table_exchange_undo(&ns_breakers, slot);
	ns_table_first_byte_undo(&ns_breakers, slot, LD(c->fb_us), (uint64_t)(ns_now() / 1000000),
				 ns_conn_set(c)->window_ms);
	ns_conn_own_success(c);
}

/* An answer read before the write that carried the client's preface was
 * looked at (another thread read it while the writer was between its send
 * and this file): the reader made before that write (h2conn.c
 * early_reader, its streams already open) takes it. Fed to no one, the
 * stream's answer was lost and the stream never settled (a gRPC client
 * beside four busy loops: one call in four uncounted). */
static inline int early_h2(const struct ns_conn *c, int d)
{
	return d == NS_IN && !(LD(c->flags) & (NS_C_HTTP | NS_C_NOTHTTP)) &&
		__atomic_load_n(&c->h2, __ATOMIC_ACQUIRE) != NULL;
}

/* HTTP/2: its requests are streams, not turns; the reader (h2conn.c)
 * counts them. The connection's own outcome is its connect's (over TLS,
 * the handshake's): the server's first frame, or its end. */
static __attribute__((noinline)) void h2_turn(struct ns_conn *c, int d, const char *buf, size_t n, int tls)
{
	__atomic_fetch_and(&c->flags, ~NS_C_XNEXT, __ATOMIC_RELAXED);
	ns_h2c_feed(c, d, buf, n);
	if (d == NS_IN && tls && !LD(c->outcome) && buf && n)
		ns_conn_h2_answered(c);
}

/* The turn on bytes the program sent (d = NS_OUT: maybe the start of an
 * exchange) or received (NS_IN: maybe its status line), whether on a plain
 * socket or as TLS plaintext (tls.c). For the plain socket the first byte
 * of an answer is counted by after_io; for TLS, here. */
static void turn(struct ns_conn *c, int d, const char *buf, size_t n, int tls)
{
	if (d == NS_OUT) {
		uint32_t f = LD(c->flags);

		if (unlikely((f & NS_C_H2) == NS_C_H2)) {
			h2_turn(c, d, buf, n, tls);
			return;
		}
		/* buf holds at least min(n, 8) bytes (see first8 in datapath.c) */
		if (!(f & (NS_C_HTTP | NS_C_NOTHTTP))) {
			char held[NS_H1_SNIFF_MAX];
			uint32_t k = (f & NS_C_SNIFF) ? LD(c->snlen) : 0;

			if (k > NS_H1_SNIFF_MAX)
				k = 0; /* in bounds, whatever another thread did */
			for (uint32_t j = 0; j < k; j++)
				held[j] = LD(c->sniffed[j]);
			sniff(c, buf, n);
			if ((LD(c->flags) & NS_C_H2) == NS_C_H2) {
				/* the preface: from here the reader follows it (a
				 * connection that answered something before, an
				 * HTTP/1 Upgrade, cannot be followed) */
				__atomic_fetch_and(&c->flags, ~NS_C_XNEXT, __ATOMIC_RELAXED);
				if (!tls && LD(c->outcome) && !(f & (NS_C_ANSWERED | NS_C_SENT)))
					server_spoke_first(c);
				ns_h2c_start(c, held, k, buf, n, tls, (f & NS_C_ANSWERED) != 0);
				return;
			}
		}
		f = LD(c->flags);
		if (f & NS_C_XNEXT) {
			/* a new exchange: its outcome is owed from now */
			uint32_t again = (LD(c->flags) & NS_C_ANSWERED) ? NS_C_REUSED : 0;

			ST(c->outcome, 0);
			ST(c->xstatus, 0u);
			ST(c->xthread, (uintptr_t)pthread_self());
			monotime t = LD(c->pre_now);

			/* (the clock rate's token was just taken by, else one now) */
			if (t)
				ST(c->pre_now, 0);
			ST(c->xstart, t ? t : ns_now());
			ST(c->h1s.st, (uint32_t)NS_H1S_LINE);
			ST(c->h1s.len, 0u);
			__atomic_fetch_and(&c->flags, ~(NS_C_XNEXT | NS_C_REUSED | NS_C_HDRS), __ATOMIC_RELAXED);
			__atomic_fetch_or(&c->flags,
					  again | NS_C_SENT | ((LD(c->flags) & NS_C_H2) == NS_C_HTTP ? NS_C_PARSE : 0),
					  __ATOMIC_RELAXED);
			end_begin(c, buf, n);
		}
		return;
	}
	if (unlikely(LD(c->flags) & NS_C_HDRS)) {
		/* followed past its status line: its end (every byte, the status
		 * line's too), then its headers for Retry-After once the status
		 * is read */
		if (LD(c->follow) & NS_FOLLOW_END)
			end_feed(c, buf, n);
		if (!(LD(c->flags) & NS_C_PARSE)) {
			if (LD(c->follow) & NS_FOLLOW_RA) {
				if (buf) {
					headers(c, buf, n);
				} else {
					follow_done(c, NS_FOLLOW_RA);
					settle(c, 0);
				}
			}
			return;
		}
	}
	if (LD(c->outcome)) {
		if (unlikely((LD(c->flags) & NS_C_H2) == NS_C_H2) || unlikely(early_h2(c, d)))
			h2_turn(c, d, buf, n, tls);
		return;
	}
	if (LD(c->flags) & NS_C_PARSE) {
		if (!buf) {
			/* no plain buffer to read the status from: a plain outcome */
			__atomic_fetch_and(&c->flags, ~NS_C_PARSE, __ATOMIC_RELAXED);
			return;
		}
		if (ns_h1status_fresh(LD(c->h1s.st), LD(c->h1s.len)))
			ns_first_byte_latency(c);   /* the answer's first byte */
		feed(c, buf, n);
	} else if (unlikely((LD(c->flags) & NS_C_H2) == NS_C_H2) || unlikely(early_h2(c, d))) {
		h2_turn(c, d, buf, n, tls);
	} else if (tls) {
		ns_conn_outcome(c, NS_OUT_SUCCESS, 0);   /* the first byte of the answer */
	}
}

void ns_exchange_plain(struct ns_conn *c, int d, const void *buf, size_t n)
{
	turn(c, d, buf, n, 1);
}

void ns_exchange_turn(struct ns_conn *c, int d, const void *buf, size_t n)
{
	turn(c, d, buf, n, 0);
}

void ns_exchange_gap(struct ns_conn *c)
{
	if ((LD(c->flags) & NS_C_H2) == NS_C_H2)
		ns_h2c_gap(c);
}

/* tlspair.c -- which socket a TLS session's records travel on, for the
 * sessions whose library does not say (tls.c): the pairs remembered, the
 * socket seen inside a record call, a memory-BIO session's writes matched
 * with the send that carries their ciphertext. */
#include "tlspair.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "exchange.h"
#include "reqs.h"

/* A session whose library cannot name its socket is matched to the socket
 * its ciphertext travels on:
 * - curl gives OpenSSL a BIO of its own (SSL_get_fd says -1), whose record
 *   calls reach the socket inside the call: the socket layer notes a TLS
 *   socket it sees during the call (ns_tls_note_fd);
 * - Python's asyncio (ssl.SSLObject: aiohttp, httpx, Scrapy's Twisted via
 *   pyOpenSSL) drives OpenSSL through memory BIOs: no socket call happens
 *   inside SSL_write at all; the program takes the ciphertext out of the
 *   BIO and sends it when it likes, not always next (anyio, under httpx,
 *   lets other tasks run between the two: pairing a write with the next
 *   send of a plausible size paired sessions with one another's sockets,
 *   and a request then waited for its max_requests place on a connection
 *   that never asked again). A write on a session whose socket is not
 *   known notes the last 16 bytes of the ciphertext in its BIO (an AEAD
 *   tag or a MAC: no two alike) with its plaintext's first bytes; the TLS
 *   socket whose send, outside any record call, ends with those bytes is
 *   that session's (ns_tls_pair_send, before they go: the request has its
 *   place first), and the session's noted writes are its turns, in order.
 * Pairs are remembered with the connection record and its generation, so a
 * pair whose socket has since closed, or whose number now holds another
 * connection, is never used (a new session at a freed session's address,
 * curl's case, would otherwise inherit the old socket); a socket noted
 * during the call overrides a remembered pair. */
#define SESS_CACHE 256
#define PEND_MAX   16
#define TAIL       16
static struct {
	void *sess;
	int fd;
	struct ns_conn *c;
	uint32_t gen;
} sess_fd[SESS_CACHE];
static __thread void *cur_sess __attribute__((tls_model("initial-exec")));
static __thread int cur_fd __attribute__((tls_model("initial-exec"))) = -1;
static __thread int cur_named __attribute__((tls_model("initial-exec"))); /* the library named the socket */

/* The noted writes of sessions whose socket is not known yet (a full table
 * gives up its oldest: a write whose bytes were sent in pieces, or never,
 * is not matched) */
#define NOTES 64
enum { NOTE_FREE, NOTE_BUSY, NOTE_READY };
/* Every field is read and written as a relaxed atomic: a sender looks at
 * a note it does not own (another thread may take it and fill it again
 * meanwhile), so what it read is trusted only if the note's seq (unique
 * to each filling) is the same after the look (a seqlock's check), and a
 * note taken (READY -> BUSY) is checked to be the one looked at. */
static struct {
	uint32_t state; /* NOTE_* */
	uint32_t seq;   /* the writes' order, and the filling's identity */
	void *sess;
	size_t n;                    /* plaintext bytes written */
	uint64_t tail[TAIL / 8];     /* the ciphertext's last bytes in the BIO after the write */
	uint64_t head[PEND_MAX / 8]; /* the plaintext's first bytes */
} notes[NOTES];
_Static_assert(TAIL % 8 == 0 && PEND_MAX % 8 == 0, "notes are copied in words");

/* len bytes (at most 8 * words) into words, as relaxed stores */
static void words_put(uint64_t *w, unsigned words, const void *src, size_t len)
{
	for (unsigned k = 0; k < words; k++) {
		uint64_t v = 0;

		if (len > (size_t)k * 8)
			memcpy(&v, (const char *)src + k * 8, len - k * 8 < 8 ? len - k * 8 : 8);
		__atomic_store_n(&w[k], v, __ATOMIC_RELAXED);
	}
}

static void words_get(const uint64_t *w, unsigned words, void *dst)
{
	for (unsigned k = 0; k < words; k++) {
		uint64_t v = __atomic_load_n(&w[k], __ATOMIC_RELAXED);

		memcpy((char *)dst + k * 8, &v, 8);
	}
}
static uint32_t notes_ready; /* atomic: a send looks only while some are */
static uint32_t notes_seq;   /* atomic */

static void remember_fd(void *sess, int fd, struct ns_conn *c);
static struct ns_conn *conn_of_fd(int fd);

#define NS_BIO_TYPE_MEM  (1 | 0x0400)
#define NS_BIO_CTRL_INFO 3

void ns_tls_note_write(void *ssl, ns_ssl_wbio_fn wbio_of, ns_bio_type_fn type_of, ns_bio_ctrl_fn ctrl, const void *buf,
		       size_t n)
{
	void *bio;
	char *data = NULL;
	long len;
	int i, old = -1;

	if (!wbio_of || !type_of || !ctrl || !(bio = wbio_of(ssl)) || type_of(bio) != NS_BIO_TYPE_MEM)
		return;
	len = ctrl(bio, NS_BIO_CTRL_INFO, 0, &data); /* (its unread bytes; nothing moves) */
	if (len < TAIL || !data)
		return;
	for (i = 0; i < NOTES; i++) {
		uint32_t free_ = NOTE_FREE;

		if (__atomic_compare_exchange_n(&notes[i].state, &free_, NOTE_BUSY, 0, __ATOMIC_ACQUIRE,
						__ATOMIC_RELAXED))
			break;
		if (free_ == NOTE_READY && (old < 0 || (int32_t)(LD(notes[i].seq) - LD(notes[old].seq)) < 0))
			old = i;
	}
	if (i == NOTES) {
		uint32_t ready = NOTE_READY;

		if (old < 0 ||
		    !__atomic_compare_exchange_n(&notes[old].state, &ready, NOTE_BUSY, 0, __ATOMIC_ACQUIRE,
						 __ATOMIC_RELAXED))
			return;
		__atomic_fetch_sub(&notes_ready, 1, __ATOMIC_RELAXED);
		i = old;
	}
	/* (as a seqlock's writer: the note BUSY before its new seq is seen,
	 * the new seq before any of the new fields) */
	__atomic_thread_fence(__ATOMIC_RELEASE);
	ST(notes[i].seq, __atomic_fetch_add(&notes_seq, 1, __ATOMIC_RELAXED));
	__atomic_thread_fence(__ATOMIC_RELEASE);
	ST(notes[i].sess, ssl);
	ST(notes[i].n, n);
	words_put(notes[i].tail, TAIL / 8, data + len - TAIL, TAIL);
	words_put(notes[i].head, PEND_MAX / 8, buf, n < PEND_MAX ? n : PEND_MAX);
	__atomic_store_n(&notes[i].state, NOTE_READY, __ATOMIC_RELEASE);
	__atomic_fetch_add(&notes_ready, 1, __ATOMIC_RELEASE);
}

/* The noted write whose ciphertext ends with tail: its session and seq,
 * read whole (the note was not filled again while they were read); 0:
 * none. */
static int note_of(const unsigned char *tail, void **sess, uint32_t *seq)
{
	for (int i = 0; i < NOTES; i++) {
		unsigned char t[TAIL];
		uint32_t s;

		if (__atomic_load_n(&notes[i].state, __ATOMIC_ACQUIRE) != NOTE_READY)
			continue;
		s = LD(notes[i].seq);
		words_get(notes[i].tail, TAIL / 8, t);
		*sess = LD(notes[i].sess);
		__atomic_thread_fence(__ATOMIC_ACQUIRE);
		if (memcmp(t, tail, TAIL) == 0 && __atomic_load_n(&notes[i].state, __ATOMIC_RELAXED) == NOTE_READY &&
		    LD(notes[i].seq) == s) {
			*seq = s;
			return 1;
		}
	}
	return 0;
}

/* Take the oldest noted write of sess up to seq: its first bytes into
 * head, its length. 0: none left. */
static int take_note(void *sess, uint32_t seq, char *head, size_t *n)
{
	for (;;) {
		int best = -1;
		uint32_t ready = NOTE_READY;

		uint32_t best_seq = 0;

		for (int i = 0; i < NOTES; i++) {
			uint32_t s;

			if (__atomic_load_n(&notes[i].state, __ATOMIC_ACQUIRE) != NOTE_READY ||
			    LD(notes[i].sess) != sess)
				continue;
			s = LD(notes[i].seq);
			if ((int32_t)(s - seq) <= 0 && (best < 0 || (int32_t)(s - best_seq) < 0)) {
				best = i;
				best_seq = s;
			}
		}
		if (best < 0)
			return 0;
		if (!__atomic_compare_exchange_n(&notes[best].state, &ready, NOTE_BUSY, 0, __ATOMIC_ACQUIRE,
						 __ATOMIC_RELAXED))
			continue; /* (taken by another: look again) */
		if (LD(notes[best].seq) != best_seq || LD(notes[best].sess) != sess) {
			/* filled again since the look: another's, given back */
			__atomic_store_n(&notes[best].state, NOTE_READY, __ATOMIC_RELEASE);
			continue;
		}
		*n = LD(notes[best].n);
		words_get(notes[best].head, PEND_MAX / 8, head);
		__atomic_store_n(&notes[best].state, NOTE_FREE, __ATOMIC_RELEASE);
		__atomic_fetch_sub(&notes_ready, 1, __ATOMIC_RELAXED);
		return 1;
	}
}

/* A send on fd outside any record call whose bytes end with tail: if they
 * are a noted write's ciphertext, fd is its session's socket, and the
 * session's writes up to it are seen on it; ask (before the send): the
 * request one starts asks for its max_requests place. 0, or -1 with errno
 * (held or refused, as ns_req_start). */
static int pair_by_tail(int fd, const unsigned char *tail, int ask, int nonblock)
{
	int r = 0, e = errno;
	void *sess;
	uint32_t seq;
	struct ns_conn *c;
	char head[PEND_MAX];
	size_t n;

	if (cur_sess || !note_of(tail, &sess, &seq))
		return 0;
	if (!(c = conn_of_fd(fd)))
		return 0;
	remember_fd(sess, fd, c);
	while (take_note(sess, seq, head, &n)) {
		/* its request asks for its place before a byte leaves, as a later
		 * request on the session does at its plaintext's write (pace):
		 * held, this send answers EAGAIN and the program sends again
		 * (asyncio keeps the bytes), asking again (datapath.c); the
		 * request is seen as started either way (its answer's end then
		 * followed, exchange.c) */
		if (ask && r == 0 && ns_req_starts(c, LD(c->flags), NS_C_TLS, head, n < PEND_MAX ? n : PEND_MAX)) {
			r = ns_req_start(fd, c, nonblock);
			e = errno;
		}
		ns_exchange_plain(c, NS_OUT, head, n < PEND_MAX ? n : PEND_MAX);
		if (n > PEND_MAX)
			ns_exchange_gap(c); /* (an HTTP/2 reader cannot follow what it was not shown) */
	}
	errno = e;
	return r;
}

void ns_tls_note_fd(int fd, const void *sent_tail)
{
	if (cur_sess) {
		cur_fd = fd;
		return;
	}
	/* (a send ns_tls_pair_send did not see before it went) */
	if (__atomic_load_n(&notes_ready, __ATOMIC_ACQUIRE) && sent_tail)
		pair_by_tail(fd, sent_tail, 0, 0);
}

int ns_tls_pair_send(int fd, const void *tail, int nonblock)
{
	if (likely(!__atomic_load_n(&notes_ready, __ATOMIC_ACQUIRE)) || !tail)
		return 0;
	return pair_by_tail(fd, tail, 1, nonblock);
}

/* Does pair i still name a live connection (its socket open, not reused)? */
static struct ns_conn *pair_live(int i)
{
	int fd = __atomic_load_n(&sess_fd[i].fd, __ATOMIC_RELAXED);
	struct ns_conn *c = __atomic_load_n(&sess_fd[i].c, __ATOMIC_RELAXED);

	return c && ns_conn_of(fd) == c &&
			__atomic_load_n(&c->gen, __ATOMIC_ACQUIRE) == __atomic_load_n(&sess_fd[i].gen, __ATOMIC_RELAXED)
		? c
		: NULL;
}

/* A session's first place to look (then the ones after it) */
static unsigned sess_home(const void *sess)
{
	return (unsigned)(((uintptr_t)sess * 0x9e3779b97f4a7c15ULL) >> 56) % SESS_CACHE;
}

/* The connection a remembered pair names, if it still does. */
struct ns_conn *ns_tls_cached_conn(void *sess)
{
	for (unsigned k = 0, i = sess_home(sess); k < SESS_CACHE; k++, i = (i + 1) % SESS_CACHE) {
		struct ns_conn *c;

		if (__atomic_load_n(&sess_fd[i].sess, __ATOMIC_ACQUIRE) != sess)
			continue;
		if ((c = pair_live((int)i)))
			return c;
		__atomic_store_n(&sess_fd[i].sess, NULL, __ATOMIC_RELEASE); /* stale: forgotten */
		return NULL;
	}
	return NULL;
}

/* A pair is kept in the session's own entry, or the first free or stale
 * one from its home on: a pool of sessions (aiohttp's 20 connections) must
 * not push out each other's pairs (with one entry per hash, OpenSSL's
 * sessions, a few KiB apart, lost theirs, and their answers went unseen:
 * a max_requests place was never given back) */
static void remember_fd(void *sess, int fd, struct ns_conn *c)
{
	unsigned home = sess_home(sess), i = home, spare = SESS_CACHE;

	for (unsigned k = 0; k < SESS_CACHE; k++, i = (i + 1) % SESS_CACHE) {
		void *s = __atomic_load_n(&sess_fd[i].sess, __ATOMIC_ACQUIRE);

		if (s == sess) {
			spare = i;
			break;
		}
		if (spare == SESS_CACHE && (!s || !pair_live((int)i)))
			spare = i;
	}
	i = spare < SESS_CACHE ? spare : home;
	__atomic_store_n(&sess_fd[i].sess, NULL, __ATOMIC_RELEASE);
	__atomic_store_n(&sess_fd[i].fd, fd, __ATOMIC_RELAXED);
	__atomic_store_n(&sess_fd[i].c, c, __ATOMIC_RELAXED);
	__atomic_store_n(&sess_fd[i].gen, __atomic_load_n(&c->gen, __ATOMIC_ACQUIRE), __ATOMIC_RELAXED);
	__atomic_store_n(&sess_fd[i].sess, sess, __ATOMIC_RELEASE);
}

/* The governed connection under a TLS session, marked as read at the
 * record level from now on; NULL for anything else. */
static struct ns_conn *conn_of_fd(int fd)
{
	struct ns_conn *c = fd >= 0 ? ns_conn_of(fd) : NULL;

	/* from now on the plaintext says what the protocol is */
	if (c && !(LD(c->flags) & NS_C_TLS)) {
		__atomic_fetch_and(&c->flags, ~(NS_C_HTTP | NS_C_NOTHTTP), __ATOMIC_RELAXED);
		__atomic_fetch_or(&c->flags, NS_C_TLS, __ATOMIC_RELAXED);
	}
	return c;
}

/* Before the real call: the session's connection if its socket is known
 * (from the library, or a pair that still holds), and the note-taking on. */
struct ns_conn *ns_tls_begin(void *sess, int fd)
{
	cur_sess = sess;
	cur_fd = -1;
	cur_named = fd >= 0;
	return fd >= 0 ? conn_of_fd(fd) : ns_tls_cached_conn(sess);
}

int ns_tls_seen(struct ns_conn *c, int d, const void *buf, ssize_t n)
{
	int e = errno, note;

	if (cur_fd >= 0 && (!c || ns_conn_of(cur_fd) != c)) {
		c = conn_of_fd(cur_fd);
		if (c)
			remember_fd(cur_sess, cur_fd, c);
	}
	cur_sess = NULL;
	note = !c && !cur_named && d == NS_OUT && n > 0 && buf;
	if (c && n > 0)
		ns_exchange_plain(c, d, buf, (size_t)n);
	errno = e;
	return note;
}

void ns_tls_call_begin(void *sess)
{
	cur_sess = sess;
	cur_fd = -1;
}

void ns_tls_call_end(void)
{
	struct ns_conn *c;

	if (cur_fd >= 0 && (c = ns_conn_of(cur_fd)) != NULL)
		remember_fd(cur_sess, cur_fd, c);
	cur_sess = NULL;
}

struct ns_conn *ns_tls_call_conn(void *sess)
{
	return cur_sess == sess && cur_fd >= 0 ? ns_conn_of(cur_fd) : ns_tls_cached_conn(sess);
}

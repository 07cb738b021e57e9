/* h1.h -- an HTTP/1.x exchange as it passes (h1.c): what the first bytes a
 * connection sends say of its protocol, its answer's status line, and a
 * 429 or 503's Retry-After. Where such an answer ends is h1end.h's; HTTP/2
 * is h2.h's.
 *
 * Pure code, no allocation: each reader's state is a few words the caller
 * keeps (the shim in a connection's record), fed the bytes in pieces of any
 * size; any split of a stream into pieces gives the same result as the
 * whole stream at once (tests/fuzz/fuzz_http.c holds it to that). */
#ifndef NS_H1_H
#define NS_H1_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* The longest method a request line may begin with, "OPTIONS " and
 * "CONNECT ", is 8 bytes; so is the part of HTTP/2's preface looked at. */
#define NS_H1_SNIFF_MAX 8

/* "GET ", "POST " ...: an HTTP/1.x request line begins so; HTTP/2's preface
 * ("PRI * HTTP/2.0\r\n...", its first 8 bytes) begins an HTTP/2 connection;
 * TLS (0x16) neither. Of the first n bytes sent: 1 (HTTP/1), 2 (HTTP/2), 0
 * (neither), or -1 while they may still begin one ("G", "POS", "PRI": a
 * program may send its request in pieces). */
int ns_h1_looks(const char *b, size_t n);

/* The status of a status line's first 12 bytes ("HTTP/1.x NNN"), or 0 when
 * they are none. */
static inline unsigned ns_h1_status(const char *hb)
{
	if (memcmp(hb, "HTTP/1.", 7) != 0 || hb[8] != ' ' || hb[9] < '1' || hb[9] > '5' || hb[10] < '0' ||
	    hb[10] > '9' || hb[11] < '0' || hb[11] > '9')
		return 0;
	return (unsigned)((hb[9] - '0') * 100 + (hb[10] - '0') * 10 + (hb[11] - '0'));
}

/* An interim answer (1xx but 101 Switching Protocols): a final one follows. */
static inline int ns_h1_interim(unsigned code)
{
	return code >= 100 && code <= 199 && code != 101;
}

/**** the answer's status line ****/

enum {
	NS_H1S_LINE = 0, /* a status line: len bytes of it in buf */
	NS_H1S_SKIP,     /* an interim answer's headers, to the blank line */
};

/* what ns_h1status_feed returns besides a status (100-599) */
enum {
	NS_H1S_MORE = 0,     /* no final status yet: feed more */
	NS_H1S_NOSTATUS = 1, /* the answer is no HTTP: its first bytes decide */
};

struct ns_h1status {
	uint32_t st;  /* NS_H1S_* */
	uint32_t len; /* LINE: bytes of the line seen; SKIP: 0 inside a line,
		       * 1 at a line's start, 2 after a "\r" there */
	char buf[12]; /* "HTTP/1.1 503" */
};

static inline void ns_h1status_start(struct ns_h1status *s)
{
	s->st = NS_H1S_LINE;
	s->len = 0;
}

/* Nothing of the answer read yet. */
static inline int ns_h1status_fresh(uint32_t st, uint32_t len)
{
	return st == NS_H1S_LINE && len == 0;
}

/* The usual case, the whole final status line at the start of one read:
 * its status (or NS_H1S_NOSTATUS), or NS_H1S_MORE when the reader must
 * take it byte by byte (fewer than 12 bytes, an interim answer). */
static inline unsigned ns_h1status_whole(const char *b, size_t n)
{
	unsigned code;

	if (n < 12)
		return NS_H1S_MORE;
	code = ns_h1_status(b);
	if (ns_h1_interim(code))
		return NS_H1S_MORE;
	return code ? code : NS_H1S_NOSTATUS;
}

/* Feed the next n bytes of the answer. The final status (101 included) or
 * NS_H1S_NOSTATUS once the answer says it, with *used the bytes of b taken
 * to say it (what follows is the answer's headers); NS_H1S_MORE when all n
 * were taken and it has not yet. Not to be fed after it said. */
unsigned ns_h1status_feed(struct ns_h1status *s, const char *b, size_t n, size_t *used);

/**** a 429 or 503's Retry-After ****/

#define NS_H1RA_MAX 32 /* the longest value kept (seconds, or an HTTP date: 29) */

enum {
	NS_H1RA_MORE = 0, /* inside the headers: feed more */
	NS_H1RA_NONE,     /* the blank line came first: no Retry-After */
	NS_H1RA_VALUE,    /* a Retry-After's line ended: its value in out */
};

struct ns_h1ra {
	uint32_t value; /* 1 inside a Retry-After's value */
	uint32_t len;   /* 0 inside a line, 1 at a line's start, 2 after a "\r"
			 * there, 3 + k with k bytes of "retry-after:" matched */
	uint32_t vlen;  /* bytes of the value in val */
	char val[NS_H1RA_MAX];
};

/* Begin after the status line's 12 bytes (inside its line). */
static inline void ns_h1ra_start(struct ns_h1ra *r)
{
	r->value = 0;
	r->len = 0;
	r->vlen = 0;
}

/* Feed the next n bytes of the headers; NS_H1RA_VALUE writes the value
 * (leading blanks and "\r" left out, at most NS_H1RA_MAX bytes) with a NUL
 * to out. Not to be fed after it said. */
int ns_h1ra_feed(struct ns_h1ra *r, const char *b, size_t n, char out[NS_H1RA_MAX + 1]);
/* A Retry-After's value (seconds, or an HTTP date, IMF-fixdate: the
 * obsolete forms are not taken) as the milliseconds it asks to wait from
 * wall_ms (CLOCK_REALTIME ms); 0: now, the past, or no value at all. Both
 * engines read a value through it (the library from the bytes it saw,
 * shimrun from a Go program's header map). */
uint64_t ns_retry_after_ms(const char *value, uint64_t wall_ms);

#endif

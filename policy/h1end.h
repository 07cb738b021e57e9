/* h1end.h -- where an HTTP/1.x answer ends, read as it passes (h1end.c).
 *
 * A connection may be given up for a waiter only when its last answer was
 * read to the end HTTP frames it (RFC 9112 section 6.3): the end of its
 * headers for a HEAD request, 1xx (after the final answer), 204 and 304;
 * Content-Length bytes of body; or a chunked body's last chunk and
 * trailers. Anything else (a body ended by the close, 101, a
 * Transfer-Encoding that is not chunked last, a Content-Length that does
 * not parse or disagrees with another, bytes after the end, any input that
 * is not an answer) is NS_H1E_UNKNOWN, for good: the shim never takes such
 * a connection for idle. Pure code, no allocation: the state is a few
 * words in the connection's record, fed every byte the program reads. */
#ifndef NS_H1END_H
#define NS_H1END_H

#include <stddef.h>
#include <stdint.h>

enum {
	NS_H1E_NONE = 0, /* not followed (the exchange began without it) */
	NS_H1E_MORE,     /* inside the answer: more is due */
	NS_H1E_DONE,     /* read to its end, not a byte more */
	NS_H1E_UNKNOWN,  /* its end cannot be known: never idle */
};

struct ns_h1end {
	uint64_t left;   /* body or chunk bytes still due; a chunk size as it is read */
	uint64_t num;    /* a Content-Length value as it is read */
	uint64_t te;     /* Transfer-Encoding: the value's last 8 non-blank bytes, lower case */
	uint32_t result; /* NS_H1E_* */
	uint32_t st;     /* the reader's state (h1end.c) */
	uint32_t pos;    /* a position in the status line, a header name or a line */
	uint32_t code;   /* the status being read */
	uint32_t flags;  /* what the headers said so far (h1end.c) */
	uint32_t hdr;    /* the header whose value is being read */
};

/* Begin following an answer; head: its request was HEAD (no body). */
void ns_h1end_start(struct ns_h1end *e, int head);
/* Feed the next n bytes the program read of the answer; returns result. */
uint32_t ns_h1end_feed(struct ns_h1end *e, const char *b, size_t n);

#endif

/* h1end.c -- where an HTTP/1.x answer ends (h1end.h): a byte-at-a-time
 * reader of the status line, the headers that frame the body, and the body
 * itself (counted, or its chunks read), so that any split of the answer
 * into reads gives the same result. */
#include "h1end.h"

#include <string.h>

enum {
	S_STATUS, /* "HTTP/1.x NNN": pos bytes of it seen */
	S_STATUS_REST,
	S_LINE,    /* a header line's start (pos 1: after its "\r") */
	S_NAME,    /* a header's name: pos bytes of it, hdr the names it may still be */
	S_VALUE,   /* a header's value, to its line's end */
	S_SKIP,    /* a header nobody reads, to its line's end */
	S_BODY,    /* left bytes of body due */
	S_CSIZE,   /* a chunk's size line */
	S_CEXT,    /* ...its extensions, to the line's end */
	S_CDATA,   /* left bytes of the chunk due */
	S_CCRLF,   /* the chunk's closing "\r\n" (pos 1: after the "\r") */
	S_TRAILER, /* trailer lines (pos 0 a line's start, 1 inside, 2 after a "\r" at its start) */
	S_END,
};

enum { H_CL = 1, H_TE = 2 };
enum { F_HEAD = 1, F_CL = 2, F_TE = 4, F_CHUNKED = 8, F_DIGIT = 16, F_VEND = 32 };

static const char cl_name[] = "content-length", te_name[] = "transfer-encoding";
/* "chunked" as the last 7 bytes of te */
#define TE_CHUNKED 0x6368756e6b6564ULL

void ns_h1end_start(struct ns_h1end *e, int head)
{
	memset(e, 0, sizeof(*e));
	e->result = NS_H1E_MORE;
	e->st = S_STATUS;
	e->flags = head ? F_HEAD : 0;
}

static uint32_t unknown(struct ns_h1end *e)
{
	e->result = NS_H1E_UNKNOWN;
	return e->result;
}

static uint32_t done(struct ns_h1end *e)
{
	e->st = S_END;
	e->result = NS_H1E_DONE;
	return e->result;
}

/* The blank line after the headers: what frames the body. */
static uint32_t headers_end(struct ns_h1end *e)
{
	uint32_t code = e->code;

	if (code >= 100 && code <= 199 && code != 101) {
		/* interim: the final answer follows, with headers of its own */
		uint32_t head = e->flags & F_HEAD;

		ns_h1end_start(e, head);
		return e->result;
	}
	if (code == 101)
		return unknown(e); /* another protocol from here */
	if ((e->flags & F_HEAD) || code == 204 || code == 304)
		return done(e);
	if (e->flags & F_TE) {
		if (!(e->flags & F_CHUNKED))
			return unknown(e); /* ended by the close */
		e->st = S_CSIZE;
		e->left = 0;
		e->flags &= ~(uint32_t)F_DIGIT;
		return e->result;
	}
	if (!(e->flags & F_CL))
		return unknown(e); /* ended by the close */
	if (e->left == 0)
		return done(e);
	e->st = S_BODY;
	return e->result;
}

/* A header value's line ended. */
static uint32_t value_end(struct ns_h1end *e)
{
	if (e->hdr == H_CL) {
		if (!(e->flags & F_DIGIT) || ((e->flags & F_CL) && e->left != e->num))
			return unknown(e);
		e->left = e->num;
		e->flags |= F_CL;
	} else if (e->hdr == H_TE) {
		uint64_t before = e->te >> 56;

		e->flags |= F_TE;
		if ((e->te & 0xffffffffffffffULL) == TE_CHUNKED && (before == 0 || before == ','))
			e->flags |= F_CHUNKED;
		else
			e->flags &= ~(uint32_t)F_CHUNKED; /* the last coding is what frames it */
	}
	e->st = S_LINE;
	e->pos = 0;
	return e->result;
}

static uint32_t value_byte(struct ns_h1end *e, char ch)
{
	if (ch == '\n')
		return value_end(e);
	if (ch == '\r')
		return e->result;
	if (e->hdr == H_CL) {
		if (ch == ' ' || ch == '\t') {
			if (e->flags & F_DIGIT)
				e->flags |= F_VEND;
			return e->result;
		}
		if (ch < '0' || ch > '9' || (e->flags & F_VEND) || e->num > (UINT64_MAX - 9) / 10)
			return unknown(e); /* a list, a sign, junk, or past 64 bits */
		e->num = e->num * 10 + (uint64_t)(ch - '0');
		e->flags |= F_DIGIT;
	} else if (ch != ' ' && ch != '\t') {
		e->te = e->te << 8 | (uint8_t)(ch >= 'A' && ch <= 'Z' ? ch + 32 : ch);
	}
	return e->result;
}

static uint32_t name_byte(struct ns_h1end *e, char ch)
{
	char lc = ch >= 'A' && ch <= 'Z' ? (char)(ch + 32) : ch;

	if (ch == ':') {
		if ((e->hdr & H_CL) && e->pos == sizeof(cl_name) - 1) {
			e->hdr = H_CL;
			e->num = 0;
			e->flags &= ~(uint32_t)(F_DIGIT | F_VEND);
		} else if ((e->hdr & H_TE) && e->pos == sizeof(te_name) - 1) {
			e->hdr = H_TE;
			e->te = 0;
		} else {
			e->st = S_SKIP;
			return e->result;
		}
		e->st = S_VALUE;
		return e->result;
	}
	if (ch == '\n' || ch == '\r' || ch == ' ' || ch == '\t')
		return unknown(e); /* no colon, or blanks before it: not a header we can trust */
	if ((e->hdr & H_CL) && (e->pos >= sizeof(cl_name) - 1 || cl_name[e->pos] != lc))
		e->hdr &= ~(uint32_t)H_CL;
	if ((e->hdr & H_TE) && (e->pos >= sizeof(te_name) - 1 || te_name[e->pos] != lc))
		e->hdr &= ~(uint32_t)H_TE;
	e->pos++;
	if (!e->hdr)
		e->st = S_SKIP;
	return e->result;
}

static uint32_t status_byte(struct ns_h1end *e, char ch)
{
	static const char lead[] = "HTTP/1.";
	uint32_t p = e->pos++;

	if (p < sizeof(lead) - 1)
		return ch == lead[p] ? e->result : unknown(e);
	if (p == 7)
		return ch >= '0' && ch <= '9' ? e->result : unknown(e);
	if (p == 8)
		return ch == ' ' ? e->result : unknown(e);
	if (ch < '0' || ch > '9')
		return unknown(e);
	e->code = e->code * 10 + (uint32_t)(ch - '0');
	if (p == 11)
		e->st = S_STATUS_REST;
	return e->result;
}

static uint32_t chunk_size_byte(struct ns_h1end *e, char ch)
{
	int v = ch >= '0' && ch <= '9'   ? ch - '0'
		: ch >= 'a' && ch <= 'f' ? ch - 'a' + 10
		: ch >= 'A' && ch <= 'F' ? ch - 'A' + 10
					 : -1;

	if (v >= 0 && e->st == S_CSIZE) {
		if (e->left > (UINT64_MAX >> 4))
			return unknown(e);
		e->left = e->left << 4 | (uint64_t)v;
		e->flags |= F_DIGIT;
		return e->result;
	}
	if (ch == '\n') {
		if (!(e->flags & F_DIGIT))
			return unknown(e);
		e->st = e->left ? S_CDATA : S_TRAILER;
		e->pos = 0;
		return e->result;
	}
	if (ch == '\r' || e->st == S_CEXT)
		return e->result;
	if ((ch == ';' || ch == ' ' || ch == '\t') && (e->flags & F_DIGIT)) {
		e->st = S_CEXT;
		return e->result;
	}
	return unknown(e);
}

/* The head's whole lines within the bytes at hand, read a line at a time
 * (what the byte at a time reader below does with them, in fewer steps: an
 * answer's head was ~29 instructions a byte, then ~20 steps of a token
 * each): the status line's "HTTP/1.x NNN", a line nobody reads to its end,
 * a framing header's name and a Content-Length value. Anything else, and
 * a line not whole here, is left to the byte reader. */
static uint64_t word_at(const char *b)
{
	uint64_t w;

	memcpy(&w, b, sizeof(w));
	return w;
}

#define LOW 0x2020202020202020ULL

/* The first of 8 bytes where two words differ (8: none). */
static uint32_t first_diff(uint64_t x)
{
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	return x ? (uint32_t)__builtin_ctzll(x) >> 3 : 8;
#else
	uint32_t i = 0;

	while (i < 8 && !(x >> (56 - 8 * i) & 0xff))
		i++;
	return i;
#endif
}

/* How many bytes of b (18 at hand) spell the one framing name whose first
 * letter b has (h: H_CL content-length, H_TE transfer-encoding), in any
 * case. A byte OR 0x20 is a lower-case letter only for that letter in
 * either case; for '-' it is '-' or '\r' too, so the hyphens are matched
 * as they are. */
static uint32_t name_match(const char *b, uint32_t h)
{
	uint32_t m;

	if (h == H_CL) {
		/* "content-" (its hyphen, byte 7, unmasked), "length" */
		if ((m = first_diff((word_at(b) | (LOW >> 8)) ^ word_at("content-"))) < 8)
			return m;
		m = first_diff((word_at(b + 8) | LOW) ^ word_at("length\0\0"));
		return m < 6 ? 8 + m : 14;
	}
	if ((m = first_diff((word_at(b) | LOW) ^ word_at("transfer"))) < 8)
		return m;
	if (b[8] != '-')
		return 8;
	m = first_diff((word_at(b + 9) | LOW) ^ word_at("encoding"));
	return 9 + m;
}

/* A Content-Length value's line, whole in b[0, n) up to its "\n": the
 * byte reader's verdict on it (value_byte), at once, in one pass. 0: not
 * whole here, or not plain digits (the byte reader says what). */
static size_t cl_line(struct ns_h1end *e, const char *b, size_t n)
{
	size_t j = 0;
	uint64_t v = 0;

	while (j < n && (b[j] == ' ' || b[j] == '\t'))
		j++;
	if (j == n || (unsigned char)(b[j] - '0') > 9)
		return 0;
	for (; j < n && (unsigned char)(b[j] - '0') <= 9; j++) {
		if (v > (UINT64_MAX - 9) / 10)
			return 0;
		v = v * 10 + (uint64_t)(b[j] - '0');
	}
	while (j < n && (b[j] == ' ' || b[j] == '\t' || b[j] == '\r'))
		j++;
	if (j == n || b[j] != '\n' || (e->flags & F_CL && e->left != v))
		return 0;
	e->num = v;
	e->flags |= F_DIGIT;
	value_end(e);
	return j + 1;
}

static int blank(char ch)
{
	return ch == '\n' || ch == '\r' || ch == ' ' || ch == '\t';
}

/* e->st one of S_STATUS, S_STATUS_REST, S_LINE, S_SKIP: how many bytes
 * the head's lines took (0: none; the byte reader goes on). */
static size_t head_lines(struct ns_h1end *e, const char *b, size_t n)
{
	const char *p = b, *end = b + n, *nl;

	if (e->st == S_STATUS) {
		if (e->pos || n < 12 || memcmp(b, "HTTP/1.", 7) != 0 || b[7] < '0' || b[7] > '9' || b[8] != ' ' ||
		    b[9] < '0' || b[9] > '9' || b[10] < '0' || b[10] > '9' || b[11] < '0' || b[11] > '9')
			return 0;
		e->code = (uint32_t)(b[9] - '0') * 100 + (uint32_t)(b[10] - '0') * 10 + (uint32_t)(b[11] - '0');
		e->pos = 12;
		e->st = S_STATUS_REST;
		p += 12;
	}
	for (;;) {
		uint32_t h, m, len;
		size_t took;

		if (e->st != S_LINE) { /* S_STATUS_REST, S_SKIP: to the line's end */
			if (!(nl = memchr(p, '\n', (size_t)(end - p))))
				return n;
			p = nl + 1;
			e->st = S_LINE;
			e->pos = 0;
		}
		if (e->pos || end - p < 2)
			return (size_t)(p - b);
		if (p[0] == '\r') {
			if (p[1] != '\n')
				return (size_t)(p - b);
			headers_end(e); /* the blank line */
			return (size_t)(p + 2 - b);
		}
		if ((p[0] | 0x20) != 'c' && (p[0] | 0x20) != 't') {
			if (blank(p[0]) || p[0] == ':')
				return (size_t)(p - b);
			e->st = S_SKIP; /* a name no framing header has */
			p++;
			continue;
		}
		if (end - p < 18)
			return (size_t)(p - b);
		h = (p[0] | 0x20) == 'c' ? H_CL : H_TE;
		len = h == H_CL ? sizeof(cl_name) - 1 : sizeof(te_name) - 1;
		m = name_match(p, h);
		if (blank(p[m]))
			return (size_t)(p - b); /* (the byte reader: not a header to trust) */
		if (m < len || p[m] != ':') {
			e->st = S_SKIP; /* another name (name_byte's verdict) */
			p += m;
			continue;
		}
		e->hdr = h;
		e->st = S_VALUE;
		if (h == H_TE) {
			e->te = 0;
			return (size_t)(p + len + 1 - b);
		}
		e->num = 0;
		e->flags &= ~(uint32_t)(F_DIGIT | F_VEND);
		p += len + 1;
		if (!(took = cl_line(e, p, (size_t)(end - p))))
			return (size_t)(p - b);
		p += took; /* S_LINE again */
	}
}

uint32_t ns_h1end_feed(struct ns_h1end *e, const char *b, size_t n)
{
	size_t i = 0;

	while (i < n && e->result == NS_H1E_MORE) {
		char ch = b[i];
		size_t took;

		if (e->st <= S_SKIP && e->st != S_NAME && e->st != S_VALUE &&
		    (took = head_lines(e, b + i, n - i)) != 0) {
			i += took;
			continue;
		}
		switch (e->st) {
		case S_BODY:
		case S_CDATA: {
			size_t k = n - i < e->left ? n - i : (size_t)e->left;

			e->left -= k;
			i += k;
			if (e->left == 0) {
				if (e->st == S_BODY)
					done(e);
				else {
					e->st = S_CCRLF;
					e->pos = 0;
				}
			}
			continue;
		}
		case S_STATUS:
			status_byte(e, ch);
			break;
		case S_STATUS_REST:
		case S_SKIP:
			if (ch == '\n') {
				e->st = S_LINE;
				e->pos = 0;
			}
			break;
		case S_LINE:
			if (ch == '\n') {
				headers_end(e);
			} else if (ch == '\r' && e->pos == 0) {
				e->pos = 1;
			} else if (e->pos == 1 || ch == ' ' || ch == '\t') {
				unknown(e); /* a bare "\r", or a folded line */
			} else {
				e->st = S_NAME;
				e->pos = 0;
				e->hdr = H_CL | H_TE;
				name_byte(e, ch);
			}
			break;
		case S_NAME:
			name_byte(e, ch);
			break;
		case S_VALUE:
			value_byte(e, ch);
			break;
		case S_CSIZE:
		case S_CEXT:
			chunk_size_byte(e, ch);
			break;
		case S_CCRLF:
			if (ch == '\r' && e->pos == 0) {
				e->pos = 1;
			} else if (ch == '\n') {
				e->st = S_CSIZE;
				e->left = 0;
				e->flags &= ~(uint32_t)F_DIGIT;
			} else {
				unknown(e);
			}
			break;
		case S_TRAILER:
			if (ch == '\n') {
				if (e->pos != 1)
					done(e); /* the blank line */
				else
					e->pos = 0;
			} else {
				e->pos = ch == '\r' && e->pos == 0 ? 2 : 1;
			}
			break;
		default:
			unknown(e);
			break;
		}
		i++;
	}
	if (i < n && e->result == NS_H1E_DONE)
		unknown(e); /* bytes after the end: a pipelined answer, or junk */
	return e->result;
}

/* h2.h -- following an HTTP/2 connection's frames (RFC 9113), both ways,
 * for its outcomes (DESIGN part 4, "HTTP/2 and gRPC outcomes"): which
 * streams the client opened, when the server first answered each, how each
 * ended. The server's header blocks go through the HPACK decoder (hpack.h)
 * in order, so its dynamic table stays the server's.
 *
 * Pure: no system call, no allocation, no libc beyond memcpy. Bytes come in
 * pieces of any size, split anywhere, as the program sent and read them;
 * what they mean comes back as events, at the octet that decides each. A
 * stream the reader cannot follow, a frame or header block it cannot parse,
 * makes the connection blind: one NS_H2_BLIND event, then nothing, so that
 * an outcome is never guessed. */
#ifndef NS_H2_H
#define NS_H2_H

#include <stddef.h>
#include <stdint.h>

#include "hpack.h"

#define NS_H2_STREAMS 32 /* streams open at once that are followed; one more: blind */

/* the client's connection preface (RFC 9113 3.4) */
#define NS_H2_PREFACE     "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
#define NS_H2_PREFACE_LEN 24

enum ns_h2_evtype {
	NS_H2_OPEN,        /* the client opened `stream` (its request's HEADERS) */
	NS_H2_FIRST,       /* the server's first frame on `stream`: the answer's first byte */
	NS_H2_HEADERS,     /* the answer's final header block: status, grpc, retry_after */
	NS_H2_DONE,        /* `stream` ended (END_STREAM): status, grpc, grpc_status */
	NS_H2_FAILED,      /* the server reset `stream` (code), or the connection ended with it open */
	NS_H2_UNPROCESSED, /* REFUSED_STREAM, or above a GOAWAY's last stream: the server did nothing */
	NS_H2_CANCELLED,   /* the client reset `stream`: the program gave up on it */
	NS_H2_BLIND,       /* the reader lost its way: no more events from this connection */
};

#define NS_H2_CONN_ENDED 0xffffffffu /* FAILED's code when the connection ended under the stream */

struct ns_h2_event {
	uint8_t type;        /* NS_H2_* */
	uint8_t grpc;        /* the answer's content-type is gRPC's */
	uint8_t place;       /* the stream's place, 0 to NS_H2_STREAMS - 1, for the caller's own
			      * figures of it (kept from OPEN to its end); BLIND: NS_H2_STREAMS */
	uint16_t status;     /* HEADERS, DONE: the final :status, 0 = none */
	int16_t grpc_status; /* DONE: grpc-status (trailers, or a trailers-only answer); -1 = none */
	uint32_t stream;
	uint32_t code;           /* FAILED: RST_STREAM's error code, or NS_H2_CONN_ENDED */
	const char *retry_after; /* HEADERS: retry-after's text, "" = none */
};

typedef void (*ns_h2_cb)(void *arg, const struct ns_h2_event *ev);

/* One direction's framing, kept across any split. */
struct ns_h2_dir {
	uint8_t hdr[9]; /* a frame header being read */
	uint8_t hlen;   /* ...its octets so far (9: the payload is being read) */
	uint8_t type, flags;
	uint8_t pre;         /* payload octets before a header block's fragment still to skip */
	uint8_t padlen_due;  /* PADDED: the pad length octet is next */
	uint8_t setting_len; /* SETTINGS: octets of the setting being read */
	uint8_t setting[6];
	uint32_t stream;
	uint32_t left;    /* payload octets still to come */
	uint32_t pad;     /* padding octets at the payload's end */
	uint8_t fixed[8]; /* RST_STREAM, GOAWAY: their first octets */
	uint8_t fixed_len;
};

struct ns_h2_stream {
	uint32_t id;      /* 0 = a free place */
	uint8_t answered; /* the server's first frame came */
	uint8_t final;    /* a final (non-1xx) header block came */
	uint8_t grpc;
	uint8_t pad;
	uint16_t status;
	int16_t grpc_status;
};

struct ns_h2 {
	uint8_t preface; /* octets of the client preface seen (NS_H2_PREFACE_LEN: all) */
	uint8_t blind;
	uint8_t block_end_stream; /* the open header block's HEADERS had END_STREAM */
	uint8_t block_push;       /* ...it is a PUSH_PROMISE's (decoded, nothing read from it) */
	uint8_t table_pending;    /* the client asked a header table size the server has not acked */
	uint8_t goaway;           /* the server sent GOAWAY */
	uint32_t block_stream;    /* a header block is open on this stream (0 = none) */
	uint32_t table_size;      /* ...that size */
	uint32_t settings_sent;   /* the client's SETTINGS frames (not ACKs) */
	uint32_t settings_acked;  /* the server's ACKs of them */
	uint32_t table_seq;       /* the one that asked table_size: it holds once this many are acked */
	uint32_t last_opened;     /* the client's highest stream id */
	uint32_t goaway_last;     /* the GOAWAY's last stream id */
	struct ns_h2_dir out, in; /* client to server, server to client */
	struct ns_hfields block;  /* what the open header block says */
	struct ns_h2_stream st[NS_H2_STREAMS];
	struct ns_hpack hp;
};

void ns_h2_init(struct ns_h2 *h);

/* What the program sent, beginning with the preface. */
void ns_h2_out(struct ns_h2 *h, const uint8_t *p, size_t n, ns_h2_cb cb, void *arg);

/* What the program read. */
void ns_h2_in(struct ns_h2 *h, const uint8_t *p, size_t n, ns_h2_cb cb, void *arg);

/* The connection ended (closed, reset, timed out): every stream still
 * open fails. */
void ns_h2_end(struct ns_h2 *h, ns_h2_cb cb, void *arg);

/* A look ahead at bytes the program is about to send, changing nothing:
 * which client streams they open (for rate's tokens, one a new stream). */
struct ns_h2_peek {
	struct ns_h2_dir d;
	uint8_t preface;
	uint8_t blind;
	uint32_t last;               /* the highest stream id opened so far */
	uint32_t opened;             /* new streams whose HEADERS frame header is whole in the bytes looked at */
	uint32_t firsts;             /* ...of them, the connection's first stream (it rides on the connect's token) */
	size_t second_at;            /* where the second of them begins in the bytes looked at; 0 = nowhere */
	size_t seen;                 /* the bytes looked at */
	size_t hdr_at;               /* where the frame header being read began, */
	uint8_t hdr_here;            /* ...when it began in the bytes looked at */
	uint32_t ids[NS_H2_STREAMS]; /* the first NS_H2_STREAMS of the streams opened, in order */
};

void ns_h2_peek_begin(const struct ns_h2 *h, struct ns_h2_peek *k);
void ns_h2_peek(struct ns_h2_peek *k, const uint8_t *p, size_t n);

/* The client is about to send stream id's HEADERS (a look ahead found it):
 * it is open from now, so that an answer read by another thread before
 * the write's own bytes are fed finds it. Their HEADERS then open nothing
 * more. */
void ns_h2_open(struct ns_h2 *h, uint32_t id, ns_h2_cb cb, void *arg);

#endif

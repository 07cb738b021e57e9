/* h2.h -- following an HTTP/2 connection's frames (RFC 9113), both ways,
 * for its outcomes (docs/design.md, "HTTP/2 and gRPC"): which
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

/* streams open at once that are followed; one more: blind. Servers ask
 * 100-250 (SETTINGS_MAX_CONCURRENT_STREAMS: nginx 128, Go 250, h2o 100) */
#define NS_H2_STREAMS 256

/* the most events one octet of a frame can give (a HEADERS of no payload:
 * FIRST, HEADERS, DONE; or OPEN, UNPROCESSED), blind included; a sweep of
 * many streams (GOAWAY, the end) goes one room at a time */
#define NS_H2_ROOM 6

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
	NS_H2_REJECTED,    /* the client ended `stream` with a code that blames the answer (code;
			    * goaway: by GOAWAY, for all its streams): PROTOCOL_ERROR, INTERNAL_ERROR,
			    * FLOW_CONTROL_ERROR, SETTINGS_TIMEOUT, FRAME_SIZE_ERROR, COMPRESSION_ERROR,
			    * ENHANCE_YOUR_CALM; NO_ERROR, CANCEL, STREAM_CLOSED are CANCELLED */
	NS_H2_BLIND,       /* the reader lost its way: no more events from this connection (why) */
};

/* why a reader went blind */
enum ns_h2_why {
	NS_H2_WHY_NONE,
	NS_H2_WHY_STREAMS, /* more streams open at once than NS_H2_STREAMS */
	NS_H2_WHY_FRAMING, /* a frame the reader cannot follow (a length, padding, a frame between a block's) */
	NS_H2_WHY_HPACK,   /* a header block the decoder cannot read */
	NS_H2_WHY_PREFACE, /* the client's first octets were not the preface */
	NS_H2_WHY_GAP,     /* (the caller's) bytes went by that the reader was not shown */
	NS_H2_WHY_LATE,    /* (the caller's) the connection began before the reader */
	NS_H2_WHY_MEMORY,  /* (the caller's) no reader could be had */
};

/* how the connection ended (ns_h2_end) */
enum ns_h2_end_how {
	NS_H2_END_BROKEN, /* reset, timed out, closed by the server: every open stream fails */
	NS_H2_END_CLOSED, /* closed by the program: a stream whose answer's header block was being
			   * read fails (BLOCK_CUT, its :status if read); the others were its to drop */
};

#define NS_H2_CONN_ENDED 0xffffffffu /* FAILED's code when the connection ended under the stream */
#define NS_H2_BLOCK_CUT  0xfffffffeu /* ...when the program closed it inside the answer's header block */

struct ns_h2_event {
	uint8_t type;        /* NS_H2_* */
	uint8_t grpc;        /* the answer's content-type is gRPC's */
	uint8_t why;         /* BLIND: NS_H2_WHY_* */
	uint8_t goaway;      /* REJECTED: by the client's GOAWAY (else its RST_STREAM) */
	uint16_t place;      /* the stream's place, 0 to NS_H2_STREAMS - 1, for the caller's own
			      * figures of it (kept from OPEN to its end); BLIND: NS_H2_STREAMS */
	uint16_t status;     /* HEADERS, DONE, FAILED: the final :status, 0 = none (not yet) */
	int16_t grpc_status; /* DONE: grpc-status (trailers, or a trailers-only answer); -1 = none */
	int32_t pushback_ms; /* DONE: grpc-retry-pushback-ms in the block that ended it; -1 = none */
	uint32_t stream;
	uint32_t code;           /* FAILED: RST_STREAM's error code, NS_H2_CONN_ENDED, NS_H2_BLOCK_CUT;
				  * REJECTED: the client's error code */
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
	uint32_t id; /* 0 = a free place */
	uint16_t status;
	uint8_t flags;      /* NS_H2_S_* */
	int8_t grpc_status; /* -1 = none (gRPC's codes are 0-16) */
};

#define NS_H2_S_ANSWERED 0x1 /* the server's first frame came */
#define NS_H2_S_FINAL    0x2 /* a final (non-1xx) header block came */
#define NS_H2_S_GRPC     0x4

struct ns_h2 {
	uint8_t preface; /* octets of the client preface seen (NS_H2_PREFACE_LEN: all) */
	uint8_t blind;
	uint8_t block_end_stream; /* the open header block's HEADERS had END_STREAM */
	uint8_t block_push;       /* ...it is a PUSH_PROMISE's (decoded, nothing read from it) */
	uint8_t table_pending;    /* the client asked a header table size the server has not acked */
	uint8_t goaway;           /* the server sent GOAWAY */
	uint8_t why;              /* blind: NS_H2_WHY_* */
	uint8_t sweeping;         /* a GOAWAY's streams are being settled, room by room (h2.c) */
	uint16_t hi;              /* one past the highest place in use */
	uint16_t sweep_at;        /* ...the next place it looks at */
	uint32_t sweep_code;      /* ...the client's error code */
	uint32_t room;            /* events the caller can take before it must be given control
				   * back: a feed stops (returns what it read) below NS_H2_ROOM */
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

/* What the program sent, beginning with the preface. Returns the octets
 * read: n, or fewer when h->room ran low (the caller takes its events and
 * feeds the rest). ns_h2_init sets room unbounded. */
size_t ns_h2_out(struct ns_h2 *h, const uint8_t *p, size_t n, ns_h2_cb cb, void *arg);

/* What the program read (returns as ns_h2_out). */
size_t ns_h2_in(struct ns_h2 *h, const uint8_t *p, size_t n, ns_h2_cb cb, void *arg);

/* The connection ended (how: NS_H2_END_*). Returns 1 when h->room ran
 * low before every stream was settled (call again), else 0. */
int ns_h2_end(struct ns_h2 *h, int how, ns_h2_cb cb, void *arg);

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

/* hpack.h -- HPACK (RFC 7541) decoding of a server's header blocks, for
 * reading HTTP/2 outcomes (docs/design.md, "HTTP/2 and gRPC").
 *
 * Pure: no system call, no allocation, no libc beyond memcpy; fixed size
 * (struct ns_hpack is under 5 KiB). It is fed a header block in pieces of
 * any size, split anywhere (HEADERS and CONTINUATION frames, reads of any
 * length), and follows every representation so that its dynamic table stays
 * the server's, but keeps only what an outcome needs: :status, retry-after,
 * grpc-status and whether content-type is gRPC's. Anything it cannot follow
 * exactly (a malformed block, a table larger than it can hold) is an error:
 * the caller then stops reading that connection (h2_blind), so a status is
 * never guessed. */
#ifndef NS_HPACK_H
#define NS_HPACK_H

#include <stddef.h>
#include <stdint.h>

#define NS_HPACK_DEFAULT_TABLE 4096 /* SETTINGS_HEADER_TABLE_SIZE until the client says otherwise */
#define NS_HPACK_ENTRIES       128  /* entries held: a table of 4096 bytes holds at most 4096 / 32 */
#define NS_HPACK_VAL_MAX       29   /* a kept value's bytes: an IMF-fixdate Retry-After is 29 */
#define NS_HPACK_VALS          24   /* entries with a kept value (:status, retry-after...) at once */

/* the header names an outcome reads */
enum { NS_HN_OTHER, NS_HN_STATUS, NS_HN_RETRY_AFTER, NS_HN_GRPC_STATUS, NS_HN_CONTENT_TYPE, NS_HN_GRPC_PUSHBACK };

/* What one header block said that an outcome needs. */
struct ns_hfields {
	uint16_t status;     /* :status, 0 = none (or not three digits) */
	int16_t grpc_status; /* grpc-status, -1 = none */
	int32_t pushback_ms; /* grpc-retry-pushback-ms (gRPC's server pushback), -1 = none */
	uint8_t grpc;        /* content-type is application/grpc (or application/grpc+...) */
	uint8_t ra_len;      /* retry-after's text, 0 = none */
	char retry_after[NS_HPACK_VAL_MAX + 1];
};

/* One entry of the dynamic table: its size, and where its value is kept
 * when its name is one an outcome reads. */
struct ns_hpack_entry {
	uint16_t nlen; /* the name's octets */
	uint16_t size; /* nlen + the value's octets + 32 (RFC 7541 4.1) */
	uint8_t name;  /* NS_HN_* */
	uint8_t kept;  /* its value's place in vals[] + 1; 0 = none (NS_HN_OTHER) */
};

/* A kept value. */
struct ns_hpack_val {
	uint8_t vlen; /* octets of val kept */
	uint8_t over; /* the value was longer: cut there, and read as no value */
	char val[NS_HPACK_VAL_MAX];
};

struct ns_hpack {
	uint32_t max;           /* the size the client allows (SETTINGS_HEADER_TABLE_SIZE) */
	uint32_t cap;           /* the table's size limit now: max, or less by a size update */
	uint32_t size;          /* the sum of the entries' sizes */
	uint16_t newest, count; /* ent[] is a ring: ent[newest] the newest of count */
	/* the representation being read, kept across any split */
	uint8_t st;          /* where in it (hpack.c) */
	uint8_t rep;         /* which kind */
	uint8_t at_start;    /* no header yet in this block: a size update may come */
	uint8_t huff;        /* the string being read is Huffman-coded */
	uint8_t in_name;     /* ...and it is a literal name */
	uint8_t need_update; /* the client lowered its limit: the next block starts with a size update */
	uint8_t shift;       /* a prefixed integer's next 7 bits go here */
	uint8_t name;        /* NS_HN_* of this representation's name */
	uint8_t cand;        /* a literal name being read: the names it may still be */
	uint8_t vlen;        /* octets of val kept */
	uint8_t over;        /* the value was longer than val */
	uint8_t hn;          /* Huffman: bits in hacc not yet decoded */
	uint32_t num;        /* a prefixed integer */
	uint32_t left;       /* a string's octets still to read */
	uint32_t olen;       /* a string's octets, decoded */
	uint32_t nlen;       /* this representation's name's octets */
	uint64_t hacc;       /* Huffman: the string's bits, the last hn of them not yet decoded */
	/* the canonical code's limits, made from RFC 7541's table at init: by
	 * length L, the first code and the end of the codes up to L, both
	 * left-justified in 30 bits, and how many symbols are shorter */
	uint32_t hfirst[31], hlimit[31];
	uint16_t hbase[31];
	char val[NS_HPACK_VAL_MAX];
	uint32_t vals_used; /* a bit for each place of vals[] taken */
	struct ns_hpack_entry ent[NS_HPACK_ENTRIES];
	struct ns_hpack_val vals[NS_HPACK_VALS];
};

/* A new decoder for a connection: an empty table of NS_HPACK_DEFAULT_TABLE. */
void ns_hpack_init(struct ns_hpack *h);

/* The client's SETTINGS_HEADER_TABLE_SIZE. A value under the table's
 * size now must be answered by a size update at the next block's start
 * (RFC 7541 4.2): a block without one is an error. */
void ns_hpack_set_max(struct ns_hpack *h, uint32_t max);

/* A header block begins: out is cleared, and what the block says goes there. */
void ns_hpack_begin(struct ns_hpack *h, struct ns_hfields *out);

/* The next n octets of the block. 0, or -1 when it is not one this decoder
 * can follow exactly (the connection is then unreadable from here on). */
int ns_hpack_feed(struct ns_hpack *h, const uint8_t *p, size_t n, struct ns_hfields *out);

/* The block ended (END_HEADERS): 0, or -1 when it ended inside a
 * representation. */
int ns_hpack_end(struct ns_hpack *h);

#endif

/* ocring.h -- the outcome ring: every exchange's outcome and every connect
 * a breaker turned away, handed by the shim to the history recorder
 * (netshim-agent --history) through shared memory.
 *
 * The ring is a file beside the table (/dev/shm/NAME.outcomes), made by the
 * agent when it starts recording and mapped by a program at its first
 * outcome after that. Programs write into it only while the table's header
 * says a recorder is reading (hist_until_ms ahead of the clock, renewed by
 * the agent every pass): with no recorder, an outcome costs one load and
 * one comparison more, and nothing is mapped. A writer takes a position
 * with one atomic add and publishes the record with its sequence number;
 * the reader copies a record between two reads of that number, so a record
 * overwritten meanwhile (the reader fell a whole ring behind) is counted
 * lost, never read torn. */
#ifndef NS_POLICY_OCRING_H
#define NS_POLICY_OCRING_H

#include <stddef.h>
#include <stdint.h>

#include "table.h"

#define NS_OC_MAGIC 0x676e69726f63736eULL   /* "nsocring" */
#define NS_OC_VERSION 1u
#define NS_OC_DEFAULT_CAP 131072u           /* 8 MiB: 1.6 s of 80,000 outcomes a second */
#define NS_OC_MAX_CAP (1u << 24)

/* what a record says happened */
enum ns_oc_kind {
	NS_OC_SUCCESS = 1,
	NS_OC_FAILURE,
	NS_OC_TIMEOUT,
	NS_OC_REJECTED,          /* the destination's breaker was open */
	NS_OC_REJECTED_FLEET,    /* closed here, held open by the fleet */
	NS_OC_REJECTED_COOLDOWN, /* a server's Retry-After */
	NS_OC_KIND_MAX = NS_OC_REJECTED_COOLDOWN,
	/* not a row: the connection's own success (NS_OC_F_OWN) was taken
	 * back by its first request; the recorder drops that row */
	NS_OC_WITHDRAWN = 16
};

/* a record's flags */
#define NS_OC_F_OWN \
	1u /* a SUCCESS that is the connection's own (its TLS handshake, an h2
			* connection's first frame): a WITHDRAWN of the connection may follow */

struct ns_oc_hdr {
	uint64_t magic;
	uint32_t version;
	uint32_t rec_size;
	uint32_t cap;               /* records; a power of two */
	uint32_t pad;
	uint64_t head;              /* atomic: the next position a writer takes */
	uint64_t created_wall_ms;
	uint8_t reserved[88];
};

/* One outcome. Times are CLOCK_MONOTONIC microseconds (the breakers'
 * clock); conn_us is when the connection's connect was admitted, so a
 * replay makes one attempt per connection and one outcome per exchange. */
struct ns_ocrec {
	uint64_t seq;               /* atomic: position + 1 once written; 0 or another while not */
	uint64_t at_us;             /* when it was counted */
	uint64_t start_us;          /* when the exchange began (its request, or the connect) */
	uint64_t conn_us;           /* when the connection's connect was admitted */
	uint64_t wall_ms;           /* at_us on the wall clock */
	uint32_t slot;              /* the destination's slot in the table */
	uint32_t conn;              /* the connection's number in its process (0: a turned-away connect) */
	uint32_t pid;
	uint32_t err;               /* a failure's errno, 0 = none */
	uint32_t latency_us;        /* a success: its first byte after the exchange began */
	uint16_t status;            /* HTTP status, 0 = none */
	uint8_t kind;               /* enum ns_oc_kind */
	uint8_t flags;              /* NS_OC_F_* */
};

_Static_assert(sizeof(struct ns_oc_hdr) == 128, "outcome ring header layout");
_Static_assert(sizeof(struct ns_ocrec) == 64, "outcome record layout");

/* A mapped ring (the table file's guard covers it: a file cut short under
 * a program turns into zeros, never a SIGBUS). */
struct ns_ocring {
	struct ns_table m;          /* the mapping, as the guard knows mappings */
	struct ns_oc_hdr *h;
	struct ns_ocrec *recs;
	uint32_t cap;               /* private copy, validated */
};

/* The ring's path for the table at table_path: beside it. */
int ns_ocring_path(const char *table_path, char *out, size_t len);
/* Make (replace) the ring: a new file of cap records, renamed into place.
 * Returns 0, or -1 with the reason in err. */
int ns_ocring_create(const char *path, uint32_t cap, char *err, size_t errlen);
/* Map the ring at path, checked as the table is (owner, mode, size,
 * header). Returns 0, or -1 with the reason in err. */
int ns_ocring_open(const char *path, struct ns_ocring *r, char *err, size_t errlen);
void ns_ocring_close(struct ns_ocring *r);

/* Writer: one record (its seq is set here). */
void ns_ocring_put(struct ns_ocring *r, const struct ns_ocrec *rec);
/* Reader: the next position writers will take. */
uint64_t ns_ocring_head(const struct ns_ocring *r);
/* Reader: the record at position pos. 0: copied; 1: not written yet (a
 * writer is in the middle of it); -1: overwritten, lost. */
int ns_ocring_get(const struct ns_ocring *r, uint64_t pos, struct ns_ocrec *out);

/* Why a connect to slot idx is turned away at now_ms: NS_OC_REJECTED*. */
int ns_table_reject_kind(const struct ns_table *t, int idx, uint64_t now_ms);

#endif

/* gohook.h -- the statuses a Go program's net/http receives, read at the
 * return sites of net/http.(*Transport).roundTrip (gohook.c, goelf.c).
 *
 * shimrun stops the program once, at its exec, before any of its code has
 * run: it maps a page of code (one trampoline per return site) and a ring
 * shared with shimrun, moves each return's epilogue into its trampoline
 * and leaves a jmp in its place, then lets go (no tracer stays). A
 * trampoline runs in the goroutine that returns: it makes no call, no
 * system call and no allocation; it reads *Response (its status, whether
 * TLS carried it, its request's URL.Host, and a 429 or 503's Retry-After
 * from its header map) and writes one slot of the ring,
 * then runs the moved epilogue, which returns as before. */
#ifndef NS_GOHOOK_H
#define NS_GOHOOK_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "goelf.h"

#define NS_GOHOOK_FUNC  "net/http.(*Transport).roundTrip"
#define NS_GORING_MAGIC 0x676e6972746f676eull /* "ngotring" */
#define NS_GORING_SLOTS 4096u                 /* (a power of two): 40 ms of answers at 100,000 a second */
#define NS_GOHOST_MAX   63
#define NS_GORA_MAX     32 /* (policy/h1.h's NS_H1RA_MAX: an HTTP date is 29) */

/* One answer: written by a trampoline, seq last (head + 1). */
struct ns_goslot {
	uint64_t seq;
	uint64_t status;      /* Response.StatusCode */
	uint64_t flags;       /* bit 0: TLS carried it; bits 8-15: the host's length; a 429 or 503's
			  * headers: bit 1 they were read (NS_GOSLOT_HDRS), bits 16-23 the length of
			  * their Retry-After (0: none; above 32: cut) */
	char host[64];        /* Request.URL.Host, as much as fits */
	uint64_t ticks;       /* roundTrip's time in TSC ticks (0: not known) */
	char ra[NS_GORA_MAX]; /* Retry-After's first value, as much as fits */
};

#define NS_GOSLOT_HDRS 2u

#define NS_GOSTARTS 256u /* (a power of two) */

struct ns_goring {
	uint64_t magic;
	uint64_t head; /* slots claimed (lock xadd) */
	uint64_t pad[6];
	struct ns_goslot slot[NS_GORING_SLOTS];
	/* when each goroutine (its g, hashed) entered roundTrip: its TSC */
	struct {
		uint64_t g, tsc;
	} start[NS_GOSTARTS];
};

/* Go 1.19-1.23's layouts: Response.StatusCode, .Request, .TLS; Request.URL;
 * URL.Host (a string: pointer, length) */
enum {
	NS_GO_RESP_STATUS = 16,
	NS_GO_RESP_HEADER = 56,
	NS_GO_RESP_REQUEST = 128,
	NS_GO_RESP_TLS = 136,
	NS_GO_REQ_URL = 16,
	NS_GO_URL_HOST = 40
};

/* ...and Go 1.19-1.23's maps (runtime/map.go: hmap, and a bucket of a
 * map[string][]string: 8 tophash bytes, 8 keys of 16 bytes, 8 values of
 * 24, the overflow pointer). A header map is read only whole: none that
 * grows (its old buckets kept), none of more than 2^NS_GO_MAP_BMAX buckets
 * or of a chain longer than NS_GO_MAP_CHAIN buckets. */
enum {
	NS_GO_HMAP_COUNT = 0,
	NS_GO_HMAP_B = 9,
	NS_GO_HMAP_BUCKETS = 16,
	NS_GO_HMAP_OLDBUCKETS = 24,
	NS_GO_BUCKET_KEYS = 8,
	NS_GO_BUCKET_VALUES = 136,
	NS_GO_BUCKET_OVERFLOW = 328,
	NS_GO_BUCKET_SIZE = 336,
	NS_GO_TOPHASH_MIN = 5, /* below: an empty or moved cell */
	NS_GO_MAP_BMAX = 5,
	NS_GO_MAP_CHAIN = 8
};

/* The trampoline of one return site: the hook, then the moved epilogue
 * (ep, eplen bytes ending in its ret), for a ring at ring_at. Its length
 * written at out (cap bytes), or -1. */
int ns_gohook_tramp(unsigned char *out, size_t cap, uint64_t ring_at, const unsigned char *ep, size_t eplen);
/* The entry's trampoline, at out_at in the program: the goroutine's start
 * time kept (TSC, by g), the moved first instruction (first, len bytes),
 * then a jmp back to back_at. Its length, or -1. */
int ns_gohook_entry(unsigned char *out, size_t cap, uint64_t out_at, uint64_t ring_at, const unsigned char *first,
		    size_t len, uint64_t back_at);

/* Hook the program pid, stopped at its exec (PTRACE_EVENT_EXEC, seized by
 * shimrun), whose file g describes: its ring is memfd (shimrun's
 * descriptor, opened by the program through /proc). 0 when hooked, else -1
 * and why. The program is left as it was stopped (the caller detaches,
 * delivering *sig: a signal that came meanwhile, or 0). */
int ns_gohook_inject(pid_t pid, const struct ns_goelf *g, int memfd, int *sig, char *why, size_t wl);

#endif

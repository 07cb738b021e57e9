/* histread.h -- the history database read back (histread.c). */
#ifndef NS_HISTREAD_H
#define NS_HISTREAD_H

#include <sqlite3.h>
#include <stddef.h>
#include <stdint.h>

#include "../../policy/ocring.h"
#include "../../policy/policy.h"

struct hopt {
	const char *file;
	uint64_t since_ms;          /* a span back from now, 0 = all */
	int json;
	const char *dest;
	uint32_t keep_bp;           /* suggest --keep, basis points */
	const char *policy;
};

/* One recorded outcome, as the replay needs it. */
struct row {
	int64_t at_us, conn_us, wall_ms;
	int64_t conn;
	uint32_t latency_us;
	int dest;                   /* index into dests[] */
	uint16_t status;
	uint8_t kind;
	int err;
	int att;                    /* its connection's attempt, -1 = none */
};

struct dest {
	char key[NS_KEY_MAX];
	uint64_t n[NS_OC_KIND_MAX + 1];
	uint32_t *lat;              /* successes' first-byte times, us */
	size_t nlat, caplat;
};

struct hist {
	struct row *rows;
	size_t nrows, caprows;
	struct dest *dests;
	int ndests;
	int64_t first_wall, last_wall;
};

struct event {
	int64_t at_us, wall_ms;
	char dest[NS_KEY_MAX];
	char type[24], rule[32];
	int matched;
};

/* Open FILE read-only and check its schema (saying why not): NULL on failure. */
sqlite3 *hr_open(const char *file);
/* The outcomes of the span (of o->dest alone when set), by destination. 0 or -1. */
int hr_load(sqlite3 *db, const struct hopt *o, struct hist *h);
void hr_free(struct hist *h);
int hr_cmp_u32(const void *a, const void *b);
/* The value at fraction bp/10000 of sorted v. */
uint32_t hr_quantile(const uint32_t *v, size_t n, uint32_t bp);
/* The breakers' transitions and the operators' resets and forced opens of
 * the span, in time order (NULL and *n 0 when none). */
struct event *hr_load_events(sqlite3 *db, const struct hopt *o, size_t *n);

#endif

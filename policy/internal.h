/* internal.h -- what the files of policy/ share and nobody else uses:
 * the keys' types and places, the error list of a parse, and the steps
 * the parser (policy.c) takes from values.c and patterns.c. */
#ifndef NS_POLICY_INTERNAL_H
#define NS_POLICY_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "policy.h"

#define NS_POLICY_MAX_BYTES (1 << 20)
#define NS_LINE_MAX 1024
#define NS_MAX_DURATION_MS (7ULL * 24 * 3600 * 1000)

enum vtype {
	T_DUR,
	T_UINT,
	T_PCT,
	T_RECOVERY,
	T_MODE,
	T_BOOL,
	T_FAULT,
	T_SEED,
	T_STATUSES,
	T_GRPC,
	T_FACTOR,
	T_RATE,
	T_RATEH,
	T_MAXCONN,   /* a count, or auto (NS_MAXCONN_AUTO) */
	T_THROTTLE,  /* adaptive or off */
	T_ADDRCHOICE /* as-resolved or healthy-first */
};

struct keydef {
	int type;
	size_t off;
	uint64_t min, max;          /* for T_UINT, T_DUR (ms; 0 always allowed) */
};

extern const struct keydef ns_keydefs[NS_K_COUNT];

/* The errors of one parse: every one counted, as many as fit kept in buf,
 * one per line, "file:line: " first. */
struct perr {
	char *buf;
	size_t len, used;
	int count;
	const char *fname;
};

void ns_perr_add(struct perr *e, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* values.c: s without its leading and trailing blanks (in place). */
const char *ns_trim(char *s);
/* "12", "12.5" into thousandths: the end, or NULL. */
const char *ns_parse_milli(const char *s, uint64_t *out);
/* A whole number of at most 9 digits: 0, or -1. */
int ns_parse_uint(const char *s, uint64_t *v);
/* Set one key from its text. Returns 0 or -1 after reporting. */
int ns_set_value(struct perr *e, int line, int key, const char *val, struct ns_settings *s);

/* patterns.c: a section header's pattern into sec. NULL, or the reason. */
const char *ns_parse_pattern_at(const char *pat, struct ns_section *sec);
/* Do a and b name the same destinations? */
int ns_same_pattern(const struct ns_section *a, const struct ns_section *b);
/* A hash of what ns_same_pattern compares: equal for the same pattern. */
uint64_t ns_pattern_hash(const struct ns_section *a);

#endif

/* scenario.h -- shimrun --scenario FILE: a timeline of injected faults for
 * one run. Pure: no system calls (the caller reads the file and the clock).
 *
 *   LINE := AT DEST FAULTS | AT DEST "clear"     (blank lines, # comments)
 *
 * AT is a duration from the start of the run ("0s", "10s", "1500ms"). A
 * line sets (or clears) the faults of its DEST from AT on, replacing what
 * an earlier line set for the same DEST; a destination gets the faults of
 * the most specific DEST that matches it (one with a port before one
 * without), as with shimctl inject. */
#ifndef NS_SCENARIO_H
#define NS_SCENARIO_H

#include <stddef.h>
#include <stdint.h>

#include "faultspec.h"
#include "policy.h"

#define NS_SCENARIO_LINES 256   /* lines with an injection a scenario may have */

struct ns_scen_line {
	uint64_t at_ms;
	int dest_id;                /* the first line with the same DEST: one state per DEST */
	int clear;
	int line;                   /* in the file, for messages */
	struct ns_section pat;
	struct ns_faults f;
};

struct ns_scenario {
	int n;
	struct ns_scen_line *l;     /* in time order (lines with the same AT in file order) */
};

/* Parse the whole text of a scenario named fname (for messages). Returns
 * the number of errors, each "fname:line: why" in errs (one per line); on
 * 0 errors *out holds the timeline (ns_scenario_free). */
int ns_scenario_parse(const char *text, const char *fname, struct ns_scenario *out, char *errs, size_t errlen);
void ns_scenario_free(struct ns_scenario *s);

/* The faults for d at t_ms into the run: 1 and *out, or 0 (none in force). */
int ns_scenario_match(const struct ns_scenario *s, uint64_t t_ms, const struct ns_dest *d, struct ns_faults *out);

/* The last AT of the timeline (when its last phase begins). */
uint64_t ns_scenario_end(const struct ns_scenario *s);

#endif

/* state.c -- what every file of the agent may use, below all of them: the
 * agent's one state (agentstate.h) and its log line. No file here calls
 * back up into another, so the agent's files call each other in no loop
 * (tests/integration/test_layout.py). */
#include <stdarg.h>
#include <stdio.h>

#include "agentstate.h"

struct agent_state ag_state;

void ag_log(const char *fmt, ...)
{
	char buf[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	fprintf(stderr, "netshim-agent: %s\n", buf);
}

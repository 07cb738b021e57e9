/* trace.h -- the calling code's frames, for traced failures (trace.c). */
#ifndef NS_TRACE_H
#define NS_TRACE_H

#include "base.h"

/* trace.c: up to max frames of the calling code, the shim's own skipped,
 * as "function+0xoff (object)". Returns how many. */
NS_HIDDEN unsigned ns_trace_frames(char frames[][150], unsigned max);

#endif

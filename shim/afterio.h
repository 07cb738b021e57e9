/* afterio.h -- what a data call's result says about its connection
 * (afterio.c). */
#ifndef NS_AFTERIO_H
#define NS_AFTERIO_H

#include <sys/types.h>

#include "conn.h"

/* After the real call on c returned r (errno as it left it): count the
 * outcome, and turn the kernel's EAGAIN into ETIMEDOUT when the timeout it
 * held was the shim's. d: NS_IN or NS_OUT; len: the bytes asked for (for
 * input: 0 asked is no end of stream); flags: the call's MSG_*; gen: c's
 * generation before the call (a record reused meanwhile is left alone).
 * Returns r, or -1 with errno ETIMEDOUT. */
NS_HIDDEN ssize_t ns_after_io(int fd, struct ns_conn *c, int d, ssize_t r, size_t len, int flags, uint32_t gen);

#endif

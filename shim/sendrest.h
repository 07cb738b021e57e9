/* sendrest.h -- a blocking connect's limit left in SO_SNDTIMEO after it,
 * and the sends it cuts short carried on (sendrest.c). */
#ifndef NS_SENDREST_H
#define NS_SENDREST_H

#include <sys/types.h>

#include "conn.h"

/* 1 when r, an output call's result for len asked (bytes, or messages),
 * is short only because the kernel still held the connect's limit
 * (NS_SRC_SHIM_CONNECT) on a blocking call: the program's own send timeout
 * (none) is back in the kernel and the caller carries the call on with
 * its rest. EAGAIN is the limit's alone; a short count is a signal's too,
 * so it is the limit's only when the call lasted that long (t0: when it
 * began, 0 when not read: the signal's, returned as it is). errno is kept. */
NS_HIDDEN int ns_out_cut(int fd, struct ns_conn *c, ssize_t r, size_t len, int flags, monotime t0);
/* Calls that write at least this many bytes read the clock first: a
 * smaller one the kernel cut after moving some is left short (as a
 * signal leaves it) rather than timed on every send. */
#define NS_OUT_TIMED 16384
/* The clock for an output call that may be cut (the limit still in the
 * kernel), else 0. */
static inline monotime ns_out_t0(const struct ns_conn *c)
{
	return LD(c->dir[NS_OUT].src) == NS_SRC_SHIM_CONNECT ? ns_now() : 0;
}
/* Before an exec or a spawn: each governed socket a child inherits (not
 * close-on-exec) gets the program's own SO_SNDTIMEO back (a system call
 * each), so no other program meets the shim's limit there. */
NS_HIDDEN void ns_sndtimeo_for_child(void);

#endif

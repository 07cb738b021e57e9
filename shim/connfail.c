/* connfail.c -- a connection's failure: the HTTP/2 streams still open on
 * it fail with it first (h2conn.c: they are its outcomes, and settle the
 * connection's own), then its own outcome is counted (outcome.c). This
 * file sits above both, so that each is called in one direction: the
 * reader counts through outcome.c, and outcome.c knows no reader. */
#include "connfail.h"

#include "h2conn.h"
#include "outcome.h"

void ns_conn_failed(struct ns_conn *c, int kind, int err)
{
	int saved = errno;

	if (unlikely(__atomic_load_n(&c->h2, __ATOMIC_ACQUIRE) != NULL))
		ns_h2c_end(c, kind, err);
	ns_conn_outcome(c, kind, err);
	errno = saved;
}

void ns_conn_fail_errno(struct ns_conn *c, int e)
{
	if (__atomic_load_n(&c->flags, __ATOMIC_RELAXED) & NS_C_CONNECTING)
		__atomic_fetch_or(&c->flags, NS_C_FAILED, __ATOMIC_RELAXED);
	ns_conn_failed(c, e == ETIMEDOUT ? NS_OUT_TIMEOUT : NS_OUT_FAILURE, e);
}

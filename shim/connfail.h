/* connfail.h -- a connection's failure, with its HTTP/2 streams (connfail.c). */
#ifndef NS_CONNFAIL_H
#define NS_CONNFAIL_H

#include "conn.h"

/* The connection failed (kind NS_OUT_FAILURE or NS_OUT_TIMEOUT, err its
 * errno, 0 when none says it: the peer closed before the answer): its
 * HTTP/2 streams still open fail with it and are its outcomes; then its
 * own outcome is counted. errno is kept. */
NS_HIDDEN void ns_conn_failed(struct ns_conn *c, int kind, int err);
/* ...failed with errno e (a connect that failed leaves the socket free for
 * a new attempt). */
NS_HIDDEN void ns_conn_fail_errno(struct ns_conn *c, int e);

#endif

/* exchange.h -- exchanges on a connection and the HTTP status of their
 * answers (exchange.c). */
#ifndef NS_EXCHANGE_H
#define NS_EXCHANGE_H

#include <stddef.h>

#include "conn.h"

/* A turn of the exchange: bytes the program sent (d NS_OUT) or received
 * of the answer (NS_IN), n of them at buf (NULL when the call has no plain
 * buffer). For the data path's calls that start an exchange or read an
 * answer whose status is not known yet (NS_C_TURN). */
NS_HIDDEN void ns_exchange_turn(struct ns_conn *c, int d, const void *buf, size_t n);
/* The same on TLS plaintext (tls.c). */
NS_HIDDEN void ns_exchange_plain(struct ns_conn *c, int d, const void *buf, size_t n);
/* Bytes went by that the shim was not shown (a memory-BIO session's first
 * write beyond what was kept): an HTTP/2 connection can no longer be
 * followed (h2_blind); nothing for any other. */
NS_HIDDEN void ns_exchange_gap(struct ns_conn *c);
/* Is c a reused connection (not its first exchange) whose request went out
 * and no byte of the answer came? Then its end is a stale keep-alive
 * connection's, not a failure. */
NS_HIDDEN int ns_exchange_stale(const struct ns_conn *c);

#endif

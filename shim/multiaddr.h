/* multiaddr.h -- a name with several addresses (multiaddr.c): each address's
 * connects noted, getaddrinfo's answer listed healthy first. */
#ifndef NS_MULTIADDR_H
#define NS_MULTIADDR_H

#include <netdb.h>
#include "../policy/policy.h"
#include "base.h"

struct ns_conn;
/* c's connect failed with err, or its first outcome was a success (ok):
 * noted for its address when c's destination is a name (not an address
 * the program gave). */
NS_HIDDEN void ns_addr_connect_outcome(struct ns_conn *c, int ok, int err);
/* A successful getaddrinfo answer for node: reordered in place when its
 * settings ask for healthy-first (one load otherwise: the policy has none). */
NS_HIDDEN void ns_addr_reorder(const char *node, struct addrinfo **res);

/* connect_total_timeout: this thread's connect to slot's name at d,
 * entered in its attempt (multiaddr.c says what one is): 0, or -1 when the
 * attempt's budget is spent (the connect is not to be made). */
NS_HIDDEN int ns_budget_enter(int slot, const struct ns_dest *d, uint64_t total_ms, monotime now);
/* ...a connect under the key that enters no attempt (no slot for it, or
 * monitor mode): the thread's attempt ends, none of it applies. */
NS_HIDDEN void ns_budget_forget(void);
/* A blocking connect's limit lim (ns): lim, or the attempt's share when
 * that is less; a retry: 1 once the attempt's budget is spent; the record
 * of a connect: its connect deadline no later than the attempt's end. */
NS_HIDDEN int64_t ns_budget_share(const struct ns_conn *c, int64_t lim);
NS_HIDDEN int ns_budget_spent(void);
NS_HIDDEN void ns_budget_deadline(struct ns_conn *c);

#endif

/* addrs.h -- address_choice = healthy-first (addrs.c): each address's
 * connects noted, getaddrinfo's answer listed healthy first. */
#ifndef NS_ADDRS_H
#define NS_ADDRS_H

#include <netdb.h>
#include "base.h"

struct ns_conn;
/* c's connect succeeded (ok) or failed with err: noted for its address
 * when c's destination is a name (not an address the program gave). */
NS_HIDDEN void ns_addr_connect_outcome(struct ns_conn *c, int ok, int err);
/* A successful getaddrinfo answer for node: reordered in place when its
 * settings ask for healthy-first (one load otherwise: the policy has none). */
NS_HIDDEN void ns_addr_reorder(const char *node, struct addrinfo **res);

#endif

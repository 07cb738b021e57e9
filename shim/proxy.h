/* proxy.h -- forward proxies: a request given to its target's breaker (proxy.c). */
#ifndef NS_PROXY_H
#define NS_PROXY_H

#include <stddef.h>
#include "conn.h"

/* Before a send that starts an exchange (the data path): a request to a forward
 * proxy is given to its target's breaker. 0 to send, or -1 with errno
 * ECONNREFUSED (the target's breaker is open; nothing is sent). */
NS_HIDDEN int ns_exchange_proxied(struct ns_conn *c, const void *buf, size_t n);

#endif

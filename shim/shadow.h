/* shadow.h -- a shadow policy: judged live on the same outcomes, never
 * enforced (shadow.c). */
#ifndef NS_SHADOW_H
#define NS_SHADOW_H

#include "../policy/account.h"
#include "config.h"
#include "conn.h"

/* (a shadow policy is asked for: NS_FL_SHADOW in ns_fault_local, which
 * config.c sets with each live policy; the connect tests that word anyway) */
/* A connect to d admitted (c, its record) or turned away by the live
 * breaker (c NULL): the shadow's breaker asked too; a connect it would
 * turn away is counted there and its outcomes are not the shadow's. */
NS_HIDDEN void ns_shadow_attempt(struct ns_conn *c, const struct ns_dest *d, monotime now);
/* c's view in the shadow (its table, settings and slot) for the core to
 * judge its outcomes on (policy/account.c); ref->t NULL: none. */
NS_HIDDEN void ns_shadow_ref(const struct ns_conn *c, struct ns_shadow_ref *ref);

#endif

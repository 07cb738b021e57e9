/* queued.h -- this process's queued non-blocking connects, served in
 * the order they queued (queued.c). */
#ifndef NS_QUEUED_H
#define NS_QUEUED_H

#include "conn.h"

/* Entries in use (atomic; 0: a connect need not ask). */
extern int ns_shape_queued NS_HIDDEN;
/* c queued for a place (the rest of a full list are served in no order). */
NS_HIDDEN void ns_queued_add(struct ns_conn *c);
/* 1 when another of this process's connects to slot, queued before
 * `since` and looked at lately, still waits for a place; c's entry is
 * cleared once it is served (gone). */
NS_HIDDEN int ns_queued_before(struct ns_conn *c, int slot, monotime since, monotime now, int gone);
/* A forked child: none of them is its own. */
NS_HIDDEN void ns_queued_forget(void);

#endif

/* fault.h -- injected faults made real: at connect, in the data path and
 * in the waits (fault.c). Which faults: faultcfg.h. */
#ifndef NS_SHIM_FAULT_H
#define NS_SHIM_FAULT_H

#include <sys/socket.h>
#include <sys/types.h>

#include "conn.h"
#include "faultcfg.h"

/* At connect, after the breaker let it through. Returns NS_FC_NONE (connect
 * as asked), NS_FC_TARGET (connect to *to instead: the local target that
 * refuses, or that never answers), or NS_FC_FAIL (fail now, errno set). */
enum { NS_FC_NONE, NS_FC_TARGET, NS_FC_FAIL };
NS_HIDDEN int ns_fault_at_connect(struct ns_conn *c, const struct ns_dest *d, const struct ns_settings *set,
				  int slot, const struct sockaddr *sa, socklen_t len,
				  struct sockaddr_storage *to, socklen_t *tolen);
/* The shim's own descriptors (the local targets, the blackhole's filler),
 * which the program's ranged closes must leave open: how many, into out. */
NS_HIDDEN int ns_fault_own_fds(int *out, int max);
/* fd is about to be closed (or replaced by dup2) by the program: if it is
 * one of the shim's own sockets, ours moves to another number first. One
 * load while no fault target was ever made. */
extern int ns_fault_targets NS_HIDDEN;
NS_HIDDEN void ns_fault_keep_own(int fd);
static inline void ns_fault_keep_own_maybe(int fd)
{
	if (__builtin_expect(__atomic_load_n(&ns_fault_targets, __ATOMIC_RELAXED), 0))
		ns_fault_keep_own(fd);
}
/* The local socket that refuses, as an address for family: 0, or -1. */
NS_HIDDEN int ns_fault_refusing_target(int family, struct sockaddr_storage *to, socklen_t *tolen);
/* Hold a connect back until `until` (a queued one: shape.c): it goes to
 * the local target that never answers (*to) and to sa once
 * ns_fault_delay_due lets it. 0, or -1 (no target: not held). */
NS_HIDDEN int ns_fault_hold_connect(struct ns_conn *c, const struct sockaddr *sa, socklen_t len, monotime until,
				    struct sockaddr_storage *to, socklen_t *tolen);
/* A delay whose time came: the real connect starts (a queued one: when a
 * place is its, else it is throttled). 1 if it did. */
NS_HIDDEN int ns_fault_delay_due(int fd, struct ns_conn *c, monotime now);
/* shimctl inject --existing: an open connection flagged NS_C_RTCHECK
 * takes the runtime fault set for it after it began, if there is one (its
 * data faults replace any it had; refuse and unreachable act on it as a
 * reset, blackhole as a stall: what those faults do to a connection that
 * is already open). On fd's own data call, before the real call. */
NS_HIDDEN void ns_fault_existing(int fd, struct ns_conn *c);

/* The data path of a connection with faults, before the real call:
 * NS_FAULT_GO to make it (at most *allow bytes), or the call's result
 * (errno set for -1). buf/n: the caller's buffer, for a made-up answer
 * (NULL when the call has no plain buffer). */
#define NS_FAULT_GO (-2)
NS_HIDDEN ssize_t ns_fault_pre(int fd, struct ns_conn *c, int d, int flags, void *buf, size_t n, size_t *allow);
/* ...and after it moved r > 0 bytes. */
NS_HIDDEN void ns_fault_post(struct ns_conn *c, int d, ssize_t r);
/* For the waits: NS_FW_NONE, NS_FW_GATED (input held until *until; 0 =
 * for ever) or NS_FW_READY (input to report now, with *ev of NS_FWE_*). */
enum { NS_FW_NONE, NS_FW_GATED, NS_FW_READY };
#define NS_FWE_ERR 0x1
#define NS_FWE_HUP 0x2
#define NS_FWE_RDHUP 0x4
NS_HIDDEN int ns_fault_wait(struct ns_conn *c, monotime now, monotime *until, int *ev);
/* getsockopt(SO_ERROR): 1 when an injected reset is due and not yet told
 * (it is now, and counted), as the kernel reports a reset there. */
NS_HIDDEN int ns_fault_so_error(struct ns_conn *c);


#endif

/* real.h -- the one table of the real libc functions the wrappers call. */
#ifndef NS_REAL_H
#define NS_REAL_H

#include <fcntl.h>
#include <netdb.h>
#include <stdio.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

#define unlikely(x) __builtin_expect(!!(x), 0)

/* The fortified entry points, declared here since the headers only declare
 * them under _FORTIFY_SOURCE. */
ssize_t __recv_chk(int, void *, size_t, size_t, int);
ssize_t __recvfrom_chk(int, void *, size_t, size_t, int, struct sockaddr *, socklen_t *);
ssize_t __read_chk(int, void *, size_t, size_t);
int fcntl64(int, int, ...);
int __poll_chk(struct pollfd *, nfds_t, int, size_t);
int __ppoll_chk(struct pollfd *, nfds_t, const struct timespec *, const sigset_t *, size_t);

#include "exports.h"

/* The real functions, one field per symbol bound (exports.h). */
#define NS_REAL_FIELD(ret, sym, field, params, ...) ret (*field) params;
#define NS_REAL_NONE(sym)
struct ns_real {
	NS_EXPORTS(NS_REAL_FIELD, NS_REAL_FIELD, NS_REAL_FIELD, NS_REAL_NONE)
};

#define NS_REAL_HIDDEN __attribute__((visibility("hidden")))
extern struct ns_real ns_real;

/* libc's syscall() (the exported one is uring.c's), bound with the rest. */
extern long (*ns_real_syscall)(long, ...) NS_REAL_HIDDEN;

/* Bind every entry (once, thread-safe, callable before the constructor). */
void ns_real_bind(void);

/* The data calls' way in before anything was bound (a call from another
 * library's constructor): bind, then call. Separate functions so that the
 * wrappers' fast path is two tail calls and needs no stack frame. */
#define NS_UNBOUND_DECL(ret, sym, field, params, args) ret ns_unbound_##field params;
#define NS_UNBOUND_NONE(...)
NS_EXPORTS(NS_UNBOUND_DECL, NS_UNBOUND_NONE, NS_UNBOUND_NONE, NS_UNBOUND_NONE)
int ns_unbound_select(int, fd_set *, fd_set *, fd_set *, struct timeval *);
ssize_t ns_unbound_sendto(int, const void *, size_t, int, const struct sockaddr *, socklen_t);
ssize_t ns_unbound_sendmsg(int, const struct msghdr *, int);
int ns_unbound_sendmmsg(int, struct mmsghdr *, unsigned, int);

/* The two ways to libc. REAL(fn): the real function, bound on first use
 * (REAL_CALL(fn, args) calls it the same way, the binding kept out of line
 * in ns_unbound_fn so that a wrapper's fast path needs no stack frame).
 * ns_real.fn: where the table is known bound (a governed connection was
 * made through it). */
#define REAL(fn) (__builtin_expect(ns_real.fn != NULL, 1) ? ns_real.fn : (ns_real_bind(), ns_real.fn))
#define REAL_CALL(fn, args) (__builtin_expect(ns_real.fn != NULL, 1) ? ns_real.fn args : ns_unbound_##fn args)

#endif

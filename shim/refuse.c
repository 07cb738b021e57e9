/* refuse.c -- connects refused as the kernel refuses them: an open
 * breaker's, a throttled one's (shaping), each with the program's next
 * connect() told the same. A non-blocking socket is connected to the
 * shim's local refusing socket (fault.c's target), so the kernel makes the
 * whole sequence (EINPROGRESS, POLLERR, SO_ERROR) the program would see of
 * a real refusal; nothing reaches the destination. */
#include "refuse.h"

#include <errno.h>

#include "fault.h"
#include "real.h"

/* An open breaker refuses a connect on fd (v: its tag). A blocking socket
 * is told ECONNREFUSED at once, as the kernel tells it of a refusal. A
 * non-blocking one gets what a real refusal gives it, which event loops
 * rely on (Mojo, ab): EINPROGRESS, then ready with POLLERR and SO_ERROR
 * ECONNREFUSED in poll, select and epoll alike, and a connect() again
 * reports the error. The kernel makes it so: the connect goes to the
 * shim's local refusing socket (loopback; nothing reaches the destination).
 * The mark on fd sends the program's next connect(), which asks for the
 * outcome, there too, uncounted (ns_refused_again). */
int ns_refuse_open(int fd, uintptr_t v, int family)
{
	struct sockaddr_storage to;
	socklen_t tolen;
	int r;

	if (!(v & NS_TAG_NONBLOCK) || ns_fault_refusing_target(family, &to, &tolen) < 0) {
		errno = ECONNREFUSED;
		return -1;
	}
	r = REAL(connect)(fd, (struct sockaddr *)&to, tolen);
	if (r < 0 && errno == EINPROGRESS) {
		int e = errno;

		ns_fd_set(fd, v | NS_TAG_REFUSED);
		errno = e;
	} else if (r == 0) {
		errno = ECONNREFUSED;   /* never: nothing listens there */
		r = -1;
	}
	return r;
}

/* The connect() after ns_refuse_open's: the kernel's answer for that attempt
 * (ECONNREFUSED, or ECONNABORTED once SO_ERROR took it), mark cleared. */
int ns_refused_again(int fd, uintptr_t v, int family)
{
	struct sockaddr_storage to;
	socklen_t tolen;

	ns_fd_set(fd, v & ~(uintptr_t)NS_TAG_REFUSED);
	if (ns_fault_refusing_target(family, &to, &tolen) < 0) {
		errno = ECONNREFUSED;
		return -1;
	}
	return REAL(connect)(fd, (struct sockaddr *)&to, tolen);
}

/* connect() on a socket whose queued connect was throttled (fault.c,
 * throttle_held): the kernel's answer from the refusing target it went to,
 * once; the connect after that is a new attempt. */
int ns_throttled_again(int fd, struct ns_conn *c)
{
	struct sockaddr_storage to;
	socklen_t tolen;

	__atomic_fetch_and(&c->flags, ~NS_C_THROTTLED, __ATOMIC_RELAXED);
	__atomic_fetch_or(&c->flags, NS_C_FAILED, __ATOMIC_RELAXED);
	if (ns_fault_refusing_target(c->fault.real_sa.ss_family, &to, &tolen) < 0) {
		errno = ECONNREFUSED;
		return -1;
	}
	return REAL(connect)(fd, (struct sockaddr *)&to, tolen);
}

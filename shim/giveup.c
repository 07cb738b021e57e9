/* giveup.c -- hold and wait: a process that must wait for a place while it
 * holds idle keep-alive connections to the destination gives up its
 * oldest provably idle one (shape.c asks), and a send that starts a
 * request on a connection meanwhile keeps it or learns it went. */
#include "shape.h"

#include <errno.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "config.h"
#include "real.h"

#define QUIET_MS 100u /* a threaded process's idle connection gives its place up after this quiet */

/* Hold and wait: a connect over the cap while this very process holds
 * places of the destination with idle keep-alive connections (a pool's)
 * would wait on itself. Such a connection, answered and quiet, gives its
 * place up: shut down, so that the program sees what a server's idle close
 * looks like (end of stream; a send on it fails EPIPE, counted a stale
 * reuse), which every pool already handles by connecting anew.
 *
 * Idle: an HTTP/1 connection (in clear text, or TLS whose plaintext the
 * shim reads) whose last answer was read to the end HTTP frames it
 * (h1end.h: Content-Length, the last chunk; never a body ended by the
 * close, nor one the shim did not see every byte of), nothing sent since,
 * no request held for a token, nothing unread in the kernel and nothing
 * unsent. Any doubt keeps the connection: another protocol, HTTP/2, TLS
 * read only as records, pipelining. The oldest (by its last request) goes. */
#define BUSY                                                                                                         \
	(NS_C_CONNECTING | NS_C_SENT | NS_C_PARSE | NS_C_HDRS | NS_C_SNIFF | NS_C_PACED | NS_C_QUEUED | NS_C_TOKEN | \
	 NS_C_FAULT | NS_C_EXPIRED | NS_C_GIVENUP)

static int idle_holder(int fd, struct ns_conn *c, int slot, uint32_t cap, uint32_t self)
{
	uint32_t f = LD(c->flags);
	int p = LD(c->place), n = 0;

	if (!(f & NS_C_PLACE) || p < 0 || (uint32_t)p >= cap || LD(c->place_slot) != slot ||
	    LD(c->place_holder) != self || !LD(c->outcome))
		return 0;
	if ((f & (NS_C_ANSWERED | NS_C_XNEXT)) != (NS_C_ANSWERED | NS_C_XNEXT) || (f & BUSY) ||
	    (f & NS_C_H2) != NS_C_HTTP || __atomic_load_n(&c->h1end.result, __ATOMIC_ACQUIRE) != NS_H1E_DONE)
		return 0;
	return ns_real_syscall(SYS_ioctl, fd, SIOCINQ, &n) == 0 && n == 0 &&
		ns_real_syscall(SYS_ioctl, fd, SIOCOUTQ, &n) == 0 && n == 0;
}

/* ...and when its last exchange was another thread's, in a process that
 * has other threads (one may have just taken it back from its pool to send
 * on it), or when the connect that waits is an event loop's (non-blocking:
 * the loop goes on, and its pool may hand the connection to its next
 * request before the loop has seen the end of stream): only after QUIET_MS
 * of silence. A blocking connect's own thread, waiting in it, is not
 * between a pool and a send. */
static int quiet_enough(int fd, const struct ns_conn *c, int loop)
{
	struct tcp_info ti;
	socklen_t tl = sizeof(ti);

	if (!loop &&
	    (LD(c->xthread) == (uintptr_t)pthread_self() || ns_proc_stat_field((unsigned)ns_own_pid, 20, NULL) <= 1))
		return 1;
	return ns_real_syscall(SYS_getsockopt, fd, IPPROTO_TCP, TCP_INFO, &ti, &tl) == 0 &&
		ti.tcpi_last_data_recv >= QUIET_MS && ti.tcpi_last_data_sent >= QUIET_MS;
}

/* The place of this process's oldest idle connection to slot, given up:
 * its index, or -1 when there is none. */
int ns_shape_give_up_idle(int slot, uint32_t cap, uint32_t self, int loop)
{
	unsigned hi = __atomic_load_n(&ns_fdhi, __ATOMIC_ACQUIRE);
	struct ns_conn *best = NULL;
	int best_fd = -1, saved = errno, p;
	monotime best_t = 0;
	uint32_t was;

	if (!self)
		return -1;
	/* the fd table is walked only when this process holds one of the
	 * places (a queued connect looks every few milliseconds) */
	for (p = 0; p < (int)cap && p < (int)NS_PLACES; p++)
		if (ns_table_place_holder(&ns_breakers, slot, p) == self)
			break;
	if (p >= (int)cap || p >= (int)NS_PLACES)
		return -1;
	for (unsigned fd = 0; fd < hi && fd < ns_fdmax; fd++) {
		struct ns_conn *c = ns_conn_of((int)fd);
		monotime t;

		if (!c || !idle_holder((int)fd, c, slot, cap, self))
			continue;
		t = LD(c->xstart) ? LD(c->xstart) : LD(c->start);
		if (!best || t < best_t) {
			best = c;
			best_fd = (int)fd;
			best_t = t;
		}
	}
	if (!best || !quiet_enough(best_fd, best, loop) || !ns_conn_still(best_fd, best)) {
		errno = saved;
		return -1;
	}
	/* a request that started on it since it was looked at keeps it
	 * (NS_C_OUTGOING, and the exchange's flags after it): one word, so
	 * either the send sees NS_C_GIVENUP or this sees the send */
	was = __atomic_fetch_or(&best->flags, NS_C_GIVENUP, __ATOMIC_ACQ_REL);
	if (was & ((NS_C_OUTGOING | BUSY) & ~NS_C_GIVENUP)) {
		__atomic_fetch_and(&best->flags, ~NS_C_GIVENUP, __ATOMIC_RELEASE);
		errno = saved;
		return -1;
	}
	if (was & NS_C_GIVENUP) {
		errno = saved;
		return -1; /* another thread's */
	}
	/* the thread that takes the place from the record gives it up */
	p = __atomic_exchange_n(&best->place, -1, __ATOMIC_ACQ_REL);
	if (p < 0) {
		errno = saved;
		return -1; /* (it stays shut to sends: its place went elsewhere) */
	}
	ns_real_syscall(SYS_shutdown, best_fd, SHUT_RDWR);
	NS_LOG(NS_LOG_INFO,
	       "fd %d: an idle keep-alive connection gave its place (max_connections) to a new connect "
	       "of the same process, and was shut down",
	       best_fd);
	errno = saved;
	return p;
}

int ns_shape_outgoing(struct ns_conn *c)
{
	int slot = LD(c->slot);
	uint32_t was = __atomic_fetch_or(&c->flags, NS_C_OUTGOING, __ATOMIC_ACQ_REL);

	if (likely(!(was & NS_C_GIVENUP)))
		return 0;
	__atomic_fetch_and(&c->flags, ~NS_C_OUTGOING, __ATOMIC_RELEASE);
	if ((__atomic_fetch_and(&c->flags, ~NS_C_ANSWERED, __ATOMIC_RELAXED) & NS_C_ANSWERED) && slot >= 0 &&
	    ns_breakers_ok)
		ns_table_stale_reuse(&ns_breakers, slot);
	errno = EPIPE;
	return -1;
}

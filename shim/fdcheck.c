/* fdcheck.c -- is a descriptor still the socket the shim knew? (a close it
 * could not see may have freed the number) */
#include "conn.h"

#include <errno.h>
#include <string.h>

#include "real.h"

/* c's destination address is addr (16 bytes), read word by word */
static int peer_addr_is(const struct ns_conn *c, const uint8_t *addr)
{
	uint64_t pa[2] = { LD(c->peer_a[0]), LD(c->peer_a[1]) };

	return memcmp(pa, addr, sizeof(pa)) == 0;
}

/* Is fd still the socket c was made for? Asked only where the shim is
 * about to act on its own (fail a call at a deadline, inject a fault): a
 * close it could not see (a raw system call, libc's own close reached
 * through dlsym) may have freed the number, and whatever holds it now must
 * not inherit c's state. A stream socket connected to c's destination (or
 * not connected at all: reset, or still connecting, or faulted to a local
 * target) is taken as c's; anything else is not, and fd's entry is dropped.
 * Two system calls, on those paths only. errno is kept. */
__attribute__((noinline, cold)) int ns_conn_still(int fd, struct ns_conn *c)
{
	struct sockaddr_storage ss;
	socklen_t l = sizeof(ss), tl;
	struct ns_dest d;
	int type = 0, saved = errno, ours = 0;

	tl = sizeof(type);
	if (REAL(getsockopt)(fd, SOL_SOCKET, SO_TYPE, &type, &tl) == 0 && type == SOCK_STREAM) {
		if (REAL(getpeername)(fd, (struct sockaddr *)&ss, &l) < 0)
			ours = errno == ENOTCONN;
		else
			ours = (LD(c->flags) & NS_C_FAULT) ||
				(ns_dest_from_sa((struct sockaddr *)&ss, l, &d) == 0 &&
				 LD(c->peer_fp) == ((uint32_t)d.family << 16 | d.port) && peer_addr_is(c, d.addr));
	}
	if (!ours) {
		NS_LOG(NS_LOG_DEBUG, "fd %d is no longer the socket the shim knew (closed unseen): its state dropped", fd);
		if (ns_fd_get(fd) == (uintptr_t)c)
			ns_fd_set(fd, 0);
	}
	errno = saved;
	return ours;
}

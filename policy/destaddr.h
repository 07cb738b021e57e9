/* destaddr.h -- a destination from a socket address, for both engines
 * (the preload library's connect path, inline, and shimrun's seccomp
 * engine). */
#ifndef NS_DESTADDR_H
#define NS_DESTADDR_H

#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>

#include "policy.h"

/* d (its name left empty) from an AF_INET or AF_INET6 address: 0, or -1. */
static inline __attribute__((always_inline)) int ns_dest_from_sa(const struct sockaddr *sa, socklen_t len,
								 struct ns_dest *d)
{
	d->name[0] = '\0'; /* (all of it would be 280 bytes to clear on every connect) */
	memset(d->addr, 0, sizeof(d->addr));
	if (sa->sa_family == AF_INET && len >= (socklen_t)sizeof(struct sockaddr_in)) {
		const struct sockaddr_in *s4 = (const struct sockaddr_in *)sa;

		d->family = AF_INET;
		memcpy(d->addr, &s4->sin_addr, 4);
		d->port = ntohs(s4->sin_port);
		return 0;
	}
	if (sa->sa_family == AF_INET6 && len >= (socklen_t)sizeof(struct sockaddr_in6)) {
		const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)sa;

		if (IN6_IS_ADDR_V4MAPPED(&s6->sin6_addr)) {
			d->family = AF_INET;
			memcpy(d->addr, &s6->sin6_addr.s6_addr[12], 4);
		} else {
			d->family = AF_INET6;
			memcpy(d->addr, &s6->sin6_addr, 16);
		}
		d->port = ntohs(s6->sin6_port);
		return 0;
	}
	return -1;
}

#endif

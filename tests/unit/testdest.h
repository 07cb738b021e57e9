/* testdest.h -- the unit tests' destination: a name (may be NULL), an
 * address as text (IPv4 or IPv6) and a port. */
#ifndef NS_TESTDEST_H
#define NS_TESTDEST_H

#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>

#include "../../policy/policy.h"

static inline struct ns_dest dest(const char *name, const char *addr, int port)
{
	struct ns_dest d;

	memset(&d, 0, sizeof(d));
	if (name)
		snprintf(d.name, sizeof(d.name), "%s", name);
	if (inet_pton(AF_INET, addr, d.addr) == 1)
		d.family = AF_INET;
	else if (inet_pton(AF_INET6, addr, d.addr) == 1)
		d.family = AF_INET6;
	d.port = (uint16_t)port;
	return d;
}

#endif

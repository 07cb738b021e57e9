/* names.h -- the names the program resolved, by address (names.c), and the lookup calls. */
#ifndef NS_NAMES_H
#define NS_NAMES_H

#include <netdb.h>
#include "base.h"

/* The name the program resolved addr from, into out: 0, or -1 (none). A
 * process that never resolved a name pays one load. now: ns_now(). */
extern unsigned ns_names_used NS_HIDDEN;
extern uint64_t ns_names_gen NS_HIDDEN;   /* atomic: changes whenever a name is remembered */
NS_HIDDEN int ns_names_lookup_map(int family, const void *addr, char *out, size_t len, monotime now);
static inline int ns_names_lookup(int family, const void *addr, char *out, size_t len, monotime now)
{
	if (!__atomic_load_n(&ns_names_used, __ATOMIC_ACQUIRE))
		return -1;
	return ns_names_lookup_map(family, addr, out, len, now);
}
NS_HIDDEN int ns_getaddrinfo(const char *node, const char *service, const struct addrinfo *hints, struct addrinfo **res);
NS_HIDDEN struct hostent *ns_gethostbyname(const char *name);
NS_HIDDEN struct hostent *ns_gethostbyname2(const char *name, int af);
NS_HIDDEN int ns_gethostbyname_r(const char *name, struct hostent *ret, char *buf, size_t buflen, struct hostent **result, int *h_errnop);
NS_HIDDEN int ns_gethostbyname2_r(const char *name, int af, struct hostent *ret, char *buf, size_t buflen, struct hostent **result, int *h_errnop);

#endif

/* names.c -- host-name attribution: remember which name each address the
 * program resolved came from, so a connect to it is keyed "name:port".
 *
 * The resolver wrappers pass every result and every error through untouched;
 * they only read the answer. The map is bounded (see policy/namemap.c) and
 * guarded by a lock held for a hash lookup, never across a system call. */
#include "names.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../policy/namemap.h"
#include "multiaddr.h"
#include "config.h"
#include "conn.h"
#include "fault.h"
#include "faultcfg.h"
#include "lock.h"
#include "real.h"

#define NAMES_MAX 4096u
#define NAMES_TTL_MS (10u * 60u * 1000u)

static pthread_mutex_t names_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t names_once; /* lock.h: a handler inside its own thread's set-up does without */
static struct ns_namemap *names;
unsigned ns_names_used;       /* atomic: 0 until a name is remembered (see ns_names_lookup) */
#define names_used ns_names_used
uint64_t ns_names_gen;        /* atomic: bumped each time a name is remembered */
#define names_gen ns_names_gen

/* Each thread's last lookup, answered again without the lock while the map
 * has not changed, for a second at most (so an entry's ten-minute expiry is
 * kept to within a second). A scraper connects to the same address over
 * and over; this is what keeps that from costing a lock and a hash. */
struct names_last {
	uint64_t gen;          /* names_gen it was read under; 0 = none */
	uint64_t until_ms;
	int family;
	int found;
	uint8_t addr[16];
	char name[NS_HOST_MAX + 1];
};
static __thread struct names_last last __attribute__((tls_model("initial-exec")));

static void names_prepare(void) { pthread_mutex_lock(&names_lock); }
static void names_parent(void) { pthread_mutex_unlock(&names_lock); }
static void names_child(void) { pthread_mutex_init(&names_lock, NULL); }

static void names_init(void)
{
	names = ns_namemap_new(NAMES_MAX, NAMES_TTL_MS);
	if (!names)
		NS_LOG(NS_LOG_ERROR, "out of memory for the host-name map; keys stay addresses");
	(void)ns_fork_hook(names_prepare, names_parent, names_child);
}

static int numeric(const char *node)
{
	unsigned char buf[16];

	return inet_pton(AF_INET, node, buf) == 1 || inet_pton(AF_INET6, node, buf) == 1;
}

static void remember(const char *name, int family, const void *addr)
{
	uint64_t now = (uint64_t)(ns_now() / 1000000);

	ns_once(&names_once, names_init);
	if (!names)
		return;
	if (!ns_mutex_take(&names_lock, NS_LOCK_NAMES))
		return;   /* a handler's lookup inside its own thread's: not remembered */
	if (ns_namemap_put(names, family, addr, name, now) == 0)
		__atomic_store_n(&names_used, 1, __ATOMIC_RELEASE);
	__atomic_fetch_add(&names_gen, 1, __ATOMIC_RELEASE);
	ns_mutex_give(&names_lock, NS_LOCK_NAMES);
}

static void remember_hostent(const char *name, const struct hostent *h)
{
	if (!name || !h || numeric(name) || (h->h_addrtype != AF_INET && h->h_addrtype != AF_INET6))
		return;
	for (char **a = h->h_addr_list; a && *a; a++)
		remember(name, h->h_addrtype, *a);
}

int ns_names_lookup_map(int family, const void *addr, char *out, size_t len, monotime now_ns)
{
	size_t alen = family == AF_INET6 ? 16 : 4;
	uint64_t now = (uint64_t)(now_ns / 1000000), gen;
	int r;

	gen = __atomic_load_n(&names_gen, __ATOMIC_ACQUIRE);
	if (last.gen == gen && now < last.until_ms && last.family == family && memcmp(last.addr, addr, alen) == 0) {
		if (!last.found)
			return -1;
		if (strlen(last.name) >= len)
			return -1;
		strcpy(out, last.name);
		return 0;
	}
	if (!ns_mutex_take(&names_lock, NS_LOCK_NAMES))
		return -1;   /* a handler's connect inside its own thread's lookup: the address is the key */
	r = ns_namemap_get(names, family, addr, out, len, now);
	ns_mutex_give(&names_lock, NS_LOCK_NAMES);
	last.gen = gen;
	last.until_ms = now + 1000;
	last.family = family;
	last.found = r == 0 && strlen(out) < sizeof(last.name);
	memcpy(last.addr, addr, alen);
	if (last.found)
		strcpy(last.name, out);
	return r;
}

/**** injected lookup faults ****/

/* What an injected fault makes of one lookup: the answer (NS_F_NXDOMAIN,
 * NS_F_SERVFAIL, NS_F_RESOLVE with addr, or 0: the real one), after a
 * delay (dnsdelay). */
struct lookup {
	uint32_t kind;
	uint64_t delay_ms;
	char addr[INET_ADDRSTRLEN];
};

static int lookup_faults(const char *name, const char *service, struct lookup *lk)
{
	struct ns_dest d;
	struct ns_faults f;
	struct ns_settings set;
	uint32_t mask;
	int rt;

	memset(lk, 0, sizeof(*lk));
	if (!name || !*name || strlen(name) >= sizeof(d.name))
		return 0;
	memset(&d, 0, sizeof(d));
	for (size_t i = 0; name[i]; i++)
		d.name[i] = (char)((name[i] >= 'A' && name[i] <= 'Z') ? name[i] - 'A' + 'a' : name[i]);
	if (service) {
		char *end;
		unsigned long p = strtoul(service, &end, 10);

		if (!*end && p > 0 && p < 65536)
			d.port = (uint16_t)p;
	}
	ns_policy_faults_for(&d, &set);
	if (!ns_fault_list_for(&d, &set.fault, ns_now(), &f, &rt) ||
	    !(mask = ns_fault_choose(&f, NS_FP_LOOKUP) & ns_fault_windows(&f)))
		return 0;
	for (uint32_t i = 0; i < f.n; i++) {
		const struct ns_fault *x = &f.f[i];

		if (!(mask & (1u << i)) || ns_fault_phase(x->kind) != NS_FP_LOOKUP)
			continue;
		if (x->kind == NS_F_DNSDELAY)
			lk->delay_ms = x->arg;
		else if (!lk->kind)
			lk->kind = x->kind;
		if (x->kind == NS_F_RESOLVE && lk->kind == NS_F_RESOLVE && !lk->addr[0]) {
			struct in_addr a4 = { .s_addr = (uint32_t)x->arg };

			inet_ntop(AF_INET, &a4, lk->addr, sizeof(lk->addr));
		}
	}
	if (!lk->kind && !lk->delay_ms)
		return 0;
	if (rt >= 0 && ns_tbl())
		ns_table_fault_applied(ns_tbl(), (uint32_t)rt);
	NS_LOG(NS_LOG_INFO, "%s: injected lookup fault: %s%s%s%s", d.name,
	       lk->kind == NS_F_NXDOMAIN ? "nxdomain" : lk->kind == NS_F_SERVFAIL ? "servfail" :
	       lk->kind == NS_F_RESOLVE ? "resolve " : "", lk->addr, lk->delay_ms && lk->kind ? ", " : "",
	       lk->delay_ms ? "dnsdelay" : "");
	return 1;
}

/* The faults injected for this lookup of name (never of an address): 1
 * and *lk after its delay was slept, or 0. */
static int injected(const char *name, const char *service, struct lookup *lk)
{
	if (!name || numeric(name))
		return 0;
	if (unlikely(!__atomic_load_n(&ns_fault_genp, __ATOMIC_ACQUIRE))) {
		ns_cfg_init(); /* a lookup before any connect: the policy's and NETSHIM_INJECT's faults, */
		ns_tbl();      /* ...and the table, to see shimctl inject */
	}
	if (likely(!ns_fault_possible()) || !lookup_faults(name, service, lk))
		return 0;
	if (lk->delay_ms) {
		/* a slow resolver: the whole delay, whatever signals come (a
		 * lookup is not interrupted by them either) */
		int saved = errno;
		struct timespec ts;
		monotime until = ns_now() + (int64_t)lk->delay_ms * 1000000;

		ts.tv_sec = (time_t)(until / 1000000000);
		ts.tv_nsec = (long)(until % 1000000000);
		while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
			;
		errno = saved;
	}
	return 1;
}

/* The hostent calls' answers to an injected nxdomain (HOST_NOT_FOUND) or
 * servfail (TRY_AGAIN). */
static struct hostent *not_found(const struct lookup *lk)
{
	h_errno = lk->kind == NS_F_SERVFAIL ? TRY_AGAIN : HOST_NOT_FOUND;
	return NULL;
}

/* ...for the _r forms: 0, no result, the code in *h_errnop (as glibc). */
static int not_found_r(const struct lookup *lk, struct hostent **result, int *h_errnop)
{
	if (result)
		*result = NULL;
	if (h_errnop)
		*h_errnop = lk->kind == NS_F_SERVFAIL ? TRY_AGAIN : HOST_NOT_FOUND;
	return 0;
}

/* Does the injected fault answer the lookup itself (1), or does the real
 * lookup go on, for *name (the fault's address, for resolve)? */
static int answered(const struct lookup *lk, const char **name)
{
	if (lk->kind == NS_F_RESOLVE) {
		*name = lk->addr;
		return 0;
	}
	return lk->kind == NS_F_NXDOMAIN || lk->kind == NS_F_SERVFAIL;
}

int ns_getaddrinfo(const char *node, const char *service, const struct addrinfo *hints, struct addrinfo **res)
{
	int r, e;
	struct lookup lk;
	const char *ask = node;

	if (!(hints && (hints->ai_flags & AI_NUMERICHOST)) && injected(node, service, &lk) && answered(&lk, &ask))
		/* what glibc says of a name the DNS does not know, or of a
		 * server that failed */
		return lk.kind == NS_F_SERVFAIL ? EAI_AGAIN : EAI_NONAME;
	r = REAL(getaddrinfo)(ask, service, hints, res);
	e = errno;

	if (r == 0 && node && res && !(hints && (hints->ai_flags & AI_NUMERICHOST)) && !numeric(node)) {
		for (const struct addrinfo *ai = *res; ai; ai = ai->ai_next) {
			if (ai->ai_family == AF_INET && ai->ai_addrlen >= sizeof(struct sockaddr_in))
				remember(node, AF_INET, &((const struct sockaddr_in *)ai->ai_addr)->sin_addr);
			else if (ai->ai_family == AF_INET6 && ai->ai_addrlen >= sizeof(struct sockaddr_in6))
				remember(node, AF_INET6, &((const struct sockaddr_in6 *)ai->ai_addr)->sin6_addr);
		}
		ns_addr_reorder(node, res); /* address_choice = healthy-first */
	}
	errno = e;
	return r;
}

struct hostent *ns_gethostbyname(const char *name)
{
	struct hostent *h;
	struct lookup lk;
	const char *ask = name;
	int e;

	if (injected(name, NULL, &lk) && answered(&lk, &ask))
		return not_found(&lk);
	h = REAL(gethostbyname)(ask);
	e = errno;

	remember_hostent(name, h);
	errno = e;
	return h;
}

struct hostent *ns_gethostbyname2(const char *name, int af)
{
	struct hostent *h;
	struct lookup lk;
	const char *ask = name;
	int e;

	if (injected(name, NULL, &lk) && answered(&lk, &ask))
		return not_found(&lk);
	h = REAL(gethostbyname2)(ask, af);
	e = errno;

	remember_hostent(name, h);
	errno = e;
	return h;
}

int ns_gethostbyname_r(const char *name, struct hostent *ret, char *buf, size_t buflen,
		       struct hostent **result, int *h_errnop)
{
	int r, e;
	struct lookup lk;
	const char *ask = name;

	if (injected(name, NULL, &lk) && answered(&lk, &ask))
		return not_found_r(&lk, result, h_errnop);
	r = REAL(gethostbyname_r)(ask, ret, buf, buflen, result, h_errnop);
	e = errno;

	if (r == 0 && result)
		remember_hostent(name, *result);
	errno = e;
	return r;
}

int ns_gethostbyname2_r(const char *name, int af, struct hostent *ret, char *buf, size_t buflen,
			struct hostent **result, int *h_errnop)
{
	int r, e;
	struct lookup lk;
	const char *ask = name;

	if (injected(name, NULL, &lk) && answered(&lk, &ask))
		return not_found_r(&lk, result, h_errnop);
	r = REAL(gethostbyname2_r)(ask, af, ret, buf, buflen, result, h_errnop);
	e = errno;

	if (r == 0 && result)
		remember_hostent(name, *result);
	errno = e;
	return r;
}

/* proxy.c -- requests to a forward HTTP proxy, given to their target's
 * breaker (one dead upstream must not open the proxy's, and block every
 * host behind it). */
#include "proxy.h"

#include <errno.h>
#include <string.h>
#include <strings.h>

#include "config.h"
#include "outcome.h"
#include "settings.h"

/* The target of a request to a forward HTTP proxy, from its request line:
 * "CONNECT host:port HTTP/1.x" or "METHOD http://host[:port]/... HTTP/1.x"
 * (the absolute form, which only proxies are sent). Returns 0 with
 * "host:port" in out (port 80 when the URI has none), or -1. */
static int proxy_target(const char *b, size_t n, char *out, size_t len)
{
	const char *sp = memchr(b, ' ', n < 16 ? n : 16), *end = b + n, *h, *e;
	int connect;
	size_t hl;

	if (!sp)
		return -1;
	connect = sp - b == 7 && memcmp(b, "CONNECT", 7) == 0;
	h = sp + 1;
	if (!connect) {
		if (end - h < 8 || strncasecmp(h, "http://", 7) != 0)
			return -1;
		h += 7;
	}
	for (e = h; e < end && *e != '/' && *e != ' ' && *e != '?' && *e != '#' && *e != '\r'; e++)
		;
	hl = (size_t)(e - h);
	if (hl == 0 || hl + 4 >= len || memchr(h, '@', hl))
		return -1;   /* (userinfo in the URI: left to the proxy's own breaker) */
	memcpy(out, h, hl);
	out[hl] = '\0';
	if (!(out[0] == '[' ? strstr(out, "]:") != NULL : strchr(out, ':') != NULL)) {
		if (connect)
			return -1;
		memcpy(out + hl, ":80", 4);
	}
	return 0;
}

/* Behind a forward proxy the connection's destination is the proxy, and
 * one dead upstream (three 502s for bad.example) would open the proxy's
 * breaker and block every host. Before a send that starts an exchange with
 * a proxy's request line, the exchange is given to the target the program
 * asked for: its breaker admits it (or refuses it: -1, errno ECONNREFUSED,
 * nothing sent, counted as rejected on the target), and the connection's
 * outcomes, key and breaker settings are the target's from this request on
 * (the deadlines in force stay the proxy connection's). The connect's own
 * outcome stayed on the proxy. Returns 0 to send. */
int ns_exchange_proxied(struct ns_conn *c, const void *buf, size_t n)
{
	char text[NS_KEY_MAX], key[NS_KEY_MAX], cur[NS_KEY_MAX];
	const struct ns_policy *pol;
	const struct ns_settings *kept;
	struct ns_settings set;
	struct ns_dest d;
	monotime now;
	int slot, klen, full, saved = errno;

	if (!buf || n < 12 || proxy_target(buf, n, text, sizeof(text)) < 0 || ns_dest_parse(text, &d) < 0)
		return 0;
	now = ns_now();
	pol = ns_cfg_get(now);
	if (!pol)
		return 0;
	ns_policy_resolve(pol, &d, &set, NULL);
	klen = ns_dest_key(&d, key, sizeof(key));
	ns_conn_key(c, cur);
	if (set.mode == NS_MODE_BYPASS || klen < 0 || strcmp(key, cur) == 0)
		return 0;
	kept = ns_settings_keep(&set, ns_cfg_fallback, &full);
	if (ns_breaker_admit(key, NS_SLOT_UNKNOWN, &slot, kept, set.mode == NS_MODE_ENFORCE, now) < 0) {
		NS_LOG(NS_LOG_DEBUG, "%s (through %s): breaker open, request refused", key, cur);
		errno = ECONNREFUSED;
		return -1;
	}
	ns_conn_put_key(c, key, (size_t)klen);
	__atomic_store_n(&c->set, kept, __ATOMIC_RELEASE);
	ST(c->slot, slot);
	errno = saved;
	return 0;
}


/* log.c -- one line per event on stderr, prefixed "netshim:". */

#include "base.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "real.h"

int ns_log_level = NS_LOG_WARN;

void ns_log_init(void)
{
	const char *v = ns_getenv("NETSHIM_LOG");

	if (!v || !*v)
		return;
	if (strcmp(v, "off") == 0)
		ns_log_level = NS_LOG_OFF;
	else if (strcmp(v, "error") == 0)
		ns_log_level = NS_LOG_ERROR;
	else if (strcmp(v, "warn") == 0)
		ns_log_level = NS_LOG_WARN;
	else if (strcmp(v, "info") == 0)
		ns_log_level = NS_LOG_INFO;
	else if (strcmp(v, "debug") == 0)
		ns_log_level = NS_LOG_DEBUG;
	else
		ns_log(NS_LOG_WARN, "NETSHIM_LOG=%s is not off, error, warn, info or debug; using warn", v);
}

/* Control bytes from the outside (a policy path, a table name, a host name)
 * are written as \xNN: a log line never moves the cursor or recolours an
 * operator's terminal. */
void ns_log(int level, const char *fmt, ...)
{
	static const char hex[] = "0123456789abcdef";
	char msg[448], buf[512];
	int saved = errno, n;
	size_t o = 9;
	va_list ap;

	if (level > ns_log_level)
		return;
	memcpy(buf, "netshim: ", 9);
	va_start(ap, fmt);
	n = vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (n < 0)
		msg[0] = '\0';
	for (const unsigned char *p = (const unsigned char *)msg; *p && o < sizeof(buf) - 5; p++) {
		if (*p < 0x20 || *p == 0x7f) {
			buf[o++] = '\\';
			buf[o++] = 'x';
			buf[o++] = hex[*p >> 4];
			buf[o++] = hex[*p & 0xf];
		} else {
			buf[o++] = (char)*p;
		}
	}
	buf[o++] = '\n';
	(void)!REAL(write)(2, buf, o);
	errno = saved;
}

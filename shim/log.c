/* log.c -- one line per event on stderr, prefixed "netshim:". */

#include "shim.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "real.h"

int ns_log_level = NS_LOG_WARN;

void ns_log_init(void)
{
	const char *v = getenv("NETSHIM_LOG");

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

void ns_log(int level, const char *fmt, ...)
{
	char buf[512];
	int saved = errno, n;
	va_list ap;

	if (level > ns_log_level)
		return;
	memcpy(buf, "netshim: ", 9);
	va_start(ap, fmt);
	n = vsnprintf(buf + 9, sizeof(buf) - 10, fmt, ap);
	va_end(ap);
	if (n < 0)
		n = 0;
	n += 9;
	if (n > (int)sizeof(buf) - 2)
		n = (int)sizeof(buf) - 2;
	buf[n++] = '\n';
	(void)!REAL(write)(2, buf, (size_t)n);
	errno = saved;
}

/* exchange.c -- exchanges on a connection, and the HTTP/1.x status of
 * their answers.
 *
 * An exchange starts when the program sends after a complete answer (or
 * sends first); its outcome is its answer's: success at the first byte,
 * failure when a deadline passes, the peer resets, or the stream ends
 * before a byte. When the first bytes a connection sends are an HTTP/1.x
 * request line, the answer's status line is read as it passes (one byte
 * per read is fine; 1xx interim answers are skipped), and a status in
 * failure_status fails the exchange. The program's bytes are only looked
 * at, never held or changed. Several requests sent before an answer
 * (pipelining) are one exchange, decided by the first answer.
 *
 * Both ends take the data path's slow branch only at the turns: the send
 * that starts an exchange (NS_C_XNEXT) and the reads of an answer whose
 * status is not known yet (NS_C_PARSE); everything between is the fast
 * path. */
#include "shim.h"

#include <errno.h>
#include <string.h>

enum { HS_STATUS, HS_SKIP };

/* "GET ", "POST " ...: an HTTP/1.x request line begins so. HTTP/2's
 * preface ("PRI * HTTP/2.0") and TLS (0x16) do not. */
static int looks_http(const char *b, size_t n)
{
	static const char *const methods[] = { "GET ", "HEAD ", "POST ", "PUT ", "DELETE ", "OPTIONS ",
		"PATCH ", "TRACE ", "CONNECT " };

	for (size_t i = 0; i < sizeof(methods) / sizeof(methods[0]); i++) {
		size_t m = strlen(methods[i]);

		if (n >= m && memcmp(b, methods[i], m) == 0)
			return 1;
	}
	return 0;
}

/* Feed bytes of the answer; decides the exchange once the final status
 * line is in, or gives up on a status (plain outcome) if it is not one. */
static void feed(struct ns_conn *c, const char *b, size_t n)
{
	static const char end[] = "\r\n\r\n";
	char hb[12];

	for (size_t i = 0; i < n && (LD(c->flags) & NS_C_PARSE); i++) {
		if (LD(c->hstate) == HS_SKIP) {
			/* the headers of a 1xx answer, up to the blank line */
			uint32_t m = LD(c->hlen);

			if (m > 3)
				m = 0;   /* in bounds, whatever another thread did */
			ST(c->hlen, b[i] == end[m] ? m + 1 : (uint32_t)(b[i] == '\r'));
			if (LD(c->hlen) == 4) {
				ST(c->hstate, (uint32_t)HS_STATUS);
				ST(c->hlen, 0);
			}
			continue;
		}
		{
			uint32_t k = LD(c->hlen);

			if (k >= sizeof(c->hbuf))
				k = 0;   /* never past the buffer, whatever another thread did */
			ST(c->hbuf[k], b[i]);
			ST(c->hlen, k + 1);
			if (k + 1 < 12)
				continue;
		}
		/* a copy: another thread may write the record (the program's race) */
		for (int j = 0; j < 12; j++)
			hb[j] = LD(c->hbuf[j]);
		/* "HTTP/1.x NNN" */
		if (memcmp(hb, "HTTP/1.", 7) != 0 || hb[8] != ' ' || hb[9] < '1' || hb[9] > '5' ||
		    hb[10] < '0' || hb[10] > '9' || hb[11] < '0' || hb[11] > '9') {
			/* not an HTTP answer after all: the first byte decides */
			__atomic_fetch_and(&c->flags, ~NS_C_PARSE, __ATOMIC_RELAXED);
			ns_conn_outcome(c, NS_OUT_SUCCESS, 0);
			return;
		}
		{
			unsigned code = (unsigned)((hb[9] - '0') * 100 + (hb[10] - '0') * 10 + (hb[11] - '0'));
			struct ns_settings set;

			if (code >= 100 && code < 200 && code != 101) {
				ST(c->hstate, (uint32_t)HS_SKIP);   /* interim: the final answer follows */
				ST(c->hlen, 0);
				continue;
			}
			ns_conn_settings(c, &set);
			ns_conn_http(c, code, ns_status_fails(&set, code));
		}
	}
}

int ns_exchange_answered(const struct ns_conn *c)
{
	return LD(c->hlen) > 0 || LD(c->hstate) == HS_SKIP;
}

ssize_t ns_exchange_io(int fd, struct ns_conn *c, int d, ssize_t r, const void *buf, size_t len, int flags,
		       uint32_t gen)
{
	int e = errno;

	if (__atomic_load_n(&c->gen, __ATOMIC_ACQUIRE) != gen || r <= 0)
		return ns_after_io(fd, c, d, r, len, flags, gen);
	if (d == NS_OUT) {
		uint32_t f = LD(c->flags);

		/* buf holds at least min(r, 8) bytes (see FIRST8 in core.c) */
		if (!(f & (NS_C_HTTP | NS_C_NOTHTTP)))
			__atomic_fetch_or(&c->flags, buf && looks_http(buf, (size_t)r < 8 ? (size_t)r : 8) ?
					  NS_C_HTTP : NS_C_NOTHTTP, __ATOMIC_RELAXED);
		if (LD(c->flags) & NS_C_XNEXT) {
			/* a new exchange: its outcome is owed from now */
			ST(c->outcome, 0);
			ST(c->xstart, ns_now());
			ST(c->hstate, (uint32_t)HS_STATUS);
			ST(c->hlen, 0);
			__atomic_fetch_and(&c->flags, ~NS_C_XNEXT, __ATOMIC_RELAXED);
			__atomic_fetch_or(&c->flags, NS_C_SENT | ((LD(c->flags) & NS_C_HTTP) ? NS_C_PARSE : 0),
					  __ATOMIC_RELAXED);
		}
	} else if ((LD(c->flags) & NS_C_PARSE) && !(flags & MSG_PEEK)) {
		if (buf && !LD(c->outcome)) {
			if (LD(c->hlen) == 0 && LD(c->hstate) == HS_STATUS) {
				monotime from = LD(c->xstart) ? LD(c->xstart) : LD(c->start);
				struct ns_table *t = LD(c->slot) >= 0 ? ns_tbl() : NULL;

				if (t)
					ns_table_latency(t, LD(c->slot), 1, (uint64_t)(ns_now() - from) / 1000);
			}
			feed(c, buf, (size_t)r < len ? (size_t)r : len);
		} else {
			/* no plain buffer to read the status from: a plain outcome */
			__atomic_fetch_and(&c->flags, ~NS_C_PARSE, __ATOMIC_RELAXED);
		}
	}
	errno = e;
	return ns_after_io(fd, c, d, r, len, flags, gen);
}

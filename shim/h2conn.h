/* h2conn.h -- an HTTP/2 connection's streams as its exchanges (h2conn.c;
 * docs/design.md, "HTTP/2 and gRPC"). */
#ifndef NS_H2CONN_H
#define NS_H2CONN_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "conn.h"

/* The preface went out on c (exchange.c): its reader is taken and fed what
 * was sent so far: held (the bytes kept while the protocol was told) and
 * then buf. tls: the bytes are TLS plaintext (tls.c), else the socket's own
 * (its data calls then feed the reader: NS_C_H2READ). seen_before: the
 * connection carried something else first (an HTTP/1 Upgrade): its
 * server's side cannot be followed, so it is blind from the start. */
NS_HIDDEN void ns_h2c_start(struct ns_conn *c, const char *held, size_t nheld, const void *buf, size_t n, int tls,
			    int seen_before);
/* Bytes the program sent (d NS_OUT) or read (NS_IN) on an h2 connection. */
NS_HIDDEN void ns_h2c_feed(struct ns_conn *c, int d, const void *buf, size_t n);
/* ...bytes that moved where the shim could not see them (sendfile, splice,
 * a vector it was not shown): the reader can no longer follow (h2_blind). */
NS_HIDDEN void ns_h2c_gap(struct ns_conn *c);
/* The connection ended (kind NS_OUT_FAILURE or NS_OUT_TIMEOUT, err its
 * errno or 0 for the peer's close) under its open streams: each fails, and
 * is an outcome of its own. Returns how many failed; when any did, the
 * connection's own outcome is settled by them (c->outcome set). */
NS_HIDDEN int ns_h2c_end(struct ns_conn *c, int kind, int err);
#define NS_H2C_IOV_CUT 64 /* a vector is cut only within its first this many buffers */
#define NS_H2C_NOT     1  /* ns_h2c_before_write: not an h2 connection's write */
/* Before a write that may be an h2 connection's (an h2 connection's, or a
 * connection's first bytes, which may begin with the preface: its reader
 * is made then). The streams it opens are open before it goes, so that an
 * answer another thread reads before the write's bytes are fed finds them.
 * During a cooldown (Retry-After) a write that opens a new stream is held
 * until it ends, as an HTTP/1 request is. Under rate, a write that opens a new stream (not the connection's first,
 * which rides on the connect's token) waits for a token as an HTTP/1
 * request does (blocking: sleeps; non-blocking: -1 with errno EAGAIN), and
 * one that opens more than one is cut (*len) before the second: one new
 * stream a write. iov: a vector call's buffers when buf is NULL (cut within
 * its first NS_H2C_IOV_CUT, else sent whole for one token). tls: TLS
 * plaintext (never cut; the wait is a sleep whatever the socket's mode).
 * Returns 0 go, -1 with errno, or NS_H2C_NOT. */
NS_HIDDEN int ns_h2c_before_write(int fd, struct ns_conn *c, const void *buf, const struct iovec *iov, size_t iovcnt,
				  size_t *len, int nonblock, int tls);
/* The record is freed: its reader goes back to the pool (streams still
 * open were the program's to give up: no outcome). */
NS_HIDDEN void ns_h2c_release(struct ns_conn *c);

#endif

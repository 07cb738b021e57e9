/* tls.c -- exchanges and HTTP status inside TLS, through the record calls
 * of OpenSSL 3 (SSL_read, SSL_read_ex, SSL_write, SSL_write_ex) and GnuTLS
 * (gnutls_record_recv, gnutls_record_send).
 *
 * The shim links neither library: a program that calls these calls them
 * from the shared library it loaded, so the preload sees the call, and the
 * real function and the session's socket (SSL_get_fd,
 * gnutls_transport_get_int) are found at run time with dlsym. A program
 * that has neither never reaches this file. The plaintext is looked at the
 * way exchange.c looks at a plain socket's bytes (exchange starts, request
 * line, status line), never held or changed; deadlines stay at the socket.
 * Programs whose TLS is linked in (node's OpenSSL) are not seen here: their
 * connections keep the outcomes of their encrypted bytes. */
#include "tls.h"
#include "tlspair.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "conn.h"
#include "exchange.h"
#include "h2conn.h"
#include "faultcfg.h"
#include "real.h"
#include "reqs.h"
#include "shape.h"

typedef int (*ssl_io_fn)(void *, void *, int);
typedef int (*ssl_io_ex_fn)(void *, void *, size_t, size_t *);
typedef int (*ssl_fd_fn)(const void *);
typedef ssize_t (*gnutls_io_fn)(void *, void *, size_t);
typedef int (*gnutls_fd_fn)(void *);

/* The real functions, per calling object. A call reaches the shim from
 * the object that called SSL_write (Python's _ssl module, libcurl, a
 * plugin): the real function is the one that object would have bound to
 * without the shim, found by dlsym on that object's own handle, whose
 * search covers it and its dependencies (not the preloaded shim). That
 * finds a private OpenSSL loaded RTLD_LOCAL or RTLD_DEEPBIND (a wheel's
 * renamed libssl-<hash>.so, a vendor SDK's), and with two OpenSSLs in one
 * process each caller reaches its own. A caller in the main program, or
 * one whose handle finds only the shim, falls back to the global scope
 * after the shim (RTLD_NEXT) and then to the usual library names loaded
 * privately (RTLD_NOLOAD never loads one). Each calling object is looked up
 * once (dladdr), each call site once more; both are remembered in small
 * tables filled lock-free (a full table only means asking again). */
enum {
	F_SSL_READ,
	F_SSL_WRITE,
	F_SSL_READ_EX,
	F_SSL_WRITE_EX,
	F_SSL_GET_FD,
	F_GNUTLS_RECV,
	F_GNUTLS_SEND,
	F_GNUTLS_FD,
	F_SSL_CONNECT,
	F_SSL_DO_HANDSHAKE,
	F_GNUTLS_VERIFY2,
	F_GNUTLS_VERIFY3,
	F_SSL_GET_WBIO,
	F_BIO_METHOD_TYPE,
	F_BIO_CTRL,
	F_COUNT
};
static const char *const fn_names[F_COUNT] = { "SSL_read",
					       "SSL_write",
					       "SSL_read_ex",
					       "SSL_write_ex",
					       "SSL_get_fd",
					       "gnutls_record_recv",
					       "gnutls_record_send",
					       "gnutls_transport_get_int",
					       "SSL_connect",
					       "SSL_do_handshake",
					       "gnutls_certificate_verify_peers2",
					       "gnutls_certificate_verify_peers3",
					       "SSL_get_wbio",
					       "BIO_method_type",
					       "BIO_ctrl" };

#define TLS_OBJS 16
#define TLS_SITES 64
struct tls_obj {
	const void *base;          /* the calling object's load address; NULL = the global fallback */
	void *fn[F_COUNT];         /* atomic: found, or NULL not yet asked */
	uint32_t asked;            /* atomic bit per F_*: asked (fn may be NULL: not there) */
};
static struct tls_obj tls_global;
static struct tls_obj tls_objs[TLS_OBJS];
static unsigned tls_nobjs;                     /* atomic: entries claimed */
static struct { const void *ra; struct tls_obj *o; } tls_sites[TLS_SITES];
static unsigned tls_nsites;                    /* atomic */

static void *global_sym(const char *name)
{
	static const char *const libs[] = { "libssl.so.3", "libssl.so.1.1", "libssl.so", "libgnutls.so.30",
		"libgnutls.so" };
	void *p = dlsym(RTLD_NEXT, name);

	for (size_t i = 0; !p && i < sizeof(libs) / sizeof(libs[0]); i++) {
		void *h = dlopen(libs[i], RTLD_LAZY | RTLD_NOLOAD);

		if (h) {
			p = dlsym(h, name);
			dlclose(h);   /* drops only the reference NOLOAD took */
		}
	}
	return p;
}

/* Is p one of the shim's own functions (what a dlsym of an object that
 * took its symbols from the global scope may hand back)? */
static int is_ours(void *p)
{
	Dl_info a, b;

	return dladdr(p, &a) && dladdr((void *)is_ours, &b) && a.dli_fbase == b.dli_fbase;
}

/* The object entry for a call from ra (claimed on first sight). */
static struct tls_obj *obj_of(const void *ra)
{
	unsigned n = __atomic_load_n(&tls_nsites, __ATOMIC_ACQUIRE), k;
	struct tls_obj *o = &tls_global;
	Dl_info info;

	for (unsigned i = 0; i < n && i < TLS_SITES; i++)
		if (__atomic_load_n(&tls_sites[i].ra, __ATOMIC_ACQUIRE) == ra)
			return __atomic_load_n(&tls_sites[i].o, __ATOMIC_ACQUIRE);
	if (ra && dladdr(ra, &info) && info.dli_fbase && info.dli_fname && info.dli_fname[0]) {
		k = __atomic_load_n(&tls_nobjs, __ATOMIC_ACQUIRE);
		o = NULL;
		for (unsigned i = 0; i < k && i < TLS_OBJS; i++)
			if (__atomic_load_n(&tls_objs[i].base, __ATOMIC_ACQUIRE) == info.dli_fbase)
				o = &tls_objs[i];
		if (!o) {
			k = __atomic_fetch_add(&tls_nobjs, 1, __ATOMIC_ACQ_REL);
			o = k < TLS_OBJS ? &tls_objs[k] : &tls_global;
			if (o != &tls_global)
				__atomic_store_n(&o->base, info.dli_fbase, __ATOMIC_RELEASE);
		}
	}
	k = __atomic_fetch_add(&tls_nsites, 1, __ATOMIC_ACQ_REL);
	if (k < TLS_SITES) {
		__atomic_store_n(&tls_sites[k].o, o, __ATOMIC_RELEASE);
		__atomic_store_n(&tls_sites[k].ra, ra, __ATOMIC_RELEASE);
	}
	return o;
}

/* The real function f for a call from ra, or NULL (logged once). */
static void *real_fn(const void *ra, int f)
{
	struct tls_obj *o = obj_of(ra);
	void *p = __atomic_load_n(&o->fn[f], __ATOMIC_ACQUIRE);
	Dl_info info;

	if (p || (__atomic_load_n(&o->asked, __ATOMIC_ACQUIRE) & (1u << f)))
		return p;
	if (o != &tls_global && dladdr(o->base, &info) && info.dli_fname) {
		void *h = dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD);

		if (h) {
			p = dlsym(h, fn_names[f]);
			dlclose(h);
			if (p && is_ours(p))
				p = NULL;
		}
	}
	if (!p)
		p = global_sym(fn_names[f]);
	if (!p)
		ns_log(NS_LOG_ERROR, "cannot find the real %s; the call fails (ENOSYS)", fn_names[f]);
	__atomic_store_n(&o->fn[f], p, __ATOMIC_RELEASE);
	__atomic_fetch_or(&o->asked, 1u << f, __ATOMIC_ACQ_REL);
	return p;
}

static struct ns_conn *ssl_conn(void *ssl, const void *ra)
{
	ssl_fd_fn get = (ssl_fd_fn)real_fn(ra, F_SSL_GET_FD);

	return ns_tls_begin(ssl, get && ssl ? get(ssl) : -1);
}

static struct ns_conn *gnutls_conn(void *session, const void *ra)
{
	gnutls_fd_fn get = (gnutls_fd_fn)real_fn(ra, F_GNUTLS_FD);

	return ns_tls_begin(session, get && session ? get(session) : -1);
}

/* After the call: what moved (tlspair.c), and a memory-BIO session's
 * write noted by its ciphertext (ssl: an OpenSSL session, ra its caller;
 * NULL for GnuTLS, whose sessions name their socket or reach it inside the
 * call). */
static void seen(struct ns_conn *c, int d, const void *buf, ssize_t n, void *ssl, const void *ra)
{
	int e = errno;

	if (ns_tls_seen(c, d, buf, n) && ssl)
		ns_tls_note_write(ssl, (ns_ssl_wbio_fn)real_fn(ra, F_SSL_GET_WBIO),
				  (ns_bio_type_fn)real_fn(ra, F_BIO_METHOD_TYPE),
				  (ns_bio_ctrl_fn)real_fn(ra, F_BIO_CTRL), buf, (size_t)n);
	errno = e;
}

/* Before a write of plaintext: a request under rate waits for its token.
 * A blocking socket sleeps here; a non-blocking one is marked held, and
 * its socket's write answers EAGAIN (datapath.c), which the library hands
 * the program as "want write" until the token is due. A request about to
 * start on a connection that answered before, while the breaker is open or
 * the throttle refuses (HTTP/1; HTTP/2: a write that opens a new stream),
 * is refused here, before the library has a byte of it: -1 with errno
 * ECONNREFUSED, counted rejected. Else 0. */
static int pace(struct ns_conn *c, const void *buf, size_t n)
{
	int e = errno, r = 0;
	uint32_t f = c ? LD(c->flags) : 0;

	/* HTTP/2 (h2conn.c: its streams open before the write, paced): a
	 * write that opens a stream waits here, before the library has it,
	 * whatever the socket's mode (one record: never cut). Held at the
	 * socket instead, as an HTTP/1 request is, the record would sit in the
	 * library while curl's HTTP/2 layer wrote its other frames, and curl
	 * failed the stream (error 92) */
	if (c && buf && ((f & NS_C_H2) == NS_C_H2 || !(f & (NS_C_HTTP | NS_C_NOTHTTP)))) {
		int h = ns_h2c_before_write(-1, c, buf, NULL, 0, &n, 0, 1);

		if (h < 0)
			e = errno, r = -1;
		if (h != NS_H2C_NOT)
			goto out;
	}
	/* a request's place under max_requests (reqs.c): a non-blocking one
	 * held is marked so, and its socket's write answers EAGAIN (datapath.c)
	 * until it looks again at the program's next write; a blocking one
	 * sleeps here; one past queue_timeout is refused (ECONNREFUSED) */
	if (c && unlikely(ns_req_starts(c, f, NS_C_TLS, buf, n)) && ns_req_start(-1, c, (f & NS_C_NONBLOCK) != 0) < 0) {
		if (errno != EAGAIN || !(f & NS_C_NONBLOCK))
			e = errno, r = -1;
		goto out; /* (held: its socket's write answers EAGAIN) */
	}
	f = c ? LD(c->flags) : 0; /* (a wait for a place leaves it held for rate's token) */
	if (c && (f & (NS_C_XNEXT | NS_C_H2 | NS_C_ANSWERED)) == (NS_C_XNEXT | NS_C_HTTP | NS_C_ANSWERED) &&
	    ns_shape_request_admit(c) < 0) {
		ns_req_done(c); /* (refused before a byte left: its place back) */
		e = errno;
		r = -1;
		goto out;
	}
	if (c && unlikely(ns_shape_wants_token(c, f, NS_C_TLS)))
		ns_shape_request(-1, c, (f & NS_C_NONBLOCK) != 0);
out:
	errno = e;
	return r;
}

/* OpenSSL reports a socket error under SSL_read as SSL_ERROR_SYSCALL with
 * nothing on its error queue, and Python (3.10 on, with OpenSSL 3) reads
 * that from SSL_read_ex as a ragged end of stream, which suppress_ragged_eofs
 * turns into a clean end of data: an end-of-stream-delimited body cut short
 * by a read deadline came back as a whole 200. A read that failed with
 * ETIMEDOUT (the shim's deadline at the socket, or the kernel's own) has it
 * put on the queue as a system error (ERR_LIB_SYS with the errno as reason,
 * as OpenSSL raises the errors of its own system calls), so every reader
 * sees an error: Python an OSError(ETIMEDOUT), others SSL_ERROR_SYSCALL with
 * errno as before. The functions come from the libcrypto of the library
 * whose SSL_read ran (real: that function), found only on this path. */
#define NS_ERR_LIB_SYS 2
typedef unsigned long (*err_peek_fn)(void);
typedef void (*err_new_fn)(void);
typedef void (*err_debug_fn)(const char *, int, const char *);
typedef void (*err_set_fn)(int, int, const char *, ...);
typedef void (*err_put_fn)(int, int, int, const char *, int);

/* The library a real function came from, for its other functions
 * (RTLD_NOLOAD never loads one; dlclose drops only the reference this
 * took), or NULL. */
static void *library_of(void *real)
{
	Dl_info info;

	return dladdr(real, &info) && info.dli_fname ? dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD) : NULL;
}

static void tls_raise_errno(void *real, int e, const char *op)
{
	void *h;
	int saved = errno;

	if (!(h = library_of(real)))
		goto out;
	{
		err_peek_fn peek = (err_peek_fn)dlsym(h, "ERR_peek_error");
		err_new_fn enew = (err_new_fn)dlsym(h, "ERR_new");
		err_debug_fn debug = (err_debug_fn)dlsym(h, "ERR_set_debug");
		err_set_fn set = (err_set_fn)dlsym(h, "ERR_set_error");
		err_put_fn put = (err_put_fn)dlsym(h, "ERR_put_error");

		if (peek && peek() == 0) {
			if (enew && debug && set) {          /* OpenSSL 3 */
				enew();
				debug("netshim", 0, op);
				set(NS_ERR_LIB_SYS, e, NULL);
			} else if (put) {                    /* OpenSSL 1.1 */
				put(NS_ERR_LIB_SYS, 0, e, "netshim", 0);
			}
		}
	}
	dlclose(h);   /* drops only the reference NOLOAD took */
out:
	errno = saved;
}

/* A write refused before the library had it (pace): what the call returns
 * (ret), with errno put on OpenSSL's queue as a system error, so that
 * SSL_get_error says SSL_ERROR_SYSCALL and Python raises the OSError. */
static int refused(void *real, int ret, const char *op)
{
	tls_raise_errno(real, errno, op);
	return ret;
}

#define NS_GNUTLS_E_PUSH_ERROR (-53)

/* One record call of each shape: find the real one, learn the socket,
 * call, and look at what moved (d: NS_IN for reads, NS_OUT for writes). */
static int ssl_io(int fi, const void *ra, int d, void *ssl, void *buf, int num)
{
	ssl_io_fn f = (ssl_io_fn)real_fn(ra, fi);
	struct ns_conn *c;
	int r;

	if (!f) {
		errno = ENOSYS;
		return -1;
	}
	c = ssl_conn(ssl, ra);
	if (d == NS_OUT && pace(c, buf, num > 0 ? (size_t)num : 0) < 0)
		return refused((void *)f, -1, "SSL_write");
	r = f(ssl, buf, num);
	if (r <= 0 && d == NS_IN && errno == ETIMEDOUT)
		tls_raise_errno((void *)f, ETIMEDOUT, "SSL_read");
	seen(c, d, buf, r, ssl, ra);
	return r;
}

static int ssl_io_ex(int fi, const void *ra, int d, void *ssl, void *buf, size_t num, size_t *moved)
{
	ssl_io_ex_fn f = (ssl_io_ex_fn)real_fn(ra, fi);
	struct ns_conn *c;
	int r;

	if (!f) {
		errno = ENOSYS;
		return 0;
	}
	c = ssl_conn(ssl, ra);
	if (d == NS_OUT && pace(c, buf, num) < 0)
		return refused((void *)f, 0, "SSL_write_ex");
	r = f(ssl, buf, num, moved);
	if (r != 1 && d == NS_IN && errno == ETIMEDOUT)
		tls_raise_errno((void *)f, ETIMEDOUT, "SSL_read_ex");
	seen(c, d, buf, r == 1 && moved ? (ssize_t)*moved : 0, ssl, ra);
	return r;
}

static ssize_t gnutls_io(int fi, const void *ra, int d, void *session, void *data, size_t size)
{
	gnutls_io_fn f = (gnutls_io_fn)real_fn(ra, fi);
	struct ns_conn *c;
	ssize_t r;

	if (!f) {
		errno = ENOSYS;
		return -1;
	}
	c = gnutls_conn(session, ra);
	if (d == NS_OUT && pace(c, data, size) < 0)
		return NS_GNUTLS_E_PUSH_ERROR; /* (errno says why, as after its push function's failure) */
	r = f(session, data, size);
	seen(c, d, data, r, NULL, NULL);
	return r;
}

int ns_ssl_read(void *ssl, void *buf, int num, const void *ra)
{
	return ssl_io(F_SSL_READ, ra, NS_IN, ssl, buf, num);
}

int ns_ssl_write(void *ssl, const void *buf, int num, const void *ra)
{
	return ssl_io(F_SSL_WRITE, ra, NS_OUT, ssl, (void *)buf, num);
}

int ns_ssl_read_ex(void *ssl, void *buf, size_t num, size_t *got, const void *ra)
{
	return ssl_io_ex(F_SSL_READ_EX, ra, NS_IN, ssl, buf, num, got);
}

int ns_ssl_write_ex(void *ssl, const void *buf, size_t num, size_t *put, const void *ra)
{
	return ssl_io_ex(F_SSL_WRITE_EX, ra, NS_OUT, ssl, (void *)buf, num, put);
}

ssize_t ns_gnutls_record_recv(void *session, void *data, size_t size, const void *ra)
{
	return gnutls_io(F_GNUTLS_RECV, ra, NS_IN, session, data, size);
}

ssize_t ns_gnutls_record_send(void *session, const void *data, size_t size, const void *ra)
{
	return gnutls_io(F_GNUTLS_SEND, ra, NS_OUT, session, (void *)data, size);
}

/**** tlsfail: a handshake that fails as against a certificate the program rejects ****/

/* An injected tlsfail makes the program's own verification reject the
 * server's certificate, inside the real handshake, so everything after is
 * the library's own: while a fault is possible, a verifying OpenSSL session
 * gets a verify callback (chained to the program's) that fails a tlsfail
 * connection with "self-signed certificate" (X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT),
 * so it sends the alert, queues CERTIFICATE_VERIFY_FAILED and reports
 * that result, as against a self-signed server; GnuTLS, which leaves
 * verification to the program after the handshake, answers its
 * gnutls_certificate_verify_peers2/3 with "not trusted, unknown issuer". A
 * program that does not verify (curl -k, SSL_VERIFY_NONE) is not failed,
 * as a bad certificate would not fail it. The functions come from the
 * library whose handshake ran, found only for a connection with the fault. */
#define NS_SSL_VERIFY_PEER 0x01
#define NS_X509_SELF_SIGNED 18           /* X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT */
#define NS_GNUTLS_CERT_INVALID 0x02
#define NS_GNUTLS_CERT_SIGNER_NOT_FOUND 0x40
#define NS_GNUTLS_E_INTERNAL_ERROR (-59)
typedef int (*hs_fn)(void *);
typedef int (*verify_cb_fn)(int, void *);
typedef int (*get_mode_fn)(const void *);
typedef void (*set_verify_fn)(void *, int, verify_cb_fn);
typedef void (*store_int_fn)(void *, int);
typedef int (*gnutls_v2_fn)(void *, unsigned *);
typedef int (*gnutls_v3_fn)(void *, const char *, unsigned *);
typedef verify_cb_fn (*get_cb_fn)(const void *);
typedef void *(*get_ex_fn)(const void *, int);
typedef int (*set_ex_fn)(void *, int, void *);
typedef int (*idx_fn)(void);
typedef int (*new_index_fn)(int, long, void *, void *, void *, void *);

/* What the verify hook needs, from the first OpenSSL whose handshake ran
 * with a fault possible (written once, then read only: ossl_state 2). */
static struct {
	get_mode_fn mode;
	set_verify_fn set_verify;
	get_cb_fn get_cb;
	store_int_fn set_error, set_depth;
	get_ex_fn store_get_ex, ssl_get_ex;
	idx_fn store_ssl_idx;
	set_ex_fn ssl_set_ex;
	ssl_fd_fn get_fd;
	int ex_idx;                /* the SSL ex_data slot holding the program's own callback */
} ossl;
static int ossl_state;         /* atomic: 0 not looked for, 1 being filled, 2 ready, 3 not there */
static const char no_cb;       /* ex_data for "the program set no callback" */

static int wants_tlsfail(const struct ns_conn *c)
{
	return c && (LD(c->expired) & NS_ATTN_FAULT) && LD(c->fault.tlsfail);
}

static int ossl_ready(void *real)
{
	int st = __atomic_load_n(&ossl_state, __ATOMIC_ACQUIRE), none = 0;
	void *h;

	if (st >= 2 || st == 1)
		return st == 2;
	if (!__atomic_compare_exchange_n(&ossl_state, &none, 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
		return 0;   /* another thread fills it: this handshake goes without */
	st = 3;
	if ((h = library_of(real)) != NULL) {
		new_index_fn new_index = (new_index_fn)dlsym(h, "CRYPTO_get_ex_new_index");

		ossl.mode = (get_mode_fn)dlsym(h, "SSL_get_verify_mode");
		ossl.set_verify = (set_verify_fn)dlsym(h, "SSL_set_verify");
		ossl.get_cb = (get_cb_fn)dlsym(h, "SSL_get_verify_callback");
		ossl.set_error = (store_int_fn)dlsym(h, "X509_STORE_CTX_set_error");
		ossl.set_depth = (store_int_fn)dlsym(h, "X509_STORE_CTX_set_error_depth");
		ossl.store_get_ex = (get_ex_fn)dlsym(h, "X509_STORE_CTX_get_ex_data");
		ossl.store_ssl_idx = (idx_fn)dlsym(h, "SSL_get_ex_data_X509_STORE_CTX_idx");
		ossl.ssl_get_ex = (get_ex_fn)dlsym(h, "SSL_get_ex_data");
		ossl.ssl_set_ex = (set_ex_fn)dlsym(h, "SSL_set_ex_data");
		ossl.get_fd = (ssl_fd_fn)dlsym(h, "SSL_get_fd");
		/* CRYPTO_EX_INDEX_SSL is 0 */
		ossl.ex_idx = new_index ? new_index(0, 0, NULL, NULL, NULL, NULL) : -1;
		if (ossl.mode && ossl.set_verify && ossl.get_cb && ossl.set_error && ossl.store_get_ex &&
		    ossl.store_ssl_idx && ossl.ssl_get_ex && ossl.ssl_set_ex && ossl.get_fd && ossl.ex_idx >= 0)
			st = 2;
		dlclose(h);
	}
	__atomic_store_n(&ossl_state, st, __ATOMIC_RELEASE);
	return st == 2;
}

/* The verify callback of every verifying session while a fault is
 * possible: a connection with tlsfail is rejected as self-signed, any other
 * gets the program's own callback (or OpenSSL's own verdict) unchanged. The
 * connection is looked up when the certificate is judged, so a handshake
 * that runs whole in one call is judged as one that takes several. */
static int verify_hook(int ok, void *store)
{
	void *ssl = ossl.store_get_ex(store, ossl.store_ssl_idx());
	int fd = ssl ? ossl.get_fd(ssl) : -1;
	struct ns_conn *c = fd >= 0 ? ns_conn_of(fd) : ns_tls_call_conn(ssl);
	void *orig;

	if (wants_tlsfail(c)) {
		ossl.set_error(store, NS_X509_SELF_SIGNED);
		if (ossl.set_depth)
			ossl.set_depth(store, 0);
		return 0;
	}
	orig = ssl ? ossl.ssl_get_ex(ssl, ossl.ex_idx) : NULL;
	return orig && orig != (void *)&no_cb ? ((verify_cb_fn)orig)(ok, store) : ok;
}

static void ssl_hook_verify(void *ssl, void *real)
{
	int saved = errno, m;
	verify_cb_fn cb;

	if (ssl && ossl_ready(real) && ((m = ossl.mode(ssl)) & NS_SSL_VERIFY_PEER) &&
	    (cb = ossl.get_cb(ssl)) != verify_hook &&
	    ossl.ssl_set_ex(ssl, ossl.ex_idx, cb ? (void *)cb : (void *)&no_cb) == 1)
		ossl.set_verify(ssl, m, verify_hook);
	errno = saved;
}

/* SSL_connect, SSL_do_handshake. A session whose library names no socket
 * (curl's BIO) is paired with the socket its handshake sends on, as for
 * the record calls, so its next step finds it. */
static int ssl_handshake(int fi, void *ssl, const void *ra)
{
	hs_fn f = (hs_fn)real_fn(ra, fi);
	ssl_fd_fn get;
	int fd, r, e;

	if (!f) {
		errno = ENOSYS;
		return -1;
	}
	if (!ns_fault_possible())
		return f(ssl);
	ssl_hook_verify(ssl, (void *)f);
	get = (ssl_fd_fn)real_fn(ra, F_SSL_GET_FD);
	fd = get && ssl ? get(ssl) : -1;
	if (fd >= 0)
		return f(ssl);
	ns_tls_call_begin(ssl);
	r = f(ssl);
	e = errno;
	ns_tls_call_end();
	errno = e;
	return r;
}

int ns_ssl_connect(void *ssl, const void *ra)
{
	return ssl_handshake(F_SSL_CONNECT, ssl, ra);
}

int ns_ssl_do_handshake(void *ssl, const void *ra)
{
	return ssl_handshake(F_SSL_DO_HANDSHAKE, ssl, ra);
}

/* GnuTLS's verdict on the peer's certificate: a connection with tlsfail
 * is told it is not trusted and its issuer unknown (a self-signed one). */
static void gnutls_reject(void *session, const void *ra, int r, unsigned *status)
{
	gnutls_fd_fn get;
	int fd;

	if (r != 0 || !status || !ns_fault_possible())
		return;
	get = (gnutls_fd_fn)real_fn(ra, F_GNUTLS_FD);
	fd = get && session ? get(session) : -1;
	if (wants_tlsfail(fd >= 0 ? ns_conn_of(fd) : ns_tls_cached_conn(session)))
		*status |= NS_GNUTLS_CERT_INVALID | NS_GNUTLS_CERT_SIGNER_NOT_FOUND;
}

int ns_gnutls_verify_peers2(void *session, unsigned *status, const void *ra)
{
	gnutls_v2_fn f = (gnutls_v2_fn)real_fn(ra, F_GNUTLS_VERIFY2);
	int r, e;

	if (!f)
		return NS_GNUTLS_E_INTERNAL_ERROR;
	r = f(session, status);
	e = errno;
	gnutls_reject(session, ra, r, status);
	errno = e;
	return r;
}

int ns_gnutls_verify_peers3(void *session, const char *host, unsigned *status, const void *ra)
{
	gnutls_v3_fn f = (gnutls_v3_fn)real_fn(ra, F_GNUTLS_VERIFY3);
	int r, e;

	if (!f)
		return NS_GNUTLS_E_INTERNAL_ERROR;
	r = f(session, host, status);
	e = errno;
	gnutls_reject(session, ra, r, status);
	errno = e;
	return r;
}

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
#include "shim.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

#include "real.h"

typedef int (*ssl_io_fn)(void *, void *, int);
typedef int (*ssl_io_ex_fn)(void *, void *, size_t, size_t *);
typedef int (*ssl_fd_fn)(const void *);
typedef ssize_t (*gnutls_io_fn)(void *, void *, size_t);
typedef int (*gnutls_fd_fn)(void *);

/* Bound on first use: the library is loaded by then (the program is
 * calling into it). dlsym(RTLD_NEXT) finds it when it is in the global
 * scope; a library dlopen()ed privately (Python's _ssl loads libssl so) is
 * not, and is found by name with RTLD_NOLOAD, which never loads one. */
static void *sym(void **slot, const char *name)
{
	static const char *const libs[] = { "libssl.so.3", "libssl.so.1.1", "libssl.so", "libgnutls.so.30",
		"libgnutls.so" };
	void *p = __atomic_load_n(slot, __ATOMIC_ACQUIRE);

	if (p)
		return p;
	p = dlsym(RTLD_NEXT, name);
	for (size_t i = 0; !p && i < sizeof(libs) / sizeof(libs[0]); i++) {
		void *h = dlopen(libs[i], RTLD_LAZY | RTLD_NOLOAD);

		if (h) {
			p = dlsym(h, name);
			dlclose(h);   /* drops only the reference NOLOAD took */
		}
	}
	if (!p)
		ns_log(NS_LOG_ERROR, "cannot find the real %s; the call fails (ENOSYS)", name);
	__atomic_store_n(slot, p, __ATOMIC_RELEASE);
	return p;
}

static void *p_ssl_read, *p_ssl_write, *p_ssl_read_ex, *p_ssl_write_ex, *p_ssl_get_fd;
static void *p_gnutls_recv, *p_gnutls_send, *p_gnutls_fd;

/* A session whose library cannot name its socket (curl gives OpenSSL a BIO
 * of its own, so SSL_get_fd says -1) is matched to the socket its record
 * call used: the socket layer notes a TLS socket it sees during the call
 * (ns_tls_note_fd), and the pair is remembered here. */
#define SESS_CACHE 64
static struct { void *sess; int fd; } sess_fd[SESS_CACHE];
static __thread void *cur_sess;
static __thread int cur_fd = -1;

void ns_tls_note_fd(int fd)
{
	if (cur_sess)
		cur_fd = fd;
}

static int cached_fd(void *sess)
{
	for (int i = 0; i < SESS_CACHE; i++)
		if (__atomic_load_n(&sess_fd[i].sess, __ATOMIC_ACQUIRE) == sess)
			return __atomic_load_n(&sess_fd[i].fd, __ATOMIC_RELAXED);
	return -1;
}

static void remember_fd(void *sess, int fd)
{
	unsigned i = (unsigned)(((uintptr_t)sess >> 4) % SESS_CACHE);

	__atomic_store_n(&sess_fd[i].fd, fd, __ATOMIC_RELAXED);
	__atomic_store_n(&sess_fd[i].sess, sess, __ATOMIC_RELEASE);
}

/* The governed connection under a TLS session, marked as read at the
 * record level from now on; NULL for anything else. */
static struct ns_conn *conn_of_fd(int fd)
{
	struct ns_conn *c = fd >= 0 ? ns_conn_of(fd) : NULL;

	/* from now on the plaintext says what the protocol is */
	if (c && !(LD(c->flags) & NS_C_TLS)) {
		__atomic_fetch_and(&c->flags, ~(NS_C_HTTP | NS_C_NOTHTTP), __ATOMIC_RELAXED);
		__atomic_fetch_or(&c->flags, NS_C_TLS, __ATOMIC_RELAXED);
	}
	return c;
}

/* Before the real call: the session's connection if its socket is known
 * (from the library or from an earlier call), and the note-taking on. */
static struct ns_conn *begin(void *sess, int fd)
{
	if (fd < 0)
		fd = cached_fd(sess);
	cur_sess = sess;
	cur_fd = -1;
	return conn_of_fd(fd);
}

static struct ns_conn *ssl_conn(void *ssl)
{
	ssl_fd_fn get = (ssl_fd_fn)sym(&p_ssl_get_fd, "SSL_get_fd");

	return begin(ssl, get && ssl ? get(ssl) : -1);
}

static struct ns_conn *gnutls_conn(void *session)
{
	gnutls_fd_fn get = (gnutls_fd_fn)sym(&p_gnutls_fd, "gnutls_transport_get_int");

	return begin(session, get && session ? get(session) : -1);
}

/* After it: the bytes, and the socket learnt during the call. */
static void seen(struct ns_conn *c, int d, const void *buf, ssize_t n)
{
	int e = errno;

	if (!c && cur_fd >= 0) {
		remember_fd(cur_sess, cur_fd);
		c = conn_of_fd(cur_fd);
	}
	cur_sess = NULL;
	if (c && n > 0)
		ns_exchange_plain(c, d, buf, (size_t)n);
	errno = e;
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

static void tls_raise_errno(void *real, int e)
{
	Dl_info info;
	void *h;
	int saved = errno;

	if (!dladdr(real, &info) || !info.dli_fname || !(h = dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD)))
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
				debug("netshim", 0, "SSL_read");
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

/* One record call of each shape: find the real one, learn the socket,
 * call, and look at what moved (d: NS_IN for reads, NS_OUT for writes). */
static int ssl_io(void **slot, const char *name, int d, void *ssl, void *buf, int num)
{
	ssl_io_fn f = (ssl_io_fn)sym(slot, name);
	struct ns_conn *c;
	int r;

	if (!f) {
		errno = ENOSYS;
		return -1;
	}
	c = ssl_conn(ssl);
	r = f(ssl, buf, num);
	if (r <= 0 && d == NS_IN && errno == ETIMEDOUT)
		tls_raise_errno((void *)f, ETIMEDOUT);
	seen(c, d, buf, r);
	return r;
}

static int ssl_io_ex(void **slot, const char *name, int d, void *ssl, void *buf, size_t num, size_t *moved)
{
	ssl_io_ex_fn f = (ssl_io_ex_fn)sym(slot, name);
	struct ns_conn *c;
	int r;

	if (!f) {
		errno = ENOSYS;
		return 0;
	}
	c = ssl_conn(ssl);
	r = f(ssl, buf, num, moved);
	if (r != 1 && d == NS_IN && errno == ETIMEDOUT)
		tls_raise_errno((void *)f, ETIMEDOUT);
	seen(c, d, buf, r == 1 && moved ? (ssize_t)*moved : 0);
	return r;
}

static ssize_t gnutls_io(void **slot, const char *name, int d, void *session, void *data, size_t size)
{
	gnutls_io_fn f = (gnutls_io_fn)sym(slot, name);
	struct ns_conn *c;
	ssize_t r;

	if (!f) {
		errno = ENOSYS;
		return -1;
	}
	c = gnutls_conn(session);
	r = f(session, data, size);
	seen(c, d, data, r);
	return r;
}

int ns_ssl_read(void *ssl, void *buf, int num)
{
	return ssl_io(&p_ssl_read, "SSL_read", NS_IN, ssl, buf, num);
}

int ns_ssl_write(void *ssl, const void *buf, int num)
{
	return ssl_io(&p_ssl_write, "SSL_write", NS_OUT, ssl, (void *)buf, num);
}

int ns_ssl_read_ex(void *ssl, void *buf, size_t num, size_t *got)
{
	return ssl_io_ex(&p_ssl_read_ex, "SSL_read_ex", NS_IN, ssl, buf, num, got);
}

int ns_ssl_write_ex(void *ssl, const void *buf, size_t num, size_t *put)
{
	return ssl_io_ex(&p_ssl_write_ex, "SSL_write_ex", NS_OUT, ssl, (void *)buf, num, put);
}

ssize_t ns_gnutls_record_recv(void *session, void *data, size_t size)
{
	return gnutls_io(&p_gnutls_recv, "gnutls_record_recv", NS_IN, session, data, size);
}

ssize_t ns_gnutls_record_send(void *session, const void *data, size_t size)
{
	return gnutls_io(&p_gnutls_send, "gnutls_record_send", NS_OUT, session, (void *)data, size);
}

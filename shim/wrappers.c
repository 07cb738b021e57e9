/* wrappers.c -- the exported symbols over their workers: one line each,
 * generated from the list (exports.h) where the worker takes the same
 * arguments, written out below where it does not. The data calls make
 * their one fd lookup here (NS_PASS), so a descriptor the shim does not
 * govern costs a lookup and a jump. The version script exports exactly the
 * list's names; a few are defined beside the code they need (the list
 * says where). */

#include <fcntl.h>
#include <stdarg.h>
#include <netdb.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/select.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <unistd.h>

#include "real.h"
#include "connect.h"
#include "datapath.h"
#include "exec.h"
#include "fdops.h"
#include "names.h"
#include "tls.h"
#include "uring.h"
#include "wait.h"

#define EXPORT __attribute__((visibility("default")))

/* The first of a parenthesized list, and the list with the connection
 * appended: the data calls' descriptor and their worker's arguments. */
#define NS_FIRST_(a, ...) a
#define NS_FIRST(...) NS_FIRST_(__VA_ARGS__)
#define NS_WITH_CONN(...) (__VA_ARGS__, c_)

#define WRAP_DATA(ret, sym, field, params, args) \
	EXPORT ret sym params { NS_PASS(NS_FIRST args, field, args, ns_##field NS_WITH_CONN args); }
#define WRAP_CALL(ret, sym, field, params, args) \
	EXPORT ret sym params { return ns_##field args; }
#define WRAP_NONE(...)

NS_EXPORTS(WRAP_DATA, WRAP_CALL, WRAP_NONE, WRAP_NONE)

/* TCP Fast Open: sendto, sendmsg or sendmmsg with MSG_FASTOPEN and an address, on a
 * socket not connected yet, is a connect and a send in one call, which no
 * connect wrapper would see. It is made the two: the connect governed as
 * any (breaker, deadlines, caps, pacing), then the send on the connection.
 * The program sees what a kernel without a Fast Open cookie answers: no
 * data in the SYN; blocking, the bytes sent once connected; non-blocking,
 * EINPROGRESS and nothing sent (the program sends again when writable). */
static __attribute__((noinline, cold)) ssize_t fastopen(int fd, const void *buf, size_t n, const struct msghdr *msg,
							int flags, const struct sockaddr *sa, socklen_t len)
{
	struct ns_conn *c;

	if (ns_connect(fd, sa, len) < 0)
		return -1;
	flags &= ~MSG_FASTOPEN;
	c = ns_conn_of(fd);
	if (msg) {
		struct msghdr m = *msg;

		m.msg_name = NULL;
		m.msg_namelen = 0;
		return c ? ns_sendmsg(fd, &m, flags, c) : REAL_CALL(sendmsg, (fd, &m, flags));
	}
	return c ? ns_send(fd, buf, n, flags, c) : REAL_CALL(send, (fd, buf, n, flags));
}

EXPORT ssize_t sendto(int fd, const void *buf, size_t n, int flags, const struct sockaddr *sa, socklen_t len)
{
	struct ns_conn *c_ = ns_conn_of(fd);

	if (likely(!c_)) {
		if (unlikely(flags & MSG_FASTOPEN) && sa)
			return fastopen(fd, buf, n, NULL, flags, sa, len);
		return REAL_CALL(sendto, (fd, buf, n, flags, sa, len));
	}
	return ns_sendto(fd, buf, n, flags, sa, len, c_);
}

EXPORT ssize_t sendmsg(int fd, const struct msghdr *msg, int flags)
{
	struct ns_conn *c_ = ns_conn_of(fd);

	if (likely(!c_)) {
		if (unlikely(flags & MSG_FASTOPEN) && msg && msg->msg_name)
			return fastopen(fd, NULL, 0, msg, flags, msg->msg_name, msg->msg_namelen);
		return REAL_CALL(sendmsg, (fd, msg, flags));
	}
	return ns_sendmsg(fd, msg, flags, c_);
}

/* ...through sendmmsg: its first message's address is the connect's, and
 * that message alone is sent (a short count, as a full socket buffer gives:
 * the program sends the rest). */
EXPORT int sendmmsg(int fd, struct mmsghdr *v, unsigned n, int flags)
{
	struct ns_conn *c_ = ns_conn_of(fd);

	if (likely(!c_)) {
		if (unlikely(flags & MSG_FASTOPEN) && v && n && v[0].msg_hdr.msg_name) {
			ssize_t r = fastopen(fd, NULL, 0, &v[0].msg_hdr, flags, v[0].msg_hdr.msg_name,
					     v[0].msg_hdr.msg_namelen);

			if (r < 0)
				return -1;
			v[0].msg_len = (unsigned)r;
			return 1;
		}
		return REAL_CALL(sendmmsg, (fd, v, n, flags));
	}
	return ns_sendmmsg(fd, v, n, flags, c_);
}

/* sendfile64 is sendfile on 64-bit: the same worker. */
EXPORT ssize_t sendfile64(int out, int in, off_t *off, size_t n) { NS_PASS(out, sendfile, (out, in, off, n), ns_sendfile(out, in, off, n, c_)); }
EXPORT void closefrom(int lowfd) { ns_closefrom(lowfd); }

/* syscall() (uring.c): the raw call event loops make for io_uring. Six
 * arguments are taken whatever the number, as libc's syscall() does. */
EXPORT long syscall(long n, ...)
{
	va_list ap;
	long a[6];

	va_start(ap, n);
	for (int i = 0; i < 6; i++)
		a[i] = va_arg(ap, long);
	va_end(ap);
	return ns_syscall(n, a[0], a[1], a[2], a[3], a[4], a[5]);
}

/* TLS record calls (tls.c): the sessions are opaque pointers here, and
 * the real functions are found at run time; the shim links no TLS library,
 * so it declares them itself. */
int SSL_read(void *ssl, void *buf, int num);
int SSL_write(void *ssl, const void *buf, int num);
int SSL_read_ex(void *ssl, void *buf, size_t num, size_t *got);
int SSL_write_ex(void *ssl, const void *buf, size_t num, size_t *put);
ssize_t gnutls_record_recv(void *session, void *data, size_t size);
ssize_t gnutls_record_send(void *session, const void *data, size_t size);
int SSL_connect(void *ssl);
int SSL_do_handshake(void *ssl);
int gnutls_certificate_verify_peers2(void *session, unsigned *status);
int gnutls_certificate_verify_peers3(void *session, const char *host, unsigned *status);

/* The TLS calls pass on where they were called from: the real function is
 * the one the calling object would have bound to (tls.c). */
#define CALLER __builtin_return_address(0)
EXPORT int SSL_read(void *ssl, void *buf, int num) { return ns_ssl_read(ssl, buf, num, CALLER); }
EXPORT int SSL_write(void *ssl, const void *buf, int num) { return ns_ssl_write(ssl, buf, num, CALLER); }
EXPORT int SSL_read_ex(void *ssl, void *buf, size_t num, size_t *got) { return ns_ssl_read_ex(ssl, buf, num, got, CALLER); }
EXPORT int SSL_write_ex(void *ssl, const void *buf, size_t num, size_t *put) { return ns_ssl_write_ex(ssl, buf, num, put, CALLER); }
EXPORT ssize_t gnutls_record_recv(void *session, void *data, size_t size) { return ns_gnutls_record_recv(session, data, size, CALLER); }
EXPORT ssize_t gnutls_record_send(void *session, const void *data, size_t size) { return ns_gnutls_record_send(session, data, size, CALLER); }
EXPORT int SSL_connect(void *ssl) { return ns_ssl_connect(ssl, CALLER); }
EXPORT int SSL_do_handshake(void *ssl) { return ns_ssl_do_handshake(ssl, CALLER); }
EXPORT int gnutls_certificate_verify_peers2(void *session, unsigned *status)
{
	return ns_gnutls_verify_peers2(session, status, CALLER);
}
EXPORT int gnutls_certificate_verify_peers3(void *session, const char *host, unsigned *status)
{
	return ns_gnutls_verify_peers3(session, host, status, CALLER);
}

/* execl, execlp, execle: their arguments made into a vector (on the
 * caller's stack, as libc's own do), then the vector form's worker
 * (exec.c). *ap is left after the terminating NULL (execle's envp). */
static size_t execl_count(va_list *ap)
{
	va_list c;
	size_t n = 1;

	va_copy(c, *ap);
	while (va_arg(c, char *))
		n++;
	va_end(c);
	return n + 1;
}

static void execl_fill(const char *first, va_list *ap, char **argv)
{
	argv[0] = (char *)first;
	for (size_t i = 1; (argv[i] = va_arg(*ap, char *)) != NULL; i++)
		;
}

/* (alloca in a statement of its own: never inside a call's arguments) */
#define EXECL_ARGV(argv, arg, ap) \
	do { \
		argv = __builtin_alloca(execl_count(&ap) * sizeof(char *)); \
		execl_fill(arg, &ap, argv); \
	} while (0)

EXPORT int execl(const char *path, const char *arg, ...)
{
	va_list ap;
	char **argv;

	va_start(ap, arg);
	EXECL_ARGV(argv, arg, ap);
	va_end(ap);
	return ns_execv(path, argv);
}

EXPORT int execlp(const char *file, const char *arg, ...)
{
	va_list ap;
	char **argv;

	va_start(ap, arg);
	EXECL_ARGV(argv, arg, ap);
	va_end(ap);
	return ns_execvp(file, argv);
}

EXPORT int execle(const char *path, const char *arg, ...)
{
	va_list ap;
	char **argv, *const *envp;

	va_start(ap, arg);
	EXECL_ARGV(argv, arg, ap);
	envp = va_arg(ap, char *const *);
	va_end(ap);
	return ns_execve(path, argv, envp);
}

/* The variadic ones: every fcntl and ioctl argument is an int or a pointer,
 * both passed in one register, so reading it as a pointer and handing it on
 * is what glibc itself does. */
EXPORT int fcntl(int fd, int cmd, ...) { va_list ap; void *arg; va_start(ap, cmd); arg = va_arg(ap, void *); va_end(ap); return ns_fcntl(0, fd, cmd, arg); }
EXPORT int fcntl64(int fd, int cmd, ...) { va_list ap; void *arg; va_start(ap, cmd); arg = va_arg(ap, void *); va_end(ap); return ns_fcntl(1, fd, cmd, arg); }
EXPORT int ioctl(int fd, unsigned long req, ...) { va_list ap; void *arg; va_start(ap, req); arg = va_arg(ap, void *); va_end(ap); return ns_ioctl(fd, req, arg); }

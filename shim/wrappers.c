/* wrappers.c -- every symbol netshim exports, each one line over its worker.
 * The data calls make their one fd lookup here (NS_PASS), so a descriptor
 * the shim does not govern costs a lookup and a jump.
 *
 * A reader finds the whole intercepted surface here; the version script
 * (netshim.map) exports exactly these names and nothing else. */

#include <fcntl.h>
#include <stdarg.h>
#include <netdb.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/select.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <unistd.h>

#include "real.h"
#include "shim.h"

#define EXPORT __attribute__((visibility("default")))

EXPORT int socket(int domain, int type, int protocol) { return ns_socket(domain, type, protocol); }
EXPORT int connect(int fd, const struct sockaddr *sa, socklen_t len) { return ns_connect(fd, sa, len); }
EXPORT ssize_t send(int fd, const void *buf, size_t n, int flags) { NS_PASS(fd, send, (fd, buf, n, flags), ns_send(c_, fd, buf, n, flags)); }
EXPORT ssize_t sendto(int fd, const void *buf, size_t n, int flags, const struct sockaddr *sa, socklen_t len) { NS_PASS(fd, sendto, (fd, buf, n, flags, sa, len), ns_sendto(c_, fd, buf, n, flags, sa, len)); }
EXPORT ssize_t sendmsg(int fd, const struct msghdr *msg, int flags) { NS_PASS(fd, sendmsg, (fd, msg, flags), ns_sendmsg(c_, fd, msg, flags)); }
EXPORT ssize_t recv(int fd, void *buf, size_t n, int flags) { NS_PASS(fd, recv, (fd, buf, n, flags), ns_recv(c_, fd, buf, n, flags)); }
EXPORT ssize_t recvfrom(int fd, void *buf, size_t n, int flags, struct sockaddr *sa, socklen_t *len) { NS_PASS(fd, recvfrom, (fd, buf, n, flags, sa, len), ns_recvfrom(c_, fd, buf, n, flags, sa, len)); }
EXPORT ssize_t recvmsg(int fd, struct msghdr *msg, int flags) { NS_PASS(fd, recvmsg, (fd, msg, flags), ns_recvmsg(c_, fd, msg, flags)); }
EXPORT ssize_t read(int fd, void *buf, size_t n) { NS_PASS(fd, read, (fd, buf, n), ns_read(c_, fd, buf, n)); }
EXPORT ssize_t write(int fd, const void *buf, size_t n) { NS_PASS(fd, write, (fd, buf, n), ns_write(c_, fd, buf, n)); }
EXPORT ssize_t readv(int fd, const struct iovec *iov, int cnt) { NS_PASS(fd, readv, (fd, iov, cnt), ns_readv(c_, fd, iov, cnt)); }
EXPORT ssize_t writev(int fd, const struct iovec *iov, int cnt) { NS_PASS(fd, writev, (fd, iov, cnt), ns_writev(c_, fd, iov, cnt)); }
EXPORT ssize_t __recv_chk(int fd, void *buf, size_t n, size_t buflen, int flags) { NS_PASS(fd, recv_chk, (fd, buf, n, buflen, flags), ns_recv_chk(c_, fd, buf, n, buflen, flags)); }
EXPORT ssize_t __recvfrom_chk(int fd, void *buf, size_t n, size_t buflen, int flags, struct sockaddr *sa, socklen_t *len) { NS_PASS(fd, recvfrom_chk, (fd, buf, n, buflen, flags, sa, len), ns_recvfrom_chk(c_, fd, buf, n, buflen, flags, sa, len)); }
EXPORT ssize_t __read_chk(int fd, void *buf, size_t n, size_t buflen) { NS_PASS(fd, read_chk, (fd, buf, n, buflen), ns_read_chk(c_, fd, buf, n, buflen)); }
EXPORT int close(int fd) { return ns_close(fd); }
EXPORT int dup(int fd) { return ns_dup(fd); }
EXPORT int dup2(int fd, int fd2) { return ns_dup2(fd, fd2); }
EXPORT int dup3(int fd, int fd2, int flags) { return ns_dup3(fd, fd2, flags); }
EXPORT int setsockopt(int fd, int level, int name, const void *val, socklen_t len) { return ns_setsockopt(fd, level, name, val, len); }
EXPORT int getaddrinfo(const char *node, const char *service, const struct addrinfo *hints, struct addrinfo **res) { return ns_getaddrinfo(node, service, hints, res); }
EXPORT struct hostent *gethostbyname(const char *name) { return ns_gethostbyname(name); }
EXPORT struct hostent *gethostbyname2(const char *name, int af) { return ns_gethostbyname2(name, af); }
EXPORT int gethostbyname_r(const char *name, struct hostent *ret, char *buf, size_t buflen, struct hostent **result, int *h_errnop) { return ns_gethostbyname_r(name, ret, buf, buflen, result, h_errnop); }
EXPORT int gethostbyname2_r(const char *name, int af, struct hostent *ret, char *buf, size_t buflen, struct hostent **result, int *h_errnop) { return ns_gethostbyname2_r(name, af, ret, buf, buflen, result, h_errnop); }
EXPORT int poll(struct pollfd *fds, nfds_t n, int timeout) { return ns_poll(fds, n, timeout); }
EXPORT int ppoll(struct pollfd *fds, nfds_t n, const struct timespec *ts, const sigset_t *mask) { return ns_ppoll(fds, n, ts, mask); }
EXPORT int __poll_chk(struct pollfd *fds, nfds_t n, int timeout, size_t fdslen) { return ns_poll_chk(fds, n, timeout, fdslen); }
EXPORT int __ppoll_chk(struct pollfd *fds, nfds_t n, const struct timespec *ts, const sigset_t *mask, size_t fdslen) { return ns_ppoll_chk(fds, n, ts, mask, fdslen); }
EXPORT int select(int nfds, fd_set *r, fd_set *w, fd_set *e, struct timeval *tv) { return ns_select(nfds, r, w, e, tv); }
EXPORT int pselect(int nfds, fd_set *r, fd_set *w, fd_set *e, const struct timespec *ts, const sigset_t *mask) { return ns_pselect(nfds, r, w, e, ts, mask); }
EXPORT int epoll_ctl(int epfd, int op, int fd, struct epoll_event *ev) { return ns_epoll_ctl(epfd, op, fd, ev); }
EXPORT int epoll_wait(int epfd, struct epoll_event *ev, int max, int timeout) { return ns_epoll_wait(epfd, ev, max, timeout); }
EXPORT int epoll_pwait(int epfd, struct epoll_event *ev, int max, int timeout, const sigset_t *mask) { return ns_epoll_pwait(epfd, ev, max, timeout, mask); }
EXPORT int epoll_pwait2(int epfd, struct epoll_event *ev, int max, const struct timespec *ts, const sigset_t *mask) { return ns_epoll_pwait2(epfd, ev, max, ts, mask); }
EXPORT int getsockopt(int fd, int level, int name, void *val, socklen_t *len) { return ns_getsockopt(fd, level, name, val, len); }
EXPORT int close_range(unsigned first, unsigned last, int flags) { return ns_close_range(first, last, flags); }
EXPORT void closefrom(int lowfd) { ns_closefrom(lowfd); }
EXPORT int fclose(FILE *fp) { return ns_fclose(fp); }
EXPORT int accept(int fd, struct sockaddr *sa, socklen_t *len) { return ns_accept(fd, sa, len); }
EXPORT int accept4(int fd, struct sockaddr *sa, socklen_t *len, int flags) { return ns_accept4(fd, sa, len, flags); }
EXPORT int recvmmsg(int fd, struct mmsghdr *v, unsigned n, int flags, struct timespec *ts) { NS_PASS(fd, recvmmsg, (fd, v, n, flags, ts), ns_recvmmsg(c_, fd, v, n, flags, ts)); }
EXPORT int sendmmsg(int fd, struct mmsghdr *v, unsigned n, int flags) { NS_PASS(fd, sendmmsg, (fd, v, n, flags), ns_sendmmsg(c_, fd, v, n, flags)); }
EXPORT ssize_t sendfile(int out, int in, off_t *off, size_t n) { NS_PASS(out, sendfile, (out, in, off, n), ns_sendfile(c_, out, in, off, n)); }
EXPORT ssize_t sendfile64(int out, int in, off_t *off, size_t n) { NS_PASS(out, sendfile, (out, in, off, n), ns_sendfile(c_, out, in, off, n)); }
EXPORT ssize_t splice(int in, loff_t *offin, int out, loff_t *offout, size_t n, unsigned flags) { return ns_splice(in, offin, out, offout, n, flags); }

/* TLS record calls (tls.c): the sessions are opaque pointers here, and
 * the real functions are found at run time; the shim links no TLS library,
 * so it declares them itself. */
int SSL_read(void *ssl, void *buf, int num);
int SSL_write(void *ssl, const void *buf, int num);
int SSL_read_ex(void *ssl, void *buf, size_t num, size_t *got);
int SSL_write_ex(void *ssl, const void *buf, size_t num, size_t *put);
ssize_t gnutls_record_recv(void *session, void *data, size_t size);
ssize_t gnutls_record_send(void *session, const void *data, size_t size);

EXPORT int SSL_read(void *ssl, void *buf, int num) { return ns_ssl_read(ssl, buf, num); }
EXPORT int SSL_write(void *ssl, const void *buf, int num) { return ns_ssl_write(ssl, buf, num); }
EXPORT int SSL_read_ex(void *ssl, void *buf, size_t num, size_t *got) { return ns_ssl_read_ex(ssl, buf, num, got); }
EXPORT int SSL_write_ex(void *ssl, const void *buf, size_t num, size_t *put) { return ns_ssl_write_ex(ssl, buf, num, put); }
EXPORT ssize_t gnutls_record_recv(void *session, void *data, size_t size) { return ns_gnutls_record_recv(session, data, size); }
EXPORT ssize_t gnutls_record_send(void *session, const void *data, size_t size) { return ns_gnutls_record_send(session, data, size); }

/* The variadic ones: every fcntl and ioctl argument is an int or a pointer,
 * both passed in one register, so reading it as a pointer and handing it on
 * is what glibc itself does. */
EXPORT int fcntl(int fd, int cmd, ...) { va_list ap; void *arg; va_start(ap, cmd); arg = va_arg(ap, void *); va_end(ap); return ns_fcntl(0, fd, cmd, arg); }
EXPORT int fcntl64(int fd, int cmd, ...) { va_list ap; void *arg; va_start(ap, cmd); arg = va_arg(ap, void *); va_end(ap); return ns_fcntl(1, fd, cmd, arg); }
EXPORT int ioctl(int fd, unsigned long req, ...) { va_list ap; void *arg; va_start(ap, req); arg = va_arg(ap, void *); va_end(ap); return ns_ioctl(fd, req, arg); }

/* exports.h -- every symbol netshim exports, listed once.
 *
 * From this list follow the table of real libc functions and its binding
 * (real.h, real.c), the wrappers (wrappers.c), the version script (built
 * from netshim.map.in) and the passthrough test, which reads the script.
 * NS_EXPORTS(DATA, CALL, BOUND, OWN) applies one of four macros to each:
 *
 *   DATA(ret, sym, field, params, args)  a data call, its descriptor first:
 *       the wrapper makes the one lookup (NS_PASS) and calls
 *       ns_<field>(args..., c) for a governed connection, libc otherwise
 *   CALL(ret, sym, field, params, args)  the wrapper calls ns_<field>(args)
 *   BOUND(ret, sym, field, params)       bound in the table; its wrapper is
 *       written out in wrappers.c (variadic, or returning nothing)
 *   OWN(sym)                             exported, written beside the code
 *       it needs, not bound here (the file is named)
 *
 * sym is the exported name, field the table's (the fortified __recv_chk is
 * recv_chk). A symbol libc lacks (epoll_pwait2 before glibc 2.35,
 * close_range and closefrom before 2.34, execveat before 2.34) is bound to
 * NULL. */
#ifndef NS_EXPORTS_H
#define NS_EXPORTS_H

/* (a table, aligned by hand) */
/* clang-format off */
#define NS_EXPORTS(DATA, CALL, BOUND, OWN) \
	CALL(int, socket, socket, (int domain, int type, int protocol), (domain, type, protocol)) \
	CALL(int, connect, connect, (int fd, const struct sockaddr *sa, socklen_t len), (fd, sa, len)) \
	DATA(ssize_t, send, send, (int fd, const void *buf, size_t n, int flags), (fd, buf, n, flags)) \
	BOUND(ssize_t, sendto, sendto, (int fd, const void *buf, size_t n, int flags, const struct sockaddr *sa, \
		socklen_t len))          /* wrappers.c: a send that may be a Fast Open connect */ \
	BOUND(ssize_t, sendmsg, sendmsg, (int fd, const struct msghdr *msg, int flags)) \
	DATA(ssize_t, recv, recv, (int fd, void *buf, size_t n, int flags), (fd, buf, n, flags)) \
	DATA(ssize_t, recvfrom, recvfrom, (int fd, void *buf, size_t n, int flags, struct sockaddr *sa, \
		socklen_t *len), (fd, buf, n, flags, sa, len)) \
	DATA(ssize_t, recvmsg, recvmsg, (int fd, struct msghdr *msg, int flags), (fd, msg, flags)) \
	DATA(ssize_t, read, read, (int fd, void *buf, size_t n), (fd, buf, n)) \
	DATA(ssize_t, write, write, (int fd, const void *buf, size_t n), (fd, buf, n)) \
	DATA(ssize_t, readv, readv, (int fd, const struct iovec *iov, int cnt), (fd, iov, cnt)) \
	DATA(ssize_t, writev, writev, (int fd, const struct iovec *iov, int cnt), (fd, iov, cnt)) \
	DATA(ssize_t, __recv_chk, recv_chk, (int fd, void *buf, size_t n, size_t buflen, int flags), \
		(fd, buf, n, buflen, flags)) \
	DATA(ssize_t, __recvfrom_chk, recvfrom_chk, (int fd, void *buf, size_t n, size_t buflen, int flags, \
		struct sockaddr *sa, socklen_t *len), (fd, buf, n, buflen, flags, sa, len)) \
	DATA(ssize_t, __read_chk, read_chk, (int fd, void *buf, size_t n, size_t buflen), (fd, buf, n, buflen)) \
	DATA(int, recvmmsg, recvmmsg, (int fd, struct mmsghdr *v, unsigned n, int flags, struct timespec *ts), \
		(fd, v, n, flags, ts)) \
	BOUND(int, sendmmsg, sendmmsg, (int fd, struct mmsghdr *v, unsigned n, int flags)) /* Fast Open too */ \
	DATA(ssize_t, sendfile, sendfile, (int out, int in, off_t *off, size_t n), (out, in, off, n)) \
	CALL(ssize_t, splice, splice, (int in, loff_t *offin, int out, loff_t *offout, size_t n, unsigned flags), \
		(in, offin, out, offout, n, flags)) \
	CALL(int, close, close, (int fd), (fd)) \
	CALL(int, dup, dup, (int fd), (fd)) \
	CALL(int, dup2, dup2, (int fd, int fd2), (fd, fd2)) \
	CALL(int, dup3, dup3, (int fd, int fd2, int flags), (fd, fd2, flags)) \
	BOUND(int, fcntl, fcntl, (int fd, int cmd, ...)) \
	BOUND(int, fcntl64, fcntl64, (int fd, int cmd, ...)) \
	BOUND(int, ioctl, ioctl, (int fd, unsigned long req, ...)) \
	CALL(int, setsockopt, setsockopt, (int fd, int level, int name, const void *val, socklen_t len), \
		(fd, level, name, val, len)) \
	CALL(int, getsockopt, getsockopt, (int fd, int level, int name, void *val, socklen_t *len), \
		(fd, level, name, val, len)) \
	CALL(int, getpeername, getpeername, (int fd, struct sockaddr *sa, socklen_t *len), (fd, sa, len)) \
	CALL(int, shutdown, shutdown, (int fd, int how), (fd, how)) \
	CALL(int, getaddrinfo, getaddrinfo, (const char *node, const char *service, const struct addrinfo *hints, \
		struct addrinfo **res), (node, service, hints, res)) \
	CALL(struct hostent *, gethostbyname, gethostbyname, (const char *name), (name)) \
	CALL(struct hostent *, gethostbyname2, gethostbyname2, (const char *name, int af), (name, af)) \
	CALL(int, gethostbyname_r, gethostbyname_r, (const char *name, struct hostent *ret, char *buf, \
		size_t buflen, struct hostent **result, int *h_errnop), (name, ret, buf, buflen, result, h_errnop)) \
	CALL(int, gethostbyname2_r, gethostbyname2_r, (const char *name, int af, struct hostent *ret, char *buf, \
		size_t buflen, struct hostent **result, int *h_errnop), (name, af, ret, buf, buflen, result, h_errnop)) \
	CALL(int, poll, poll, (struct pollfd *fds, nfds_t n, int timeout), (fds, n, timeout)) \
	CALL(int, ppoll, ppoll, (struct pollfd *fds, nfds_t n, const struct timespec *ts, const sigset_t *mask), \
		(fds, n, ts, mask)) \
	CALL(int, __poll_chk, poll_chk, (struct pollfd *fds, nfds_t n, int timeout, size_t fdslen), \
		(fds, n, timeout, fdslen)) \
	CALL(int, __ppoll_chk, ppoll_chk, (struct pollfd *fds, nfds_t n, const struct timespec *ts, \
		const sigset_t *mask, size_t fdslen), (fds, n, ts, mask, fdslen)) \
	CALL(int, select, select, (int nfds, fd_set *r, fd_set *w, fd_set *e, struct timeval *tv), \
		(nfds, r, w, e, tv)) \
	CALL(int, pselect, pselect, (int nfds, fd_set *r, fd_set *w, fd_set *e, const struct timespec *ts, \
		const sigset_t *mask), (nfds, r, w, e, ts, mask)) \
	CALL(int, epoll_ctl, epoll_ctl, (int epfd, int op, int fd, struct epoll_event *ev), (epfd, op, fd, ev)) \
	CALL(int, epoll_wait, epoll_wait, (int epfd, struct epoll_event *ev, int max, int timeout), \
		(epfd, ev, max, timeout)) \
	CALL(int, epoll_pwait, epoll_pwait, (int epfd, struct epoll_event *ev, int max, int timeout, \
		const sigset_t *mask), (epfd, ev, max, timeout, mask)) \
	CALL(int, epoll_pwait2, epoll_pwait2, (int epfd, struct epoll_event *ev, int max, \
		const struct timespec *ts, const sigset_t *mask), (epfd, ev, max, ts, mask)) \
	CALL(int, close_range, close_range, (unsigned first, unsigned last, int flags), (first, last, flags)) \
	BOUND(void, closefrom, closefrom, (int lowfd)) \
	CALL(int, fclose, fclose, (FILE *fp), (fp)) \
	CALL(int, accept, accept, (int fd, struct sockaddr *sa, socklen_t *len), (fd, sa, len)) \
	CALL(int, accept4, accept4, (int fd, struct sockaddr *sa, socklen_t *len, int flags), (fd, sa, len, flags)) \
	CALL(int, execve, execve, (const char *path, char *const argv[], char *const envp[]), (path, argv, envp)) \
	CALL(int, execv, execv, (const char *path, char *const argv[]), (path, argv)) \
	CALL(int, execvp, execvp, (const char *file, char *const argv[]), (file, argv)) \
	CALL(int, execvpe, execvpe, (const char *file, char *const argv[], char *const envp[]), (file, argv, envp)) \
	CALL(int, fexecve, fexecve, (int fd, char *const argv[], char *const envp[]), (fd, argv, envp)) \
	CALL(int, execveat, execveat, (int dirfd, const char *path, char *const argv[], char *const envp[], \
		int flags), (dirfd, path, argv, envp, flags)) \
	OWN(execl) OWN(execlp) OWN(execle)   /* wrappers.c: variadic, over execv, execvp, execve */ \
	OWN(sendfile64)          /* wrappers.c: sendfile's worker */ \
	OWN(syscall)             /* wrappers.c, for uring.c */ \
	OWN(SSL_read) OWN(SSL_write) OWN(SSL_read_ex) OWN(SSL_write_ex) \
	OWN(gnutls_record_recv) OWN(gnutls_record_send)   /* wrappers.c, for tls.c */ \
	OWN(SSL_connect) OWN(SSL_do_handshake)   /* ...tlsfail */ \
	OWN(gnutls_certificate_verify_peers2) OWN(gnutls_certificate_verify_peers3) \
	OWN(dlopen)              /* deepbind.c */ \
	OWN(vfork) OWN(__vfork)  /* fdtab.c */ \
	OWN(fgets) OWN(fgets_unlocked) OWN(__fgets_chk) OWN(__fgets_unlocked_chk)   /* stdio.c */ \
	OWN(fread) OWN(fread_unlocked) OWN(__fread_chk) OWN(__fread_unlocked_chk) \
	OWN(fgetc) OWN(getc) OWN(_IO_getc) OWN(fgetc_unlocked) OWN(getc_unlocked) OWN(__uflow) \
	OWN(getline) OWN(getdelim) OWN(__getdelim)
/* clang-format on */

#endif

/* real.h -- the one table of the real libc functions the wrappers call. */
#ifndef NS_REAL_H
#define NS_REAL_H

#include <fcntl.h>
#include <netdb.h>
#include <stdio.h>
#include <poll.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

struct ns_real {
	int (*socket)(int, int, int);
	int (*connect)(int, const struct sockaddr *, socklen_t);
	ssize_t (*send)(int, const void *, size_t, int);
	ssize_t (*sendto)(int, const void *, size_t, int, const struct sockaddr *, socklen_t);
	ssize_t (*sendmsg)(int, const struct msghdr *, int);
	ssize_t (*recv)(int, void *, size_t, int);
	ssize_t (*recvfrom)(int, void *, size_t, int, struct sockaddr *, socklen_t *);
	ssize_t (*recvmsg)(int, struct msghdr *, int);
	ssize_t (*read)(int, void *, size_t);
	ssize_t (*write)(int, const void *, size_t);
	ssize_t (*readv)(int, const struct iovec *, int);
	ssize_t (*writev)(int, const struct iovec *, int);
	int (*close)(int);
	int (*dup)(int);
	int (*dup2)(int, int);
	int (*dup3)(int, int, int);
	int (*fcntl)(int, int, ...);
	int (*fcntl64)(int, int, ...);
	int (*ioctl)(int, unsigned long, ...);
	int (*setsockopt)(int, int, int, const void *, socklen_t);
	int (*getsockopt)(int, int, int, void *, socklen_t *);
	ssize_t (*recv_chk)(int, void *, size_t, size_t, int);
	ssize_t (*recvfrom_chk)(int, void *, size_t, size_t, int, struct sockaddr *, socklen_t *);
	ssize_t (*read_chk)(int, void *, size_t, size_t);
	int (*getaddrinfo)(const char *, const char *, const struct addrinfo *, struct addrinfo **);
	struct hostent *(*gethostbyname)(const char *);
	struct hostent *(*gethostbyname2)(const char *, int);
	int (*gethostbyname_r)(const char *, struct hostent *, char *, size_t, struct hostent **, int *);
	int (*gethostbyname2_r)(const char *, int, struct hostent *, char *, size_t, struct hostent **, int *);
	int (*poll)(struct pollfd *, nfds_t, int);
	int (*ppoll)(struct pollfd *, nfds_t, const struct timespec *, const sigset_t *);
	int (*poll_chk)(struct pollfd *, nfds_t, int, size_t);
	int (*ppoll_chk)(struct pollfd *, nfds_t, const struct timespec *, const sigset_t *, size_t);
	int (*select)(int, fd_set *, fd_set *, fd_set *, struct timeval *);
	int (*pselect)(int, fd_set *, fd_set *, fd_set *, const struct timespec *, const sigset_t *);
	int (*epoll_ctl)(int, int, int, struct epoll_event *);
	int (*epoll_wait)(int, struct epoll_event *, int, int);
	int (*epoll_pwait)(int, struct epoll_event *, int, int, const sigset_t *);
	int (*epoll_pwait2)(int, struct epoll_event *, int, const struct timespec *, const sigset_t *);
	int (*close_range)(unsigned, unsigned, int);
	void (*closefrom)(int);
	int (*fclose)(FILE *);
	int (*accept)(int, struct sockaddr *, socklen_t *);
	int (*accept4)(int, struct sockaddr *, socklen_t *, int);
	int (*recvmmsg)(int, struct mmsghdr *, unsigned, int, struct timespec *);
	int (*sendmmsg)(int, struct mmsghdr *, unsigned, int);
	ssize_t (*sendfile)(int, int, off_t *, size_t);
	ssize_t (*splice)(int, loff_t *, int, loff_t *, size_t, unsigned);
};

extern struct ns_real ns_real;

/* Bind every entry (once, thread-safe, callable before the constructor). */
void ns_real_bind(void);

/* The data calls' way in before anything was bound (a call from another
 * library's constructor): bind, then call. Separate functions so that the
 * wrappers' fast path is two tail calls and needs no stack frame. */
ssize_t ns_unbound_send(int, const void *, size_t, int);
ssize_t ns_unbound_sendto(int, const void *, size_t, int, const struct sockaddr *, socklen_t);
ssize_t ns_unbound_sendmsg(int, const struct msghdr *, int);
ssize_t ns_unbound_recv(int, void *, size_t, int);
ssize_t ns_unbound_recvfrom(int, void *, size_t, int, struct sockaddr *, socklen_t *);
ssize_t ns_unbound_recvmsg(int, struct msghdr *, int);
ssize_t ns_unbound_read(int, void *, size_t);
ssize_t ns_unbound_write(int, const void *, size_t);
ssize_t ns_unbound_readv(int, const struct iovec *, int);
ssize_t ns_unbound_writev(int, const struct iovec *, int);
ssize_t ns_unbound_recv_chk(int, void *, size_t, size_t, int);
ssize_t ns_unbound_recvfrom_chk(int, void *, size_t, size_t, int, struct sockaddr *, socklen_t *);
ssize_t ns_unbound_read_chk(int, void *, size_t, size_t);
int ns_unbound_recvmmsg(int, struct mmsghdr *, unsigned, int, struct timespec *);
int ns_unbound_sendmmsg(int, struct mmsghdr *, unsigned, int);
ssize_t ns_unbound_sendfile(int, int, off_t *, size_t);
int ns_unbound_select(int, fd_set *, fd_set *, fd_set *, struct timeval *);

/* The real function, bound on first use. */
#define REAL(fn) (__builtin_expect(ns_real.fn != NULL, 1) ? ns_real.fn : (ns_real_bind(), ns_real.fn))

#endif

/* fdops.h -- the descriptor calls (fdops.c). */
#ifndef NS_FDOPS_H
#define NS_FDOPS_H

#include <stdio.h>
#include <sys/socket.h>
#include "base.h"

NS_HIDDEN int ns_close(int fd);
NS_HIDDEN int ns_close_range(unsigned first, unsigned last, int flags);
NS_HIDDEN void ns_closefrom(int lowfd);
NS_HIDDEN int ns_fclose(FILE *fp);
NS_HIDDEN int ns_accept(int fd, struct sockaddr *sa, socklen_t *len);
NS_HIDDEN int ns_accept4(int fd, struct sockaddr *sa, socklen_t *len, int flags);
NS_HIDDEN int ns_dup(int fd);
NS_HIDDEN int ns_dup2(int fd, int fd2);
NS_HIDDEN int ns_dup3(int fd, int fd2, int flags);
NS_HIDDEN int ns_fcntl(int use64, int fd, int cmd, void *arg);
NS_HIDDEN int ns_ioctl(int fd, unsigned long req, void *arg);
NS_HIDDEN int ns_setsockopt(int fd, int level, int name, const void *val, socklen_t len);
NS_HIDDEN int ns_getsockopt(int fd, int level, int name, void *val, socklen_t *len);
NS_HIDDEN int ns_getpeername(int fd, struct sockaddr *sa, socklen_t *len);
NS_HIDDEN int ns_shutdown(int fd, int how);

#endif

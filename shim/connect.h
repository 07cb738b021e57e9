/* connect.h -- socket() and connect() (connect.c). */
#ifndef NS_CONNECT_H
#define NS_CONNECT_H

#include <sys/socket.h>
#include "base.h"

NS_HIDDEN int ns_socket(int domain, int type, int protocol);
NS_HIDDEN int ns_connect(int fd, const struct sockaddr *sa, socklen_t len);

#endif

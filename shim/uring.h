/* uring.h -- syscall(): io_uring_setup refused while the shim governs (uring.c). */
#ifndef NS_URING_H
#define NS_URING_H

#include "base.h"

NS_HIDDEN long ns_syscall(long n, long a, long b, long c, long d, long e, long f);

#endif

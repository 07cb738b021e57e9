/* refuse.h -- connects refused as the kernel refuses them (refuse.c). */
#ifndef NS_REFUSE_H
#define NS_REFUSE_H

#include <stdint.h>

#include "conn.h"

/* A connect on fd (v: its tag) refused: ECONNREFUSED at once when
 * blocking; when not, EINPROGRESS and the kernel's refusal, the fd marked
 * so that its next connect() is ns_refused_again. Returns connect()'s. */
NS_HIDDEN int ns_refuse_open(int fd, uintptr_t v, int family);
/* The connect() after ns_refuse_open's: the kernel's answer, mark cleared. */
NS_HIDDEN int ns_refused_again(int fd, uintptr_t v, int family);
/* connect() on a socket whose queued connect was throttled: the kernel's
 * answer, once; the connect after that is a new attempt. */
NS_HIDDEN int ns_throttled_again(int fd, struct ns_conn *c);

#endif

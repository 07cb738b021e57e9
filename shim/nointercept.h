/* nointercept.h -- forced into the shim's build of policy/ (-include): the
 * shim's own file I/O (reading the policy, creating the table) goes straight
 * to libc instead of through the shim's exported wrappers. */
#ifndef NS_NOINTERCEPT_H
#define NS_NOINTERCEPT_H

#include <sys/types.h>

__attribute__((visibility("hidden"))) int ns_sys_close(int fd);
__attribute__((visibility("hidden"))) ssize_t ns_sys_read(int fd, void *buf, size_t n);

#define close(fd) ns_sys_close(fd)
#define read(fd, buf, n) ns_sys_read(fd, buf, n)

#endif

/* exec.h -- the exec family (exec.c): what an exec closes unseen is
 * settled before the new program starts. */
#ifndef NS_EXEC_H
#define NS_EXEC_H

#include "base.h"

NS_HIDDEN int ns_execve(const char *path, char *const argv[], char *const envp[]);
NS_HIDDEN int ns_execv(const char *path, char *const argv[]);
NS_HIDDEN int ns_execvp(const char *file, char *const argv[]);
NS_HIDDEN int ns_execvpe(const char *file, char *const argv[], char *const envp[]);
NS_HIDDEN int ns_fexecve(int fd, char *const argv[], char *const envp[]);
NS_HIDDEN int ns_execveat(int dirfd, const char *path, char *const argv[], char *const envp[], int flags);

#endif

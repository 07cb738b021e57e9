/* exec.h -- the exec family (exec.c): what an exec closes unseen is
 * settled before the new program starts. */
#ifndef NS_EXEC_H
#define NS_EXEC_H

#include <spawn.h>
#include <stdio.h>

#include "base.h"

NS_HIDDEN int ns_execve(const char *path, char *const argv[], char *const envp[]);
NS_HIDDEN int ns_execv(const char *path, char *const argv[]);
NS_HIDDEN int ns_execvp(const char *file, char *const argv[]);
NS_HIDDEN int ns_execvpe(const char *file, char *const argv[], char *const envp[]);
NS_HIDDEN int ns_fexecve(int fd, char *const argv[], char *const envp[]);
NS_HIDDEN int ns_execveat(int dirfd, const char *path, char *const argv[], char *const envp[], int flags);
/* ...and the spawns, whose exec the shim does not see */
NS_HIDDEN int ns_posix_spawn(pid_t *pid, const char *path, const posix_spawn_file_actions_t *fa,
			     const posix_spawnattr_t *attr, char *const argv[], char *const envp[]);
NS_HIDDEN int ns_posix_spawnp(pid_t *pid, const char *file, const posix_spawn_file_actions_t *fa,
			      const posix_spawnattr_t *attr, char *const argv[], char *const envp[]);
NS_HIDDEN int ns_system(const char *cmd);
NS_HIDDEN FILE *ns_popen(const char *cmd, const char *type);

#endif

/* exec.c -- the exec family. The kernel closes every close-on-exec
 * descriptor at exec without a close the shim could see; what those
 * connections held machine-wide (their places under max_connections) is
 * given back first, and taken again if the exec fails (shape.c). Each
 * variant is wrapped: libc's execv, execvp and the rest reach the kernel
 * through its own execve, not through the exported one. */
#include "exec.h"

#include <errno.h>
#include <unistd.h>

#include "real.h"
#include "shape.h"

#define HELD_MAX 64

struct held {
	struct ns_conn *c[HELD_MAX];
	int n;
};

static void before(struct held *h)
{
	h->n = __atomic_load_n(&ns_conn_end_hook, __ATOMIC_RELAXED) ||
			__atomic_load_n(&ns_req_end_hook, __ATOMIC_RELAXED)
		? ns_shape_exec_release(h->c, HELD_MAX)
		: 0;
}

/* the exec returned: it failed, and the program goes on with its sockets */
static int failed(struct held *h, int r)
{
	int e = errno;

	if (h->n)
		ns_shape_exec_failed(h->c, h->n);
	errno = e;
	return r;
}

int ns_execve(const char *path, char *const argv[], char *const envp[])
{
	struct held h;

	before(&h);
	return failed(&h, REAL(execve)(path, argv, envp));
}

int ns_execv(const char *path, char *const argv[])
{
	struct held h;

	before(&h);
	return failed(&h, REAL(execv)(path, argv));
}

int ns_execvp(const char *file, char *const argv[])
{
	struct held h;

	before(&h);
	return failed(&h, REAL(execvp)(file, argv));
}

int ns_execvpe(const char *file, char *const argv[], char *const envp[])
{
	struct held h;

	before(&h);
	return failed(&h, REAL(execvpe)(file, argv, envp));
}

int ns_fexecve(int fd, char *const argv[], char *const envp[])
{
	struct held h;

	before(&h);
	return failed(&h, REAL(fexecve)(fd, argv, envp));
}

int ns_execveat(int dirfd, const char *path, char *const argv[], char *const envp[], int flags)
{
	struct held h;

	if (!REAL(execveat)) {
		errno = ENOSYS;   /* (a libc before 2.34) */
		return -1;
	}
	before(&h);
	return failed(&h, REAL(execveat)(dirfd, path, argv, envp, flags));
}

/* goexec.h -- a governed process's exec of a Go program, hooked at its
 * one stop (goexec.c). */
#ifndef NS_GOEXEC_H
#define NS_GOEXEC_H

#include <linux/seccomp.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <sys/types.h>

#include "gostat.h"

struct ns_goexec {
	struct ns_gostat *go;
	int level;            /* NETSHIM_LOG's (3: info says each program hooked) */
	int off;              /* NETSHIM_GO_STATUS=off: no program is hooked */
	uint64_t max_stop_us; /* the longest a program was stopped to be hooked */
	pid_t child;          /* shimrun's own child, */
	int child_done;       /* ...reaped while an exec was waited for, */
	int child_status;     /* ...with this status */
	unsigned nsaid;
	unsigned said[64]; /* the refusals said (their reasons' hashes) */
};

/* Answer notification id: the call goes on as the program made it. */
typedef void ns_goexec_cont_fn(void *ctx, uint64_t id);

/* n: an execve or execveat of a process under the filter. Answered
 * (through cont) in every case; a Go program it execs is hooked when its
 * file is one the hook knows. */
void ns_goexec(struct ns_goexec *x, const struct seccomp_notif *n, ns_goexec_cont_fn *cont, void *ctx);

/* NETSHIM_GO_STATUS=off: no Go program is hooked */
int ns_goexec_off(void);

/* path's file: 1 when its HTTP statuses can be read (what: its Go
 * version), 0 for a Go program they cannot (what: why), -1 for a program
 * that is not Go. */
int ns_goexec_probe(const char *path, char *what, size_t len);

#endif

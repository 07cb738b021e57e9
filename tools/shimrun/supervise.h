/* supervise.h -- shimrun's second engine (supervise.c): the program runs
 * under a seccomp filter that sends its connect() calls to shimrun, which
 * answers them from the breaker table and the policy, as the preload
 * library would (docs/design.md, "The seccomp engine"). */
#ifndef NS_SUPERVISE_H
#define NS_SUPERVISE_H

#include <stddef.h>

/* Run argv (found as execvp finds it) under the seccomp engine, with the
 * policy at policy (NULL or "": the built-in one) and the table name (NULL:
 * NETSHIM_TABLE, else the default). Returns what shimrun exits with: the
 * program's status (128 + its signal), 126/127 when it cannot be run, or,
 * when this kernel cannot notify shimrun of a child's system calls (older
 * than 5.0, or seccomp refused), -1 before anything ran, with the reason in
 * why: the caller then runs it another way. first: argv[0]'s file as an
 * absolute path when it is an ELF program that is not Go (its exec needs
 * no stop in shimrun), else NULL. */
int ns_sup_run(char **argv, const char *first, const char *policy, const char *table, char *why, size_t whylen);

#endif

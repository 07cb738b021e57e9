/* govern.h -- the seccomp engine's decisions (govern.c): what shimrun does
 * with a program's connect, and with the connection after it, from the
 * same table and policy as the preload library. supervise.c brings the
 * connects (seccomp user notification) and answers them through answer. */
#ifndef NS_GOVERN_H
#define NS_GOVERN_H

#include <poll.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <time.h>

/* How a held connect is answered: err 0 and cont: the kernel makes the
 * call as the program asked; else the call fails with err (0: it
 * succeeded). */
typedef void ns_gov_answer_fn(void *ctx, uint64_t id, int err, int cont);
/* Is notification id still the program's to be answered (its call not
 * interrupted, its process alive)? Asked before shimrun acts on one. */
typedef int ns_gov_valid_fn(void *ctx, uint64_t id);

struct ns_gov;

/* CLOCK_MONOTONIC in microseconds: shimrun's clock */
static inline uint64_t ns_gov_mono_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

/* The policy at policy (NULL or "": the built-in one), the table name
 * (NULL: NETSHIM_TABLE, else the default). NULL when the policy does not
 * load (why says so). A table that cannot be opened is said on stderr:
 * connects then go on uncounted. */
struct ns_gov *ns_gov_new(const char *policy, const char *table, ns_gov_answer_fn *answer, ns_gov_valid_fn *valid,
			  void *ctx, char *why, size_t whylen);

/* One connect of the program: notification id, by thread tid, on its
 * descriptor fd, to ss (len bytes, copied from the program: the
 * notification is checked valid after that, and again before a connect
 * held for its turn goes on). */
void ns_gov_connect(struct ns_gov *g, uint64_t id, pid_t tid, int fd, const struct sockaddr_storage *ss, socklen_t len);
/* shimrun could not take a copy of thread tid's socket (err: why): the
 * errno to refuse its connect with, ENOBUFS when shimrun's descriptors ran
 * out, else 0 (the kernel's to answer, uncounted). Out of descriptors, and
 * no right to the program (EPERM: non-dumpable under an unprivileged
 * shimrun), are each said once. */
int ns_gov_no_copy(struct ns_gov *g, pid_t tid, int err);

/* The descriptors shimrun waits on for the connects in progress (at most
 * max, into p: NS_GOV_POLLED holds every one), and how long until it must
 * look again (ms; -1: not before one of them, or a connect, comes). */
#define NS_GOV_POLLED 4096
int ns_gov_pollfds(struct ns_gov *g, struct pollfd *p, int max);
int ns_gov_timeout(struct ns_gov *g);
/* Everything due: connects decided (p, n: ns_gov_pollfds' descriptors as
 * poll returned them), connects held for a place or a token, connections
 * to look at (deadlines, places given back). */
void ns_gov_run(struct ns_gov *g, const struct pollfd *p, int n);
/* The Go programs hooked (gostat.h): their connections' own successes
 * are taken back by their answers. An answer hooked program tgid read
 * from d (its HTTP status; latency_us: its time in roundTrip, 0 when not
 * known; a 429's or 503's Retry-After, "" none, NULL not read) is counted
 * as the library counts an exchange. */
struct ns_gostat;
struct ns_dest;
void ns_gov_hooks(struct ns_gov *g, struct ns_gostat *go);
void ns_gov_status(struct ns_gov *g, const struct ns_dest *d, pid_t tgid, unsigned status, uint64_t latency_us,
		   const char *retry_after);
/* Every governed process is gone: what is left is settled. */
void ns_gov_finish(struct ns_gov *g);

#endif

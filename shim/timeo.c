/* timeo.c -- the kernel's timeouts, kept for the shim's deadlines.
 *
 * Read deadlines ride on the kernel: the shim puts min(read_timeout, the
 * program's own SO_RCVTIMEO) into SO_RCVTIMEO when the connection starts, so
 * a blocking read on a healthy connection costs no system call beyond the
 * real one. When the kernel reports EAGAIN on a blocking socket the shim
 * knows whose timeout the kernel held and answers ETIMEDOUT (ours) or EAGAIN
 * (the program's), exactly as before. The total budget and the rest of a
 * read a signal interrupted are checked before the data calls that have
 * them (ns_deadline_check). */
#include "timeo.h"

#include <errno.h>
#include <string.h>

#include "connfail.h"
#include "outcome.h"
#include "real.h"


/* Overshoot a total deadline may have before the kernel timeout is lowered
 * again: bounds the extra setsockopt calls to 1 per this many ns, and only
 * while the total deadline is nearer than the read timeout. */
#define TOTAL_SLACK_NS (50 * 1000000LL)

/* Make the kernel hold the shorter of the program's timeout and want_ns
 * (the shim's, 0 = none) for direction d. On a tie the program's wins so that
 * its own timeout reports EAGAIN, as it always did. */
void ns_dir_sync(int fd, struct ns_conn *c, int d, int64_t want_ns, uint32_t want_src)
{
	struct ns_dir *dir = &c->dir[d];
	int64_t k = LD(dir->prog_ns);
	uint32_t src = LD(dir->prog_ns) ? NS_SRC_PROGRAM : NS_SRC_NONE;
	struct timeval tv;

	if (want_ns > 0 && (k == 0 || want_ns < k)) {
		k = want_ns;
		src = want_src;
	}
	if (k == LD(dir->kernel_ns)) {
		ST(dir->src, src);
		return;
	}
	tv = ns_to_tv(k);
	if (REAL(setsockopt)(fd, SOL_SOCKET, d == NS_IN ? SO_RCVTIMEO : SO_SNDTIMEO, &tv, sizeof(tv)) == 0) {
		ST(dir->kernel_ns, k);
		ST(dir->src, src);
	}
}

/* What the shim wants in direction d given the time left of the total budget. */
void ns_dir_want(const struct ns_conn *c, int d, int64_t left, int64_t *want, uint32_t *src)
{
	*want = d == NS_IN ? LD(c->read_timeout_ns) : 0;
	*src = NS_SRC_SHIM_READ;
	if (left > 0 && (*want == 0 || left < *want)) {
		*want = left;
		*src = NS_SRC_SHIM_TOTAL;
	}
}


/* Before a data call with a deadline of its own: the total budget, or the
 * rest of a read that a signal interrupted. Fails once it is spent, and keeps
 * the kernel timeout from outliving it. Returns 0, 1 when fd is no longer
 * c's socket (the call is the kernel's alone), or -1 with errno ETIMEDOUT. */
int ns_deadline_check(int fd, struct ns_conn *c, int d)
{
	monotime now;
	struct ns_dir *dir = &c->dir[d];
	int64_t left = 0, want;
	uint32_t src;

	if (ns_exp_kind(c)) {
		if (!ns_conn_still(fd, c))
			return 1;
		errno = ETIMEDOUT;   /* a deadline fired in a wait: the connection is done */
		return -1;
	}
	now = ns_now();
	if (LD(c->total_deadline)) {
		left = LD(c->total_deadline) - now;
		if (left <= 0)
			goto out_expired;
	}
	if (d == NS_IN && LD(c->intr_deadline)) {
		int64_t rest = LD(c->intr_deadline) - now;

		if (rest <= 0) {
			ns_set_intr(c, 0);
			goto out_expired;
		}
		if (left == 0 || rest < left) {
			ns_dir_sync(fd, c, d, rest, NS_SRC_SHIM_READ);
			return 0;
		}
	}
	if (LD(c->total_deadline) && (LD(dir->kernel_ns) == 0 || left + TOTAL_SLACK_NS < LD(dir->kernel_ns))) {
		ns_dir_want(c, d, left, &want, &src);
		ns_dir_sync(fd, c, d, want, src);
	}
	return 0;
out_expired:
	if (!ns_conn_still(fd, c))
		return 1;
	ns_conn_failed(c, NS_OUT_TIMEOUT, ETIMEDOUT);
	errno = ETIMEDOUT;
	return -1;
}

/* A blocking read interrupted by a signal is usually called again at once
 * (Python always does). The kernel would then wait a whole read_timeout
 * again, and a program with a periodic timer signal would never time out, so
 * the retry waits only for what is left of the first interrupted wait. The
 * shim cannot see when the interrupted call began without reading the clock
 * on every read, so that rest is counted from the interruption: the read
 * fails at most read_timeout after its first signal. */
void ns_note_interrupted(int fd, struct ns_conn *c, int e)
{
	int64_t want;
	uint32_t src;

	if (e == EINTR) {
		if (!LD(c->intr_deadline) && ns_src_fires(LD(c->dir[NS_IN].src)) &&
		    !(__atomic_load_n(&c->flags, __ATOMIC_RELAXED) & NS_C_NONBLOCK))
			ns_set_intr(c, ns_now() + LD(c->dir[NS_IN].kernel_ns));
		return;
	}
	if (LD(c->intr_deadline)) {
		ns_set_intr(c, 0);
		ns_dir_want(c, NS_IN, LD(c->total_deadline) ? LD(c->total_deadline) - ns_now() : 0, &want, &src);
		ns_dir_sync(fd, c, NS_IN, want, src);
	}
}

int64_t ns_prog_timeout(int fd, int opt)
{
	struct timeval tv;
	socklen_t l = sizeof(tv);

	if (REAL(getsockopt)(fd, SOL_SOCKET, opt, &tv, &l) < 0)
		return 0;
	return ns_tv_to_ns(&tv);
}

/* End a connect the shim timed out. AF_UNSPEC drops the half-open attempt,
 * so no SYN is retried and the socket may connect anew; the ECONNRESET the
 * kernel then leaves pending is read away, since the program is told
 * ETIMEDOUT and nothing else. errno is kept. */
void ns_drop_attempt(int fd)
{
	struct sockaddr un = { .sa_family = AF_UNSPEC };
	int saved = errno, err;
	socklen_t l = sizeof(err);

	REAL(connect)(fd, &un, sizeof(un));
	REAL(getsockopt)(fd, SOL_SOCKET, SO_ERROR, &err, &l);
	errno = saved;
}

/* The kernel's timeouts back to the program's own: the shim's end with the
 * connection (a disconnect, a failed attempt the program makes again), and
 * the next connect must find the program's values there, not ours. */
void ns_conn_release_kernel(int fd, struct ns_conn *c)
{
	for (int d = NS_IN; d <= NS_OUT; d++) {
		if (LD(c->dir[d].kernel_ns) != LD(c->dir[d].prog_ns))
			ns_dir_sync(fd, c, d, 0, NS_SRC_NONE);
	}
}

/* Put the shim's read (and total) timeouts into the kernel, beside the
 * program's own. ask: the program may have set its own before connecting
 * (otherwise it has none and no system call is spent asking). */
__attribute__((noinline)) void ns_conn_arm_full(int fd, struct ns_conn *c, monotime now, int ask)
{
	int64_t want;
	uint32_t src;

	ST(c->dir[NS_IN].prog_ns, ask ? ns_prog_timeout(fd, SO_RCVTIMEO) : 0);
	ST(c->dir[NS_IN].kernel_ns, LD(c->dir[NS_IN].prog_ns));
	ns_dir_want(c, NS_IN, LD(c->total_deadline) ? LD(c->total_deadline) - now : 0, &want, &src);
	ns_dir_sync(fd, c, NS_IN, want, src);
	if (LD(c->total_deadline)) {
		ST(c->dir[NS_OUT].prog_ns, ask ? ns_prog_timeout(fd, SO_SNDTIMEO) : 0);
		ST(c->dir[NS_OUT].kernel_ns, LD(c->dir[NS_OUT].prog_ns));
		ns_dir_want(c, NS_OUT, LD(c->total_deadline) - now, &want, &src);
		ns_dir_sync(fd, c, NS_OUT, want, src);
	}
}


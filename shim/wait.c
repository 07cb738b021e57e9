/* wait.c -- a connection's deadlines and injected faults as the waits
 * (wait_poll.c, wait_select.c, wait_epoll.c) meet them: the read clock
 * that starts with a wait for input, the nearest time a wait must wake,
 * a deadline fired inside a wait, and readiness seen. */
#include "wait.h"

#include <errno.h>

#include "connfail.h"
#include "outcome.h"
#include "real.h"
#include "timeo.h"

void ns_wait_start_clock(struct ns_conn *c, monotime now)
{
	ns_set_rd_wait(c, now);
}

monotime ns_wait_interest_faults(struct ns_conn *c, int want_in, int want_out, monotime now)
{
	monotime d = ns_wait_deadline(c, want_in, want_out, now), t = 0, until;
	int ev;

	if (LD(c->flags) & NS_C_CONNECTING) {
		t = c->fault.delay_until;       /* the real connect starts then */
	} else {
		int st = want_in && (LD(c->expired) & NS_ATTN_FAULT) ? ns_fault_wait(c, now, &until, &ev) : NS_FW_NONE;

		if (st == NS_FW_READY)
			t = now;
		else if (st == NS_FW_GATED)
			/* held with no end of its own (a stall): looked at again
			 * now and then, for a shutdown by another thread */
			t = until ? until : now + NS_STALL_LOOK_NS;
		/* a held request's output is let out then */
		if (want_out && out_gated(c, now) && (!t || LD(c->pace_until) < t))
			t = LD(c->pace_until);
	}
	return t && (!d || t < d) ? t : d;
}

int ns_wait_expire(struct ns_conn *c, int fd, int want_in, int want_out, monotime now)
{
	uint32_t f = __atomic_load_n(&c->flags, __ATOMIC_RELAXED), kind, none = NS_EXP_NONE;
	monotime d;

	if (unlikely(LD(c->expired) & NS_ATTN_FAULT) && (f & NS_C_CONNECTING) && fd >= 0 && ns_conn_of(fd) == c)
		ns_fault_delay_due(fd, c, now);
	kind = ns_exp_kind(c);
	if (kind)
		return (int)kind;
	d = ns_wait_deadline(c, want_in, want_out, now);
	if (!d || now < d)
		return 0;
	if (LD(c->total_deadline) && now >= LD(c->total_deadline))
		kind = NS_EXP_TOTAL;
	else
		kind = (f & NS_C_CONNECTING) ? NS_EXP_CONNECT : NS_EXP_READ;
	none = __atomic_load_n(&c->expired, __ATOMIC_ACQUIRE) & ~NS_EXP_MASK;   /* keeps NS_ATTN_* */
	if (__atomic_compare_exchange_n(&c->expired, &none, none | kind, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
		__atomic_fetch_or(&c->flags, NS_C_EXPIRED, __ATOMIC_RELEASE);
		if (kind == NS_EXP_CONNECT) {
			__atomic_fetch_or(&c->flags, NS_C_FAILED | NS_C_ERR_PENDING, __ATOMIC_RELAXED);
			if (fd >= 0 && ns_conn_of(fd) == c)
				ns_drop_attempt(fd);
		}
		ns_conn_failed(c, NS_OUT_TIMEOUT, ETIMEDOUT);
	}
	return (int)ns_exp_kind(c);
}

void ns_wait_settle_connect(int fd, struct ns_conn *c, int blocking)
{
	int saved = errno;

	while ((LD(c->expired) & NS_ATTN_FAULT) && (LD(c->flags) & NS_C_CONNECTING) && LD(c->fault.delay_until) &&
	       ns_conn_of(fd) == c) {
		monotime now = ns_now(), until;
		struct timespec ts;

		if (ns_wait_expire(c, fd, 1, 1, now) || !blocking)
			break;
		until = LD(c->fault.delay_until);
		if (!until || !(LD(c->flags) & NS_C_CONNECTING))
			break;
		/* a blocking call waits for the held connect as the kernel's
		 * would for its own: a look every few milliseconds (a place
		 * may free at any time), a signal only makes it look sooner */
		if (until > now + NS_SETTLE_TICK_NS)
			until = now + NS_SETTLE_TICK_NS;
		ts.tv_sec = (until - now) / 1000000000;
		ts.tv_nsec = (until - now) % 1000000000;
		REAL(ppoll)(NULL, 0, &ts, NULL);
	}
	errno = saved;
}

void ns_wait_ready(struct ns_conn *c, int in, int out, int err)
{
	if (in && LD(c->rd_wait_start))
		ns_set_rd_wait(c, 0);
	/* writable without an error: the connect completed. With an error the
	 * program reads it through SO_ERROR, which counts the failure. */
	if (out && !err && (__atomic_load_n(&c->flags, __ATOMIC_RELAXED) & NS_C_CONNECTING))
		ns_conn_connected(c);
}


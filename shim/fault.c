/* fault.c -- injected faults, inside the program: which connections get
 * which fault, and what the program then sees.
 *
 * Faults come from the shared table (shimctl inject: every process, from
 * its next connect), from NETSHIM_INJECT (shimrun --inject: this run) and
 * from the policy's `fault` key, in that order of precedence.
 *
 * The connect faults are made real by the kernel wherever it can make
 * them: a refused connect is a connect to a local socket that is bound
 * but not listening, a blackholed one a connect to a local listener whose
 * accept queue is full, so the program sees exactly what it would see of
 * the real fault (errno, SO_ERROR, poll/epoll readiness, kernel retries)
 * while nothing goes to the network. The data faults are the shim's: it
 * holds input back (latency, bandwidth, stall), ends the stream (close),
 * fails it (reset), or answers itself (status); the waits learn of them
 * through ns_fault_wait, as they learn of deadlines. */
#include "fault.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../policy/faultspec.h"
#include "config.h"
#include "connfail.h"
#include "faultcfg.h"
#include "outcome.h"
#include "real.h"
#include "settings.h"
#include "shape.h"
#include "timeo.h"


/* An injected `reset after 0` shows once the program has sent (a server
 * that reads the request and resets), or this long after the connect began
 * for a program that waits for the server to speak first. */
#define RESET_LAG_NS (50 * 1000000LL)

/**** the local targets that make connect faults real ****/

/* A hidden socket and its address, written whole by the thread that made
 * it and only then published (one pointer, compare-and-swap), so a thread
 * that loses the race to publish can never leave the published address
 * pointing at the port of the socket it then closes. The candidates are
 * static (a connect in a signal handler may make one: no malloc); each
 * thread takes its own by a counter, and a process that somehow used them
 * all passes such connects through. */
struct target {
	int fd;
	int filler;              /* blackhole: our connection that fills its queue; -1 */
	socklen_t len;
	struct sockaddr_storage sa;
};
#define TARGET_CANDIDATES 8
static struct target target_pool[2][2][TARGET_CANDIDATES];   /* [refuse/hole][v4/v6][candidate] */
static unsigned target_next[2][2];
static struct target *target_pub[2][2];
int ns_fault_targets;   /* atomic: 1 once a target was published (fault.h) */

/* Out of the program's way: the shim's own sockets live high. */
static int move_high(int fd)
{
	int hi = REAL(fcntl)(fd, F_DUPFD_CLOEXEC, 900);

	if (hi < 0)
		return fd;
	REAL(close)(fd);
	return hi;
}

static int loopback(int v6, struct sockaddr_storage *ss, socklen_t *len)
{
	memset(ss, 0, sizeof(*ss));
	if (v6) {
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;

		s6->sin6_family = AF_INET6;
		s6->sin6_addr = in6addr_loopback;
		*len = sizeof(*s6);
	} else {
		struct sockaddr_in *s4 = (struct sockaddr_in *)ss;

		s4->sin_family = AF_INET;
		s4->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		*len = sizeof(*s4);
	}
	return v6 ? AF_INET6 : AF_INET;
}

/* A local socket that refuses (bound, not listening), or one whose SYNs are
 * dropped (listening with backlog 0, its one place taken by our own
 * connection). Made once per family; a thread that loses the race to
 * publish closes its own and takes the winner's. Returns 0 and the
 * address, or -1. */
static int target(int kind, int v6, struct sockaddr_storage *out, socklen_t *outlen)
{
	int k = kind == NS_F_REFUSE ? 0 : 1;
	struct target *t = __atomic_load_n(&target_pub[k][v6], __ATOMIC_ACQUIRE), *mine, *none = NULL;
	struct sockaddr_storage ss;
	socklen_t l;
	unsigned n;
	int fd, filler = -1, fam, saved = errno;

	if (t)
		goto out_copy;
	n = __atomic_fetch_add(&target_next[k][v6], 1, __ATOMIC_RELAXED);
	if (n >= TARGET_CANDIDATES) {
		errno = EAGAIN;
		goto out_fail;
	}
	mine = &target_pool[k][v6][n];
	fam = loopback(v6, &ss, &l);
	fd = REAL(socket)(fam, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		goto out_fail;
	if (bind(fd, (struct sockaddr *)&ss, l) < 0 || getsockname(fd, (struct sockaddr *)&ss, &l) < 0)
		goto out_close;
	if (kind != NS_F_REFUSE) {
		if (listen(fd, 0) < 0)
			goto out_close;
		filler = REAL(socket)(fam, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (filler < 0 || REAL(connect)(filler, (struct sockaddr *)&ss, l) < 0)
			goto out_close;
		filler = move_high(filler);
	}
	mine->fd = move_high(fd);
	mine->filler = filler;
	mine->sa = ss;
	mine->len = l;
	if (__atomic_compare_exchange_n(&target_pub[k][v6], &none, mine, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
		t = mine;   /* the filler stays open for the life of the process: it keeps the queue full */
		__atomic_store_n(&ns_fault_targets, 1, __ATOMIC_RELEASE);
	} else {
		REAL(close)(mine->fd);
		if (filler >= 0)
			REAL(close)(filler);
		t = none;   /* the winner's, whole */
	}
out_copy:
	memcpy(out, &t->sa, sizeof(*out));
	*outlen = t->len;
	errno = saved;
	return 0;
out_close:
	REAL(close)(fd);
	if (filler >= 0)
		REAL(close)(filler);
out_fail:
	ns_log(NS_LOG_ERROR, "cannot make the local %s target for an injected fault: %s; passing the connect through",
	       kind == NS_F_REFUSE ? "refusing" : "blackhole", strerror(errno));
	errno = saved;
	return -1;
}

/* A v6 socket reaches the v4 target as ::ffff:127.0.0.1 when ::1 has none. */
static int target_for(int kind, int family, struct sockaddr_storage *to, socklen_t *tolen)
{
	if (family == AF_INET6 && target(kind, 1, to, tolen) == 0)
		return 0;
	if (target(kind, 0, to, tolen) < 0)
		return -1;
	if (family == AF_INET6) {
		struct sockaddr_in v4;
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)to;

		memcpy(&v4, to, sizeof(v4));
		memset(to, 0, sizeof(*to));
		s6->sin6_family = AF_INET6;
		s6->sin6_port = v4.sin_port;
		s6->sin6_addr.s6_addr[10] = 0xff;
		s6->sin6_addr.s6_addr[11] = 0xff;
		memcpy(&s6->sin6_addr.s6_addr[12], &v4.sin_addr, 4);
		*tolen = sizeof(*s6);
	}
	return 0;
}

int ns_fault_refusing_target(int family, struct sockaddr_storage *to, socklen_t *tolen)
{
	return target_for(NS_F_REFUSE, family, to, tolen);
}

/* Our socket at *slot is to be closed or replaced by the program (a loop
 * that closes every descriptor, a dup2 onto it): it moves to another
 * number first, so connects held at a blackhole stay held and its port
 * stays ours. With no number to move to, the target is forgotten and the
 * next fault makes a new one. */
static void keep_own(int k, int v6, int *slot)
{
	int fd = __atomic_load_n(slot, __ATOMIC_ACQUIRE), moved = REAL(fcntl)(fd, F_DUPFD_CLOEXEC, 900);

	if (moved < 0)
		moved = REAL(fcntl)(fd, F_DUPFD_CLOEXEC, 3);
	if (moved >= 0) {
		__atomic_store_n(slot, moved, __ATOMIC_RELEASE);
		NS_LOG(NS_LOG_DEBUG, "the program closes fd %d, the shim's own: moved to %d", fd, moved);
		return;
	}
	__atomic_store_n(&target_pub[k][v6], NULL, __ATOMIC_RELEASE);
	NS_LOG(NS_LOG_WARN, "the program closes fd %d, the shim's fault target, and no descriptor is free to keep "
	       "it: a new one is made at the next fault", fd);
}

void ns_fault_keep_own(int fd)
{
	int saved = errno;

	for (int k = 0; k < 2; k++)
		for (int v6 = 0; v6 < 2; v6++) {
			struct target *t = __atomic_load_n(&target_pub[k][v6], __ATOMIC_ACQUIRE);

			if (t && __atomic_load_n(&t->fd, __ATOMIC_ACQUIRE) == fd)
				keep_own(k, v6, &t->fd);
			if (t && t->filler >= 0 && __atomic_load_n(&t->filler, __ATOMIC_ACQUIRE) == fd)
				keep_own(k, v6, &t->filler);
		}
	errno = saved;
}

int ns_fault_own_fds(int *out, int max)
{
	int n = 0;

	for (int k = 0; k < 2; k++) {
		for (int v6 = 0; v6 < 2; v6++) {
			const struct target *t = __atomic_load_n(&target_pub[k][v6], __ATOMIC_ACQUIRE);

			if (t && n < max)
				out[n++] = t->fd;
			if (t && t->filler >= 0 && n < max)
				out[n++] = t->filler;
		}
	}
	return n;
}

/**** connect ****/

static int any_data_fault(const struct ns_cfault *cf)
{
	return LD(cf->latency_ns) || LD(cf->rate) || LD(cf->frag) || LD(cf->end_kind) || LD(cf->tlsfail);
}

/* Set the data faults of f that mask picks on cf (the first that ends the
 * stream wins). open: the connection is open already (inject --existing):
 * refuse and unreachable end it as a reset, blackhole as a stall. Returns
 * whether any was set. */
static int data_faults(struct ns_cfault *cf, const struct ns_faults *f, uint32_t mask, int open, monotime now)
{
	int got = 0;

	for (uint32_t i = 0; i < f->n && i < NS_FAULTS_MAX; i++) {
		const struct ns_fault *x = &f->f[i];
		uint32_t kind = x->kind;

		if (!(mask & (1u << i)))
			continue;
		if (open && kind == NS_F_TLSFAIL)
			continue;   /* an open connection's handshake is over */
		if (open && (kind == NS_F_REFUSE || kind == NS_F_UNREACHABLE))
			kind = NS_F_RESET;
		else if (open && kind == NS_F_BLACKHOLE)
			kind = NS_F_STALL;
		else if (ns_fault_phase(kind) != NS_FP_DATA)
			continue;
		got = 1;
		switch (kind) {
		case NS_F_LATENCY:
			ST(cf->latency_ns, (int64_t)x->arg * 1000000);
			ST(cf->jitter_ns, (int64_t)x->jitter * 1000000);
			break;
		case NS_F_BANDWIDTH:
			ST(cf->rate, x->arg);
			break;
		case NS_F_FRAGMENT:
			ST(cf->frag, x->arg);
			break;
		case NS_F_TLSFAIL:
			ST(cf->tlsfail, 1u);
			break;
		default:
			if (!LD(cf->end_kind)) {
				ST(cf->end_kind, kind);
				ST(cf->after, kind == x->kind ? x->after : 0);
				ST(cf->status, (uint32_t)x->arg);
				/* as a server that resets when the request comes:
				 * SO_ERROR after the connect is still 0 */
				if (kind == NS_F_RESET && !LD(cf->after))
					ST(cf->end_at, now + RESET_LAG_NS);
			}
			break;
		}
	}
	return got;
}

int ns_fault_at_connect(struct ns_conn *c, const struct ns_dest *d, const struct ns_settings *set,
			int slot, const struct sockaddr *sa, socklen_t len,
			struct sockaddr_storage *to, socklen_t *tolen)
{
	struct ns_cfault *cf = &c->fault;
	struct ns_faults f;
	uint32_t cm, dm;
	int rt, r = NS_FC_NONE, got = 0;
	monotime now = ns_now();

	if (!ns_fault_list_for(d, &set->fault, now, &f, &rt))
		return NS_FC_NONE;
	dm = ns_fault_sched(&f, slot);   /* first N, every N */
	cm = ns_fault_choose(&f, NS_FP_CONNECT) & dm;
	dm &= ns_fault_choose(&f, NS_FP_DATA);
	memset(cf, 0, sizeof(*cf));
	ST(cf->rt_idx, rt);
	ST(cf->rt_order, ns_fault_rt_order_of(rt));
	for (uint32_t i = 0; i < f.n && !got; i++) {
		const struct ns_fault *x = &f.f[i];

		if (!(cm & (1u << i)))
			continue;
		got = 1;
		switch (x->kind) {
		case NS_F_UNREACHABLE:
			errno = EHOSTUNREACH;
			r = NS_FC_FAIL;
			break;
		case NS_F_REFUSE:
		case NS_F_BLACKHOLE:
			r = target_for((int)x->kind, sa->sa_family, to, tolen) == 0 ? NS_FC_TARGET : NS_FC_NONE;
			break;
		case NS_F_DELAY:
			if (len > (socklen_t)sizeof(cf->real_sa))
				break;
			memcpy(&cf->real_sa, sa, len);
			ST(cf->real_len, len);
			ST(cf->delay_until, now + (int64_t)x->arg * 1000000);
			r = NS_FC_TARGET;
			if (!(__atomic_load_n(&c->flags, __ATOMIC_RELAXED) & NS_C_NONBLOCK))
				break;   /* a blocking connect waits in ns_connect itself */
			if (target_for(NS_F_BLACKHOLE, sa->sa_family, to, tolen) < 0)
				r = NS_FC_NONE;
			break;
		}
	}
	/* the data faults, when the connect itself is left alone (or delayed) */
	if (r != NS_FC_FAIL && !(r == NS_FC_TARGET && !LD(cf->delay_until)))
		got |= data_faults(cf, &f, dm, 0, now);
	if (!got)
		return NS_FC_NONE;
	if (slot >= 0 && ns_tbl())
		ns_table_add_injected(ns_tbl(), slot);
	if (rt >= 0 && ns_tbl())
		ns_table_fault_applied(ns_tbl(), (uint32_t)rt);
	NS_LOG(NS_LOG_INFO, "%s: injected fault (connect %s%s)", c->key[0] ? c->key : "?",
	       r == NS_FC_NONE ? "as asked" : r == NS_FC_FAIL ? "fails" : LD(cf->delay_until) ? "delayed" : "diverted",
	       any_data_fault(cf) ? ", data faults" : "");
	if (any_data_fault(cf) || LD(cf->delay_until)) {
		__atomic_fetch_or(&c->flags, NS_C_FAULT, __ATOMIC_RELAXED);
		__atomic_fetch_or(&c->expired, NS_ATTN_FAULT, __ATOMIC_RELEASE);
	}
	return r;
}

void ns_fault_existing(int fd, struct ns_conn *c)
{
	struct ns_cfault *cf = &c->fault;
	struct ns_faults f;
	struct ns_dest d;
	char key[NS_KEY_MAX];
	uint32_t order = 0, mask, fp = LD(c->peer_fp);
	monotime now = ns_now();
	int rt, saved = errno;

	(void)fd;
	__atomic_fetch_and(&c->flags, ~NS_C_RTCHECK, __ATOMIC_RELAXED);
	ns_conn_key(c, key);
	if (!key[0] || ns_dest_parse(key, &d) < 0)
		goto out;
	if (!d.family && fp >> 16) {
		/* a named connection: its address too, for patterns by address */
		d.family = (int)(fp >> 16);
		uint64_t pa[2] = { LD(c->peer_a[0]), LD(c->peer_a[1]) };

		memcpy(d.addr, pa, sizeof(d.addr));
	}
	rt = ns_fault_rt_existing(&d, LD(c->start), now, &f, &order);
	if (rt < 0 || ((LD(c->expired) & NS_ATTN_FAULT) && LD(cf->rt_idx) == rt && LD(cf->rt_order) == order))
		goto out;   /* none, or this one is in force already */
	mask = ns_fault_sched(&f, LD(c->slot)) &
	       (ns_fault_choose(&f, NS_FP_CONNECT) | ns_fault_choose(&f, NS_FP_DATA));
	if (!mask)
		goto out;
	/* the faults it had are replaced, and count from now */
	ST(cf->end_kind, 0u);
	ST(cf->latency_ns, 0);
	ST(cf->jitter_ns, 0);
	ST(cf->rate, 0u);
	ST(cf->frag, 0u);
	ST(cf->tlsfail, 0u);
	ST(cf->got, 0u);
	ST(cf->awaiting, 0u);
	ST(cf->sent, 0u);
	ST(cf->synth_off, 0u);
	ST(cf->end_done, 0u);
	ST(cf->end_at, 0);
	ST(cf->bw_start, 0);
	ST(cf->delay_until, 0);
	ST(cf->shut_rd, 0u);   /* (what a record's last life left) */
	if (!data_faults(cf, &f, mask, 1, now))
		goto out;
	ST(cf->rt_idx, rt);
	ST(cf->rt_order, order);
	if (LD(c->slot) >= 0 && ns_tbl())
		ns_table_add_injected(ns_tbl(), LD(c->slot));
	if (ns_tbl())
		ns_table_fault_applied(ns_tbl(), (uint32_t)rt);
	__atomic_fetch_or(&c->flags, NS_C_FAULT, __ATOMIC_RELAXED);
	__atomic_fetch_or(&c->expired, NS_ATTN_FAULT, __ATOMIC_RELEASE);
	NS_LOG(NS_LOG_INFO, "%s: injected fault (on the open connection)", key);
out:
	errno = saved;
}

int ns_fault_hold_connect(struct ns_conn *c, const struct sockaddr *sa, socklen_t len, monotime until,
			  struct sockaddr_storage *to, socklen_t *tolen)
{
	struct ns_cfault *cf = &c->fault;

	if (len > (socklen_t)sizeof(cf->real_sa) || target_for(NS_F_BLACKHOLE, sa->sa_family, to, tolen) < 0)
		return -1;
	/* nothing injected: what a record's last life left here must not act
	 * (the data path reads these while NS_ATTN_FAULT is set) */
	memset(cf, 0, sizeof(*cf));
	ST(cf->rt_idx, -1);
	memcpy(&cf->real_sa, sa, len);
	ST(cf->real_len, len);
	ST(cf->delay_until, until);
	__atomic_fetch_or(&c->expired, NS_ATTN_FAULT, __ATOMIC_RELEASE);
	return 0;
}

/* A queued connect (shape.c) whose queue_timeout passed: refused by the
 * kernel, as a throttled connect is (the local target that refuses), with
 * no outcome counted. */
static void throttle_held(int fd, struct ns_conn *c)
{
	struct sockaddr_storage to;
	socklen_t tolen;
	char key[NS_KEY_MAX];

	ns_conn_key(c, key);
	ns_shape_throttled(LD(c->slot), key, ns_conn_set(c));
	__atomic_store_n(&c->outcome, 1, __ATOMIC_RELEASE);   /* throttled: no failure */
	__atomic_fetch_or(&c->flags, NS_C_THROTTLED, __ATOMIC_RELAXED);
	ns_drop_attempt(fd);
	if (ns_fault_refusing_target(c->fault.real_sa.ss_family, &to, &tolen) == 0)
		REAL(connect)(fd, (struct sockaddr *)&to, tolen);
}

int ns_fault_delay_due(int fd, struct ns_conn *c, monotime now)
{
	struct ns_cfault *cf = &c->fault;
	monotime due = LD(cf->delay_until);
	int saved = errno, queued;

	/* the thread that takes delay_until (to 0) acts; the others leave it */
	if (!(__atomic_load_n(&c->expired, __ATOMIC_ACQUIRE) & NS_ATTN_FAULT) || !due || now < due ||
	    !__atomic_compare_exchange_n(&cf->delay_until, &due, 0, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
		return 0;
	queued = (LD(c->flags) & NS_C_QUEUED) != 0;
	if (queued) {
		monotime next;
		int k = ns_shape_due(c, now, &next);

		if (k == 0) {
			ST(cf->delay_until, next);   /* not yet: look again */
			return 0;
		}
		if (k < 0) {
			throttle_held(fd, c);
			errno = saved;
			return 1;
		}
	}
	/* leave the target that never answers; connect for real, from now */
	ns_drop_attempt(fd);
	REAL(connect)(fd, (struct sockaddr *)&cf->real_sa, LD(cf->real_len));
	if (queued && !any_data_fault(cf)) {
		/* nothing injected: the data path is the healthy one again */
		__atomic_fetch_and(&c->expired, ~NS_ATTN_FAULT, __ATOMIC_RELEASE);
		__atomic_fetch_and(&c->flags, ~NS_C_FAULT, __ATOMIC_RELAXED);
	}
	errno = saved;
	return 1;
}

/**** lookups ****/

/**** the data path ****/

static const char *reason(uint32_t code)
{
	switch (code) {
	case 200: return "OK";
	case 400: return "Bad Request";
	case 401: return "Unauthorized";
	case 403: return "Forbidden";
	case 404: return "Not Found";
	case 408: return "Request Timeout";
	case 429: return "Too Many Requests";
	case 500: return "Internal Server Error";
	case 502: return "Bad Gateway";
	case 503: return "Service Unavailable";
	case 504: return "Gateway Timeout";
	default: return "Injected";
	}
}

/* The made-up answer of `status CODE`: a minimal HTTP/1.1 response with
 * an empty body, then end of stream. */
static size_t synth(const struct ns_cfault *cf, char *buf, size_t len)
{
	char ra[40] = "";
	int n;

	if (LD(cf->after))   /* status CODE retry-after N: seconds + 1 */
		snprintf(ra, sizeof(ra), "Retry-After: %llu\r\n", (unsigned long long)(LD(cf->after) - 1));
	n = snprintf(buf, len, "HTTP/1.1 %u %s\r\n%sContent-Length: 0\r\nConnection: close\r\n\r\n",
		     LD(cf->status), reason(LD(cf->status)), ra);

	return n < 0 ? 0 : (size_t)n >= len ? len - 1 : (size_t)n;
}

/* What input may do now: NS_FW_NONE (flow, at most *allow bytes),
 * NS_FW_GATED (held until *until, 0 = for ever) or NS_FW_READY (*ev: the
 * end or the answer is there). */
static int in_state(struct ns_cfault *cf, monotime now, size_t *allow, monotime *until, int *ev)
{
	uint64_t lim = UINT64_MAX;

	*until = 0;
	*ev = 0;
	if (__atomic_load_n(&cf->shut_rd, __ATOMIC_ACQUIRE)) {
		*ev = NS_FWE_RDHUP;   /* the program shut its reading: the end of the stream, now */
		return NS_FW_READY;
	}
	if (LD(cf->end_kind) == NS_F_STATUS) {
		char b[160];

		if (!LD(cf->sent))
			return NS_FW_GATED;   /* no answer before the request */
		if (LD(cf->synth_off) >= synth(cf, b, sizeof(b)))
			*ev = NS_FWE_RDHUP;
		return NS_FW_READY;
	}
	if (LD(cf->end_kind) && LD(cf->got) >= LD(cf->after)) {
		if (LD(cf->end_kind) == NS_F_STALL)
			return NS_FW_GATED;
		if (LD(cf->end_at) && now < LD(cf->end_at) && !LD(cf->sent)) {
			*until = LD(cf->end_at);
			return NS_FW_GATED;
		}
		*ev = LD(cf->end_kind) == NS_F_RESET && !LD(cf->end_done) ? NS_FWE_ERR | NS_FWE_HUP | NS_FWE_RDHUP : NS_FWE_RDHUP;
		return NS_FW_READY;
	}
	if (LD(cf->end_kind))
		lim = LD(cf->after) - LD(cf->got);
	/* awaiting, resp_due and sent are written by the sending thread
	 * (ns_fault_post, ns_fault_pre) while another may read here */
	if (LD(cf->latency_ns) && LD(cf->awaiting) && now < LD(cf->resp_due)) {
		*until = LD(cf->resp_due);
		return NS_FW_GATED;
	}
	if (LD(cf->rate)) {
		uint64_t burst = LD(cf->rate) / 20 ? LD(cf->rate) / 20 : 1, ok, got = LD(cf->got);
		monotime start = LD(cf->bw_start), none = 0;

		/* got, bw_start (and the others here) may be touched by two
		 * threads reading one socket: atomics, the first start kept */
		if (!start && !__atomic_compare_exchange_n(&cf->bw_start, &none, now, 0, __ATOMIC_RELAXED,
							   __ATOMIC_RELAXED))
			start = none;
		else if (!start)
			start = now;
		ok = burst + (uint64_t)((__int128)(now - start) * LD(cf->rate) / 1000000000);
		if (ok <= got) {
			*until = start + (monotime)((__int128)(got + 1 - burst) * 1000000000 / LD(cf->rate)) + 1;
			return NS_FW_GATED;
		}
		if (ok - got < lim)
			lim = ok - got;
	}
	if (LD(cf->frag) && LD(cf->frag) < lim)
		lim = LD(cf->frag);   /* fragment: short reads */
	*allow = lim > SIZE_MAX ? SIZE_MAX : (size_t)lim;
	return NS_FW_NONE;
}

int ns_fault_wait(struct ns_conn *c, monotime now, monotime *until, int *ev)
{
	size_t allow;

	return in_state(&c->fault, now, &allow, until, ev);
}

/* The program shut fd's reading (shutdown SHUT_RD or SHUT_RDWR) rather
 * than the peer closing: a local shutdown leaves the connection
 * established (or in FIN_WAIT after SHUT_RDWR); the peer's FIN moves it to
 * CLOSE_WAIT. */
static int shut_here(int fd)
{
	struct tcp_info ti;
	socklen_t l = sizeof(ti);
	int saved = errno, r;

	r = REAL(getsockopt)(fd, IPPROTO_TCP, TCP_INFO, &ti, &l) == 0 &&
	    (ti.tcpi_state == TCP_ESTABLISHED || ti.tcpi_state == TCP_FIN_WAIT1 || ti.tcpi_state == TCP_FIN_WAIT2);
	errno = saved;
	return r;
}

/* A blocking read held back: wait like the kernel would, until the input
 * is let through or a deadline passes (the read deadline counts from this
 * call, as the kernel's would). A shutdown() of its reading by the program
 * (a watchdog thread's way to end a read that hangs) ends the wait as it
 * ends a real read from a silent server: at once, at the end of the
 * stream; the socket is watched for that alone (POLLRDHUP), so the input
 * the fault holds back never wakes it. Returns 0 to go on, 1 for the end
 * of the stream, or -1 with errno. */
#define SHUT_LOOK_NS (50 * 1000000L)

static int hold(int fd, struct ns_conn *c, monotime until)
{
	struct pollfd pfd = { .fd = fd, .events = POLLRDHUP };
	int watch = fd >= 0;
	monotime start = ns_now(), limit = 0;
	int64_t prog = LD(c->dir[NS_IN].prog_ns), rt = LD(c->read_timeout_ns);
	monotime total = LD(c->total_deadline);
	int which = 0;   /* 1 ours, 2 the program's */

	if (rt && (LD(c->flags) & NS_C_ENFORCE)) {
		limit = start + rt;
		which = 1;
	}
	if (total && (!limit || total < limit)) {
		limit = total;
		which = 1;
	}
	if (prog && (!limit || start + prog <= limit)) {
		limit = start + prog;
		which = 2;
	}
	for (;;) {
		monotime now = ns_now(), end = until ? until : limit;
		struct timespec ts, *tsp = NULL;

		if (until && limit && limit < until)
			end = limit;
		if (end && now >= end) {
			if (until && now >= until && (!limit || until <= limit))
				return 0;
			if (which == 2) {
				errno = EAGAIN;
				return -1;
			}
			ns_conn_failed(c, NS_OUT_TIMEOUT, ETIMEDOUT);
			errno = ETIMEDOUT;
			return -1;
		}
		if (end) {
			ts.tv_sec = (end - now) / 1000000000;
			ts.tv_nsec = (end - now) % 1000000000;
			tsp = &ts;
		}
		if (__atomic_load_n(&c->fault.shut_rd, __ATOMIC_ACQUIRE))
			return 1;   /* shut by the program (shutdown, on any thread) */
		if (!watch && (!end || end - now > SHUT_LOOK_NS)) {
			/* the socket cannot tell of a shutdown any more (the
			 * real peer closed): look for one this often */
			ts.tv_sec = 0;
			ts.tv_nsec = SHUT_LOOK_NS;
			tsp = &ts;
		}
		pfd.revents = 0;
		if (REAL(ppoll)(watch ? &pfd : NULL, watch ? 1 : 0, tsp, NULL) < 0) {
			if (errno == EINTR)
				return -1;
			watch = 0;
		} else if (watch && pfd.revents) {
			if (shut_here(fd))
				return 1;
			watch = 0;   /* the real peer closed: the fault hides it; the clock alone from here */
		}
	}
}

ssize_t ns_fault_pre(int fd, struct ns_conn *c, int d, int flags, void *buf, size_t n, size_t *allow)
{
	struct ns_cfault *cf = &c->fault;
	int nonblock = (LD(c->flags) & NS_C_NONBLOCK) || (flags & MSG_DONTWAIT);

	*allow = n;
	if (d == NS_OUT) {
		if (LD(cf->end_kind) == NS_F_RESET && LD(cf->end_at))
			ST(cf->sent, 1u);   /* the request is out: the reset may come */
		if (LD(cf->end_kind) == NS_F_STATUS) {
			/* the request is swallowed: the server never sees it */
			ST(cf->sent, 1u);
			return (ssize_t)n;
		}
		return NS_FAULT_GO;
	}
	for (;;) {
		monotime now = ns_now(), until;
		int ev, st = in_state(cf, now, allow, &until, &ev);
		char b[160];

		if (st == NS_FW_NONE) {
			if (*allow > n)
				*allow = n;
			return NS_FAULT_GO;
		}
		if (st == NS_FW_READY) {
			if (__atomic_load_n(&cf->shut_rd, __ATOMIC_ACQUIRE))
				return 0;   /* shut by the program: the end of the stream */
			if (LD(cf->end_kind) == NS_F_STATUS && !(ev & NS_FWE_RDHUP)) {
				size_t off = LD(cf->synth_off), len = synth(cf, b, sizeof(b)), k = off < len ? len - off : 0;

				if (!buf || n == 0)
					return 0;
				if (k > n)
					k = n;
				memcpy(buf, b + off, k);
				if (!(flags & MSG_PEEK))
					__atomic_fetch_add(&cf->synth_off, (uint32_t)k, __ATOMIC_RELAXED);
				return (ssize_t)k;
			}
			if (LD(cf->end_kind) == NS_F_RESET && !__atomic_exchange_n(&cf->end_done, 1u, __ATOMIC_RELAXED)) {
				errno = ECONNRESET;
				return -1;
			}
			return 0;   /* end of stream */
		}
		/* held back */
		if (nonblock) {
			errno = EAGAIN;
			return -1;
		}
		switch (hold(fd, c, until)) {
		case -1:
			return -1;
		case 1:
			return 0;   /* the program shut its reading: end of stream */
		}
	}
}

int ns_fault_so_error(struct ns_conn *c)
{
	struct ns_cfault *cf = &c->fault;

	if (LD(cf->end_kind) != NS_F_RESET || LD(cf->got) < LD(cf->after) || LD(cf->end_done) ||
	    (LD(c->flags) & NS_C_CONNECTING && LD(cf->delay_until)) || (LD(cf->end_at) && !LD(cf->sent) && ns_now() < LD(cf->end_at)))
		return 0;
	if (__atomic_exchange_n(&cf->end_done, 1u, __ATOMIC_RELAXED))
		return 0;   /* another thread told it */
	ns_conn_failed(c, NS_OUT_FAILURE, ECONNRESET);
	return 1;
}

void ns_fault_post(struct ns_conn *c, int d, ssize_t r)
{
	struct ns_cfault *cf = &c->fault;

	if (d == NS_IN) {
		__atomic_fetch_add(&cf->got, (uint64_t)r, __ATOMIC_RELAXED);
		ST(cf->awaiting, 0u);
		return;
	}
	if (LD(cf->latency_ns) && !LD(cf->awaiting)) {
		int64_t lat = LD(cf->latency_ns) + (LD(cf->jitter_ns) ? ns_fault_jitter(LD(cf->jitter_ns)) : 0);

		ST(cf->resp_due, ns_now() + (lat > 0 ? lat : 0));   /* before awaiting: a reader that sees it finds the time */
		ST(cf->awaiting, 1u);
	}
}


/* govern.c -- the seccomp engine's decisions: each connect of a program
 * LD_PRELOAD cannot reach, and the connection after it, answered from the
 * same breaker table and policy as the preload library, under the same key
 * (the address and port: this engine sees no host names).
 *
 * A connect: an open breaker, a cooldown, a retry beyond retry_budget, a
 * refusal of the adaptive throttle are ECONNREFUSED at once with nothing
 * sent. max_connections' places (under max_connections = auto, as many as
 * the shared limit allows) and
 * rate's tokens are taken in the table for the program (holder: shimrun,
 * so preloaded processes and this one share one cap and one bucket); a
 * connect that finds none is held (its system call does not return) until
 * one is free or due, or refused (throttled) after queue_timeout. Then
 * shimrun makes the connect itself on a copy of the program's socket
 * (pidfd_getfd), with connect_timeout as its TCP_USER_TIMEOUT when it is
 * not decided at once, so that the kernel ends it with ETIMEDOUT; a
 * blocking program is answered with the result, a non-blocking one at once
 * with EINPROGRESS (it reads the result its own way: shimrun never reads
 * SO_ERROR for it).
 *
 * The connection: shimrun keeps no copy of it (one would hold it open past the
 * program's close), but asks the kernel about it by its two ends
 * (sockwatch.c): when the program closed it (its place is given back), when it
 * got its first bytes (its success; a server's reset or close before any, seen
 * while the program still holds it, is a failure), and whether a request went
 * out that got nothing back. One that sent and got nothing for read_timeout,
 * or that outlived total_timeout, is reset: the program gets an error, never
 * an end of data, and a timeout is counted (outcome unknown: the request was
 * sent). It is looked at when a deadline could next fall due (the last send
 * plus read_timeout, exactly, once a request is out; else read_timeout later),
 * and every 20 ms while someone waits for its place. What it cannot see:
 * bytes, HTTP status, TLS, a server that stalls after its first bytes, a
 * protocol where the server speaks first. */
#include "govern.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "../../policy/breaker.h"
#include "../../policy/destaddr.h"
#include "../../policy/policy.h"
#include "../../policy/polimage.h"
#include "../../policy/table.h"
#include "../../policy/admit.h"
#include "govacct.h"
#include "gostat.h"
#include "govwait.h"
#include "sockwatch.h"

#define CONNS           NS_GOV_POLLED /* connects and connections governed at once */
#define PLACE_LOOK_MS   20            /* a connection whose place someone waits for is looked at this often */
#define IDLE_LOOK_MS    1000          /* ...one with no read deadline, to see it end */
#define WAITERS_LOOK_MS 100           /* whether anyone waits for a place shimrun holds is asked this often */
#define RECENT          256u          /* retry_budget: the last failure per destination */

enum { C_FREE, C_QUEUED, C_CONNECTING, C_OPEN };

struct conn {
	int state;
	int fd;          /* C_CONNECTING: shimrun's copy of the socket, else -1 */
	int pfd;         /* the program's descriptor */
	pid_t tid, tgid; /* the thread that connected, its process (0: not known yet) */
	int slot;
	struct ns_gwait w; /* the places it holds (max_connections', max_requests') */
	int blocking;      /* the program's socket blocks: its connect is answered when decided */
	int settled;       /* its success counted (its first bytes back) */
	int waits_place;   /* C_QUEUED: counted among the slot's waiters */
	int old_uto;       /* the socket's own TCP_USER_TIMEOUT (ms), */
	int uto_set;       /* ...replaced by the connect deadline (a connect not decided at once) */
	int fl;            /* its file status flags (O_NONBLOCK...) */
	int paced;         /* C_QUEUED: counted paced once */
	uint64_t id;       /* the notification (C_QUEUED, and a blocking C_CONNECTING) */
	uint64_t start_ms, queued_ms, queue_deadline_ms, next_ms, total_deadline_ms;
	socklen_t len;
	struct sockaddr_storage ss;
	struct ns_sockid sid;
	struct ns_settings set;
	uint32_t gen;    /* bumped at each use of the record: the connection's number */
	int shadow_slot; /* the shadow's breaker's slot for its outcomes, or -1 */
	struct ns_settings shadow_set;
};

struct ns_gov {
	ns_gov_answer_fn *answer;
	ns_gov_valid_fn *valid;
	void *ctx;
	struct ns_policy pol;
	struct ns_table t;
	int tbl_ok;
	int nl;          /* sock_diag, or -1: connections are not watched after their connect */
	uint32_t holder; /* shimrun's place holder word */
	int hi;          /* conns[0, hi) may be in use */
	int nconnecting, nqueued, nopen;
	int said_full, said_diag, said_fds, said_nocopy;
	int polled[NS_GOV_POLLED]; /* the connect each of ns_gov_pollfds' descriptors is */
	uint64_t rng;
	struct ns_admitter adm; /* its own state for the core's questions (policy/admit.h) */
	struct ns_gacct acct;   /* the core's accounting, as this engine lends it (govacct.c) */
	struct ns_gostat *go;   /* the Go programs hooked (gostat.c), or NULL */
	struct conn c[CONNS];
};

static int enforce(const struct conn *c)
{
	return c->set.mode == NS_MODE_ENFORCE;
}

/**** the table ****/

static void key_of(struct ns_gov *g, int slot, char *key, size_t len)
{
	char k[NS_KEY_MAX];

	ns_table_key_copy(&g->t, slot, k); /* (the key alone: no window counted) */
	if (k[0])
		snprintf(key, len, "%s", k);
	else
		snprintf(key, len, "slot %d", slot);
}

/* The process of c's thread (its events' pid). */
static pid_t tgid_of(struct conn *c)
{
	if (!c->tgid)
		c->tgid = ns_sw_tgid(c->tid);
	return c->tgid > 0 ? c->tgid : c->tid;
}

/* One outcome of c's destination (kind NS_OUT_*, err its errno; sent: a
 * request was out; else the connect failed, nothing sent), counted by the
 * core (policy/account.c) as the library counts its own. */
static void count(struct ns_gov *g, struct conn *c, int kind, int err, int sent, uint64_t now)
{
	struct ns_outcome o;
	struct ns_step st;

	memset(&o, 0, sizeof(o));
	o.kind = kind;
	o.err = err;
	o.at_connect = c->state == C_CONNECTING;
	o.sent = sent;
	o.trace = 0; /* (the program's stack is not shimrun's to walk) */
	o.now_ms = now;
	o.now_ns = now * 1000000;
	o.from_ns = o.conn_ns = c->start_ms * 1000000;
	o.conn = (uintptr_t)(c - g->c) << 6;
	o.conn_gen = c->gen;
	/* a hooked Go program's connection: its answers' statuses decide */
	if ((o.own = kind == NS_OUT_SUCCESS && g->go && ns_gostat_is_hooked(g->go, tgid_of(c))) &&
	    ns_gostat_own_add(g->go, tgid_of(c), c->slot, now))
		return;
	ns_gacct_outcome(&g->acct, c->slot, &c->set, &o, tgid_of(c), &c->shadow_set, c->shadow_slot, &st);
	if (kind != NS_OUT_SUCCESS)
		ns_admit_note_failure(&g->adm, c->slot, now);
}

void ns_gov_hooks(struct ns_gov *g, struct ns_gostat *go)
{
	g->go = go;
}

void ns_gov_status(struct ns_gov *g, const struct ns_dest *d, pid_t tgid, unsigned status, uint64_t latency_us,
		   const char *retry_after)
{
	uint64_t now = ns_gov_mono_us() / 1000;
	int slot = g->tbl_ok ? ns_gacct_status(&g->acct, &g->pol, d, tgid, status, latency_us, retry_after, now, g->go)
			     : -1;

	if (slot >= 0)
		ns_admit_note_failure(&g->adm, slot, now);
}

/* throttle = adaptive: this connect refused here (counted throttled, the
 * first of a minute said: policy/admit.c)? */
static int throttled(struct ns_gov *g, int slot, const struct ns_settings *set, const char *key, uint64_t now,
		     pid_t tid)
{
	return ns_admit_throttle(&ns_seccomp_engine, &g->adm, &g->t, slot, set, key, now, &g->rng,
				 (uint32_t)tid); /* (its thread: the engine's pid_of names its process) */
}

static void conn_free(struct ns_gov *g, struct conn *c)
{
	if (c->state == C_QUEUED) {
		g->nqueued--;
		if (c->waits_place)
			ns_table_place_waiting(&g->t, c->slot, -1);
	} else if (c->state == C_CONNECTING) {
		g->nconnecting--;
	} else if (c->state == C_OPEN) {
		g->nopen--;
	}
	ns_gw_release(&c->w, &g->t, c->slot, g->holder);
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
	c->waits_place = 0;
	c->state = C_FREE;
	while (g->hi > 0 && g->c[g->hi - 1].state == C_FREE)
		g->hi--;
}

static struct conn *conn_new(struct ns_gov *g)
{
	for (int i = 0; i < CONNS; i++)
		if (g->c[i].state == C_FREE) {
			if (i >= g->hi)
				g->hi = i + 1;
			g->c[i].fd = -1;
			ns_gw_init(&g->c[i].w);
			return &g->c[i];
		}
	return NULL;
}

/**** places and tokens ****/

static void look(struct ns_gov *g, struct conn *c, uint64_t now);

/* The engine's own part of the place question (policy/admit.c asks):
 * shimrun's connections of the destination are looked at (one the program
 * closed gives its place back), then the place is asked again. */
static int own_closed(void *ctx, int slot, uint32_t span, uint32_t holder)
{
	struct ns_gov *g = ctx;
	int freed = 0;

	(void)span, (void)holder;
	for (int i = 0; i < g->hi; i++)
		if (g->c[i].state == C_OPEN && g->c[i].slot == slot && g->c[i].w.place >= 0) {
			look(g, &g->c[i], ns_gov_mono_us() / 1000);
			freed |= g->c[i].state == C_FREE;
		}
	return freed ? NS_ADMIT_OWN_AGAIN : -1;
}

/* A place of c's destination: 1 taken, 0 none free. */
static int take_place(struct ns_gov *g, struct conn *c, uint64_t now)
{
	c->w.place = ns_admit_place(&ns_seccomp_engine, &g->adm, &g->t, c->slot, &c->set, g->holder, now, own_closed,
				    g);
	return c->w.place >= 0;
}

/* rate's token: 0 taken, else when one is due (CLOCK_MONOTONIC us). */
static uint64_t take_token(struct ns_gov *g, struct conn *c, uint64_t now_us)
{
	uint64_t tat, base;

	return ns_admit_token(&g->t, c->slot, &c->set, now_us, &g->rng, &tat, &base);
}

/**** the connect ****/

static void start_connect(struct ns_gov *g, struct conn *c, uint64_t now);

/* A connect the table admitted (and counted a call) that shimrun never
 * made: its call interrupted and made again (Go's preemption signal every
 * 10 ms), its process gone, no copy of its socket. Uncounted: a Go-only
 * run's abandoned dials were calls no engine made (and status said
 * "preload" for them). */
static void abandon(struct ns_gov *g, struct conn *c)
{
	if (c->state == C_QUEUED || (c->state == C_CONNECTING && c->fd < 0))
		ns_table_uncall(&g->t, c->slot);
	conn_free(g, c);
}

/* A held connect's turn: a place (when capped) and a token (when paced),
 * then the connect; still waiting: when to look again; queue_timeout
 * passed: throttled. */
static void try_turn(struct ns_gov *g, struct conn *c)
{
	uint64_t now_us = ns_gov_mono_us(), now = now_us / 1000, due;
	int wait;

	if (now > c->queued_ms && !g->valid(g->ctx, c->id)) {
		abandon(g, c); /* its call interrupted (and made again), or its process gone */
		return;
	}
	/* a place of max_connections, then (a connection is a request here)
	 * of max_requests, in the machine's order of waiting */
	if ((wait = c->set.max_connections && g->holder && c->w.place < 0 && !take_place(g, c, now)) ||
	    (c->set.max_requests && g->holder &&
	     !ns_gw_request(&c->w, &g->adm, &g->t, c->slot, &c->set, g->holder, now_us))) {
		if (now >= c->queue_deadline_ms) {
			char key[NS_KEY_MAX];

			key_of(g, c->slot, key, sizeof(key));
			(wait ? ns_admit_turned_away : ns_admit_request_turned_away)(
				&ns_seccomp_engine, &g->adm, &g->t, c->slot, &c->set, key, now, (uint32_t)tgid_of(c));
			g->answer(g->ctx, c->id, ECONNREFUSED, 0);
			conn_free(g, c);
			return;
		}
		if (wait != c->waits_place) { /* (counted among the place's waiters while it waits for one) */
			c->waits_place = wait;
			ns_table_place_waiting(&g->t, c->slot, wait ? 1 : -1);
		}
		c->next_ms = now + PLACE_LOOK_MS < c->queue_deadline_ms ? now + PLACE_LOOK_MS : c->queue_deadline_ms;
		return;
	}
	if (c->waits_place) {
		c->waits_place = 0;
		ns_table_place_waiting(&g->t, c->slot, -1);
	}
	if (c->set.rate_interval_us && (due = take_token(g, c, now_us)) != 0) {
		if (!c->paced)
			ns_table_paced(&g->t, c->slot);
		c->paced = 1;
		c->next_ms = (due + 999) / 1000;
		return;
	}
	if (now > c->queued_ms)
		ns_table_waited(&g->t, c->slot, now - c->queued_ms);
	g->nqueued--;
	start_connect(g, c, now);
}

int ns_gov_no_copy(struct ns_gov *g, pid_t tid, int err)
{
	struct rlimit rl;

	if (err == EMFILE || err == ENFILE) {
		/* shimrun's own descriptors ran out: refused, not let through
		 * without its deadline and count */
		if (!g->said_fds++) {
			if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
				rl.rlim_cur = 0;
			fprintf(stderr,
				"shimrun: out of descriptors (limit %llu): connects shimrun cannot take a copy of are "
				"refused with ENOBUFS until others end (raise the hard limit: ulimit -Hn)\n",
				(unsigned long long)rl.rlim_cur);
		}
		return ENOBUFS;
	}
	if ((err == EPERM || err == EACCES) && g->tbl_ok && g->t.hdr)
		__atomic_fetch_add(&g->t.hdr->ungoverned, 1, __ATOMIC_RELAXED); /* (status says it) */
	if ((err == EPERM || err == EACCES) && !g->said_nocopy++)
		fprintf(stderr,
			"shimrun: cannot act on pid %d (%s: a program that made itself non-dumpable, or runs as "
			"another user, under a shimrun without CAP_SYS_PTRACE): its connects go ungoverned, "
			"uncounted and without deadlines (said once)\n",
			(int)tid, strerror(err));
	return 0; /* (ESRCH, EBADF: the thread or the descriptor is gone; nothing to govern) */
}

void ns_gov_connect(struct ns_gov *g, uint64_t id, pid_t tid, int fd, const struct sockaddr_storage *ss, socklen_t len)
{
	struct ns_dest d;
	struct ns_settings set, shadow_set;
	char key[NS_KEY_MAX];
	uint64_t now = ns_gov_mono_us() / 1000;
	struct conn *c;
	int slot;

	if (ns_dest_from_sa((const struct sockaddr *)ss, len, &d) < 0 || !g->tbl_ok || !g->valid(g->ctx, id) ||
	    ns_dest_key(&d, key, sizeof(key)) < 0) {
		g->answer(g->ctx, id, 0, 1); /* not an inet connect, or nothing to count it in: the kernel's */
		return;
	}
	ns_policy_resolve(&g->pol, &d, &set, NULL);
	if (set.mode == NS_MODE_BYPASS || (slot = ns_table_find(&g->t, key, 1, now)) < 0) {
		g->answer(g->ctx, id, 0, 1);
		return;
	}
	/* (an open breaker, the fleet's hold, a cooldown: the table refuses) */
	if (ns_admit_breaker(&ns_seccomp_engine, &g->t, slot, &set, key, set.mode == NS_MODE_ENFORCE, now * 1000,
			     (uint32_t)tid) == NS_REJECT) {
		(void)ns_gacct_shadow_attempt(&g->acct, &d, key, now, &shadow_set);
		g->answer(g->ctx, id, ECONNREFUSED, 0); /* nothing sent */
		return;
	}
	if ((set.mode == NS_MODE_ENFORCE && (set.retry_budget_bp | set.retry_budget_min_mps) &&
	     ns_admit_retry(&g->adm, &g->t, slot, &set, now) < 0) ||
	    (set.mode == NS_MODE_ENFORCE && set.throttle && throttled(g, slot, &set, key, now, tid))) {
		g->answer(g->ctx, id, ECONNREFUSED, 0); /* nothing sent */
		return;
	}
	if (!(c = conn_new(g))) {
		if (!g->said_full++)
			fprintf(stderr, "shimrun: %d connections governed at once: later ones go uncounted\n", CONNS);
		ns_table_uncall(&g->t, slot);
		g->answer(g->ctx, id, 0, 1);
		return;
	}
	c->state = C_QUEUED;
	g->nqueued++;
	c->id = id;
	c->tid = tid;
	c->tgid = 0;
	c->pfd = fd;
	c->slot = slot;
	c->settled = 0;
	c->paced = 0;
	c->ss = *ss;
	c->len = len;
	c->set = set;
	c->gen++;
	c->shadow_slot = ns_gacct_shadow_attempt(&g->acct, &d, key, now, &c->shadow_set);
	c->queued_ms = now;
	c->queue_deadline_ms = now + set.queue_timeout_ms;
	if (set.mode == NS_MODE_ENFORCE &&
	    (((set.max_connections || set.max_requests) && g->holder) || set.rate_interval_us)) {
		try_turn(g, c); /* its turn now, or held */
		return;
	}
	g->nqueued--;
	start_connect(g, c, now);
}

/* The first look at a connection: when a deadline could first fall due
 * (a request sent at once is due read_timeout later), or sooner while
 * someone waits for its place. */
static void first_look(struct ns_gov *g, struct conn *c, uint64_t now)
{
	uint64_t rt = enforce(c) ? c->set.read_timeout_ms : 0;

	c->next_ms = now + (rt ? rt : IDLE_LOOK_MS);
	if (c->total_deadline_ms && c->total_deadline_ms < c->next_ms)
		c->next_ms = c->total_deadline_ms;
	if (ns_gw_wanted(&c->w, &g->t, c->slot) && now + PLACE_LOOK_MS < c->next_ms)
		c->next_ms = now + PLACE_LOOK_MS;
}

/* The program's socket as it was before shimrun's connect: before the
 * program is answered (a blocking program that found its socket
 * non-blocking would read EAGAIN). */
static void restore(struct conn *c)
{
	if (c->uto_set)
		(void)setsockopt(c->fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &c->old_uto, sizeof(c->old_uto));
	if (c->blocking)
		(void)fcntl(c->fd, F_SETFL, c->fl);
}

/* c's connect decided (err: 0 connected, an errno the destination's
 * failure, -1 the program's own error), its socket restored: counted (a
 * success only once the connection showed it, when it is watched). */
static void decided(struct ns_gov *g, struct conn *c, int err, uint64_t now)
{
	int watch;

	if (err < 0) { /* the program's own error (EISCONN, EALREADY...): no outcome */
		conn_free(g, c);
		return;
	}
	if (err) {
		count(g, c, err == ETIMEDOUT ? NS_OUT_TIMEOUT : NS_OUT_FAILURE, err, 0, now);
		conn_free(g, c);
		return;
	}
	ns_table_latency(&g->t, c->slot, 0, (now - c->start_ms) * 1000);
	watch = g->nl >= 0 &&
		(c->w.place >= 0 || c->w.rq >= 0 ||
		 (enforce(c) && (c->set.read_timeout_ms || c->set.total_timeout_ms)));
	if (!watch || ns_sw_id(c->fd, (const struct sockaddr *)&c->ss, c->len, &c->sid) < 0) {
		count(g, c, NS_OUT_SUCCESS, 0, 0, now);
		conn_free(g, c);
		return;
	}
	close(c->fd); /* from here the program's alone */
	c->fd = -1;
	g->nconnecting--;
	g->nopen++;
	c->state = C_OPEN;
	c->total_deadline_ms = enforce(c) && c->set.total_timeout_ms ? c->start_ms + c->set.total_timeout_ms : 0;
	first_look(g, c, now);
}

/* The errno of a connect that failed in the kernel, as an outcome: a
 * failure of the destination, or (-1) the program's own error. */
static int as_outcome(int e)
{
	return e == ECONNREFUSED || e == ENETUNREACH || e == EHOSTUNREACH || e == ETIMEDOUT || e == ECONNRESET ? e : -1;
}

static void settle_connect(struct ns_gov *g, struct conn *c, short revents, uint64_t now);

/* The connect, made by shimrun on its copy of the program's socket (one
 * socket: the program's is connecting), non-blocking. One not decided at
 * once gets the connect deadline as the socket's TCP_USER_TIMEOUT (read by
 * the kernel at each SYN's retransmission, the first a second on): the
 * kernel ends it with ETIMEDOUT. Loopback and a near peer answer within
 * the call, and pay no TCP_USER_TIMEOUT (three system calls fewer). A
 * blocking program's connect is answered when it is decided, with its
 * result; a non-blocking one's at once with EINPROGRESS. */
static void start_connect(struct ns_gov *g, struct conn *c, uint64_t now)
{
	socklen_t ol = sizeof(int);
	int uto = (int)(c->set.connect_timeout_ms > INT32_MAX ? INT32_MAX : c->set.connect_timeout_ms);
	struct pollfd p;
	int r, e;

	c->state = C_CONNECTING;
	g->nconnecting++;
	c->start_ms = now;
	c->fd = ns_sw_copy_fd(c->tid, 0, c->pfd);
	if (c->fd < 0) {
		int err = ns_gov_no_copy(g, c->tid, errno);

		g->answer(g->ctx, c->id, err, !err); /* (0: the kernel's, uncounted) */
		abandon(g, c);
		return;
	}
	c->tgid = ns_sw_tgid_of(c->tid); /* (its thread is alive now: an outcome after its end names it) */
	ns_table_seccomp_call(&g->t, c->slot);
	c->fl = fcntl(c->fd, F_GETFL);
	c->blocking = c->fl >= 0 && !(c->fl & O_NONBLOCK);
	c->old_uto = 0;
	c->uto_set = 0;
	if (c->blocking)
		(void)fcntl(c->fd, F_SETFL, c->fl | O_NONBLOCK);
	r = connect(c->fd, (const struct sockaddr *)&c->ss, c->len);
	e = r < 0 ? errno : 0;
	if (r < 0 && e == EINPROGRESS) {
		if (!c->blocking)
			g->answer(g->ctx, c->id, EINPROGRESS, 0);
		/* loopback and a near peer have often answered already: decided
		 * here, not a pass of the loop later */
		p.fd = c->fd;
		p.events = POLLOUT;
		if (poll(&p, 1, 0) == 1) {
			settle_connect(g, c, p.revents, now);
			return;
		}
		if (uto > 0 && enforce(c)) {
			(void)getsockopt(c->fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &c->old_uto, &ol);
			c->uto_set = setsockopt(c->fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &uto, sizeof(uto)) == 0;
		}
		return; /* watched from here */
	}
	/* decided at once: connected, or refused */
	restore(c);
	g->answer(g->ctx, c->id, e, 0);
	decided(g, c, e ? as_outcome(e) : 0, ns_gov_mono_us() / 1000);
}

/* A connect in progress whose socket polled revents: decided (answered,
 * for a blocking program, counted), or still connecting. */
static void settle_connect(struct ns_gov *g, struct conn *c, short revents, uint64_t now)
{
	struct sockaddr_storage peer;
	socklen_t pl = sizeof(peer);
	int err = 0;

	if (!(revents & (POLLOUT | POLLERR | POLLHUP)))
		return;
	restore(c);
	if (c->blocking) {
		/* shimrun's own connect: its result is the program's (writable
		 * with no error: connected, no SO_ERROR to read) */
		socklen_t l = sizeof(err);

		if ((revents & (POLLERR | POLLHUP)) && getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &l) < 0)
			err = errno;
		g->answer(g->ctx, c->id, err, 0);
		err = err ? as_outcome(err) : 0;
	} else if (getpeername(c->fd, (struct sockaddr *)&peer, &pl) < 0) {
		/* the program's to read (SO_ERROR): a timeout when it took
		 * the deadline, else refused */
		err = c->set.connect_timeout_ms && now - c->start_ms + 50 >= c->set.connect_timeout_ms ? ETIMEDOUT
												       : ECONNREFUSED;
	}
	decided(g, c, err, now);
}

/* A connect the kernel left undecided far past its deadline (it ends it
 * at TCP_USER_TIMEOUT): let go, answered ETIMEDOUT, uncounted. */
static void let_go_stale(struct ns_gov *g, uint64_t now)
{
	for (int i = 0; i < g->hi && g->nconnecting; i++) {
		struct conn *c = &g->c[i];

		if (c->state != C_CONNECTING || now - c->start_ms < c->set.connect_timeout_ms + 60000)
			continue;
		restore(c);
		if (c->blocking)
			g->answer(g->ctx, c->id, ETIMEDOUT, 0);
		decided(g, c, -1, now);
	}
}

/**** the connection ****/

/* A deadline passed: the connection reset, a timeout counted. */
static void expire(struct ns_gov *g, struct conn *c, const char *which, uint64_t ms, int sent, uint64_t now)
{
	char key[NS_KEY_MAX];

	if (!c->tgid)
		c->tgid = ns_sw_tgid(c->tid);
	if (ns_sw_reset(c->tid, c->tgid, c->pfd, &c->sid) < 0) {
		/* the descriptor moved where shimrun cannot find it: watched
		 * to its end, no longer cut */
		c->set.read_timeout_ms = c->total_deadline_ms = 0;
		return;
	}
	key_of(g, c->slot, key, sizeof(key));
	fprintf(stderr, "shimrun: %s: %s (%llu ms) passed%s: the connection is reset\n", key, which,
		(unsigned long long)ms, sent ? " with the request unanswered (outcome unknown)" : "");
	count(g, c, NS_OUT_TIMEOUT, ETIMEDOUT, sent, now);
	c->settled = 1;
	conn_free(g, c);
}

/* Ask the kernel about connection c: ended (the program closed it), its
 * first bytes back, a deadline passed; when to look again. */
static void look(struct ns_gov *g, struct conn *c, uint64_t now)
{
	struct ns_sockinfo in;
	uint64_t next, rt = enforce(c) ? c->set.read_timeout_ms : 0;
	int out;

	if (ns_sw_query(g->nl, &c->sid, &in) < 0) {
		if (!g->said_diag++)
			fprintf(stderr,
				"shimrun: sock_diag: %s: connections are no longer watched after their "
				"connect\n",
				strerror(errno));
		in.mine = 0;
	}
	if (!in.mine) {
		/* closed by the program (or its process ended); or, when the
		 * program still holds it, reset (the kernel unhashes a reset
		 * socket: sock_diag no longer finds it), seen when it is looked
		 * at before the program closes it */
		if (!c->settled && in.gone && ns_sw_held(c->tid, c->pfd, c->sid.inode))
			count(g, c, NS_OUT_FAILURE, ECONNRESET, in.bytes_sent != 0, now);
		else if (!c->settled)
			count(g, c, NS_OUT_SUCCESS, 0, 0, now);
		conn_free(g, c);
		return;
	}
	if (!c->settled && in.bytes_received) {
		c->settled = 1;
		count(g, c, NS_OUT_SUCCESS, 0, 0, now);
	} else if (!c->settled && in.state == 8 /* TCP_CLOSE_WAIT */ && in.bytes_sent) {
		/* the server closed it with the request unanswered (seen when it
		 * is looked at before the program closes it) */
		c->settled = 1;
		count(g, c, NS_OUT_FAILURE, 0, 1, now);
	}
	/* a request out: data sent since the last received (ms ago: less is
	 * later), on a connection the server has not ended */
	out = in.state == 1 /* TCP_ESTABLISHED */ && in.bytes_sent &&
		(!in.bytes_received || in.last_sent_ms < in.last_recv_ms);
	if (c->total_deadline_ms && now >= c->total_deadline_ms) {
		expire(g, c, "total_timeout", c->set.total_timeout_ms, out, now);
		return;
	}
	if (rt && out && in.last_sent_ms >= rt) {
		expire(g, c, "read_timeout", rt, 1, now);
		return;
	}
	/* the earliest a deadline can fall due: a request out now is due
	 * read_timeout after its send; one sent later, later still */
	next = now + (rt ? (out ? rt - in.last_sent_ms : rt) : IDLE_LOOK_MS);
	if (c->total_deadline_ms && c->total_deadline_ms < next)
		next = c->total_deadline_ms;
	if (ns_gw_wanted(&c->w, &g->t, c->slot) && now + PLACE_LOOK_MS < next)
		next = now + PLACE_LOOK_MS;
	c->next_ms = next;
}

/**** the loop ****/

int ns_gov_pollfds(struct ns_gov *g, struct pollfd *p, int max)
{
	int n = 0;

	if (max > NS_GOV_POLLED)
		max = NS_GOV_POLLED;
	for (int i = 0; i < g->hi && n < max && g->nconnecting; i++)
		if (g->c[i].state == C_CONNECTING) {
			g->polled[n] = i;
			p[n].fd = g->c[i].fd;
			p[n].events = POLLOUT;
			p[n++].revents = 0;
		}
	return n;
}

int ns_gov_timeout(struct ns_gov *g)
{
	uint64_t now = (ns_gov_mono_us() / 1000), first = UINT64_MAX;

	if (g->nconnecting)
		first = now + 1000; /* (let_go_stale) */
	for (int i = 0; i < g->hi && (g->nqueued || g->nopen); i++) {
		const struct conn *c = &g->c[i];

		if ((c->state == C_QUEUED || c->state == C_OPEN) && c->next_ms < first)
			first = c->next_ms;
		/* a place held: who waits for it is asked this often (run) */
		if (c->state == C_OPEN && (c->w.place >= 0 || c->w.rq >= 0) && now + WAITERS_LOOK_MS < first)
			first = now + WAITERS_LOOK_MS;
	}
	return first == UINT64_MAX ? -1 : first > now ? (int)(first - now < INT32_MAX ? first - now : INT32_MAX) : 0;
}

void ns_gov_run(struct ns_gov *g, const struct pollfd *p, int n)
{
	uint64_t now = ns_gov_mono_us() / 1000;

	for (int k = 0; k < n && g->nconnecting; k++) {
		struct conn *c = &g->c[g->polled[k]];

		if (p[k].revents && c->state == C_CONNECTING && c->fd == p[k].fd)
			settle_connect(g, c, p[k].revents, now);
	}
	if (g->nconnecting)
		let_go_stale(g, now);
	for (int i = 0; i < g->hi && (g->nqueued || g->nopen); i++) {
		struct conn *c = &g->c[i];

		/* someone (a preloaded process, on the slot's futex) began to
		 * wait for the place of a connection that may have ended since
		 * it was last looked at */
		if (c->state == C_OPEN && c->next_ms > now + PLACE_LOOK_MS && ns_gw_wanted(&c->w, &g->t, c->slot))
			c->next_ms = now + PLACE_LOOK_MS;
		if (c->state == C_OPEN && c->next_ms <= now)
			look(g, c, now);
		else if (c->state == C_QUEUED && c->next_ms <= now)
			try_turn(g, c);
	}
}

void ns_gov_finish(struct ns_gov *g)
{
	while (g->nconnecting) {
		struct pollfd p[NS_GOV_POLLED];
		int n = ns_gov_pollfds(g, p, NS_GOV_POLLED);

		(void)poll(p, (nfds_t)n, 100);
		ns_gov_run(g, p, n);
	}
	for (int i = 0; i < g->hi; i++) {
		struct conn *c = &g->c[i];

		if (c->state == C_OPEN)
			look(g, c, ns_gov_mono_us() / 1000); /* its process ended: the socket with it */
		if (c->state != C_FREE)
			abandon(g, c);
	}
}

struct ns_gov *ns_gov_new(const char *policy, const char *table, ns_gov_answer_fn *answer, ns_gov_valid_fn *valid,
			  void *ctx, char *why, size_t whylen)
{
	struct ns_gov *g = calloc(1, sizeof(*g));
	char err[8192], name[256];
	unsigned pid = (unsigned)getpid();
	int mapped;

	if (!g) {
		snprintf(why, whylen, "out of memory");
		return NULL;
	}
	if (policy && *policy ? ns_policy_load_shared(policy, &g->pol, err, sizeof(err), &mapped) != 0
			      : ns_policy_builtin(&g->pol) != 0) {
		snprintf(why, whylen, "the policy did not load");
		free(g);
		return NULL;
	}
	g->answer = answer;
	g->valid = valid;
	g->ctx = ctx;
	if (!table || !*table)
		table = getenv("NETSHIM_TABLE");
	if (table && *table)
		snprintf(name, sizeof(name), "%s", table);
	else
		ns_table_default_name(name, sizeof(name));
	g->tbl_ok = ns_table_open(name, 1, 0, 0, &g->t, err, sizeof(err)) == NS_TBL_OK;
	if (!g->tbl_ok)
		fprintf(stderr, "shimrun: table %s: %s; connects are not counted\n", name, err);
	else
		ns_gacct_init(&g->acct, &g->t, &g->pol);
	g->nl = ns_sw_open();
	if (g->nl < 0)
		fprintf(stderr,
			"shimrun: sock_diag: %s: connections are not watched after their connect (no read "
			"or total deadline, max_connections not kept)\n",
			strerror(errno));
	g->holder = pid <= NS_PLACE_PID_MAX && g->nl >= 0 ? ns_place_holder(pid, ns_proc_start_time(pid, NULL)) : 0;
	g->rng = ns_gov_mono_us() ^ pid;
	/* (a record is made ready when it is taken, conn_new: the 4096 of
	 * them, ~5 MB, were 1,300 pages touched at every start) */
	return g;
}

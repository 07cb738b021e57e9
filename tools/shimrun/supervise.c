/* supervise.c -- shimrun's second engine: a program LD_PRELOAD cannot reach
 * (statically linked, or Go, whose net package makes its own system calls)
 * runs under a seccomp filter that sends each of its connect() calls to
 * shimrun, its parent, by user notification (SECCOMP_RET_USER_NOTIF). No
 * privilege is needed: a process may filter itself, and its parent may read
 * its memory and take a copy of its descriptors (pidfd_getfd).
 *
 * Each connect to an inet address is answered from the same breaker table
 * and policy the preload library uses, under the same key (the address and
 * port: this engine sees no host names): an open breaker, a cooldown, is
 * ECONNREFUSED at once with nothing sent; otherwise the connect goes on in
 * the kernel (SECCOMP_USER_NOTIF_FLAG_CONTINUE) with TCP_USER_TIMEOUT set
 * to connect_timeout on the socket, so that the kernel itself ends it with
 * ETIMEDOUT, and shimrun watches a copy of the socket until the connect is
 * decided: connected is a success, and a failure is a connect timeout when
 * it took connect_timeout, else a refusal (shimrun never reads SO_ERROR,
 * which would take the error from the program). The socket's own
 * TCP_USER_TIMEOUT is put back then. Every other system call of the
 * program is not seen at all: no bytes, no HTTP status, no TLS.
 *
 * The children of the program inherit the filter and are governed too. If
 * shimrun dies, the kernel answers the filtered calls itself: a connect
 * then fails with ENOSYS, at once, never hangs. */
#include "supervise.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../../policy/policy.h"
#include "../../policy/table.h"

#ifndef SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV
#define SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV (1UL << 5)
#endif

static uint64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static uint64_t wall_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/**** the child's side ****/

/* connect() to the supervisor, everything else allowed; another
 * architecture's calls (x32, i386 through int 0x80) are killed, since
 * their numbers mean other calls. */
static int install_filter(unsigned flags)
{
	struct sock_filter f[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, 0x40000000u, 0, 1), /* x32 */
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_connect, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_USER_NOTIF),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog prog = { .len = sizeof(f) / sizeof(f[0]), .filter = f };

	return (int)syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER | flags, &prog);
}

/* In the child: the filter, its listener to the parent over sock, then
 * the program. A kernel that refuses the filter is said to the parent (an
 * errno in place of the descriptor) and the child ends. */
static void child(int sock, char **argv)
{
	int lfd, e;
	char tag = 'K'; /* K: killable waits; N: not (Go is told to keep its preemption signals) */
	struct msghdr m = { 0 };
	struct iovec iov = { &tag, 1 };
	union {
		struct cmsghdr h;
		char b[CMSG_SPACE(sizeof(int))];
	} cm;

	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) {
		e = errno;
		(void)!write(sock, &e, sizeof(e));
		_exit(127);
	}
	lfd = install_filter(SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV);
	if (lfd < 0 && errno == EINVAL) {
		/* before 5.19: a signal interrupts a notified connect, which Go's
		 * preemption (a signal every 10 ms) does all the time */
		lfd = install_filter(0);
		tag = 'N';
	}
	if (lfd < 0) {
		e = errno;
		(void)!write(sock, &e, sizeof(e));
		_exit(127);
	}
	if (tag == 'N')
		setenv("GODEBUG", "asyncpreemptoff=1", 0);
	m.msg_iov = &iov;
	m.msg_iovlen = 1;
	m.msg_control = cm.b;
	m.msg_controllen = sizeof(cm.b);
	cm.h.cmsg_level = SOL_SOCKET;
	cm.h.cmsg_type = SCM_RIGHTS;
	cm.h.cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(&cm.h), &lfd, sizeof(int));
	if (sendmsg(sock, &m, 0) < 0)
		_exit(127);
	close(lfd);
	/* wait for the parent to hold it: from here a connect has an answer */
	if (read(sock, &tag, 1) != 1)
		_exit(127);
	close(sock);
	execvp(argv[0], argv);
	e = errno;
	fprintf(stderr, "shimrun: %s: %s\n", argv[0], strerror(e));
	_exit(e == ENOENT ? 127 : 126);
}

/**** the supervisor ****/

/* A connect in progress, watched until it is decided. */
#define WATCHED 256
struct watch {
	int fd; /* shimrun's copy of the socket; -1 = a free place */
	int slot;
	int old_uto;  /* the socket's TCP_USER_TIMEOUT before (ms) */
	int blocking; /* the program's socket is blocking: shimrun answers its connect */
	uint64_t id;  /* ...the notification to answer then */
	uint64_t start_ms, timeout_ms;
	struct ns_settings set;
};

struct sup {
	int lfd;
	struct ns_policy pol;
	struct ns_table t;
	int tbl_ok;
	struct watch w[WATCHED];
	int nwatch;
	unsigned long calls, refused;
};

static void respond(struct sup *s, uint64_t id, int err, int cont)
{
	struct seccomp_notif_resp r = { .id = id };

	if (cont)
		r.flags = SECCOMP_USER_NOTIF_FLAG_CONTINUE;
	else
		r.error = -err;
	/* ENOENT: the call was interrupted, or its process died: nothing to say */
	(void)ioctl(s->lfd, SECCOMP_IOCTL_NOTIF_SEND, &r);
}

/* The sockaddr the child passed, copied out of its memory: 0, or -1. */
static int read_addr(pid_t pid, uint64_t ptr, uint64_t len, struct sockaddr_storage *out, socklen_t *olen)
{
	struct iovec l, r;
	ssize_t n;

	if (len < sizeof(sa_family_t) || len > sizeof(*out))
		return -1;
	l.iov_base = out;
	l.iov_len = (size_t)len;
	r.iov_base = (void *)(uintptr_t)ptr;
	r.iov_len = (size_t)len;
	n = process_vm_readv(pid, &l, 1, &r, 1, 0);
	if (n != (ssize_t)len)
		return -1;
	*olen = (socklen_t)len;
	return 0;
}

static int dest_of(const struct sockaddr_storage *ss, socklen_t len, struct ns_dest *d)
{
	memset(d, 0, sizeof(*d));
	if (ss->ss_family == AF_INET && len >= sizeof(struct sockaddr_in)) {
		const struct sockaddr_in *a = (const struct sockaddr_in *)ss;

		d->family = AF_INET;
		memcpy(d->addr, &a->sin_addr, 4);
		d->port = ntohs(a->sin_port);
		return 0;
	}
	if (ss->ss_family == AF_INET6 && len >= sizeof(struct sockaddr_in6)) {
		const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)ss;

		if (IN6_IS_ADDR_V4MAPPED(&a->sin6_addr)) {
			d->family = AF_INET;
			memcpy(d->addr, &a->sin6_addr.s6_addr[12], 4);
		} else {
			d->family = AF_INET6;
			memcpy(d->addr, &a->sin6_addr, 16);
		}
		d->port = ntohs(a->sin6_port);
		return 0;
	}
	return -1;
}

/* The process a thread belongs to (its thread group), or tid itself. */
static pid_t tgid_of(pid_t tid)
{
	char path[64], line[128];
	pid_t tg = tid;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)tid);
	if (!(f = fopen(path, "re")))
		return tid;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "Tgid: %d", &tg) == 1)
			break;
	fclose(f);
	return tg;
}

#ifndef PIDFD_THREAD
#define PIDFD_THREAD O_EXCL
#endif

/* A copy of the descriptor fd of the thread tid's process (the notifying
 * thread of a threaded program, Go's, is not its process's leader), or -1. */
static int copy_fd(pid_t tid, int fd)
{
	int pfd = (int)syscall(SYS_pidfd_open, tid, PIDFD_THREAD), r;

	if (pfd < 0) /* before 6.9: a pidfd names a process */
		pfd = (int)syscall(SYS_pidfd_open, tgid_of(tid), 0);
	if (pfd < 0)
		return -1;
	r = (int)syscall(SYS_pidfd_getfd, pfd, fd, 0);
	close(pfd);
	return r;
}

static void log_step(const char *key, const struct ns_step *st)
{
	if (st->transition == NS_TR_OPENED || st->transition == NS_TR_REOPENED)
		fprintf(stderr, "shimrun: breaker for %s %s by rule %s\n", key,
			st->transition == NS_TR_OPENED ? "opened" : "reopened", ns_rule_name(st->rule));
}

static void start_connect(struct sup *s, const struct seccomp_notif *n, int fd, int slot, const struct ns_settings *set,
			  const struct sockaddr_storage *ss, socklen_t len, uint64_t now);

/* One connect of the child. */
static void on_connect(struct sup *s, const struct seccomp_notif *n)
{
	struct sockaddr_storage ss;
	socklen_t len;
	struct ns_dest d;
	struct ns_settings set;
	struct ns_step st;
	char key[NS_KEY_MAX];
	uint64_t now = mono_ms();
	int slot, fd;

	if (read_addr((pid_t)n->pid, n->data.args[1], n->data.args[2], &ss, &len) < 0 || dest_of(&ss, len, &d) < 0 ||
	    ioctl(s->lfd, SECCOMP_IOCTL_NOTIF_ID_VALID, &n->id) < 0 || !s->tbl_ok ||
	    ns_dest_key(&d, key, sizeof(key)) < 0) {
		respond(s, n->id, 0, 1); /* not an inet connect, or nothing to count it in: the kernel's */
		return;
	}
	ns_policy_resolve(&s->pol, &d, &set, NULL);
	if (set.mode == NS_MODE_BYPASS || (slot = ns_table_find(&s->t, key, 1, now)) < 0) {
		respond(s, n->id, 0, 1);
		return;
	}
	if (ns_table_attempt(&s->t, slot, set.mode == NS_MODE_ENFORCE, now, &set, &st) == NS_REJECT ||
	    (set.mode == NS_MODE_ENFORCE && ns_table_cooldown_until(&s->t, slot) > now)) {
		s->refused++;
		respond(s, n->id, ECONNREFUSED, 0); /* nothing sent */
		return;
	}
	s->calls++;
	fd = s->nwatch < WATCHED ? copy_fd((pid_t)n->pid, (int)n->data.args[0]) : -1;
	if (fd < 0) {
		respond(s, n->id, 0, 1); /* (no copy: the kernel's, uncounted) */
		return;
	}
	start_connect(s, n, fd, slot, &set, &ss, len, now);
}

/* A decided connect: counted, the socket as it was, the copy let go. */
static void decided(struct sup *s, struct watch *w, int kind, int err, uint64_t now)
{
	struct ns_step st;

	if (kind == NS_OUT_SUCCESS)
		ns_table_latency(&s->t, w->slot, 0, (now - w->start_ms) * 1000);
	if (kind >= 0)
		ns_table_outcome_at(&s->t, w->slot, kind, err, 0, now, wall_ms(), &w->set, &st);
	if (kind >= 0 && st.transition != NS_TR_NONE) {
		struct ns_entry e;

		memset(&e, 0, sizeof(e));
		ns_table_read(&s->t, w->slot, now, &e);
		log_step(e.key, &st);
	}
	(void)setsockopt(w->fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &w->old_uto, sizeof(w->old_uto));
	if (w->blocking)
		(void)fcntl(w->fd, F_SETFL, fcntl(w->fd, F_GETFL) & ~O_NONBLOCK);
	close(w->fd);
	w->fd = -1;
	s->nwatch--;
}

/* The connect, made by shimrun on its copy of the program's socket (one
 * socket: the program's is connecting), non-blocking, with the connect
 * deadline as the socket's TCP_USER_TIMEOUT: the kernel ends it with
 * ETIMEDOUT. A blocking program's connect is answered when it is decided,
 * with its result; a non-blocking one's at once with EINPROGRESS (the
 * program learns the result its own way: shimrun never reads SO_ERROR for
 * it). */
static void start_connect(struct sup *s, const struct seccomp_notif *n, int fd, int slot, const struct ns_settings *set,
			  const struct sockaddr_storage *ss, socklen_t len, uint64_t now)
{
	struct watch *w = NULL;
	socklen_t ol = sizeof(int);
	int uto = (int)(set->connect_timeout_ms > INT32_MAX ? INT32_MAX : set->connect_timeout_ms);
	int fl = fcntl(fd, F_GETFL), r, e;

	for (int i = 0; !w && i < WATCHED; i++)
		if (s->w[i].fd < 0)
			w = &s->w[i];
	w->fd = fd;
	w->slot = slot;
	w->old_uto = 0;
	w->blocking = fl >= 0 && !(fl & O_NONBLOCK);
	w->id = n->id;
	w->start_ms = now;
	w->timeout_ms = set->connect_timeout_ms;
	w->set = *set;
	s->nwatch++;
	(void)getsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &w->old_uto, &ol);
	if (uto > 0 && set->mode == NS_MODE_ENFORCE)
		(void)setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &uto, sizeof(uto));
	if (w->blocking)
		(void)fcntl(fd, F_SETFL, fl | O_NONBLOCK);
	r = connect(fd, (const struct sockaddr *)ss, len);
	e = r < 0 ? errno : 0;
	if (r < 0 && e == EINPROGRESS) {
		if (!w->blocking)
			respond(s, n->id, EINPROGRESS, 0);
		return; /* watched from here */
	}
	/* decided at once: connected (loopback can be that quick), or refused */
	respond(s, n->id, e, 0);
	if (!e)
		decided(s, w, NS_OUT_SUCCESS, 0, mono_ms());
	else if (e == ECONNREFUSED || e == ENETUNREACH || e == EHOSTUNREACH || e == ETIMEDOUT)
		decided(s, w, e == ETIMEDOUT ? NS_OUT_TIMEOUT : NS_OUT_FAILURE, e, mono_ms());
	else
		decided(s, w, -1, e, mono_ms()); /* the program's own error (EISCONN, EALREADY...): no outcome */
}

/* The watched connects: the decided ones answered (a blocking program's),
 * counted and let go. */
static void check_watched(struct sup *s)
{
	uint64_t now = mono_ms();

	for (int i = 0; i < WATCHED && s->nwatch; i++) {
		struct watch *w = &s->w[i];
		struct pollfd p = { .fd = w->fd, .events = POLLOUT };
		struct sockaddr_storage peer;
		socklen_t pl = sizeof(peer);
		int err = 0;

		if (w->fd < 0)
			continue;
		if (poll(&p, 1, 0) <= 0 || !(p.revents & (POLLOUT | POLLERR | POLLHUP))) {
			/* still connecting: the kernel ends it at the deadline
			 * (TCP_USER_TIMEOUT); one left far longer is let go */
			if (now - w->start_ms < w->timeout_ms + 60000)
				continue;
			if (w->blocking)
				respond(s, w->id, ETIMEDOUT, 0);
			decided(s, w, -1, 0, now);
			continue;
		}
		if (w->blocking) {
			/* shimrun's own connect: its result is the program's */
			socklen_t l = sizeof(err);

			if (getsockopt(w->fd, SOL_SOCKET, SO_ERROR, &err, &l) < 0)
				err = errno;
			respond(s, w->id, err, 0);
		} else if (getpeername(w->fd, (struct sockaddr *)&peer, &pl) < 0) {
			/* the program's to read (SO_ERROR): a timeout when it took
			 * the deadline, else refused */
			err = w->timeout_ms && now - w->start_ms + 50 >= w->timeout_ms ? ETIMEDOUT : ECONNREFUSED;
		}
		decided(s, w, !err ? NS_OUT_SUCCESS : err == ETIMEDOUT ? NS_OUT_TIMEOUT : NS_OUT_FAILURE, err, now);
	}
}

static int serve(struct sup *s, pid_t pid)
{
	struct seccomp_notif_sizes sz;
	struct seccomp_notif *n;
	int status = 0, done = 0;

	if (syscall(SYS_seccomp, SECCOMP_GET_NOTIF_SIZES, 0, &sz) < 0)
		memset(&sz, 0, sizeof(sz));
	n = calloc(1, sz.seccomp_notif > sizeof(*n) ? sz.seccomp_notif : sizeof(*n));
	if (!n)
		return 126;
	for (;;) {
		/* the listener, and the connects watched: each is looked at as
		 * soon as it is decided (a program that connects and closes at
		 * once has its outcome read before the socket goes) */
		struct pollfd pa[1 + WATCHED], *pp = pa;
		struct pollfd p;
		int np = 1, r;

		pa[0].fd = s->lfd;
		pa[0].events = POLLIN;
		for (int i = 0; i < WATCHED && s->nwatch; i++)
			if (s->w[i].fd >= 0) {
				pa[np].fd = s->w[i].fd;
				pa[np++].events = POLLOUT;
			}
		r = poll(pp, (nfds_t)np, s->nwatch ? 1000 : 200);
		p = pa[0];
		if (s->nwatch)
			check_watched(s);
		if (!done && waitpid(pid, &status, WNOHANG) == pid)
			done = 1;
		if (r > 0 && (p.revents & POLLIN)) {
			memset(n, 0, sz.seccomp_notif > sizeof(*n) ? sz.seccomp_notif : sizeof(*n));
			if (ioctl(s->lfd, SECCOMP_IOCTL_NOTIF_RECV, n) == 0) {
				if (n->data.nr == __NR_connect)
					on_connect(s, n);
				else
					respond(s, n->id, 0, 1);
			}
			continue;
		}
		/* every filtered process gone (the child and what it started):
		 * the listener hangs up */
		if (r > 0 && (p.revents & (POLLHUP | POLLERR)) && done)
			break;
		if (r < 0 && errno != EINTR)
			break;
	}
	while (s->nwatch)
		check_watched(s);
	free(n);
	if (!done)
		waitpid(pid, &status, 0);
	return WIFEXITED(status) ? WEXITSTATUS(status) : WIFSIGNALED(status) ? 128 + WTERMSIG(status) : 126;
}

int ns_sup_run(char **argv, const char *policy, const char *table, char *why, size_t whylen)
{
	static struct sup s;
	char err[8192], name[256];
	int sp[2], e = 0;
	pid_t pid;
	struct msghdr m = { 0 };
	char b[8];
	struct iovec iov = { b, sizeof(b) };
	union {
		struct cmsghdr h;
		char b[CMSG_SPACE(sizeof(int))];
	} cm;
	ssize_t got;

	if (policy && *policy ? ns_policy_load(policy, &s.pol, err, sizeof(err)) != 0
			      : ns_policy_builtin(&s.pol) != 0) {
		snprintf(why, whylen, "the policy did not load");
		return -1;
	}
	if (!table || !*table)
		table = getenv("NETSHIM_TABLE");
	if (table && *table)
		snprintf(name, sizeof(name), "%s", table);
	else
		ns_table_default_name(name, sizeof(name));
	s.tbl_ok = ns_table_open(name, 1, 0, 0, &s.t, err, sizeof(err)) == NS_TBL_OK;
	if (!s.tbl_ok)
		fprintf(stderr, "shimrun: table %s: %s; connects are not counted\n", name, err);
	for (int i = 0; i < WATCHED; i++)
		s.w[i].fd = -1;
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp) < 0) {
		snprintf(why, whylen, "socketpair: %s", strerror(errno));
		return -1;
	}
	pid = fork();
	if (pid < 0) {
		snprintf(why, whylen, "fork: %s", strerror(errno));
		return -1;
	}
	if (pid == 0) {
		close(sp[0]);
		child(sp[1], argv);
	}
	close(sp[1]);
	m.msg_iov = &iov;
	m.msg_iovlen = 1;
	m.msg_control = cm.b;
	m.msg_controllen = sizeof(cm.b);
	got = recvmsg(sp[0], &m, MSG_CMSG_CLOEXEC);
	if (got != 1 || m.msg_controllen < CMSG_LEN(sizeof(int))) {
		/* the child's errno, or nothing: the kernel said no */
		int status;

		if (got == (ssize_t)sizeof(int))
			memcpy(&e, b, sizeof(int));
		waitpid(pid, &status, 0);
		close(sp[0]);
		snprintf(why, whylen,
			 "this kernel does not let shimrun answer a program's system calls (seccomp user "
			 "notification: %s)",
			 e ? strerror(e) : "no answer");
		return -1;
	}
	if (b[0] == 'N')
		fprintf(stderr,
			"shimrun: this kernel (before 5.19) lets signals interrupt a governed connect: "
			"Go programs run with GODEBUG=asyncpreemptoff=1\n");
	memcpy(&s.lfd, CMSG_DATA(&cm.h), sizeof(int));
	if (write(sp[0], "g", 1) != 1) {
		close(sp[0]);
		return 126;
	}
	close(sp[0]);
	return serve(&s, pid);
}

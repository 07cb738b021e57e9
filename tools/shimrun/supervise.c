/* supervise.c -- shimrun's second engine: a program LD_PRELOAD cannot reach
 * (statically linked, or Go, whose net package makes its own system calls)
 * runs under a seccomp filter that sends each of its connect() calls to
 * shimrun, its parent, by user notification (SECCOMP_RET_USER_NOTIF). No
 * privilege is needed: a process may filter itself, and its parent may read
 * its memory and take a copy of its descriptors (pidfd_getfd). What shimrun
 * answers, and how it watches the connection after, is govern.c's; every
 * other system call of the program is not seen at all.
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
#include <sys/resource.h>
#include <unistd.h>

#include "goexec.h"
#include "govacct.h"
#include "govern.h"
#include "sockwatch.h"

#ifndef SECCOMP_IOCTL_NOTIF_SET_FLAGS
#define SECCOMP_IOCTL_NOTIF_SET_FLAGS SECCOMP_IOW(4, __u64)
#endif
#ifndef SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP
#define SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP 1
#endif
#ifndef SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV
#define SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV (1UL << 5)
#endif

/**** the child's side ****/

/* The program's first exec, shimrun's own, when shimrun read its file
 * already and it is an ELF program that is not Go (nothing to hook): made
 * as execveat with this descriptor number and an absolute path, which the
 * kernel ignores it for, and which no open descriptor can have (past
 * fs.nr_open's largest, 2^30), so the filter lets it go without a stop in
 * shimrun: ~75 us of each run at the median, and most of its tail,
 * measured (docs/benchmarks.md, the journal of 2026-12-07 evening). A
 * program that passes the same number to its own execveat goes unhooked,
 * never ungoverned: its connects are sent as any are. */
#define FIRST_EXEC_FD 0x7e736872u

/* connect() to the supervisor, everything else allowed, but the ways to a
 * connection that are not connect(): io_uring (its IORING_OP_CONNECT is
 * never a system call) answers ENOSYS, as under Docker's default profile,
 * and a program falls back to plain calls; a send with MSG_FASTOPEN
 * (sendto, sendmsg, sendmmsg: a connect inside a send) answers EOPNOTSUPP, as a
 * kernel without Fast Open does, and a program connects instead. Another
 * architecture's calls (x32, i386 through int 0x80) are killed, since
 * their numbers mean other calls. */
#define GO_LOOK_MS 10 /* a hooked Go program's answers are read at least this often */
#define ARG_LO(i)  (offsetof(struct seccomp_data, args) + 8 * (i)) /* (little-endian: the low word) */
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
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_execve, 4, 0), /* (a Go program's hook: goexec.c) */
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_execveat, 0, 4),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, ARG_LO(0)), /* (the kernel reads the low word alone) */
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, FIRST_EXEC_FD, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW), /* shimrun's own first exec */
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_USER_NOTIF),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_setup, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_sendto, 0, 3),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, ARG_LO(3)),
		BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, MSG_FASTOPEN, 0, 9),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EOPNOTSUPP),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_sendmsg, 0, 3),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, ARG_LO(2)),
		BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, MSG_FASTOPEN, 0, 5),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EOPNOTSUPP),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_sendmmsg, 0, 3),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, ARG_LO(3)),
		BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, MSG_FASTOPEN, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EOPNOTSUPP),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog prog = { .len = sizeof(f) / sizeof(f[0]), .filter = f };

	return (int)syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER | flags, &prog);
}

/* In the child: the filter, its listener to the parent over sock, then
 * the program. A kernel that refuses the filter is said to the parent (an
 * errno in place of the descriptor) and the child ends. The program dies
 * with its supervisor (SIGKILL when shimrun goes: its connects would have
 * nobody to answer them, and fail ENOSYS), also when shimrun was gone
 * before the request was made (parent: shimrun's pid). */
static void child(int sock, char **argv, const char *first, pid_t parent)
{
	int lfd, e;
	char tag = 'K'; /* K: killable waits; N: not (Go is told to keep its preemption signals) */
	struct msghdr m = { 0 };
	struct iovec iov = { &tag, 1 };
	union {
		struct cmsghdr h;
		char b[CMSG_SPACE(sizeof(int))];
	} cm;

	if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0 || getppid() != parent)
		_exit(127);
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
	if (first)
		syscall(SYS_execveat, (int)FIRST_EXEC_FD, first, argv, environ, 0);
	execvp(argv[0], argv); /* (and after a first exec that failed: as the program would have) */
	e = errno;
	fprintf(stderr, "shimrun: %s: %s\n", argv[0], strerror(e));
	_exit(e == ENOENT ? 127 : 126);
}

/**** the supervisor ****/

/* Signals sent to shimrun (kill, a service manager stopping it, a
 * supervisor's HUP) are the program's: passed on as they came. One the
 * terminal sent reached the program's process group already (the program
 * keeps shimrun's), so it is not sent twice. shimrun itself goes on until
 * the program ends, and exits with its status (128 + the signal that
 * killed it). */
static volatile pid_t fwd_pid;
static const int fwd_sigs[] = { SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2, SIGALRM, SIGWINCH, SIGCONT };

static void forward(int sig, siginfo_t *si, void *uc)
{
	int e = errno;

	(void)uc;
	if (fwd_pid > 0 && (!si || si->si_code <= 0)) /* SI_USER, SI_QUEUE, SI_TKILL: sent, not the terminal's */
		kill(fwd_pid, sig);
	errno = e;
}

static void forward_signals(pid_t pid)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = forward;
	sa.sa_flags = SA_SIGINFO | SA_RESTART;
	sigemptyset(&sa.sa_mask);
	fwd_pid = pid;
	/* (one shimrun was started with ignored stays ignored: the program
	 * inherited that too, as a background job's SIGINT) */
	for (size_t i = 0; i < sizeof(fwd_sigs) / sizeof(fwd_sigs[0]); i++) {
		struct sigaction old;

		if (sigaction(fwd_sigs[i], NULL, &old) == 0 && old.sa_handler != SIG_IGN)
			sigaction(fwd_sigs[i], &sa, NULL);
	}
}

struct sup {
	int lfd;
	struct ns_gov *gov;
	struct ns_gostat go;   /* the Go programs hooked, */
	struct ns_goexec exec; /* ...at their exec */
};

static void answer(void *ctx, uint64_t id, int err, int cont)
{
	struct sup *s = ctx;
	struct seccomp_notif_resp r = { .id = id };

	if (cont)
		r.flags = SECCOMP_USER_NOTIF_FLAG_CONTINUE;
	else
		r.error = -err;
	/* ENOENT: the call was interrupted, or its process died: nothing to say */
	(void)ioctl(s->lfd, SECCOMP_IOCTL_NOTIF_SEND, &r);
}

static int still_valid(void *ctx, uint64_t id)
{
	struct sup *s = ctx;

	return ioctl(s->lfd, SECCOMP_IOCTL_NOTIF_ID_VALID, &id) == 0;
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

/* A connect whose address is not an inet one, or could not be read. On a
 * socket of another family the kernel's own answer is safe (CONTINUE). On
 * an inet socket it is not: the kernel reads the address again, and a
 * second thread of the program may have put an inet one there meanwhile;
 * so the connect is made here, on a copy of the socket, with the address
 * read (AF_UNSPEC dissolves an association; another family fails
 * EAFNOSUPPORT, as the kernel says), and its result is the answer. */
static void not_inet(struct sup *s, const struct seccomp_notif *n, const struct sockaddr_storage *ss, socklen_t len)
{
	int fd = ns_sw_copy_fd((pid_t)n->pid, 0, (int)n->data.args[0]), dom = 0, r;
	socklen_t dl = sizeof(dom);

	if (fd < 0) {
		int e = errno, err = ns_gov_no_copy(s->gov, (pid_t)n->pid, e);

		if (!err && e == EBADF)
			err = EBADF; /* (no such descriptor: as the kernel says) */
		answer(s, n->id, err, !err);
		return;
	}
	if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &dom, &dl) < 0 || (dom != AF_INET && dom != AF_INET6)) {
		close(fd);
		answer(s, n->id, 0, 1);
		return;
	}
	if (!ss) {
		close(fd);
		answer(s, n->id, n->data.args[2] > sizeof(*ss) ? EINVAL : EFAULT, 0);
		return;
	}
	r = connect(fd, (const struct sockaddr *)ss, len);
	answer(s, n->id, r < 0 ? errno : 0, 0);
	close(fd);
}

/* One notified call of the child. */
static void go_on(void *ctx, uint64_t id)
{
	answer(ctx, id, 0, 1);
}

/* One answer a hooked Go program read: counted on its destination's entry. */
static void go_answer(void *ctx, pid_t tgid, const struct ns_goslot *a)
{
	struct sup *s = ctx;
	struct ns_dest d;
	char ra[NS_GORA_MAX + 1];
	int r = ns_gostat_dest(a, &d), ra_read;

	if (r > 0 && !s->go.said_dns) {
		s->go.said_dns = 1;
		fprintf(stderr,
			"shimrun: a Go program's answer from a host only DNS names (%.*s) is not counted: shimrun "
			"resolves names from /etc/hosts alone\n",
			(int)((a->flags >> 8) & 0x3f), a->host);
	}
	if (r != 0)
		return;
	ra_read = ns_gostat_retry_after(a, ra);
	ns_gov_status(s->gov, &d, tgid, (unsigned)a->status, ns_gostat_us(&s->go, a->ticks), ra_read ? ra : NULL);
	if (!ra_read && !s->go.said_ra) {
		s->go.said_ra = 1;
		fprintf(stderr,
			"shimrun: a Go program's %u answer from %.*s: its headers could not be read whole (a header "
			"map that grows, or larger than any header block): its Retry-After is not known, and the "
			"answer counts by the breaker's rules\n",
			(unsigned)a->status, (int)((a->flags >> 8) & 0x3f), a->host);
	}
}

static void on_call(struct sup *s, const struct seccomp_notif *n)
{
	struct sockaddr_storage ss;
	socklen_t len = 0;
	int got;

	if (n->data.nr == __NR_execve || n->data.nr == __NR_execveat) {
		ns_goexec(&s->exec, n, go_on, s);
		return;
	}
	if (n->data.nr != __NR_connect) {
		answer(s, n->id, 0, 1);
		return;
	}
	got = read_addr((pid_t)n->pid, n->data.args[1], n->data.args[2], &ss, &len) == 0;
	if (got && (ss.ss_family == AF_INET || ss.ss_family == AF_INET6)) {
		ns_gov_connect(s->gov, n->id, (pid_t)n->pid, (int)n->data.args[0], &ss, len);
		return;
	}
	not_inet(s, n, got ? &ss : NULL, len);
}

static int serve(struct sup *s, pid_t pid)
{
	struct seccomp_notif_sizes sz;
	struct seccomp_notif *n;
	size_t nsize;
	int status = 0, done = 0;
	/* the child's end is seen in the poll (before 5.3: a waitpid a pass) */
	int child = (int)syscall(SYS_pidfd_open, pid, 0);

	if (syscall(SYS_seccomp, SECCOMP_GET_NOTIF_SIZES, 0, &sz) < 0)
		memset(&sz, 0, sizeof(sz));
	nsize = sz.seccomp_notif > sizeof(*n) ? sz.seccomp_notif : sizeof(*n);
	n = calloc(1, nsize);
	if (!n)
		return 126;
	for (;;) {
		/* the listener, the child, and the connects in progress: each
		 * is looked at as soon as it is decided (a program that connects
		 * and closes at once has its outcome read before the socket goes) */
		static struct pollfd pa[2 + NS_GOV_POLLED];
		int np, r;

		pa[0].fd = s->lfd;
		pa[0].events = POLLIN;
		pa[0].revents = 0;
		pa[1].fd = done ? -1 : child;
		pa[1].events = POLLIN;
		pa[1].revents = 0;
		np = ns_gov_pollfds(s->gov, pa + 2, NS_GOV_POLLED);
		r = ns_gov_timeout(s->gov);
		if (s->go.n && (r < 0 || r > GO_LOOK_MS)) /* (hooked programs' answers read this often) */
			r = GO_LOOK_MS;
		r = poll(pa, (nfds_t)(2 + np), r);
		ns_gostat_drain(&s->go, go_answer, s, r == 0);
		if (s->go.lost && !s->go.said_lost) {
			s->go.said_lost = 1;
			fprintf(stderr,
				"shimrun: a hooked Go program's answers came faster than shimrun read them: some are "
				"not counted (their number is said at the end)\n");
		}
		ns_gov_run(s->gov, pa + 2, np);
		if (!done && s->exec.child_done) {
			status = s->exec.child_status;
			done = 1;
		}
		if (!done && (child < 0 || pa[1].revents) && waitpid(pid, &status, WNOHANG) == pid)
			done = 1;
		if (r > 0 && (pa[0].revents & POLLIN)) {
			memset(n, 0, nsize);
			if (ioctl(s->lfd, SECCOMP_IOCTL_NOTIF_RECV, n) == 0)
				on_call(s, n);
			continue;
		}
		/* every filtered process gone (the child and what it started):
		 * the listener hangs up */
		if (r > 0 && (pa[0].revents & (POLLHUP | POLLERR)) && done)
			break;
		if (r < 0 && errno != EINTR)
			break;
	}
	ns_gostat_drain(&s->go, go_answer, s, 0);
	if (s->go.lost)
		fprintf(stderr, "shimrun: %llu answers of hooked Go programs were not counted (read too late)\n",
			(unsigned long long)s->go.lost);
	ns_gov_finish(s->gov);
	free(n);
	if (child >= 0)
		close(child);
	if (!done && s->exec.child_done)
		status = s->exec.child_status;
	else if (!done)
		waitpid(pid, &status, 0);
	return WIFEXITED(status) ? WEXITSTATUS(status) : WIFSIGNALED(status) ? 128 + WTERMSIG(status) : 126;
}

int ns_sup_run(char **argv, const char *first, const char *policy, const char *table, char *why, size_t whylen)
{
	static struct sup s;
	int sp[2], e = 0;
	pid_t pid, parent;
	struct msghdr m = { 0 };
	char b[8];
	struct iovec iov = { b, sizeof(b) };
	union {
		struct cmsghdr h;
		char b[CMSG_SPACE(sizeof(int))];
	} cm;
	ssize_t got;

	s.lfd = -1;
	if (!(s.gov = ns_gov_new(policy, table, answer, still_valid, &s, why, whylen)))
		return -1;
	s.exec.go = &s.go;
	s.exec.level = ns_gacct_level();
	s.exec.off = ns_goexec_off();
	ns_gov_hooks(s.gov, &s.go);
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp) < 0) {
		snprintf(why, whylen, "socketpair: %s", strerror(errno));
		return -1;
	}
	parent = getpid();
	pid = fork();
	if (pid < 0) {
		snprintf(why, whylen, "fork: %s", strerror(errno));
		return -1;
	}
	if (pid == 0) {
		close(sp[0]);
		child(sp[1], argv, first && first[0] == '/' ? first : NULL, parent);
	}
	close(sp[1]);
	s.exec.child = pid;
	forward_signals(pid);
	/* shimrun holds a copy of each socket whose connect is in progress:
	 * its own soft limit up to the hard one (the program keeps its own) */
	{
		struct rlimit rl;

		if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
			rl.rlim_cur = rl.rlim_max;
			(void)setrlimit(RLIMIT_NOFILE, &rl);
		}
	}
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
	/* Linux 6.6: the notifying thread and shimrun hand the CPU to each
	 * other (a connect waits on shimrun alone), not through the scheduler
	 * (before: EINVAL, and the wake-ups as they were) */
	(void)ioctl(s.lfd, SECCOMP_IOCTL_NOTIF_SET_FLAGS, SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP);
	if (write(sp[0], "g", 1) != 1) {
		close(sp[0]);
		return 126;
	}
	close(sp[0]);
	return serve(&s, pid);
}

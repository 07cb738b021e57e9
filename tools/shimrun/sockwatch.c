/* sockwatch.c -- the seccomp engine's look at a connection after its
 * connect. shimrun holds no copy of a connected socket (a copy would keep
 * it open after the program closed it: no FIN, a place never given back);
 * it asks the kernel about it by its two ends through sock_diag, which any
 * user may (ss(8) does), and takes it again only to reset it. */
#include "sockwatch.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/sock_diag.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

int ns_sw_open(void)
{
	return socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
}

int ns_sw_id(int fd, const struct sockaddr *dst, socklen_t dlen, struct ns_sockid *id)
{
	struct sockaddr_storage a;
	socklen_t la = sizeof(a);
	struct stat st;

	memset(id, 0, sizeof(*id));
	if (fstat(fd, &st) < 0 || getsockname(fd, (struct sockaddr *)&a, &la) < 0 || a.ss_family != dst->sa_family)
		return -1;
	id->inode = (uint32_t)st.st_ino;
	id->family = (uint8_t)a.ss_family;
	if (a.ss_family == AF_INET && dlen >= sizeof(struct sockaddr_in)) {
		const struct sockaddr_in *s = (const void *)&a, *d = (const void *)dst;

		id->sport = s->sin_port;
		id->dport = d->sin_port;
		memcpy(id->src, &s->sin_addr, 4);
		memcpy(id->dst, &d->sin_addr, 4);
		return 0;
	}
	if (a.ss_family == AF_INET6 && dlen >= sizeof(struct sockaddr_in6)) {
		const struct sockaddr_in6 *s = (const void *)&a, *d = (const void *)dst;

		id->sport = s->sin6_port;
		id->dport = d->sin6_port;
		memcpy(id->src, &s->sin6_addr, 16);
		memcpy(id->dst, &d->sin6_addr, 16);
		return 0;
	}
	return -1;
}

int ns_sw_query(int nl, const struct ns_sockid *id, struct ns_sockinfo *out)
{
	struct {
		struct nlmsghdr h;
		struct inet_diag_req_v2 r;
	} req;
	union {
		struct nlmsghdr h;
		char b[1024];
	} ans;
	struct sockaddr_nl kernel = { .nl_family = AF_NETLINK };
	const struct inet_diag_msg *m;
	const struct rtattr *a;
	struct tcp_info ti;
	size_t got = 0;
	ssize_t n;
	int len;

	memset(out, 0, sizeof(*out));
	memset(&req, 0, sizeof(req));
	req.h.nlmsg_len = sizeof(req);
	req.h.nlmsg_type = SOCK_DIAG_BY_FAMILY;
	req.h.nlmsg_flags = NLM_F_REQUEST;
	req.r.sdiag_family = id->family;
	req.r.sdiag_protocol = IPPROTO_TCP;
	req.r.idiag_ext = 1 << (INET_DIAG_INFO - 1);
	req.r.idiag_states = ~0u;
	req.r.id.idiag_sport = id->sport;
	req.r.id.idiag_dport = id->dport;
	memcpy(req.r.id.idiag_src, id->src, 16);
	memcpy(req.r.id.idiag_dst, id->dst, 16);
	req.r.id.idiag_cookie[0] = req.r.id.idiag_cookie[1] = INET_DIAG_NOCOOKIE;
	if (sendto(nl, &req, sizeof(req), 0, (struct sockaddr *)&kernel, sizeof(kernel)) < 0)
		return -1;
	do
		n = recv(nl, &ans, sizeof(ans), 0);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return -1;
	if ((size_t)n < sizeof(ans.h) || ans.h.nlmsg_len > (size_t)n) {
		errno = EPROTO;
		return -1;
	}
	if (ans.h.nlmsg_type == NLMSG_ERROR) {
		const struct nlmsgerr *e = NLMSG_DATA(&ans.h);

		if (ans.h.nlmsg_len >= NLMSG_LENGTH(sizeof(*e)) && e->error == -ENOENT) {
			out->gone = 1; /* closed, or reset */
			return 0;
		}
		errno = ans.h.nlmsg_len >= NLMSG_LENGTH(sizeof(*e)) && e->error ? -e->error : EPROTO;
		return -1;
	}
	if (ans.h.nlmsg_type != SOCK_DIAG_BY_FAMILY || ans.h.nlmsg_len < NLMSG_LENGTH(sizeof(*m))) {
		errno = EPROTO;
		return -1;
	}
	m = NLMSG_DATA(&ans.h);
	/* an orphan (the program closed it: inode 0), or another socket on
	 * the same ends, is no longer the program's connection */
	out->mine = m->idiag_inode == id->inode;
	out->state = m->idiag_state;
	memset(&ti, 0, sizeof(ti));
	len = (int)(ans.h.nlmsg_len - NLMSG_LENGTH(sizeof(*m)));
	for (a = (const struct rtattr *)(m + 1); RTA_OK(a, len); a = RTA_NEXT(a, len))
		if (a->rta_type == INET_DIAG_INFO) {
			got = RTA_PAYLOAD(a) < sizeof(ti) ? RTA_PAYLOAD(a) : sizeof(ti);
			memcpy(&ti, RTA_DATA(a), got);
		}
	out->last_sent_ms = ti.tcpi_last_data_sent;
	out->last_recv_ms = ti.tcpi_last_data_recv;
	/* data sent: tcpi_bytes_sent since 4.19; before, what was acknowledged,
	 * less the SYN (which tcpi_bytes_acked counts) */
	if (got >= offsetof(struct tcp_info, tcpi_bytes_sent) + sizeof(ti.tcpi_bytes_sent))
		out->bytes_sent = ti.tcpi_bytes_sent;
	else
		out->bytes_sent = ti.tcpi_bytes_acked > 1 ? ti.tcpi_bytes_acked - 1 : 0;
	out->bytes_received = ti.tcpi_bytes_received;
	return 0;
}

pid_t ns_sw_tgid(pid_t tid)
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

/* pidfds of the threads that connected last: a Go program connects from
 * a few long-lived threads, a C program from one, so the next connect
 * needs no pidfd_open of its own. A dead thread's pidfd says ESRCH, and is
 * opened anew (its tid may be another's now). */
#define PIDFDS 64
static struct {
	pid_t tid;
	int pfd;
	pid_t tgid; /* its process, 0 until asked */
} pidfds[PIDFDS];
static unsigned pidfd_next;

static int pidfd_of(pid_t tid, pid_t tgid)
{
	int pfd = (int)syscall(SYS_pidfd_open, tid, PIDFD_THREAD);

	if (pfd < 0) /* before 6.9 a pidfd names a process; or the thread is gone */
		pfd = (int)syscall(SYS_pidfd_open, tgid ? tgid : ns_sw_tgid(tid), 0);
	return pfd;
}

/* The entry kept for thread tid, or PIDFDS. */
static unsigned pidfd_entry(pid_t tid)
{
	unsigned i = 0;

	while (i < PIDFDS && !(pidfds[i].tid == tid && pidfds[i].pfd > 0))
		i++;
	return i;
}

int ns_sw_copy_fd(pid_t tid, pid_t tgid, int fd)
{
	unsigned i = pidfd_entry(tid);
	int r;

	if (i < PIDFDS) {
		r = (int)syscall(SYS_pidfd_getfd, pidfds[i].pfd, fd, 0);
		if (r >= 0 || errno != ESRCH)
			return r;
		close(pidfds[i].pfd); /* that thread is gone */
		pidfds[i].tid = 0;
		pidfds[i].pfd = 0;
	} else {
		i = pidfd_next++ % PIDFDS;
		if (pidfds[i].pfd > 0)
			close(pidfds[i].pfd);
	}
	pidfds[i].tid = 0;
	pidfds[i].tgid = tgid;
	pidfds[i].pfd = pidfd_of(tid, tgid);
	if (pidfds[i].pfd < 0) {
		pidfds[i].pfd = 0;
		return -1;
	}
	pidfds[i].tid = tid;
	return (int)syscall(SYS_pidfd_getfd, pidfds[i].pfd, fd, 0);
}

pid_t ns_sw_tgid_of(pid_t tid)
{
	unsigned i = pidfd_entry(tid);

	if (i == PIDFDS)
		return ns_sw_tgid(tid);
	if (!pidfds[i].tgid)
		pidfds[i].tgid = ns_sw_tgid(tid);
	return pidfds[i].tgid;
}

static int same_socket(int fd, uint32_t inode)
{
	struct stat st;

	return fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode) && (uint32_t)st.st_ino == inode;
}

int ns_sw_held(pid_t tid, int fd, uint32_t inode)
{
	char path[64], link[64], want[32];
	ssize_t n;

	snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)tid, fd);
	snprintf(want, sizeof(want), "socket:[%u]", inode);
	n = readlink(path, link, sizeof(link) - 1);
	return n > 0 && (link[n] = '\0', strcmp(link, want) == 0);
}

/* The descriptor of process tgid that holds socket inode (the program
 * moved it: dup2), or -1. */
static int find_fd(pid_t tgid, uint32_t inode)
{
	char path[64];
	struct dirent *e;
	DIR *d;
	int fd = -1;

	snprintf(path, sizeof(path), "/proc/%d/fd", (int)tgid);
	if (!(d = opendir(path)))
		return -1;
	while (fd < 0 && (e = readdir(d)))
		if (e->d_name[0] != '.' && ns_sw_held(tgid, atoi(e->d_name), inode))
			fd = atoi(e->d_name);
	closedir(d);
	return fd;
}

int ns_sw_reset(pid_t tid, pid_t tgid, int fd, const struct ns_sockid *id)
{
	struct sockaddr none = { .sa_family = AF_UNSPEC };
	int c = ns_sw_copy_fd(tid, tgid, fd), r;

	if (c >= 0 && !same_socket(c, id->inode)) {
		close(c);
		c = -1;
	}
	if (c < 0) {
		pid_t g = tgid ? tgid : ns_sw_tgid(tid);
		int other = find_fd(g, id->inode);

		if (other >= 0 && (c = ns_sw_copy_fd(g, g, other)) >= 0 && !same_socket(c, id->inode)) {
			close(c);
			c = -1;
		}
	}
	if (c < 0)
		return -1;
	/* tcp_disconnect: a reset to the peer, ECONNRESET for the program */
	r = connect(c, &none, sizeof(none));
	close(c);
	return r;
}

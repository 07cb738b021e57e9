/* metrics.c -- netshim-agent --metrics-listen ADDR:PORT: GET /metrics
 * answered in the Prometheus text format, HTTP/1.0, from the agent's own
 * loop without ever waiting there: up to 64 clients at once, each read and
 * written as far as the kernel allows at each look, each given a second
 * for the whole exchange. Whoever can reach the port cannot hold the
 * agent's pass (polls, hooks, lease renewals) back. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "agent.h"

int ag_metrics_listen(const char *spec, char *err, size_t len)
{
	struct sockaddr_in a;
	char host[64];
	const char *colon = strrchr(spec, ':');
	char *end;
	long port;
	int fd, one = 1;

	if (!colon || (size_t)(colon - spec) >= sizeof(host)) {
		snprintf(err, len, "expected ADDRESS:PORT, such as 127.0.0.1:9464");
		return -1;
	}
	memcpy(host, spec, (size_t)(colon - spec));
	host[colon - spec] = '\0';
	port = strtol(colon + 1, &end, 10);
	memset(&a, 0, sizeof(a));
	a.sin_family = AF_INET;
	a.sin_port = htons((uint16_t)port);
	if (*end || port < 1 || port > 65535 || inet_pton(AF_INET, host[0] ? host : "0.0.0.0", &a.sin_addr) != 1) {
		snprintf(err, len, "expected an IPv4 ADDRESS:PORT, such as 127.0.0.1:9464");
		return -1;
	}
	fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
	    bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(fd, 16) < 0) {
		snprintf(err, len, "%s: %s", spec, strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	return fd;
}

/* The clients: at most MSRV_MAX at once, each with a second from its
 * accept for the whole exchange. Nothing here waits: every call reads and
 * writes what the kernel has ready (MSG_DONTWAIT) and comes back, so a
 * silent, trickling or never-reading client costs the agent's pass a few
 * system calls, never time. When all are taken, a new client takes the
 * place of the one nearest its deadline. */
#define MSRV_MAX 64
#define MSRV_DEADLINE_MS 1000
#define MSRV_REQ_MAX 2048

struct mcl {
	int fd;                 /* -1: free */
	uint64_t deadline_ms;
	size_t got;             /* request bytes read */
	char *out;              /* the answer, once the request is whole */
	size_t out_len, out_off;
	char req[MSRV_REQ_MAX];
};

static struct mcl cl[MSRV_MAX];
static int cl_init;

static void cl_close(struct mcl *m)
{
	if (m->fd >= 0)
		close(m->fd);
	free(m->out);
	m->fd = -1;
	m->out = NULL;
	m->got = m->out_len = m->out_off = 0;
}

static struct mcl *cl_slot(uint64_t now)
{
	struct mcl *oldest = NULL;

	if (!cl_init) {
		for (int i = 0; i < MSRV_MAX; i++)
			cl[i].fd = -1;
		cl_init = 1;
	}
	for (int i = 0; i < MSRV_MAX; i++) {
		if (cl[i].fd < 0)
			return &cl[i];
		if (!oldest || cl[i].deadline_ms < oldest->deadline_ms)
			oldest = &cl[i];
	}
	(void)now;
	cl_close(oldest);
	return oldest;
}

/* The request is whole: 1 for GET of /metrics (or /), 0 for anything else. */
static int wanted(const char *buf)
{
	return strncmp(buf, "GET /metrics ", 13) == 0 || strncmp(buf, "GET /metrics?", 13) == 0 ||
	       strncmp(buf, "GET / ", 6) == 0;
}

static void answer(struct mcl *m, void (*body)(FILE *f, void *arg), void *arg)
{
	static const char nf[] = "HTTP/1.0 404 Not Found\r\nContent-Type: text/plain\r\nContent-Length: 25\r\n\r\n"
				 "only /metrics lives here\n";
	char *text = NULL, hdr[160];
	size_t n = 0;
	FILE *f;

	if (!wanted(m->req)) {
		m->out = strdup(nf);
		m->out_len = m->out ? sizeof(nf) - 1 : 0;
		return;
	}
	f = open_memstream(&text, &n);
	if (f) {
		body(f, arg);
		fclose(f);
	}
	snprintf(hdr, sizeof(hdr), "HTTP/1.0 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
		 "Content-Length: %zu\r\n\r\n", text ? n : 0);
	m->out_len = strlen(hdr) + (text ? n : 0);
	m->out = malloc(m->out_len);
	if (m->out) {
		memcpy(m->out, hdr, strlen(hdr));
		if (text)
			memcpy(m->out + strlen(hdr), text, n);
	} else {
		m->out_len = 0;
	}
	free(text);
}

/* What the kernel has for m, read or written: 0 still going, -1 done. */
static int cl_step(struct mcl *m, void (*body)(FILE *f, void *arg), void *arg)
{
	while (!m->out) {
		ssize_t r = recv(m->fd, m->req + m->got, sizeof(m->req) - 1 - m->got, MSG_DONTWAIT);

		if (r < 0 && (errno == EAGAIN || errno == EINTR))
			return 0;
		if (r <= 0)
			return -1;
		m->got += (size_t)r;
		m->req[m->got] = '\0';
		if (strstr(m->req, "\r\n\r\n") || strstr(m->req, "\n\n") || m->got == sizeof(m->req) - 1) {
			answer(m, body, arg);
			if (!m->out)
				return -1;
		}
	}
	while (m->out_off < m->out_len) {
		ssize_t w = send(m->fd, m->out + m->out_off, m->out_len - m->out_off, MSG_NOSIGNAL | MSG_DONTWAIT);

		if (w < 0 && (errno == EAGAIN || errno == EINTR))
			return 0;
		if (w <= 0)
			return -1;
		m->out_off += (size_t)w;
	}
	return -1;   /* all sent */
}

int ag_metrics_pollfds(struct pollfd *p, int max)
{
	int n = 0;

	for (int i = 0; cl_init && i < MSRV_MAX && n < max; i++)
		if (cl[i].fd >= 0) {
			p[n].fd = cl[i].fd;
			p[n].events = cl[i].out ? POLLOUT : POLLIN;
			p[n++].revents = 0;
		}
	return n;
}

void ag_metrics_serve(int lfd, void (*body)(FILE *f, void *arg), void *arg)
{
	uint64_t now = ctl_mono_ms(); /* the agent's one clock */
	int c;

	/* new clients, each with a place (the one nearest its end gives it up) */
	while (lfd >= 0 && (c = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK)) >= 0) {
		struct mcl *m = cl_slot(now);

		m->fd = c;
		m->deadline_ms = now + MSRV_DEADLINE_MS;
	}
	for (int i = 0; cl_init && i < MSRV_MAX; i++) {
		struct mcl *m = &cl[i];

		if (m->fd < 0)
			continue;
		if (now >= m->deadline_ms || cl_step(m, body, arg) < 0)
			cl_close(m);
	}
}

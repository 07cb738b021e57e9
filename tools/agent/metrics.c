/* metrics.c -- netshim-agent --metrics-listen ADDR:PORT: GET /metrics
 * answered in the Prometheus text format, HTTP/1.0, one connection at a
 * time, from the agent's own loop. A client gets half a second to send its
 * request and a second to take the answer, so a slow or silent one costs
 * the loop at most that, once. */
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

int msrv_listen(const char *spec, char *err, size_t len)
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

static long ms_since(const struct timespec *t0);

/* The request's first line, within half a second: 1 for GET of /metrics
 * (or /), 0 for anything else, -1 for nothing usable. */
static int read_request(int c)
{
	char buf[2048];
	size_t got = 0;
	struct timespec t0;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	while (got < sizeof(buf) - 1) {
		struct pollfd p = { .fd = c, .events = POLLIN };
		long left = 500 - ms_since(&t0);   /* half a second for the whole request */
		ssize_t r;

		if (left <= 0 || poll(&p, 1, (int)left) <= 0)
			return -1;
		r = recv(c, buf + got, sizeof(buf) - 1 - got, 0);
		if (r <= 0)
			return -1;
		got += (size_t)r;
		buf[got] = '\0';
		if (strstr(buf, "\r\n\r\n") || strstr(buf, "\n\n"))
			break;
	}
	buf[got] = '\0';
	return strncmp(buf, "GET /metrics ", 13) == 0 || strncmp(buf, "GET /metrics?", 13) == 0 ||
	       strncmp(buf, "GET / ", 6) == 0;
}

static long ms_since(const struct timespec *t0)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (t.tv_sec - t0->tv_sec) * 1000 + (t.tv_nsec - t0->tv_nsec) / 1000000;
}

/* Within a second in all from t0, however slowly the client reads. */
static void send_all(int c, const char *p, size_t n, const struct timespec *t0)
{
	while (n) {
		struct pollfd q = { .fd = c, .events = POLLOUT };
		long left = 1000 - ms_since(t0);
		ssize_t w;

		if (left <= 0 || poll(&q, 1, (int)left) <= 0)
			return;
		w = send(c, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (w < 0 && (errno == EAGAIN || errno == EINTR))
			continue;
		if (w <= 0)
			return;   /* the client went */
		p += w;
		n -= (size_t)w;
	}
}

void msrv_serve(int lfd, void (*body)(FILE *f, void *arg), void *arg)
{
	int c;

	while ((c = accept4(lfd, NULL, NULL, SOCK_CLOEXEC)) >= 0) {
		struct timespec t0;
		char *text = NULL, hdr[160];
		size_t n = 0;
		int ok = read_request(c);
		FILE *f;

		clock_gettime(CLOCK_MONOTONIC, &t0);
		if (ok < 0) {
			close(c);
			continue;
		}
		if (!ok) {
			static const char nf[] = "HTTP/1.0 404 Not Found\r\nContent-Type: text/plain\r\nContent-Length: 25\r\n\r\n"
						 "only /metrics lives here\n";

			send_all(c, nf, sizeof(nf) - 1, &t0);
			close(c);
			continue;
		}
		f = open_memstream(&text, &n);
		if (f) {
			body(f, arg);
			fclose(f);
		}
		snprintf(hdr, sizeof(hdr), "HTTP/1.0 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
			 "Content-Length: %zu\r\n\r\n", text ? n : 0);
		send_all(c, hdr, strlen(hdr), &t0);
		if (text)
			send_all(c, text, n, &t0);
		free(text);
		close(c);
	}
}

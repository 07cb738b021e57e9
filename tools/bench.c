/* bench.c -- the measurements behind `make bench`. Run it bare and under
 * the shim side by side (tools/bench.sh does); it only prints figures.
 *
 *   bench rtt N          N one-byte send/recv round trips on a loopback TCP
 *                        connection to an echo thread; prints ns per trip
 *   bench poll N | bench epoll N
 *                        N zero-timeout waits for input or output on a
 *                        connected loopback socket (for callgrind)
 *   bench failfast ADDR|NAME PORT N
 *                        N connects to a destination whose breaker is open
 *                        (a NAME is resolved once with getaddrinfo first);
 *                        prints the median and p99 of one connect() in ns */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sys/epoll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static long long now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int cmp_ll(const void *a, const void *b)
{
	long long x = *(const long long *)a, y = *(const long long *)b;

	return x < y ? -1 : x > y;
}

static void *echo(void *arg)
{
	int fd = *(int *)arg;
	char b;

	while (recv(fd, &b, 1, 0) == 1)
		if (send(fd, &b, 1, 0) != 1)
			break;
	close(fd);
	return NULL;
}

static int rtt(long n)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t l = sizeof(a);
	int lfd = socket(AF_INET, SOCK_STREAM, 0), cfd, sfd, one = 1;
	pthread_t th;
	long long t0, t1;
	char b = 'x';

	if (lfd < 0 || bind(lfd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(lfd, 1) < 0 ||
	    getsockname(lfd, (struct sockaddr *)&a, &l) < 0) {
		perror("bench: listen");
		return 1;
	}
	cfd = socket(AF_INET, SOCK_STREAM, 0);
	if (connect(cfd, (struct sockaddr *)&a, sizeof(a)) < 0) {
		perror("bench: connect");
		return 1;
	}
	sfd = accept(lfd, NULL, NULL);
	setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	setsockopt(sfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	pthread_create(&th, NULL, echo, &sfd);
	t0 = now_ns();
	for (long i = 0; i < n; i++) {
		if (send(cfd, &b, 1, 0) != 1 || recv(cfd, &b, 1, 0) != 1) {
			perror("bench: round trip");
			return 1;
		}
	}
	t1 = now_ns();
	shutdown(cfd, SHUT_WR);
	pthread_join(th, NULL);
	close(cfd);
	close(lfd);
	if (n)
		printf("rtt_ns %.0f\n", (double)(t1 - t0) / (double)n);
	return 0;
}

static int failfast(const char *addr, int port, long n)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	long long *t = calloc((size_t)n, sizeof(*t));
	long refused = 0;

	if (!t || n <= 0) {
		fprintf(stderr, "bench: bad arguments\n");
		return 2;
	}
	if (inet_pton(AF_INET, addr, &a.sin_addr) != 1) {
		/* a name: resolved once, as a program would, then connected to by address */
		struct addrinfo hints = { .ai_family = AF_INET, .ai_socktype = SOCK_STREAM }, *res;

		if (getaddrinfo(addr, NULL, &hints, &res) != 0) {
			fprintf(stderr, "bench: cannot resolve %s\n", addr);
			return 2;
		}
		a.sin_addr = ((struct sockaddr_in *)res->ai_addr)->sin_addr;
		freeaddrinfo(res);
	}
	for (long i = 0; i < n; i++) {
		int fd = socket(AF_INET, SOCK_STREAM, 0), r, e;
		long long t0 = now_ns();

		r = connect(fd, (struct sockaddr *)&a, sizeof(a));
		e = errno;
		t[i] = now_ns() - t0;
		if (r < 0 && e == ECONNREFUSED)
			refused++;
		close(fd);
	}
	qsort(t, (size_t)n, sizeof(*t), cmp_ll);
	printf("failfast_connects %ld\nfailfast_refused %ld\nfailfast_median_ns %lld\nfailfast_p99_ns %lld\n",
	       n, refused, t[n / 2], t[(n * 99) / 100]);
	free(t);
	return 0;
}

/* A connected loopback pair; the client end is what the shim governs. */
static int connected(int *server_end)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t l = sizeof(a);
	int lfd = socket(AF_INET, SOCK_STREAM, 0), cfd;

	if (lfd < 0 || bind(lfd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(lfd, 1) < 0 ||
	    getsockname(lfd, (struct sockaddr *)&a, &l) < 0)
		return -1;
	cfd = socket(AF_INET, SOCK_STREAM, 0);
	if (connect(cfd, (struct sockaddr *)&a, sizeof(a)) < 0)
		return -1;
	*server_end = accept(lfd, NULL, NULL);
	close(lfd);
	return cfd;
}

static int waits(int use_epoll, long n)
{
	int peer, fd = connected(&peer), ep = -1, ready = 0;
	struct epoll_event ev = { .events = EPOLLIN | EPOLLOUT }, out[4];

	if (fd < 0) {
		perror("bench: connect");
		return 1;
	}
	if (use_epoll) {
		ep = epoll_create1(0);
		ev.data.fd = fd;
		epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
	}
	for (long i = 0; i < n; i++) {
		if (use_epoll) {
			ready += epoll_wait(ep, out, 4, 0);
		} else {
			struct pollfd p = { .fd = fd, .events = POLLIN | POLLOUT };

			ready += poll(&p, 1, 0);
		}
	}
	if (n)
		printf("%s_ready %d of %ld\n", use_epoll ? "epoll" : "poll", ready, n);
	close(fd);
	close(peer);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 3 && strcmp(argv[1], "rtt") == 0)
		return rtt(atol(argv[2]));
	if (argc == 3 && strcmp(argv[1], "poll") == 0)
		return waits(0, atol(argv[2]));
	if (argc == 3 && strcmp(argv[1], "epoll") == 0)
		return waits(1, atol(argv[2]));
	if (argc == 5 && strcmp(argv[1], "failfast") == 0)
		return failfast(argv[2], atoi(argv[3]), atol(argv[4]));
	fprintf(stderr, "usage: bench rtt N | bench poll N | bench epoll N | bench failfast ADDR PORT N\n");
	return 2;
}

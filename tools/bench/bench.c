/* bench.c -- the measurements behind `make bench`. Run it bare and under
 * the shim side by side (tools/bench.sh does); it only prints figures.
 *
 *   bench rtt N          N one-byte send/recv round trips on a loopback TCP
 *                        connection to an echo thread; prints ns per trip
 *   bench rttrw N        the same round trip with write/read
 *   bench calls KIND N   N calls of one kind on a connected loopback socket
 *                        (send recv write read connect connect-client
 *                        connect-client-name socket resolve) or a pipe
 *                        (pipe-read pipe-write), for callgrind
 *   bench http ADDR PORT N
 *                        N sequential HTTP/1.0 requests, a new connection
 *                        each; prints requests per second and median latency
 *   bench rss            resident memory after one connection, in KiB
 *   bench poll N | bench ppoll N | bench select N | bench epoll N
 *                        N zero-timeout waits for input or output on a
 *                        connected loopback socket (for callgrind)
 *   bench hold           accept and hold connections (prints PORT n)
 *   bench epoll-scale K N PORT
 *                        K idle governed sockets (to a `bench hold` at
 *                        PORT) and one with input pending in one epoll set;
 *                        N zero-timeout waits; prints ns per wait and the
 *                        resident memory after the K connects
 *   bench first ADDR PORT
 *                        the first connect() of the process (the shim maps
 *                        its table there) and the median of the next 20, in us
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
#include <sys/mman.h>
#include <sys/wait.h>
#include <sys/select.h>
#include <sys/resource.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <fcntl.h>

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

/* A system call straight to the kernel: neither libc nor the shim sees it. */
static long raw_syscall3(long nr, long a, long b, long c)
{
	long r;

	__asm__ volatile("syscall" : "=a"(r) : "a"(nr), "D"(a), "S"(b), "d"(c) : "rcx", "r11", "memory");
	return r;
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

/* The server end of keep-alive HTTP exchanges: an answer per request. */
static const char ka_req[] = "GET / HTTP/1.1\r\nHost: bench\r\n\r\n";
static const char ka_ans[] = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";

static void *answer(void *arg)
{
	int fd = *(int *)arg;
	char b[sizeof(ka_req)];
	size_t got = 0;
	ssize_t r;

	while ((r = recv(fd, b + got, sizeof(ka_req) - 1 - got, 0)) > 0)
		if ((got += (size_t)r) == sizeof(ka_req) - 1) {
			got = 0;
			if (send(fd, ka_ans, sizeof(ka_ans) - 1, 0) != (ssize_t)sizeof(ka_ans) - 1)
				break;
		}
	close(fd);
	return NULL;
}

/* One keep-alive HTTP exchange on fd: 0, or -1. */
static int exchange(int fd)
{
	char b[sizeof(ka_ans)];
	size_t got = 0;
	ssize_t r;

	if (send(fd, ka_req, sizeof(ka_req) - 1, 0) != (ssize_t)sizeof(ka_req) - 1)
		return -1;
	while (got < sizeof(ka_ans) - 1 && (r = recv(fd, b + got, sizeof(ka_ans) - 1 - got, 0)) > 0)
		got += (size_t)r;
	return got == sizeof(ka_ans) - 1 ? 0 : -1;
}

/* rw: 0 a byte each way with send/recv, 1 with write/read, 2 keep-alive
 * HTTP exchanges (a request and its answer) */
static int rtt(long n, int rw)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t l = sizeof(a);
	int lfd = socket(AF_INET, SOCK_STREAM, 0), cfd, sfd, one = 1;
	pthread_t th;
	long long t0, t1;
	char b = 'x';

	/* BENCH_PORT: one destination run after run (its slot's history kept) */
	if (getenv("BENCH_PORT")) {
		a.sin_port = htons((uint16_t)atoi(getenv("BENCH_PORT")));
		setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	}
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
	pthread_create(&th, NULL, rw == 2 ? answer : echo, &sfd);
	t0 = now_ns();
	for (long i = 0; i < n; i++) {
		if (rw == 2 ? exchange(cfd) < 0 :
		    rw ? (write(cfd, &b, 1) != 1 || read(cfd, &b, 1) != 1)
		       : (send(cfd, &b, 1, 0) != 1 || recv(cfd, &b, 1, 0) != 1)) {
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

/* max_requests = 1 passed between two processes (the caller's policy): each
 * makes n keep-alive exchanges on its own connection; a place's hand-off is
 * from the moment one process's answer was read (its place given back) to
 * the moment the other's send, held for that place, returned. Prints the
 * hand-offs' p50 and p99 in us. */
#define HANDOFF_MAX 20000
struct handoff {
	long long rel[2]; /* atomic: each side's last answer read */
	int ready;        /* atomic */
	long ngap[2];
	long long gap[2][HANDOFF_MAX];
};

static int ho_lfd, ho_fds[2];

static void *ho_server(void *arg)
{
	pthread_t th[2];

	(void)arg;
	for (int k = 0; k < 2; k++) {
		ho_fds[k] = accept(ho_lfd, NULL, NULL);
		pthread_create(&th[k], NULL, answer, &ho_fds[k]);
	}
	for (int k = 0; k < 2; k++)
		pthread_join(th[k], NULL);
	return NULL;
}

static int handoff(long n)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t l = sizeof(a);
	struct handoff *h = mmap(NULL, sizeof(*h), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	static long long all[2 * HANDOFF_MAX];
	int one = 1, side, cfd;
	pthread_t srv;
	pid_t kid;
	long m = 0;

	ho_lfd = socket(AF_INET, SOCK_STREAM, 0);
	if (n > HANDOFF_MAX)
		n = HANDOFF_MAX;
	if (h == MAP_FAILED || ho_lfd < 0 || bind(ho_lfd, (struct sockaddr *)&a, sizeof(a)) < 0 ||
	    listen(ho_lfd, 4) < 0 || getsockname(ho_lfd, (struct sockaddr *)&a, &l) < 0) {
		perror("bench: handoff");
		return 1;
	}
	memset(h, 0, sizeof(*h));
	kid = fork();
	side = kid == 0;
	if (!side)
		pthread_create(&srv, NULL, ho_server, NULL);
	cfd = socket(AF_INET, SOCK_STREAM, 0);
	if (cfd < 0 || connect(cfd, (struct sockaddr *)&a, sizeof(a)) < 0) {
		perror("bench: handoff connect");
		return 1;
	}
	setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	__atomic_fetch_add(&h->ready, 1, __ATOMIC_SEQ_CST);
	while (__atomic_load_n(&h->ready, __ATOMIC_SEQ_CST) < 2)
		;
	for (long i = 0; i < n; i++) {
		char b[sizeof(ka_ans)];
		size_t got = 0;
		ssize_t r;
		long long t0 = now_ns(), t1, rel;

		if (send(cfd, ka_req, sizeof(ka_req) - 1, 0) != (ssize_t)sizeof(ka_req) - 1)
			return 1;
		t1 = now_ns();
		rel = __atomic_load_n(&h->rel[!side], __ATOMIC_SEQ_CST);
		if (rel > t0 && h->ngap[side] < HANDOFF_MAX) /* held until the other gave its place back */
			h->gap[side][h->ngap[side]++] = t1 - rel;
		while (got < sizeof(ka_ans) - 1 && (r = recv(cfd, b + got, sizeof(ka_ans) - 1 - got, 0)) > 0)
			got += (size_t)r;
		__atomic_store_n(&h->rel[side], now_ns(), __ATOMIC_SEQ_CST);
	}
	close(cfd);
	if (side)
		_exit(0);
	waitpid(kid, NULL, 0);
	pthread_join(srv, NULL);
	for (int s2 = 0; s2 < 2; s2++)
		for (long k = 0; k < h->ngap[s2]; k++)
			all[m++] = h->gap[s2][k];
	if (!m) {
		printf("handoffs 0\n");
		return 0;
	}
	qsort(all, (size_t)m, sizeof(all[0]), cmp_ll);
	printf("handoffs %ld p50_us %.1f p99_us %.1f\n", m, (double)all[m / 2] / 1000,
	       (double)all[m * 99 / 100] / 1000);
	return 0;
}

static int failfast(const char *addr, int port, long n)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	long long *t = calloc((size_t)n + 1, sizeof(*t));
	long refused = 0;

	if (!t || n < 0) {
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
	if (n == 0)
		return 0;   /* the start-up alone, for callgrind */
	qsort(t, (size_t)n, sizeof(*t), cmp_ll);
	printf("failfast_connects %ld\nfailfast_refused %ld\nfailfast_median_ns %lld\nfailfast_p90_ns %lld\n"
	       "failfast_p99_ns %lld\n",
	       n, refused, t[n / 2], t[(n * 90) / 100], t[(n * 99) / 100]);
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

/* N calls of one kind; everything else in the run is the same with and
 * without the shim, so (shim - bare) / N is the cost of one call. */
static int calls(const char *kind, long n)
{
	int peer, fd, p[2];
	char b = 'x', *big;

	if (strncmp(kind, "pipe-", 5) == 0) {
		/* in a process that has made a socket (and so the shim its fd
		 * table): a process that never does leaves the wrapper sooner */
		close(socket(AF_INET, SOCK_STREAM, 0));
		if (pipe(p) < 0)
			return 1;
		fcntl(p[1], F_SETPIPE_SZ, 1 << 20);
		if (strcmp(kind, "pipe-read") == 0) {
			big = calloc(1, (size_t)n + 1);
			if (n && write(p[1], big, (size_t)n) != n)
				return 1;
			for (long i = 0; i < n; i++)
				if (read(p[0], &b, 1) != 1)
					return 1;
			free(big);
		} else {
			for (long i = 0; i < n; i++)
				if (write(p[1], &b, 1) != 1)
					return 1;
		}
		return 0;
	}
	if (strcmp(kind, "resolve") == 0) {
		/* getaddrinfo of a name with a service, as curl and python ask,
		 * and its answer freed: what address_choice costs a lookup */
		struct addrinfo hints = { .ai_family = AF_INET, .ai_socktype = SOCK_STREAM }, *res;

		for (long i = 0; i < n; i++) {
			if (getaddrinfo("localhost", "80", &hints, &res) != 0)
				return 1;
			freeaddrinfo(res);
		}
		return 0;
	}
	if (strcmp(kind, "socket") == 0) {
		/* socket() and close() alone: what the fail-fast figure carries
		 * besides its connect() (one first, in the N=0 run too: the
		 * shim makes its fd table at a process's first socket) */
		for (long i = -1; i < n; i++)
			close(socket(AF_INET, SOCK_STREAM, 0));
		return 0;
	}
	if (strcmp(kind, "connect") == 0 || strcmp(kind, "connect-client") == 0 ||
	    strcmp(kind, "connect-client-name") == 0) {
		/* connect-client: the server end is accepted and closed with
		 * raw system calls, which neither run counts, so the figure is
		 * the client's socket+connect+close alone; connect-client-name:
		 * the same to localhost, resolved once as a program would */
		int raw = kind[7] == '-';
		struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
		socklen_t l = sizeof(a);
		int lfd = socket(AF_INET, SOCK_STREAM, 0);

		if (strcmp(kind, "connect-client-name") == 0) {
			struct addrinfo hints = { .ai_family = AF_INET, .ai_socktype = SOCK_STREAM }, *res;

			if (getaddrinfo("localhost", NULL, &hints, &res) != 0)
				return 1;
			a.sin_addr = ((struct sockaddr_in *)res->ai_addr)->sin_addr;
			freeaddrinfo(res);
		}
		if (bind(lfd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(lfd, 4096) < 0 ||
		    getsockname(lfd, (struct sockaddr *)&a, &l) < 0)
			return 1;
		/* one connect first, in the N=0 run too: what the shim does once,
		 * at a process's first connect (its policy, its table), is not
		 * a connect's own */
		for (long i = -1; i < n; i++) {
			int c = socket(AF_INET, SOCK_STREAM, 0);

			if (connect(c, (struct sockaddr *)&a, sizeof(a)) < 0)
				return 1;
			close(c);
			if (raw)
				raw_syscall3(SYS_close, raw_syscall3(SYS_accept, lfd, 0, 0), 0, 0);
			else
				close(accept(lfd, NULL, NULL));
		}
		return 0;
	}
	fd = connected(&peer);
	if (fd < 0)
		return 1;
	if (!strcmp(kind, "recv") || !strcmp(kind, "read")) {
		big = calloc(1, (size_t)n + 1);
		if (n && send(peer, big, (size_t)n, 0) != n)
			return 1;
		for (long i = 0; i < n; i++)
			if ((kind[0] == 'r' && kind[2] == 'c' ? recv(fd, &b, 1, 0) : read(fd, &b, 1)) != 1)
				return 1;
		free(big);
	} else {
		for (long i = 0; i < n; i++)
			if ((kind[0] == 's' ? send(fd, &b, 1, 0) : write(fd, &b, 1)) != 1)
				return 1;
	}
	return 0;
}

/* A non-blocking socket connected as an event loop does it (EINPROGRESS,
 * poll for output, SO_ERROR): the fd, or -1. */
static int connect_nb(const struct sockaddr_in *a)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0), err = 0;
	socklen_t l = sizeof(err);
	struct pollfd p = { .fd = fd, .events = POLLOUT };

	if (fd < 0)
		return -1;
	if (connect(fd, (const struct sockaddr *)a, sizeof(*a)) == 0)
		return fd;
	if (errno != EINPROGRESS || poll(&p, 1, 5000) != 1 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &l) < 0 ||
	    err) {
		close(fd);
		return -1;
	}
	return fd;
}

/* Sequential HTTP/1.0 requests, a new connection each, as a scraper makes
 * them; nb: non-blocking sockets waited on with poll, as an event loop. */
static int http(const char *addr, int port, long n, int nb)
{
	static const char req[] = "GET / HTTP/1.0\r\nHost: bench\r\n\r\n";
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	long long *t = calloc((size_t)n, sizeof(*t)), t0 = now_ns();
	char buf[4096];
	long ok = 0;

	if (!t || n <= 0 || inet_pton(AF_INET, addr, &a.sin_addr) != 1)
		return 2;
	for (long i = 0; i < n; i++) {
		long long s = now_ns();
		int fd = nb ? connect_nb(&a) : socket(AF_INET, SOCK_STREAM, 0);
		ssize_t r, got = 0;

		if (fd >= 0 && (nb || connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0) &&
		    send(fd, req, sizeof(req) - 1, 0) > 0) {
			struct pollfd p = { .fd = fd, .events = POLLIN };

			while ((!nb || poll(&p, 1, 5000) == 1) && (r = recv(fd, buf, sizeof(buf), 0)) > 0)
				got += r;
			if (got > 12 && memcmp(buf, "HTTP/1.", 7) == 0)
				ok++;
		}
		close(fd);
		t[i] = now_ns() - s;
	}
	{
		double secs = (double)(now_ns() - t0) / 1e9;

		qsort(t, (size_t)n, sizeof(*t), cmp_ll);
		printf("http_requests %ld\nhttp_ok %ld\nhttp_rps %.0f\nhttp_median_us %.1f\nhttp_p99_us %.1f\n",
		       n, ok, (double)n / secs, (double)t[n / 2] / 1e3, (double)t[(n * 99) / 100] / 1e3);
	}
	free(t);
	return ok == n ? 0 : 1;
}

static long status_kib(const char *field)
{
	char line[256];
	long v = -1;
	FILE *f = fopen("/proc/self/status", "r");

	while (f && fgets(line, sizeof(line), f))
		if (strncmp(line, field, strlen(field)) == 0)
			v = atol(line + strlen(field));
	if (f)
		fclose(f);
	return v;
}

static int rss(void)
{
	int peer, fd = connected(&peer);
	char b = 'x';

	if (fd < 0 || send(fd, &b, 1, 0) != 1 || recv(peer, &b, 1, 0) != 1)
		return 1;
	printf("rss_kib %ld\n", status_kib("VmRSS:"));
	return 0;
}

enum { W_POLL, W_EPOLL, W_PPOLL, W_SELECT };
static const char *const wait_names[] = { "poll", "epoll", "ppoll", "select" };

/* N zero-timeout waits for input or output on one connected socket. */
static int waits(int kind, long n)
{
	int peer, fd = connected(&peer), ep = -1, ready = 0;
	struct epoll_event ev = { .events = EPOLLIN | EPOLLOUT }, out[4];
	struct timespec zero = { 0, 0 };

	if (fd < 0) {
		perror("bench: connect");
		return 1;
	}
	if (kind == W_EPOLL) {
		ep = epoll_create1(0);
		ev.data.fd = fd;
		epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
	}
	for (long i = 0; i < n; i++) {
		struct pollfd p = { .fd = fd, .events = POLLIN | POLLOUT };
		struct timeval tv = { 0, 0 };
		fd_set r, w;

		switch (kind) {
		case W_EPOLL:
			ready += epoll_wait(ep, out, 4, 0);
			break;
		case W_PPOLL:
			ready += ppoll(&p, 1, &zero, NULL);
			break;
		case W_SELECT:
			FD_ZERO(&r);
			FD_ZERO(&w);
			FD_SET(fd, &r);
			FD_SET(fd, &w);
			ready += select(fd + 1, &r, &w, NULL, &tv);
			break;
		default:
			ready += poll(&p, 1, 0);
			break;
		}
	}
	if (n)
		printf("%s_ready %d of %ld\n", wait_names[kind], ready, n);
	close(fd);
	close(peer);
	return 0;
}

static void raise_nofile(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
}

/* A server that accepts and holds every connection, never writing, and
 * closes each when its client does: the other ends of epoll-scale's idle
 * sockets, in a process of its own so that 10,000 of them fit each
 * process's descriptor limit. */
static int hold(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t l = sizeof(a);
	int lfd = socket(AF_INET, SOCK_STREAM, 0), ep = epoll_create1(0);
	struct epoll_event ev = { .events = EPOLLIN }, out[256];
	char buf[512];

	raise_nofile();
	if (lfd < 0 || ep < 0 || bind(lfd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(lfd, 4096) < 0 ||
	    getsockname(lfd, (struct sockaddr *)&a, &l) < 0)
		return 1;
	ev.data.fd = lfd;
	epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev);
	printf("PORT %d\n", ntohs(a.sin_port));
	fflush(stdout);
	for (;;) {
		int n = epoll_wait(ep, out, 256, -1);

		for (int i = 0; i < n; i++) {
			int fd = out[i].data.fd;

			if (fd == lfd) {
				int c = accept(lfd, NULL, NULL);

				if (c >= 0) {
					ev.data.fd = c;
					epoll_ctl(ep, EPOLL_CTL_ADD, c, &ev);
				}
			} else if (read(fd, buf, sizeof(buf)) <= 0) {
				close(fd);
			}
		}
	}
}

/* K idle sockets connected to the holder at PORT and one connected pair
 * with a byte pending, all in one epoll set; N zero-timeout waits. */
static int epoll_scale(long k, long n, int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
				 .sin_port = htons((uint16_t)port) };
	struct epoll_event ev, out[64];
	struct timespec t0, t1;
	struct rlimit rl;
	int ep, peer, active, ready = 0;
	char b = 'x';

	raise_nofile();
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && (rlim_t)k + 64 > rl.rlim_cur) {
		fprintf(stderr, "bench: %ld sockets need a descriptor limit above %ld\n", k, k + 64);
		return 1;
	}
	ep = epoll_create1(0);
	active = connected(&peer);
	if (ep < 0 || active < 0 || send(peer, &b, 1, 0) != 1)
		return 1;
	ev.events = EPOLLIN;
	ev.data.fd = active;
	epoll_ctl(ep, EPOLL_CTL_ADD, active, &ev);
	for (long i = 0; i < k; i++) {
		int fd = socket(AF_INET, SOCK_STREAM, 0);

		if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
			perror("bench: connect");
			return 1;
		}
		ev.data.fd = fd;
		epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
	}
	printf("rss_kib %ld\n", status_kib("VmRSS:"));
	while (epoll_wait(ep, out, 64, 1000) < 1)
		;   /* the active socket's byte arrived */
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (long i = 0; i < n; i++)
		ready += epoll_wait(ep, out, 64, 0);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	if (n)
		printf("epoll_scale %ld sockets: %.0f ns per wait, %d ready\n", k,
		       ((t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec)) / n, ready);
	return 0;
}

static double us_since(const struct timespec *t0)
{
	struct timespec t1;

	clock_gettime(CLOCK_MONOTONIC, &t1);
	return (t1.tv_sec - t0->tv_sec) * 1e6 + (t1.tv_nsec - t0->tv_nsec) / 1e3;
}

static int cmp_double(const void *x, const void *y)
{
	double a = *(const double *)x, b = *(const double *)y;

	return a < b ? -1 : a > b;
}

/* The process's first connect, then 20 more: what the first one costs on
 * top (the shim maps its table there). */
static long faults(void)
{
	struct rusage r;

	getrusage(RUSAGE_SELF, &r);
	return r.ru_minflt + r.ru_majflt;
}

/* A process's first socket+connect (the shim maps its table and caches
 * then), its page faults, and the next ones' median. */
static int first(const char *addr, int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((unsigned short)port) };
	double t[21];
	long f0 = 0, f1 = 0;

	if (inet_pton(AF_INET, addr, &a.sin_addr) != 1)
		return 2;
	for (int i = 0; i < 21; i++) {
		struct timespec t0;
		int fd;

		if (i == 0)
			f0 = faults();
		clock_gettime(CLOCK_MONOTONIC, &t0);
		fd = socket(AF_INET, SOCK_STREAM, 0);
		if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0)
			return 1;
		t[i] = us_since(&t0);
		if (i == 0)
			f1 = faults();
		close(fd);
	}
	qsort(t + 1, 20, sizeof(double), cmp_double);
	printf("first_connect_us %.1f\nfirst_connect_faults %ld\nnext_connect_median_us %.1f\n", t[0], f1 - f0,
	       t[11]);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 3 && strcmp(argv[1], "rtt") == 0)
		return rtt(atol(argv[2]), 0);
	if (argc == 3 && strcmp(argv[1], "rttrw") == 0)
		return rtt(atol(argv[2]), 1);
	if (argc == 3 && strcmp(argv[1], "keepalive") == 0)
		return rtt(atol(argv[2]), 2);
	if (argc == 4 && strcmp(argv[1], "calls") == 0)
		return calls(argv[2], atol(argv[3]));
	if (argc == 5 && strcmp(argv[1], "http") == 0)
		return http(argv[2], atoi(argv[3]), atol(argv[4]), 0);
	if (argc == 5 && strcmp(argv[1], "http-nb") == 0)
		return http(argv[2], atoi(argv[3]), atol(argv[4]), 1);
	if (argc == 2 && strcmp(argv[1], "rss") == 0)
		return rss();
	for (int k = 0; k < 4; k++)
		if (argc == 3 && strcmp(argv[1], wait_names[k]) == 0)
			return waits(k, atol(argv[2]));
	if (argc == 5 && strcmp(argv[1], "epoll-scale") == 0)
		return epoll_scale(atol(argv[2]), atol(argv[3]), atoi(argv[4]));
	if (argc == 2 && strcmp(argv[1], "hold") == 0)
		return hold();
	if (argc == 4 && strcmp(argv[1], "first") == 0)
		return first(argv[2], atoi(argv[3]));
	if (argc == 3 && strcmp(argv[1], "handoff") == 0)
		return handoff(atol(argv[2]));
	if (argc == 5 && strcmp(argv[1], "failfast") == 0)
		return failfast(argv[2], atoi(argv[3]), atol(argv[4]));
	fprintf(stderr, "usage: bench rtt N | bench keepalive N | bench poll N | bench epoll N | bench failfast ADDR PORT N\n");
	return 2;
}

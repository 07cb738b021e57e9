/* faultsrv.c -- a loopback server that misbehaves on purpose, for tests,
 * demos and operators rehearsing failures.
 *
 *   faultsrv --mode MODE [--port N] [--bind ADDR] [--interval MS]
 *            [--status CODE] [--count-file FILE] [--delay MS] [--idle MS]
 *            [--idle-random] [--seed N]
 *
 * MODE: http (200), status (answer --status CODE), refuse (bound, not
 * listening), blackhole (accept queue full, SYNs dropped), silent (accept and
 * never answer), reset (accept and reset), drip (answer one byte per
 * --interval), reset-request (read the request, then reset), keepalive
 * (answer every request on a connection with Content-Length and no
 * "Connection: close", then close the connection once it has been idle
 * --idle ms, 0 = right after each answer; --idle-random draws each idle time
 * uniformly from 0 to --idle, as servers past their keep-alive timeout
 * race their clients); --delay holds every answer that long. Prints "PORT n"
 * on stdout once ready. SIGUSR1 turns it into a healthy http server, SIGUSR2
 * into a silent one.
 *
 * Every client socket is non-blocking, and a poll round's results are
 * applied to the clients that were polled, before that round's accept, so
 * one client never waits for another. */
#include <arpa/inet.h>
#include <err.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum mode { M_HTTP, M_STATUS, M_REFUSE, M_BLACKHOLE, M_SILENT, M_RESET, M_DRIP, M_RESET_REQUEST, M_KEEPALIVE };
static const char *const mode_names[] = { "http", "status", "refuse", "blackhole", "silent", "reset", "drip",
	"reset-request", "keepalive" };

#define MAXC 1024

struct client {
	int fd;
	size_t got;          /* request bytes seen (up to the header end) */
	int answered;        /* request complete, response chosen */
	char resp[512];
	size_t resp_len, sent;
	long long next_ms;   /* next drip byte */
	int match;           /* how much of "\r\n\r\n" has been seen */
	long long close_ms;  /* keepalive: close when idle until then, 0 = not idle */
};

static volatile sig_atomic_t switch_to = -1;
static struct client cl[MAXC];
static int ncl;
static unsigned long accepts;
static const char *count_file;

static long long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void on_usr(int sig)
{
	switch_to = sig == SIGUSR1 ? M_HTTP : M_SILENT;
}

static void write_count(void)
{
	char tmp[4096];
	FILE *f;

	if (!count_file)
		return;
	snprintf(tmp, sizeof(tmp), "%s.tmp", count_file);
	f = fopen(tmp, "w");
	if (!f)
		return;
	fprintf(f, "%lu\n", accepts);
	fclose(f);
	rename(tmp, count_file);
}

static int make_sock(const char *bind_addr, int port, struct sockaddr_storage *ss, socklen_t *sl)
{
	struct sockaddr_in *s4 = (struct sockaddr_in *)ss;
	struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;
	int one = 1, fd;

	memset(ss, 0, sizeof(*ss));
	if (inet_pton(AF_INET, bind_addr, &s4->sin_addr) == 1) {
		s4->sin_family = AF_INET;
		s4->sin_port = htons((uint16_t)port);
		*sl = sizeof(*s4);
	} else if (inet_pton(AF_INET6, bind_addr, &s6->sin6_addr) == 1) {
		s6->sin6_family = AF_INET6;
		s6->sin6_port = htons((uint16_t)port);
		*sl = sizeof(*s6);
	} else {
		errx(2, "--bind %s: not an address", bind_addr);
	}
	fd = socket(ss->ss_family, SOCK_STREAM, 0);
	if (fd < 0)
		err(1, "socket");
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)ss, *sl) < 0)
		err(1, "bind %s:%d", bind_addr, port);
	*sl = sizeof(*ss);
	getsockname(fd, (struct sockaddr *)ss, sl);
	return fd;
}

static int bound_port(const struct sockaddr_storage *ss)
{
	return ntohs(ss->ss_family == AF_INET ? ((const struct sockaddr_in *)ss)->sin_port
					      : ((const struct sockaddr_in6 *)ss)->sin6_port);
}

/* Fill the accept queue of a listener with backlog 0 so the kernel drops
 * every further SYN: a host that does not answer, on loopback. */
static void fill_queue(const struct sockaddr_storage *ss, socklen_t sl)
{
	for (int i = 0; i < 16; i++) {
		int fd = socket(ss->ss_family, SOCK_STREAM | SOCK_NONBLOCK, 0);
		struct pollfd p = { .fd = fd, .events = POLLOUT };

		if (fd < 0)
			err(1, "socket");
		if (connect(fd, (const struct sockaddr *)ss, sl) == 0)
			continue;   /* kept open: it holds a place in the queue */
		if (errno != EINPROGRESS)
			err(1, "filling the accept queue");
		if (poll(&p, 1, 300) == 0) {
			close(fd);  /* this SYN was dropped: the queue is full */
			return;
		}
	}
	errx(1, "could not fill the accept queue");
}

static void drop(int i)
{
	close(cl[i].fd);
	cl[i] = cl[--ncl];
}

static void choose_response(struct client *c, enum mode m, int status)
{
	static const char body[] = "hello from faultsrv\n";
	const char *reason = status == 200 ? "OK" : status == 503 ? "Service Unavailable" :
			     status == 500 ? "Internal Server Error" : status == 404 ? "Not Found" : "Status";

	c->answered = 1;
	if (m == M_SILENT)
		return;
	c->resp_len = (size_t)snprintf(c->resp, sizeof(c->resp),
		"HTTP/1.1 %d %s\r\nContent-Type: text/plain\r\nContent-Length: %zu\r\n%s\r\n%s",
		m == M_STATUS ? status : 200, reason, sizeof(body) - 1,
		m == M_KEEPALIVE ? "" : "Connection: close\r\n", body);
	c->next_ms = now_ms();
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: faultsrv --mode MODE [--port N] [--bind ADDR] [--interval MS] [--status CODE]\n"
		"                [--count-file FILE] [--delay MS] [--idle MS] [--idle-random] [--seed N]\n"
		"A loopback server that misbehaves on purpose. Prints \"PORT n\" once ready.\n"
		"\n"
		"MODE is what every connection gets:\n"
		"  http           a 200 answer, then close\n"
		"  status         the answer --status CODE, then close (--status alone picks it)\n"
		"  refuse         nothing listens on the port: connects are refused\n"
		"  blackhole      the accept queue is full: connects hang (SYNs dropped)\n"
		"  silent         accepts, reads, never answers\n"
		"  reset          accepts, then resets the connection\n"
		"  drip           a 200 answer one byte every --interval MS (default 200)\n"
		"  reset-request  reads the request, then resets\n"
		"  keepalive      answers every request on a kept-alive connection; closes one\n"
		"                 idle for --idle MS (0: after each answer; --idle-random: a\n"
		"                 random idle time up to it, drawn from --seed N)\n"
		"\n"
		"  --port N          listen on N (default: a free port)\n"
		"  --bind ADDR       listen on ADDR (default 127.0.0.1)\n"
		"  --delay MS        hold every answer that long\n"
		"  --count-file FILE write the number of accepted connections there\n"
		"\n"
		"SIGUSR1 turns it into a healthy http server, SIGUSR2 into a silent one.\n");
}

/* A non-negative number of an option, or exit 2 naming it. */
static int num_arg(const char *opt, const char *v)
{
	char *end;
	long n;

	errno = 0;
	n = strtol(v, &end, 10);
	if (errno || end == v || *end || n < 0 || n > 1000000000)
		errx(2, "--%s %s: expected a number from 0 to 1000000000", opt, v);
	return (int)n;
}

static int idle_ms, idle_random;
static unsigned long long rng = 0x9e3779b97f4a7c15ULL;

/* The idle time after an answer: --idle, or uniform in [0, --idle]. */
static long long idle_for(void)
{
	if (!idle_random || idle_ms == 0)
		return idle_ms;
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (long long)(rng % (unsigned long long)(idle_ms + 1));
}

/* Input on client i: the request's bytes (the answer chosen at its end),
 * or its end. Returns 0, or -1 when the client was dropped. */
static int client_input(int i, int mode, int status, int delay)
{
	struct client *cc = &cl[i];
	char buf[4096];
	ssize_t r = read(cc->fd, buf, sizeof(buf));

	if (r < 0 && (errno == EAGAIN || errno == EINTR))
		return 0;
	if (r <= 0) {
		drop(i);
		return -1;
	}
	cc->close_ms = 0;   /* a request: no longer idle */
	for (ssize_t j = 0; j < r && !cc->answered; j++) {
		static const char end[] = "\r\n\r\n";

		cc->match = buf[j] == end[cc->match] ? cc->match + 1 : (buf[j] == '\r');
		if (cc->match == 4 && mode == M_RESET_REQUEST) {
			/* the request read, the connection reset: deterministic,
			 * unlike a reset at accept that races the handshake */
			struct linger lg = { 1, 0 };

			setsockopt(cc->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
			drop(i);   /* SO_LINGER 0: the close sends a reset */
			return -1;
		}
		if (cc->match == 4) {
			choose_response(cc, (enum mode)mode, status);
			cc->next_ms = now_ms() + delay;
		}
	}
	return 0;
}

/* Client i may take output: the next piece of its answer. Returns 0, or
 * -1 when the client was dropped. */
static int client_output(int i, int mode, int interval)
{
	struct client *cc = &cl[i];
	size_t chunk = mode == M_DRIP ? 1 : cc->resp_len - cc->sent;
	ssize_t w = write(cc->fd, cc->resp + cc->sent, chunk);

	if (w < 0 && (errno == EAGAIN || errno == EINTR))
		return 0;
	if (w < 0) {
		drop(i);
		return -1;
	}
	cc->sent += (size_t)w;
	cc->next_ms = mode == M_DRIP ? now_ms() + interval : 0;
	if (cc->sent < cc->resp_len)
		return 0;
	if (mode != M_KEEPALIVE) {
		shutdown(cc->fd, SHUT_WR);
		return 0;
	}
	/* keep-alive: ready for the next request, closed once idle */
	cc->answered = 0;
	cc->match = 0;
	cc->sent = cc->resp_len = 0;
	cc->close_ms = now_ms() + idle_for();
	if (idle_ms == 0 && !idle_random) {
		drop(i);
		return -1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "mode", required_argument, NULL, 'm' },
		{ "port", required_argument, NULL, 'p' },
		{ "bind", required_argument, NULL, 'b' },
		{ "interval", required_argument, NULL, 'i' },
		{ "status", required_argument, NULL, 's' },
		{ "count-file", required_argument, NULL, 'c' },
		{ "delay", required_argument, NULL, 'd' },
		{ "idle", required_argument, NULL, 'I' },
		{ "idle-random", no_argument, NULL, 'R' },
		{ "seed", required_argument, NULL, 'S' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *bind_addr = "127.0.0.1";
	int port = 0, interval = 200, status = 200, mode = M_HTTP, delay = 0, c, lfd;
	struct sockaddr_storage ss;
	socklen_t sl;

	while ((c = getopt_long(argc, argv, "m:p:b:i:s:c:d:h", opts, NULL)) != -1) {
		switch (c) {
		case 'm':
			mode = -1;
			for (int i = 0; i < (int)(sizeof(mode_names) / sizeof(mode_names[0])); i++)
				if (strcmp(optarg, mode_names[i]) == 0)
					mode = i;
			if (mode < 0)
				errx(2, "--mode %s: expected http, status, refuse, blackhole, silent, reset, reset-request, drip or keepalive", optarg);
			break;
		case 'p': port = num_arg("port", optarg); break;
		case 'b': bind_addr = optarg; break;
		case 'i': interval = num_arg("interval", optarg); break;
		case 's': status = num_arg("status", optarg); mode = M_STATUS; break;
		case 'c': count_file = optarg; break;
		case 'd': delay = num_arg("delay", optarg); break;
		case 'I': idle_ms = num_arg("idle", optarg); break;
		case 'R': idle_random = 1; break;
		case 'S': rng = (unsigned long long)num_arg("seed", optarg) * 2654435761ULL + 1; break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind < argc) {
		usage(stderr);
		return 2;
	}
	signal(SIGPIPE, SIG_IGN);
	signal(SIGUSR1, on_usr);
	signal(SIGUSR2, on_usr);
	lfd = make_sock(bind_addr, port, &ss, &sl);
	if (mode == M_BLACKHOLE) {
		if (listen(lfd, 0) < 0)
			err(1, "listen");
		fill_queue(&ss, sl);
	} else if (mode != M_REFUSE) {
		if (listen(lfd, 128) < 0)
			err(1, "listen");
	}
	write_count();
	printf("PORT %d\n", bound_port(&ss));
	fflush(stdout);

	for (;;) {
		struct pollfd p[MAXC + 1];
		long long now = now_ms(), wait = 1000;
		int n = 0, polled, listening = mode != M_REFUSE && mode != M_BLACKHOLE;

		if (switch_to >= 0) {
			if (mode == M_REFUSE || mode == M_BLACKHOLE) {
				close(lfd);
				lfd = make_sock(bind_addr, bound_port(&ss), &ss, &sl);
				listen(lfd, 128);
			}
			mode = switch_to;
			switch_to = -1;
			continue;
		}
		/* clients first, at p[i] for cl[i]; the listener last */
		for (int i = ncl - 1; i >= 0; i--) {
			if (cl[i].close_ms && cl[i].close_ms <= now)
				drop(i);   /* keepalive: idle too long */
		}
		for (int i = 0; i < ncl; i++) {
			p[n].fd = cl[i].fd;
			p[n].events = POLLIN;
			p[n].revents = 0;
			if (cl[i].answered && cl[i].sent < cl[i].resp_len) {
				if (cl[i].next_ms <= now)
					p[n].events |= POLLOUT;
				else if (cl[i].next_ms - now < wait)
					wait = cl[i].next_ms - now;
			}
			if (cl[i].close_ms && cl[i].close_ms - now < wait)
				wait = cl[i].close_ms - now;
			n++;
		}
		polled = n;
		if (listening) {
			p[n].fd = lfd;
			p[n].events = POLLIN;
			p[n].revents = 0;
			n++;
		}
		if (poll(p, (nfds_t)n, (int)wait) < 0) {
			if (errno == EINTR)
				continue;
			err(1, "poll");
		}
		/* downwards: drop(i) moves the last client, already handled, into i */
		for (int i = polled - 1; i >= 0; i--) {
			if ((p[i].revents & (POLLIN | POLLHUP | POLLERR)) && client_input(i, mode, status, delay) < 0)
				continue;
			if ((p[i].revents & POLLOUT) && cl[i].answered && cl[i].sent < cl[i].resp_len &&
			    cl[i].next_ms <= now_ms())
				client_output(i, mode, interval);
		}
		if (listening && (p[polled].revents & POLLIN)) {
			int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK);

			if (fd >= 0) {
				accepts++;
				write_count();
				if (mode == M_RESET || ncl == MAXC) {
					struct linger lg = { 1, 0 };

					setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
					close(fd);
				} else {
					memset(&cl[ncl], 0, sizeof(cl[ncl]));
					cl[ncl++].fd = fd;
				}
			}
		}
	}
}

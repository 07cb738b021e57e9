/* fclient.c -- a small C client for the integration tests, built with
 * -O2 -D_FORTIFY_SOURCE=2 so that it calls __recv_chk and __read_chk.
 *
 *   fclient [options] ADDR PORT
 *     --nonblock        non-blocking connect, result read with SO_ERROR
 *     --rcvtimeo MS     set the program's own SO_RCVTIMEO
 *     --use recv|read   which call reads the reply (default recv)
 *     --chunk N         bytes asked for per read, at most 4096 (not a constant:
 *                       the fortified __recv_chk checks it at run time)
 *     --loop N          connect N times (no request), count results
 *     --threads T       run the loop in T threads
 *     --fork            also run the loop in a forked child
 *     --no-request      connect and read without sending anything
 *     --gethostbyname   resolve a name ADDR with gethostbyname (default getaddrinfo)
 *     --poll            event-loop style: non-blocking socket, every wait in
 *                       poll() (fortified: __poll_chk), 10 s program timeout
 *     --send-bytes N    connect, then one blocking call that writes N bytes
 *                       (--send-with send|write|writev|sendmsg|sendmmsg; --sa-restart: a
 *                       SA_RESTART SIGALRM every 20 ms meanwhile), and report
 *                       what it returned and the socket's SO_SNDTIMEO
 *
 * The reply goes to stdout; the last line on stderr is one JSON object with
 * errno names and milliseconds. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static struct sockaddr_storage dst;
static socklen_t dstlen;
static int loops, nonblock, use_poll;
static nfds_t poll_nfds = 1;   /* not a constant: poll() becomes __poll_chk */
static int refused, ok, other;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000.0 + ts.tv_nsec / 1e6;
}

static const char *ename(int e)
{
	const char *n = e ? strerrorname_np(e) : "OK";

	return n ? n : "?";
}

/* Returns 0 or an errno. */
static int do_connect(int *fdp)
{
	int fd = socket(dst.ss_family, SOCK_STREAM | (nonblock ? SOCK_NONBLOCK : 0), 0), e = 0;
	socklen_t l = sizeof(e);

	*fdp = fd;
	if (connect(fd, (struct sockaddr *)&dst, dstlen) == 0)
		return 0;
	if (!nonblock || errno != EINPROGRESS)
		return errno;
	{
		struct pollfd p[2] = { { .fd = fd, .events = POLLOUT }, { .fd = -1 } };

		if (poll(p, poll_nfds, 10000) <= 0)
			return EINPROGRESS;
	}
	if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &l) < 0)
		return errno;
	return e;
}

static void *loop_body(void *arg)
{
	(void)arg;
	for (int i = 0; i < loops; i++) {
		int fd, e = do_connect(&fd);

		pthread_mutex_lock(&mu);
		if (e == ECONNREFUSED)
			refused++;
		else if (e == 0)
			ok++;
		else
			other++;
		pthread_mutex_unlock(&mu);
		close(fd);
	}
	return NULL;
}

static volatile long alarms;
static void on_alarm(int s)
{
	(void)s;
	alarms++;
}

/* One blocking call that writes n bytes, in two halves where it takes a
 * vector (sendmmsg: two messages, its count the bytes of those sent);
 * what it returned, and the socket's SO_SNDTIMEO after it. restart: a
 * SIGALRM handler installed with SA_RESTART fires every 20 ms meanwhile,
 * and send or write loops on short counts until n went or one fails. */
static int send_once(int fd, size_t n, const char *with, double connect_ms, int restart)
{
	struct mmsghdr mm[2];
	char *buf = malloc(n);
	struct iovec iov[2];
	struct msghdr msg = { .msg_iov = iov, .msg_iovlen = 2 };
	struct timeval tv = { -1, -1 };
	socklen_t l = sizeof(tv);
	double t0 = now_ms();
	ssize_t r;
	int e = 0;

	if (!buf)
		return 2;
	memset(buf, 'x', n);
	iov[0].iov_base = buf;
	iov[0].iov_len = n / 2;
	iov[1].iov_base = buf + n / 2;
	iov[1].iov_len = n - n / 2;
	if (restart) {
		struct sigaction sa = { .sa_handler = on_alarm, .sa_flags = SA_RESTART };
		struct itimerval it = { { 0, 20000 }, { 0, 20000 } };

		sigaction(SIGALRM, &sa, NULL);
		setitimer(ITIMER_REAL, &it, NULL);
	}
	memset(mm, 0, sizeof(mm));
	mm[0].msg_hdr.msg_iov = &iov[0];
	mm[0].msg_hdr.msg_iovlen = 1;
	mm[1].msg_hdr.msg_iov = &iov[1];
	mm[1].msg_hdr.msg_iovlen = 1;
	if (restart) {
		/* as a careful program writes: on after a short count (a signal
		 * that lands after some bytes moved ends the call there, bare as
		 * well); EINTR, which SA_RESTART rules out, ends the loop */
		size_t off = 0;

		r = 0;
		while (off < n) {
			ssize_t k = !strcmp(with, "write") ? write(fd, buf + off, n - off)
							   : send(fd, buf + off, n - off, 0);

			if (k < 0) {
				r = -1;
				break;
			}
			off += (size_t)k;
			r = (ssize_t)off;
		}
	} else if (!strcmp(with, "sendmmsg")) {
		int k = sendmmsg(fd, mm, 2, 0);

		r = k < 0 ? -1 : 0;
		for (int i = 0; i < k; i++)
			r += mm[i].msg_len;
	} else if (!strcmp(with, "write"))
		r = write(fd, buf, n);
	else if (!strcmp(with, "writev"))
		r = writev(fd, iov, 2);
	else if (!strcmp(with, "sendmsg"))
		r = sendmsg(fd, &msg, 0);
	else
		r = send(fd, buf, n, 0);
	if (r < 0)
		e = errno;
	if (restart) {
		struct itimerval z = { { 0, 0 }, { 0, 0 } };

		setitimer(ITIMER_REAL, &z, NULL);
	}
	getsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, &l);
	fprintf(stderr,
		"{\"connect_ms\": %.1f, \"sent\": %zd, \"send_errno\": \"%s\", \"send_ms\": %.1f, "
		"\"sndtimeo_us\": %lld, \"alarms\": %ld}\n",
		connect_ms, r, ename(e), now_ms() - t0, (long long)tv.tv_sec * 1000000 + tv.tv_usec, alarms);
	close(fd);
	free(buf);
	return r == (ssize_t)n ? 0 : 1;
}

int main(int argc, char **argv)
{
	int use_ghbn = 0, rcvtimeo = 0, use_read = 0, threads = 1, dofork = 0, request = 1, chunk = 512;
	long send_bytes = 0;
	const char *send_with = "send";
	int restart = 0;
	struct sockaddr_in *s4 = (struct sockaddr_in *)&dst;
	struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&dst;
	const char *addr, *port;
	int i = 1;

	for (; i < argc && strncmp(argv[i], "--", 2) == 0; i++) {
		if (!strcmp(argv[i], "--nonblock"))
			nonblock = 1;
		else if (!strcmp(argv[i], "--rcvtimeo") && i + 1 < argc)
			rcvtimeo = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--use") && i + 1 < argc)
			use_read = !strcmp(argv[++i], "read");
		else if (!strcmp(argv[i], "--chunk") && i + 1 < argc)
			chunk = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--loop") && i + 1 < argc)
			loops = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
			threads = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--fork"))
			dofork = 1;
		else if (!strcmp(argv[i], "--poll"))
			use_poll = nonblock = 1;
		else if (!strcmp(argv[i], "--poll-nfds") && i + 1 < argc)
			poll_nfds = (nfds_t)atoi(argv[++i]);
		else if (!strcmp(argv[i], "--gethostbyname"))
			use_ghbn = 1;
		else if (!strcmp(argv[i], "--no-request"))
			request = 0;
		else if (!strcmp(argv[i], "--send-bytes") && i + 1 < argc)
			send_bytes = atol(argv[++i]);
		else if (!strcmp(argv[i], "--sa-restart"))
			restart = 1;
		else if (!strcmp(argv[i], "--send-with") && i + 1 < argc)
			send_with = argv[++i];
		else {
			fprintf(stderr, "fclient: unknown option %s\n", argv[i]);
			return 2;
		}
	}
	if (argc - i != 2) {
		fprintf(stderr, "usage: fclient [options] ADDR PORT\n");
		return 2;
	}
	addr = argv[i];
	port = argv[i + 1];
	memset(&dst, 0, sizeof(dst));
	if (inet_pton(AF_INET, addr, &s4->sin_addr) == 1) {
		s4->sin_family = AF_INET;
		s4->sin_port = htons((uint16_t)atoi(port));
		dstlen = sizeof(*s4);
	} else if (inet_pton(AF_INET6, addr, &s6->sin6_addr) == 1) {
		s6->sin6_family = AF_INET6;
		s6->sin6_port = htons((uint16_t)atoi(port));
		dstlen = sizeof(*s6);
	} else if (use_ghbn) {
		struct hostent *h = gethostbyname(addr);

		if (!h || h->h_addrtype != AF_INET) {
			fprintf(stderr, "fclient: %s: cannot resolve\n", addr);
			return 2;
		}
		s4->sin_family = AF_INET;
		s4->sin_port = htons((uint16_t)atoi(port));
		memcpy(&s4->sin_addr, h->h_addr_list[0], 4);
		dstlen = sizeof(*s4);
	} else {
		struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *res;

		if (getaddrinfo(addr, port, &hints, &res) != 0) {
			fprintf(stderr, "fclient: %s: cannot resolve\n", addr);
			return 2;
		}
		memcpy(&dst, res->ai_addr, res->ai_addrlen);
		dstlen = res->ai_addrlen;
		freeaddrinfo(res);
	}

	if (loops) {
		pthread_t th[64];
		pid_t child = -1;
		int status = 0;

		if (dofork)
			child = fork();
		if (threads > 64)
			threads = 64;
		for (int t = 0; t < threads; t++)
			pthread_create(&th[t], NULL, loop_body, NULL);
		for (int t = 0; t < threads; t++)
			pthread_join(th[t], NULL);
		if (child == 0) {
			fprintf(stderr, "{\"child\": true, \"refused\": %d, \"ok\": %d, \"other\": %d}\n", refused, ok, other);
			_exit(0);
		}
		if (child > 0)
			waitpid(child, &status, 0);
		fprintf(stderr, "{\"refused\": %d, \"ok\": %d, \"other\": %d}\n", refused, ok, other);
		return 0;
	}

	{
		char buf[4096];   /* known size, unknown length: fortified calls */
		double t0 = now_ms(), t1, t2;
		int fd, ce, re = 0, total = 0;
		ssize_t r;

		ce = do_connect(&fd);
		t1 = now_ms();
		if (ce) {
			fprintf(stderr, "{\"connect\": \"%s\", \"connect_ms\": %.1f}\n", ename(ce), t1 - t0);
			return 1;
		}
		if (rcvtimeo) {
			struct timeval tv = { rcvtimeo / 1000, (rcvtimeo % 1000) * 1000 };

			setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
		}
		if (send_bytes > 0)
			return send_once(fd, (size_t)send_bytes, send_with, t1 - t0, restart);
		if (nonblock && !use_poll) {
			int fl = fcntl(fd, F_GETFL);

			fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
		}
		if (request) {
			static const char req[] = "GET / HTTP/1.0\r\nHost: test\r\n\r\n";

			if (send(fd, req, sizeof(req) - 1, 0) < 0)
				re = errno;
		}
		while (!re) {
			if (use_poll) {
				struct pollfd p[2] = { { .fd = fd, .events = POLLIN }, { .fd = -1 } };
				int n = poll(p, poll_nfds, 10000);

				if (n == 0) {
					re = EAGAIN;   /* the program's own 10 s timeout */
					break;
				}
				if (n < 0) {
					re = errno;
					break;
				}
			}
			r = use_read ? read(fd, buf, (size_t)chunk) : recv(fd, buf, (size_t)chunk, 0);
			if (r < 0) {
				re = errno;
				break;
			}
			if (r == 0)
				break;
			fwrite(buf, 1, (size_t)r, stdout);
			total += (int)r;
		}
		t2 = now_ms();
		fflush(stdout);
		fprintf(stderr, "{\"connect\": \"OK\", \"connect_ms\": %.1f, \"recv\": \"%s\", \"recv_ms\": %.1f, \"bytes\": %d}\n",
			t1 - t0, ename(re), t2 - t1, total);
		close(fd);
		return re ? 1 : 0;
	}
}

/* stress.c -- many threads on governed sockets while another thread closes
 * and duplicates their descriptors under them: the shim's per-fd state and
 * connection records under every interleaving the program can cause.
 *
 *   stress SECONDS
 *
 * Runs its own loopback server (some answers at once, some late, some
 * never), WORKERS threads doing connect/send/recv/close (half through an
 * epoll wait, half blocking; two of them send from a second thread while
 * they read, as a program with a writer and a reader thread on one socket
 * does, every other time as HTTP/2 in clear text: the preface and a
 * request's HEADERS from one thread while the other reads the answer, the
 * h2 reader's lock under both), and one thread doing dup, dup2 and close
 * on the workers' descriptors. tests/tsan/stress.sh runs it once plainly and once with
 * injected latency and bandwidth limits on every connection. Built with -fsanitize=thread and run under a
 * TSan-built shim by `make SANITIZER=thread tsan`: a data race in the shim
 * is a report and a non-zero exit. Prints one JSON line of counts. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define WORKERS 8

static struct sockaddr_in srv;
static int stop;                        /* atomic */
static int cur_fd[WORKERS];             /* atomic: each worker's socket, -1 none */
static unsigned long done, failed, chaos_ops;   /* atomic */

static unsigned rnd(unsigned *s)
{
	*s = *s * 1103515245u + 12345u;
	return *s >> 8;
}

/* Every socket of this program carries its own 2 s receive timeout: the
 * chaos thread can dup2 any number onto any socket, even one the shim does
 * not govern (a server side accepted under a worker's old number), and a
 * blocking read there must still end, or the run never does. The shim's
 * 50 ms read deadline is shorter and wins where it governs. */
static void own_timeout(int fd)
{
	struct timeval tv = { 2, 0 };

	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
}

static void *serve_one(void *arg)
{
	int fd = (int)(intptr_t)arg;
	char buf[256];
	unsigned s = (unsigned)fd * 2654435761u;
	struct timespec ts = { 0, 0 };

	own_timeout(fd);

	if (read(fd, buf, sizeof(buf)) > 0) {
		switch (rnd(&s) % 3) {
		case 0: break;                                  /* at once */
		case 1: ts.tv_nsec = 30 * 1000000; break;       /* inside the deadline */
		default: ts.tv_nsec = 120 * 1000000; break;     /* past it */
		}
		nanosleep(&ts, NULL);
		if (memcmp(buf, "PRI * HTTP/2.0", 14) == 0) {
			/* HTTP/2: SETTINGS, then stream 1's :status 200, END_STREAM */
			static const char h2[] = "\0\0\0\4\0\0\0\0\0"
						 "\0\0\1\1\5\0\0\0\1\x88";

			(void)!write(fd, h2, sizeof(h2) - 1);
		} else {
			(void)!write(fd, "HTTP/1.0 200 OK\r\n\r\nok", 21);
		}
	}
	close(fd);
	return NULL;
}

static void *server(void *arg)
{
	int lfd = (int)(intptr_t)arg;

	while (!__atomic_load_n(&stop, __ATOMIC_RELAXED)) {
		int fd = accept(lfd, NULL, NULL);
		pthread_t t;

		if (fd < 0)
			continue;
		if (pthread_create(&t, NULL, serve_one, (void *)(intptr_t)fd) == 0)
			pthread_detach(t);
		else
			close(fd);
	}
	return NULL;
}

/* The other half of a duplex worker: the request, in two pieces. */
static void *send_halves(void *arg)
{
	int fd = (int)(intptr_t)arg;
	struct timespec ts = { 0, 1000000 };

	if (send(fd, "GET / HTTP/1.0\r\n", 16, MSG_NOSIGNAL) == 16) {
		nanosleep(&ts, NULL);
		(void)!send(fd, "\r\n", 2, MSG_NOSIGNAL);
	}
	return NULL;
}

/* ...the same as HTTP/2: the preface and SETTINGS, then stream 1's HEADERS
 * (GET /, END_STREAM) */
static void *send_h2(void *arg)
{
	static const char preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\4\0\0\0\0\0";
	static const char headers[] = "\0\0\3\1\5\0\0\0\1\x82\x86\x84";
	int fd = (int)(intptr_t)arg;
	struct timespec ts = { 0, 1000000 };

	if (send(fd, preface, sizeof(preface) - 1, MSG_NOSIGNAL) == (ssize_t)sizeof(preface) - 1) {
		nanosleep(&ts, NULL);
		(void)!send(fd, headers, sizeof(headers) - 1, MSG_NOSIGNAL);
	}
	return NULL;
}

static void *worker(void *arg)
{
	int id = (int)(intptr_t)arg, ep = epoll_create1(0);
	char buf[256];
	unsigned turn = 0;

	while (!__atomic_load_n(&stop, __ATOMIC_RELAXED)) {
		int fd = socket(AF_INET, SOCK_STREAM, 0), ok = 0;

		if (fd < 0)
			continue;
		own_timeout(fd);
		__atomic_store_n(&cur_fd[id], fd, __ATOMIC_RELAXED);
		if (id % 4 == 3) {
			pthread_t tx;

			/* duplex: one thread sends while this one reads */
			if (connect(fd, (struct sockaddr *)&srv, sizeof(srv)) == 0 &&
			    pthread_create(&tx, NULL, turn++ % 2 ? send_h2 : send_halves, (void *)(intptr_t)fd) == 0) {
				ok = recv(fd, buf, sizeof(buf), 0) > 0;
				pthread_join(tx, NULL);
			}
		} else if (connect(fd, (struct sockaddr *)&srv, sizeof(srv)) == 0 &&
		    send(fd, "GET / HTTP/1.0\r\n\r\n", 18, MSG_NOSIGNAL) == 18) {
			if (id & 1) {
				struct epoll_event ev = { .events = EPOLLIN, .data.fd = fd }, out;

				if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) == 0) {
					ok = epoll_wait(ep, &out, 1, 1000) == 1 && recv(fd, buf, sizeof(buf), 0) > 0;
					epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL);
				}
			} else {
				ok = recv(fd, buf, sizeof(buf), 0) > 0;
			}
		}
		__atomic_store_n(&cur_fd[id], -1, __ATOMIC_RELAXED);
		close(fd);
		__atomic_fetch_add(ok ? &done : &failed, 1, __ATOMIC_RELAXED);
	}
	close(ep);
	return NULL;
}

/* Closes, dups and dup2s the workers' sockets under them, the way a buggy
 * or cancelling program does. Touches only the workers' numbers. */
static void *chaos(void *arg)
{
	unsigned s = (unsigned)(uintptr_t)arg;

	while (!__atomic_load_n(&stop, __ATOMIC_RELAXED)) {
		int a = __atomic_load_n(&cur_fd[rnd(&s) % WORKERS], __ATOMIC_RELAXED);
		int b = __atomic_load_n(&cur_fd[rnd(&s) % WORKERS], __ATOMIC_RELAXED);
		struct timespec ts = { 0, 2 * 1000000 };
		int d;

		if (a >= 0) {
			switch (rnd(&s) % 4) {
			case 0:
				d = dup(a);
				if (d >= 0)
					close(d);
				break;
			case 1:
				if (b >= 0 && b != a)
					dup2(a, b);
				break;
			case 2:
				shutdown(a, SHUT_RDWR);
				break;
			default:
				close(a);
				break;
			}
			__atomic_fetch_add(&chaos_ops, 1, __ATOMIC_RELAXED);
		}
		nanosleep(&ts, NULL);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	pthread_t srv_t, w[WORKERS], ch;
	socklen_t l = sizeof(srv);
	int secs = argc > 1 ? atoi(argv[1]) : 3, lfd;

	signal(SIGPIPE, SIG_IGN);
	lfd = socket(AF_INET, SOCK_STREAM, 0);
	srv.sin_family = AF_INET;
	srv.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (lfd < 0 || bind(lfd, (struct sockaddr *)&srv, sizeof(srv)) < 0 || listen(lfd, 128) < 0 ||
	    getsockname(lfd, (struct sockaddr *)&srv, &l) < 0) {
		perror("stress: listen");
		return 1;
	}
	for (int i = 0; i < WORKERS; i++)
		cur_fd[i] = -1;
	pthread_create(&srv_t, NULL, server, (void *)(intptr_t)lfd);
	for (int i = 0; i < WORKERS; i++)
		pthread_create(&w[i], NULL, worker, (void *)(intptr_t)i);
	pthread_create(&ch, NULL, chaos, (void *)(uintptr_t)time(NULL));
	sleep((unsigned)secs);
	__atomic_store_n(&stop, 1, __ATOMIC_RELAXED);
	for (int i = 0; i < WORKERS; i++)
		pthread_join(w[i], NULL);
	pthread_join(ch, NULL);
	shutdown(lfd, SHUT_RDWR);
	pthread_join(srv_t, NULL);
	printf("{\"exchanges\": %lu, \"failed\": %lu, \"chaos\": %lu}\n", done, failed, chaos_ops);
	return 0;
}

/* sigstorm.c -- a signal storm over every wrapper family and every
 * first-use path of the shim.
 *
 * An interval timer (SIGALRM, US microseconds, armed before anything else)
 * runs a handler that makes the async-signal-safe calls a handler may:
 * socket, a non-blocking connect to the server, send, recv, poll and
 * close (to HPORT, a listener that need not accept). Meanwhile the process does, once, each thing the shim sets up
 * lazily (its first socket, first connect, first lookup, first runtime
 * fault look-up when the test has injected one, first epoll set), then
 * loops through every family of wrapped call on a connection to the
 * server. A handler that waits on something its own thread holds hangs
 * the process: the test runs many processes and counts the ones that do
 * not finish in time.
 *
 * FIRST: the first signal's delay in microseconds (a test sweeps it across
 * the first socket's set-up, a window of a few microseconds).
 *
 * FORKS (optional): fork that many children (each exits at once) before
 * the first uses, so that a handler's first connect can land inside its
 * own thread's fork(), where glibc holds its atfork lock: a set-up that
 * registered its fork handlers with pthread_atfork there waited for ever.
 *
 *   sigstorm PORT HPORT US LOOPS FIRST [FORKS] -> {"loops": N, "handler_calls": N, "handler_errors": N} */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

static void *idle(void *arg)
{
	(void)arg;
	for (;;)
		pause();
	return NULL;
}

static struct sockaddr_in srv = { .sin_family = AF_INET }, hsrv = { .sin_family = AF_INET };
static volatile sig_atomic_t handler_calls, handler_errors, budget = 200;

/* Only what a handler may call; errors a refused or busy server gives are
 * not counted, only a call the shim broke (EBADF, EFAULT, ENOTSOCK...). */
static void on_alarm(int sig)
{
	int saved = errno, fd;
	struct pollfd p;
	char b[16];

	(void)sig;
	if (budget <= 0)
		return; /* a starved machine: let the program finish */
	budget--;
	fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	if (fd < 0) {
		if (errno != EMFILE && errno != ENFILE)
			handler_errors++;
		errno = saved;
		return;
	}
	if (connect(fd, (struct sockaddr *)&hsrv, sizeof(hsrv)) < 0 && errno != EINPROGRESS && errno != ECONNREFUSED &&
	    errno != EAGAIN)
		handler_errors++;
	p.fd = fd;
	p.events = POLLOUT;
	if (poll(&p, 1, 0) < 0)
		handler_errors++;
	if (send(fd, "x", 1, MSG_DONTWAIT | MSG_NOSIGNAL) < 0 && errno != EAGAIN && errno != ENOTCONN &&
	    errno != EPIPE && errno != ECONNREFUSED && errno != ECONNRESET)
		handler_errors++;
	if (recv(fd, b, sizeof(b), MSG_DONTWAIT) < 0 && errno != EAGAIN && errno != ENOTCONN && errno != ECONNREFUSED &&
	    errno != ECONNRESET)
		handler_errors++;
	if (close(fd) < 0)
		handler_errors++;
	handler_calls++;
	errno = saved;
}

static int dial(void)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	if (fd < 0)
		return -1;
	while (connect(fd, (struct sockaddr *)&srv, sizeof(srv)) < 0) {
		if (errno != EINTR) {
			close(fd);
			return -1;
		}
	}
	return fd;
}

/* A request out and its answer read, by the family given: every output
 * and input call the shim wraps, in turn. */
static int exchange(int fd, int how)
{
	static const char req[] = "GET / HTTP/1.1\r\nHost: storm\r\nConnection: close\r\n\r\n";
	char buf[256];
	struct iovec v = { (void *)req, sizeof(req) - 1 }, in = { buf, sizeof(buf) };
	struct msghdr m = { .msg_iov = &v, .msg_iovlen = 1 }, mi = { .msg_iov = &in, .msg_iovlen = 1 };
	struct mmsghdr mm = { .msg_hdr = m };
	ssize_t r;

	switch (how % 5) {
	case 0:
		r = send(fd, req, sizeof(req) - 1, 0);
		break;
	case 1:
		r = write(fd, req, sizeof(req) - 1);
		break;
	case 2:
		r = writev(fd, &v, 1);
		break;
	case 3:
		r = sendmsg(fd, &m, 0);
		break;
	default:
		r = sendmmsg(fd, &mm, 1, 0) == 1 ? (ssize_t)mm.msg_len : -1;
		break;
	}
	if (r != (ssize_t)sizeof(req) - 1)
		return -1;
	for (;;) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		fd_set rs;
		struct timeval tv = { 5, 0 };
		struct timespec ts = { 5, 0 };

		switch (how % 3) { /* each wait family */
		case 0:
			r = poll(&p, 1, 5000);
			break;
		case 1:
			r = ppoll(&p, 1, &ts, NULL);
			break;
		default:
			FD_ZERO(&rs);
			FD_SET(fd, &rs);
			r = select(fd + 1, &rs, NULL, NULL, &tv);
			break;
		}
		if (r < 0 && errno == EINTR)
			continue;
		break;
	}
	if (r <= 0)
		return -1;
	do {
		switch (how % 4) {
		case 0:
			r = recv(fd, buf, sizeof(buf), 0);
			break;
		case 1:
			r = read(fd, buf, sizeof(buf));
			break;
		case 2:
			r = readv(fd, &in, 1);
			break;
		default:
			r = recvmsg(fd, &mi, 0);
			break;
		}
	} while (r < 0 && errno == EINTR);
	return r > 0 ? 0 : -1;
}

int main(int argc, char **argv)
{
	struct sigaction sa = { .sa_handler = on_alarm, .sa_flags = SA_RESTART };
	struct itimerval it = { { 0, 0 }, { 0, 0 } };
	struct addrinfo hints = { .ai_family = AF_INET, .ai_socktype = SOCK_STREAM }, *ai = NULL;
	struct epoll_event ev = { .events = EPOLLIN };
	long loops = 0, want;
	int fd, ep, failed = 0;

	if (argc != 6 && argc != 7) {
		fprintf(stderr, "usage: sigstorm PORT HPORT US LOOPS FIRST [FORKS]\n");
		return 2;
	}
	srv.sin_port = htons((unsigned short)atoi(argv[1]));
	srv.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	hsrv.sin_port = htons((unsigned short)atoi(argv[2]));
	hsrv.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	it.it_interval.tv_usec = atol(argv[3]);
	it.it_value.tv_usec = atol(argv[5]) > 0 ? atol(argv[5]) : 1;
	want = atol(argv[4]);
	/* (glibc takes its atfork lock in fork() only once the process has
	 * a second thread: one that only sleeps, made before the storm: its
	 * stack's allocation is malloc's, which a handler's first connect
	 * would interrupt, a hazard of its own: see test_sigstorm) */
	if (argc == 7) {
		pthread_t t;

		pthread_create(&t, NULL, idle, NULL);
	}
	sigaction(SIGALRM, &sa, NULL);
	setitimer(ITIMER_REAL, &it, NULL);
	for (long i = 0, n = argc == 7 ? atol(argv[6]) : 0; i < n; i++) {
		pid_t pid = fork();

		if (pid == 0)
			_exit(0);
		if (pid > 0)
			while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
				;
	}

	/* the first-use paths, each once per process, under the storm */
	fd = dial(); /* first socket, first connect (policy, table) */
	if (fd < 0 || exchange(fd, 0) < 0)
		failed++;
	if (fd >= 0)
		close(fd);
	if (getaddrinfo("localhost", argv[1], &hints, &ai) == 0) /* first lookup (names) */
		freeaddrinfo(ai);
	ep = epoll_create1(EPOLL_CLOEXEC); /* first epoll set */

	for (; loops < want; loops++) {
		fd = dial();
		if (fd < 0) {
			failed++;
			continue;
		}
		if (ep >= 0) {
			ev.data.fd = fd;
			epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
		}
		if (exchange(fd, (int)loops) < 0)
			failed++;
		if (ep >= 0) {
			struct epoll_event out;

			epoll_wait(ep, &out, 1, 0);
		}
		{
			int d = dup(fd); /* a copy, then both closed */

			close(fd);
			if (d >= 0)
				close(d);
		}
	}
	it.it_interval.tv_usec = it.it_value.tv_usec = 0;
	setitimer(ITIMER_REAL, &it, NULL);
	printf("{\"loops\": %ld, \"failed\": %d, \"handler_calls\": %d, \"handler_errors\": %d}\n", loops, failed,
	       (int)handler_calls, (int)handler_errors);
	return 0;
}

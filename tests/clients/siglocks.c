/* siglocks.c -- a signal handler connects, over and over, while its own
 * thread is in every part of the shim that takes a lock: host-name lookups
 * (getaddrinfo, and the name of each address at connect), runtime faults
 * (the test has shimctl inject one, so every connect looks them up), and
 * epoll's registrations (add, wait, close). A 300 us interval timer lands
 * the handler anywhere in the loop; a lock the handler waits on that its
 * own thread holds hangs the process, which the test sees as a timeout.
 *
 *   siglocks HOST PORT SECONDS -> {"loops": N, "handler_connects": N, "handler_errors": N} */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static struct sockaddr_in sa = { .sin_family = AF_INET };
static volatile sig_atomic_t handler_connects, handler_errors;

static void on_alarm(int sig)
{
	int saved = errno, fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);

	(void)sig;
	if (fd >= 0) {
		if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 && errno != EINPROGRESS)
			handler_errors++;
		handler_connects++;
		close(fd);
	}
	errno = saved;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	struct itimerval it = { { 0, 300 }, { 0, 300 } };
	struct sigaction act;
	struct addrinfo hints, *ai;
	double end;
	long loops = 0;
	int ep = epoll_create1(EPOLL_CLOEXEC);

	if (argc != 4 || ep < 0)
		return 2;
	inet_pton(AF_INET, argv[1], &sa.sin_addr);
	sa.sin_port = htons((unsigned short)atoi(argv[2]));
	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_INET;
	hints.ai_socktype = SOCK_STREAM;
	memset(&act, 0, sizeof(act));
	act.sa_handler = on_alarm;
	act.sa_flags = SA_RESTART;
	sigaction(SIGALRM, &act, NULL);
	end = now_s() + atof(argv[3]);
	setitimer(ITIMER_REAL, &it, NULL);
	while (now_s() < end) {
		struct epoll_event ev = { .events = EPOLLOUT }, got[4];
		int fd;

		/* a name: remembered at the lookup, looked up at the connect */
		if (getaddrinfo("localhost", argv[2], &hints, &ai) != 0)
			continue;
		fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
		if (fd >= 0) {
			connect(fd, ai->ai_addr, ai->ai_addrlen);
			ev.data.fd = fd;
			epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
			while (epoll_wait(ep, got, 4, 100) < 0 && errno == EINTR)
				;
			close(fd);
		}
		freeaddrinfo(ai);
		loops++;
	}
	it.it_value.tv_usec = it.it_interval.tv_usec = 0;
	setitimer(ITIMER_REAL, &it, NULL);
	printf("{\"loops\": %ld, \"handler_connects\": %d, \"handler_errors\": %d}\n", loops, (int)handler_connects,
	       (int)handler_errors);
	return 0;
}

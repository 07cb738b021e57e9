/* sigconnect.c -- a signal handler connects while the process's first
 * connect is still under way (connect is async-signal-safe). A one-shot
 * timer of --after-us microseconds fires during that first connect (the
 * test slows the shim's set-up under strace so that it surely does); the
 * handler connects to the same server and closes. Both must complete.
 *
 *   sigconnect HOST PORT AFTER_US -> {"main": "OK"|errno, "handler": ...} on stdout */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

static struct sockaddr_in sa = { .sin_family = AF_INET };
static volatile sig_atomic_t handler_err = -1;

static int connect_once(void)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0), e = 0;

	if (fd < 0)
		return errno;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		e = errno;
	close(fd);
	return e;
}

static void on_alarm(int sig)
{
	int saved = errno;

	(void)sig;
	handler_err = connect_once();
	errno = saved;
}

static const char *name(int e)
{
	return e < 0 ? "NOT_RUN" : e == 0 ? "OK" : e == ECONNREFUSED ? "ECONNREFUSED" : strerror(e);
}

int main(int argc, char **argv)
{
	struct itimerval it = { { 0, 0 }, { 0, 0 } };
	struct sigaction act;
	int e;

	if (argc != 4)
		return 2;
	inet_pton(AF_INET, argv[1], &sa.sin_addr);
	sa.sin_port = htons((unsigned short)atoi(argv[2]));
	memset(&act, 0, sizeof(act));
	act.sa_handler = on_alarm;
	act.sa_flags = SA_RESTART;
	sigaction(SIGALRM, &act, NULL);
	it.it_value.tv_usec = atoi(argv[3]);
	setitimer(ITIMER_REAL, &it, NULL);
	e = connect_once();
	while (handler_err < 0)
		pause();
	printf("{\"main\": \"%s\", \"handler\": \"%s\"}\n", name(e), name(handler_err));
	return 0;
}

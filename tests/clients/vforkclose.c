/* vforkclose.c -- a vfork child closes the parent's socket number before it
 * execs; the parent then reads. The child shares the parent's memory, so the
 * shim must not let the child's close() touch the parent's descriptor state.
 *
 *   vforkclose HOST PORT    -> {"errno": "...", "ms": N} on stdout */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

int main(int argc, char **argv)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	char buf[64];
	double t0;
	pid_t pid;
	int fd, st;
	ssize_t r;

	if (argc != 3)
		return 2;
	sa.sin_port = htons((unsigned short)atoi(argv[2]));
	inet_pton(AF_INET, argv[1], &sa.sin_addr);
	fd = socket(AF_INET, SOCK_STREAM, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		return 1;
	pid = vfork();
	if (pid == 0) {
		close(fd);
		_exit(0);
	}
	waitpid(pid, &st, 0);
	t0 = now_ms();
	r = read(fd, buf, sizeof(buf));
	printf("{\"errno\": \"%s\", \"ms\": %.1f}\n", r >= 0 ? "OK" :
	       errno == ETIMEDOUT ? "ETIMEDOUT" : errno == EAGAIN ? "EAGAIN" : strerror(errno), now_ms() - t0);
	return 0;
}

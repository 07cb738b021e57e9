/* tracee.c -- a program whose connects come from a function with a known
 * name, for the call-site tracing test. Built with -g.
 *
 *   tracee ADDR PORT N: N blocking connects from fetch_from_upstream(). */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

__attribute__((noinline)) int fetch_from_upstream(const char *addr, int port);

__attribute__((noinline)) int fetch_from_upstream(const char *addr, int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	int fd = socket(AF_INET, SOCK_STREAM, 0), r, e;

	inet_pton(AF_INET, addr, &a.sin_addr);
	r = connect(fd, (struct sockaddr *)&a, sizeof(a));
	e = errno;
	close(fd);
	return r < 0 ? e : 0;
}

int main(int argc, char **argv)
{
	if (argc != 4) {
		fprintf(stderr, "usage: tracee ADDR PORT N\n");
		return 2;
	}
	for (int i = 0; i < atoi(argv[3]); i++)
		printf("%s\n", strerror(fetch_from_upstream(argv[1], atoi(argv[2]))));
	return 0;
}

/* hammer.c -- table writer for the kill -9 chaos test: as fast as it can,
 * connect to HTTP_PORT (send a request, read the answer) and to each
 * refused PORT, so slots are claimed, counted, opened, half-opened and
 * written to the event ring all the time. Runs COUNT rounds (0: until
 * killed); prints {"ok": N, "failed": N} at the end.
 *
 *   hammer HTTP_PORT COUNT [PORT...] */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

static int one(unsigned short port, int talk)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port) };
	char buf[64];
	int fd = socket(AF_INET, SOCK_STREAM, 0), ok = 0;

	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd < 0)
		return 0;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0)
		ok = !talk || (write(fd, "GET / HTTP/1.0\r\n\r\n", 18) == 18 && read(fd, buf, sizeof(buf)) > 0);
	close(fd);
	return ok;
}

int main(int argc, char **argv)
{
	long count, ok = 0, failed = 0;
	int http;

	if (argc < 3)
		return 2;
	http = atoi(argv[1]);
	count = atol(argv[2]);
	for (long r = 0; count == 0 || r < count; r++) {
		if (one((unsigned short)http, 1))
			ok++;
		else
			failed++;
		for (int i = 3; i < argc; i++)
			one((unsigned short)atoi(argv[i]), 0);
	}
	printf("{\"ok\": %ld, \"failed\": %ld}\n", ok, failed);
	return 0;
}

/* deeplib.c -- a small library a test dlopen()s with RTLD_DEEPBIND: it
 * fetches from a server through its own socket calls, which libc would
 * answer directly were the shim not spliced into its relocations. */

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int deep_fetch(const char *ip, int port, int use_poll, int *stage);

/* Connect, send a request, read the answer's first bytes. use_poll: a
 * non-blocking socket waited on with poll(-1), as an event loop would.
 * Returns 0 or the errno of the failing step (*stage 1 connect, 2 send,
 * 3 recv). */
int deep_fetch(const char *ip, int port, int use_poll, int *stage)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((unsigned short)port) };
	static const char req[] = "GET / HTTP/1.0\r\n\r\n";
	char buf[256];
	int fd, e = 0;

	inet_pton(AF_INET, ip, &sa.sin_addr);
	*stage = 1;
	fd = socket(AF_INET, SOCK_STREAM | (use_poll ? SOCK_NONBLOCK : 0), 0);
	if (fd < 0)
		return errno;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		if (!use_poll || errno != EINPROGRESS)
			goto fail;
		struct pollfd p = { fd, POLLOUT, 0 };
		socklen_t l = sizeof(e);

		if (poll(&p, 1, -1) < 0)
			goto fail;
		getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &l);
		if (e)
			goto out;
	}
	*stage = 2;
	if (send(fd, req, sizeof(req) - 1, 0) < 0)
		goto fail;
	*stage = 3;
	if (use_poll) {
		struct pollfd p = { fd, POLLIN, 0 };

		if (poll(&p, 1, -1) < 0)
			goto fail;
	}
	if (recv(fd, buf, sizeof(buf), 0) < 0)
		goto fail;
	*stage = 0;
	goto out;
fail:
	e = errno;
out:
	close(fd);
	return e;
}

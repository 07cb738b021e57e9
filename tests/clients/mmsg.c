/* mmsg.c -- the batch and zero-copy calls on a governed socket.
 *
 *   mmsg HOST PORT recvmmsg|splice       send a request, wait for the answer
 *   mmsg HOST PORT sendmmsg|sendfile FILE  send a request that way, read the status line
 *
 * Prints {"errno": "...", "ms": N, "first": "status line"} on stdout. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static const char req[] = "GET / HTTP/1.0\r\nHost: t\r\n\r\n";

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static const char *ename(int e)
{
	switch (e) {
	case 0: return "OK";
	case ETIMEDOUT: return "ETIMEDOUT";
	case EAGAIN: return "EAGAIN";
	case ECONNRESET: return "ECONNRESET";
	default: return strerror(e);
	}
}

int main(int argc, char **argv)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	char buf[512] = "";
	struct iovec iov = { buf, sizeof(buf) - 1 };
	struct mmsghdr mm;
	const char *how;
	double t0;
	ssize_t r = 0;
	int fd, p[2], e = 0;

	if (argc < 4)
		return 2;
	how = argv[3];
	sa.sin_port = htons((unsigned short)atoi(argv[2]));
	inet_pton(AF_INET, argv[1], &sa.sin_addr);
	fd = socket(AF_INET, SOCK_STREAM, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		return 1;
	memset(&mm, 0, sizeof(mm));
	if (strcmp(how, "sendmmsg") == 0) {
		struct iovec out = { (void *)req, sizeof(req) - 1 };

		mm.msg_hdr.msg_iov = &out;
		mm.msg_hdr.msg_iovlen = 1;
		if (sendmmsg(fd, &mm, 1, 0) != 1)
			return 1;
	} else if (strcmp(how, "sendfile") == 0) {
		int f = open(argv[4], O_RDWR | O_CREAT | O_TRUNC, 0600);

		if (f < 0 || write(f, req, sizeof(req) - 1) != (ssize_t)sizeof(req) - 1 || lseek(f, 0, SEEK_SET) != 0)
			return 1;
		if (sendfile(fd, f, NULL, sizeof(req) - 1) != (ssize_t)sizeof(req) - 1)
			return 1;
		close(f);
	} else if (write(fd, req, sizeof(req) - 1) != (ssize_t)sizeof(req) - 1) {
		return 1;
	}
	t0 = now_ms();
	if (strcmp(how, "recvmmsg") == 0) {
		memset(&mm, 0, sizeof(mm));
		mm.msg_hdr.msg_iov = &iov;
		mm.msg_hdr.msg_iovlen = 1;
		r = recvmmsg(fd, &mm, 1, 0, NULL);
		if (r > 0)
			r = mm.msg_len;
	} else if (strcmp(how, "splice") == 0) {
		if (pipe(p) < 0)
			return 1;
		r = splice(fd, NULL, p[1], NULL, sizeof(buf) - 1, 0);
		if (r > 0)
			r = read(p[0], buf, (size_t)r);
	} else {
		r = read(fd, buf, sizeof(buf) - 1);
	}
	if (r < 0)
		e = errno;
	else
		buf[r] = '\0';
	buf[strcspn(buf, "\r\n")] = '\0';
	printf("{\"errno\": \"%s\", \"ms\": %.1f, \"first\": \"%s\"}\n", ename(e), now_ms() - t0, buf);
	return 0;
}

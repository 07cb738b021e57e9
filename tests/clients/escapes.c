/* escapes.c -- ways to a TCP connection that are not a plain connect():
 * what each engine must govern or refuse.
 *
 *   escapes MODE PORT -> {"mode": "...", "result": "connected" | "E...", "answer": N}
 *
 *   connect      a plain connect() (the control)
 *   tfo          sendto(MSG_FASTOPEN) with the request: no connect() at all
 *   tfomsg       the same through sendmsg(MSG_FASTOPEN) with msg_name
 *   tfommsg      the same through sendmmsg(MSG_FASTOPEN), the first message's msg_name
 *   uringsetup   io_uring_setup, whose IORING_OP_CONNECT no engine sees
 *   toctou       connect() with an address a second thread flips between
 *                AF_UNIX and 127.0.0.1:PORT (500 tries)
 *   nodump       prctl(PR_SET_DUMPABLE, 0), then a plain connect()
 *
 * answer: bytes of the server's answer read after a connection. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <linux/io_uring.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

static const char req[] = "GET / HTTP/1.0\r\n\r\n";
static struct sockaddr_in dst;
static union {
	struct sockaddr_storage ss;
	struct sockaddr_un un;
	struct sockaddr_in in;
} volatile flip;
static volatile int stop;

static const char *ename(int e)
{
	switch (e) {
	case ECONNREFUSED:
		return "ECONNREFUSED";
	case EOPNOTSUPP:
		return "EOPNOTSUPP";
	case ENOSYS:
		return "ENOSYS";
	case EAFNOSUPPORT:
		return "EAFNOSUPPORT";
	case ETIMEDOUT:
		return "ETIMEDOUT";
	case EINVAL:
		return "EINVAL";
	case ENOENT:
		return "ENOENT";
	case EISCONN:
		return "EISCONN";
	default:
		return "other";
	}
}

static void *flipper(void *a)
{
	(void)a;
	while (!stop) {
		memcpy((void *)&flip.in, &dst, sizeof(dst));
		for (volatile int i = 0; i < 50; i++)
			;
		flip.un.sun_family = AF_UNIX;
		for (volatile int i = 0; i < 50; i++)
			;
	}
	return NULL;
}

int main(int argc, char **argv)
{
	const char *mode;
	int fd, r = -1, e = 0;
	ssize_t got = 0;

	if (argc != 3)
		return 2;
	mode = argv[1];
	dst.sin_family = AF_INET;
	dst.sin_port = htons((unsigned short)atoi(argv[2]));
	dst.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	fd = socket(AF_INET, SOCK_STREAM, 0);
	if (!strcmp(mode, "nodump"))
		prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
	if (!strcmp(mode, "connect") || !strcmp(mode, "nodump")) {
		r = connect(fd, (struct sockaddr *)&dst, sizeof(dst));
	} else if (!strcmp(mode, "tfo")) {
		r = sendto(fd, req, sizeof(req) - 1, MSG_FASTOPEN, (struct sockaddr *)&dst, sizeof(dst)) > 0 ? 0 : -1;
	} else if (!strcmp(mode, "tfomsg")) {
		struct iovec v = { (void *)req, sizeof(req) - 1 };
		struct msghdr m = { .msg_name = &dst, .msg_namelen = sizeof(dst), .msg_iov = &v, .msg_iovlen = 1 };

		r = sendmsg(fd, &m, MSG_FASTOPEN) > 0 ? 0 : -1;
	} else if (!strcmp(mode, "tfommsg")) {
		struct iovec v = { (void *)req, sizeof(req) - 1 };
		struct mmsghdr mm = {
			.msg_hdr = { .msg_name = &dst, .msg_namelen = sizeof(dst), .msg_iov = &v, .msg_iovlen = 1 }
		};

		r = sendmmsg(fd, &mm, 1, MSG_FASTOPEN) == 1 && mm.msg_len > 0 ? 0 : -1;
	} else if (!strcmp(mode, "uringsetup")) {
		struct io_uring_params p;

		memset(&p, 0, sizeof(p));
		r = (int)syscall(__NR_io_uring_setup, 4, &p);
		e = r < 0 ? errno : 0;
		printf("{\"mode\": \"%s\", \"result\": \"%s\", \"answer\": 0}\n", mode, r < 0 ? ename(e) : "set up");
		return 0;
	} else if (!strcmp(mode, "toctou")) {
		pthread_t t;

		flip.un.sun_family = AF_UNIX; /* (all zeros is AF_UNSPEC, whose connect succeeds at once) */
		pthread_create(&t, NULL, flipper, NULL);
		for (int i = 0; i < 500 && r < 0; i++)
			r = connect(fd, (struct sockaddr *)&flip, sizeof(struct sockaddr_in));
		stop = 1;
		pthread_join(t, NULL);
	} else {
		return 2;
	}
	e = r < 0 ? errno : 0;
	if (r == 0) {
		char b[256];

		if (strncmp(mode, "tfo", 3))
			(void)!write(fd, req, sizeof(req) - 1);
		got = read(fd, b, sizeof(b));
	}
	printf("{\"mode\": \"%s\", \"result\": \"%s\", \"answer\": %zd}\n", mode, r == 0 ? "connected" : ename(e), got);
	return 0;
}

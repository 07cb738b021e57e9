/* sockwatch.h -- what the seccomp engine knows of a program's connection
 * after its connect, without holding it (sockwatch.c): the kernel's own
 * account of the socket (sock_diag, as ss(8) reads it), and a reset. */
#ifndef NS_SOCKWATCH_H
#define NS_SOCKWATCH_H

#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

/* A connection as the kernel names it: its two ends and its inode. */
struct ns_sockid {
	uint8_t family; /* AF_INET or AF_INET6 */
	uint8_t pad[3];
	uint32_t inode;
	uint16_t sport, dport; /* network order */
	uint8_t src[16], dst[16];
};

/* What sock_diag says of it. */
struct ns_sockinfo {
	int mine;                /* still the program's: found, same inode (not orphaned by its close) */
	int gone;                /* not found at all: closed, or reset (the kernel unhashes a reset socket) */
	uint8_t state;           /* TCP_ESTABLISHED (1), TCP_CLOSE_WAIT (8)... */
	uint32_t last_sent_ms;   /* since the last data sent */
	uint32_t last_recv_ms;   /* since the last data received (or the connect, before any) */
	uint64_t bytes_sent;     /* data sent (acknowledged, on a kernel before 4.19) */
	uint64_t bytes_received; /* data received */
};

/* The sock_diag socket: a descriptor, or -1 (errno). */
int ns_sw_open(void);

/* The id of fd (shimrun's copy of a socket it connected to dst): 0, or
 * -1. */
int ns_sw_id(int fd, const struct sockaddr *dst, socklen_t dlen, struct ns_sockid *id);

/* Ask the kernel about id: 0 (out filled in; out->mine 0 when the socket
 * is gone or no longer the program's), or -1 when sock_diag failed
 * (errno). */
int ns_sw_query(int nl, const struct ns_sockid *id, struct ns_sockinfo *out);

/* Reset the program's connection id, open as descriptor fd in the
 * process of thread tid (of process tgid, 0: not known): taken again by
 * pidfd_getfd and disconnected (connect to AF_UNSPEC): its peer gets a
 * reset, and the program an error on its next call (ECONNRESET; a call
 * blocked in it at that moment EPIPE, since Linux 6.6), never an end of
 * data. 0, or -1 when the descriptor no longer holds that socket. */
int ns_sw_reset(pid_t tid, pid_t tgid, int fd, const struct ns_sockid *id);

/* Does thread tid's process hold socket inode as descriptor fd (/proc)? */
int ns_sw_held(pid_t tid, int fd, uint32_t inode);

/* A copy of descriptor fd of thread tid's process (tgid: its process, 0 =
 * not known; a thread that is not its process's leader, as Go's are, has
 * its own pidfd only since Linux 6.9): a descriptor, or -1. */
int ns_sw_copy_fd(pid_t tid, pid_t tgid, int fd);

/* The process thread tid belongs to (its thread group), or tid (a thread
 * that is gone: its /proc entry went with it). */
pid_t ns_sw_tgid(pid_t tid);
/* ...kept with the thread's pidfd (ns_sw_copy_fd) while that names a live
 * thread: read once a thread, and still known after its process ended. */
pid_t ns_sw_tgid_of(pid_t tid);

#endif

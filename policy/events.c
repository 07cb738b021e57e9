/* events.c -- the table's ring of events: written by every engine and
 * tool (policy/account.c builds each record), read by shimctl events and
 * the agent, which an event it acts on wakes at once (its abstract socket).
 * A record is untrusted shared memory: every string bounded on reading. */
#include "table.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "slot.h"

#define EV_BUSY UINT64_MAX

void ns_table_event(struct ns_table *t, const struct ns_evrec *ev, uint64_t wall_ms)
{
	struct ns_evrec *rec;
	uint64_t seq;

	if (!t->events || !t->ev_cap)
		return;
	seq = ADD(&t->hdr->ev_seq, 1);
	rec = &t->events[seq % t->ev_cap];
	/* never waits: a writer lapped by a faster one just overwrites */
	__atomic_store_n(&rec->seq, EV_BUSY, __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_RELEASE);
	memcpy((char *)rec + sizeof(rec->seq), (const char *)ev + sizeof(ev->seq), sizeof(*ev) - sizeof(ev->seq));
	rec->wall_ms = wall_ms;
	rec->dest[sizeof(rec->dest) - 1] = '\0';
	STORE(&rec->seq, seq);
}

uint64_t ns_table_event_head(const struct ns_table *t)
{
	return t->hdr ? LOAD(&t->hdr->ev_seq) : 0;
}

int ns_table_event_read(const struct ns_table *t, uint64_t seq, struct ns_evrec *out)
{
	const struct ns_evrec *rec;

	if (!t->events || !t->ev_cap)
		return -1;
	rec = &t->events[seq % t->ev_cap];
	if (LOAD(&rec->seq) != seq)
		return -1;
	memcpy(out, rec, sizeof(*out));
	__atomic_thread_fence(__ATOMIC_ACQUIRE);
	if (LOAD(&rec->seq) != seq)
		return -1; /* overwritten while copying */
	out->seq = seq;
	/* bound every string: the record is untrusted shared memory */
	out->dest[sizeof(out->dest) - 1] = '\0';
	out->program[sizeof(out->program) - 1] = '\0';
	out->detail[sizeof(out->detail) - 1] = '\0';
	if (out->nframes > NS_FRAMES)
		out->nframes = NS_FRAMES;
	for (uint32_t i = 0; i < NS_FRAMES; i++)
		out->frames[i][NS_FRAME_LEN - 1] = '\0';
	return 0;
}

const char *ns_event_name(uint32_t type)
{
	switch (type) {
	case NS_E_OPENED:
		return "opened";
	case NS_E_HALF_OPEN:
		return "half_open";
	case NS_E_CLOSED:
		return "closed";
	case NS_E_REOPENED:
		return "probe_failed";
	case NS_E_RESET:
		return "reset";
	case NS_E_FORCED_OPEN:
		return "forced_open";
	case NS_E_TABLE_FULL:
		return "table_full";
	case NS_E_POLICY_RELOADED:
		return "policy_reloaded";
	case NS_E_POLICY_REJECTED:
		return "policy_rejected";
	case NS_E_CONNECT_FAILED:
		return "connect_failed";
	case NS_E_FAULT_SET:
		return "fault_set";
	case NS_E_FAULT_CLEARED:
		return "fault_cleared";
	case NS_E_FLEET_OPEN:
		return "fleet_open";
	case NS_E_FLEET_CLOSED:
		return "fleet_closed";
	case NS_E_THROTTLING:
		return "throttling";
	case NS_E_COOLDOWN:
		return "cooldown";
	case NS_E_SHADOW_OPENED:
		return "shadow_opened";
	case NS_E_SHADOW_CLOSED:
		return "shadow_closed";
	default:
		return "unknown";
	}
}

unsigned ns_table_wake_addr(const struct ns_table *t, struct sockaddr_un *out)
{
	const char *name = strrchr(t->path, '/');
	size_t n;

	name = name ? name + 1 : t->path;
	memset(out, 0, sizeof(*out));
	out->sun_family = AF_UNIX;
	/* sun_path[0] stays 0: the abstract namespace, nothing on disk */
	n = (size_t)snprintf(out->sun_path + 1, sizeof(out->sun_path) - 1, "netshim-agent:%s", name);
	if (n >= sizeof(out->sun_path) - 1)
		n = sizeof(out->sun_path) - 2;
	return (unsigned)(offsetof(struct sockaddr_un, sun_path) + 1 + n);
}

static int libc_close(int fd)
{
	return close(fd);
}

void ns_table_wake_agent(const struct ns_table *t, const struct ns_sockcalls *k)
{
	static const struct ns_sockcalls libc = { socket, sendto, libc_close };
	struct sockaddr_un a;
	socklen_t len = (socklen_t)ns_table_wake_addr(t, &a);
	int fd;

	if (!k)
		k = &libc;
	fd = k->socket_fn(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return;
	(void)k->sendto_fn(fd, "!", 1, MSG_DONTWAIT | MSG_NOSIGNAL, (struct sockaddr *)&a, len);
	k->close_fn(fd);
}

int ns_event_wakes_agent(uint32_t type)
{
	return type == NS_E_OPENED || type == NS_E_REOPENED || type == NS_E_CLOSED || type == NS_E_RESET ||
		type == NS_E_FORCED_OPEN || type == NS_E_COOLDOWN;
}

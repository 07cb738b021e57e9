/* hooks.c -- --on-event CMD: one run of CMD per new event of the table.
 *
 * The table's event ring is the queue: a cursor (stored in the table's
 * header, so a restarted agent goes on where the last one stopped) walks
 * it, and it moves past an event just before that event's run starts, so
 * no event gets two runs; every event still in the ring gets one. Runs are
 * children in their own process group, at most max_running at once, each
 * killed (the whole group) when it outlives its time. A run that fails is
 * logged; the agent goes on. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../common/tablekit.h"
#include "agent.h"

struct run {
	pid_t pid;
	uint64_t started_ms;
	uint64_t seq;
	int killed;
	char what[NS_KEY_MAX + 32];
};

struct hooks {
	uint64_t started;           /* runs started */
	struct ns_table *t;
	const char *cmd;
	const char *node;
	int timeout_ms;
	int max;
	uint64_t next;              /* the next event to consider */
	struct run *runs;
	int nrun;
};

/* The events an operator is told about. */
static int hooked(uint32_t type)
{
	switch (type) {
	case NS_E_OPENED: case NS_E_REOPENED: case NS_E_CLOSED: case NS_E_RESET: case NS_E_FORCED_OPEN:
	case NS_E_FLEET_OPEN: case NS_E_FLEET_CLOSED:
		return 1;
	default:
		return 0;
	}
}

static void store_cursor(struct hooks *h)
{
	__atomic_store_n(&h->t->hdr->agent_cursor, h->next + 1, __ATOMIC_RELEASE);
}

struct hooks *ag_hooks_new(struct ns_table *t, const char *cmd, const char *node, int timeout_ms, int max_running)
{
	struct hooks *h = calloc(1, sizeof(*h));
	uint64_t head = ns_table_event_head(t), stored;

	if (!h || !(h->runs = calloc((size_t)max_running, sizeof(*h->runs)))) {
		free(h);
		return NULL;
	}
	h->t = t;
	h->cmd = cmd;
	h->node = node;
	h->timeout_ms = timeout_ms;
	h->max = max_running;
	/* the cursor comes from shared memory: used only when it is a place
	 * in the ring as it stands; else (first run, or nonsense) the head */
	stored = __atomic_load_n(&t->hdr->agent_cursor, __ATOMIC_ACQUIRE);
	h->next = stored && stored - 1 <= head ? stored - 1 : head;
	if (head > t->ev_cap && h->next < head - t->ev_cap) {
		ag_log("%llu events were overwritten while no agent ran; their hooks will not run",
		       (unsigned long long)(head - t->ev_cap - h->next));
		h->next = head - t->ev_cap;
	}
	store_cursor(h);
	return h;
}

static void set_env(const char *name, const char *v)
{
	if (setenv(name, v, 1) < 0)
		_exit(127);
}

static void start(struct hooks *h, const struct ns_evrec *ev, uint64_t now_ms)
{
	char *line = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&line, &len);
	struct run *r = &h->runs[h->nrun];
	int p[2];
	pid_t pid;

	if (!f) {
		ag_log("cannot run the hook for event %llu: out of memory", (unsigned long long)ev->seq);
		return;
	}
	ctl_event_json(f, ev, h->node);
	fclose(f);
	if (pipe2(p, O_CLOEXEC) < 0) {
		ag_log("cannot run the hook for event %llu: pipe: %s", (unsigned long long)ev->seq, strerror(errno));
		free(line);
		return;
	}
	pid = fork();
	if (pid == 0) {
		sigset_t none;

		setpgid(0, 0);
		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		signal(SIGTERM, SIG_DFL);
		signal(SIGINT, SIG_DFL);
		signal(SIGPIPE, SIG_DFL);
		if (dup2(p[0], 0) < 0)
			_exit(127);
		set_env("NETSHIM_EVENT", ns_event_name(ev->type));
		set_env("NETSHIM_DESTINATION", ev->dest);
		set_env("NETSHIM_RULE", ev->type == NS_E_OPENED || ev->type == NS_E_REOPENED ?
			ns_rule_name((int)ev->rule) : "");
		set_env("NETSHIM_NODE", h->node);
		execl("/bin/sh", "sh", "-c", h->cmd, (char *)NULL);
		_exit(127);
	}
	close(p[0]);
	if (pid < 0) {
		ag_log("cannot run the hook for event %llu: fork: %s", (unsigned long long)ev->seq, strerror(errno));
		close(p[1]);
		free(line);
		return;
	}
	setpgid(pid, pid);
	/* one line, far below a pipe's buffer: written whole at once; a hook
	 * that does not read it gets EOF or nothing, never stalls the agent */
	fcntl(p[1], F_SETFL, O_NONBLOCK);
	if (write(p[1], line, len) != (ssize_t)len)
		ag_log("hook for event %llu: could not hand it the whole event", (unsigned long long)ev->seq);
	close(p[1]);
	free(line);
	r->pid = pid;
	r->started_ms = now_ms;
	h->started++;
	r->seq = ev->seq;
	r->killed = 0;
	snprintf(r->what, sizeof(r->what), "%s %s", ns_event_name(ev->type), ev->dest[0] ? ev->dest : "-");
	h->nrun++;
}

static void reap(struct hooks *h, uint64_t now_ms)
{
	for (int i = 0; i < h->nrun; i++) {
		struct run *r = &h->runs[i];
		int st;
		pid_t w = waitpid(r->pid, &st, WNOHANG);

		if (w == 0) {
			if (!r->killed && now_ms - r->started_ms >= (uint64_t)h->timeout_ms) {
				ag_log("hook for %s (event %llu) still running after %d ms: killed", r->what,
				       (unsigned long long)r->seq, h->timeout_ms);
				kill(-r->pid, SIGKILL);
				r->killed = 1;
			}
			continue;
		}
		if (w < 0 && errno == EINTR) {
			i--;
			continue;
		}
		if (w > 0 && !r->killed) {
			if (WIFEXITED(st) && WEXITSTATUS(st) != 0)
				ag_log("hook for %s (event %llu) exited with status %d", r->what,
				       (unsigned long long)r->seq, WEXITSTATUS(st));
			else if (WIFSIGNALED(st))
				ag_log("hook for %s (event %llu) killed by signal %d", r->what,
				       (unsigned long long)r->seq, WTERMSIG(st));
		}
		*r = h->runs[--h->nrun];
		i--;
	}
}

void ag_hooks_pass(struct hooks *h, uint64_t now_ms)
{
	uint64_t head = ns_table_event_head(h->t);
	struct ns_evrec ev;

	reap(h, now_ms);
	if (head > h->t->ev_cap && h->next < head - h->t->ev_cap) {
		ag_log("%llu events overwritten before their hooks could run",
		       (unsigned long long)(head - h->t->ev_cap - h->next));
		h->next = head - h->t->ev_cap;
	}
	while (h->nrun < h->max && h->next < head) {
		int ok = ns_table_event_read(h->t, h->next, &ev) == 0;

		if (!ok && h->next + 1 == head)
			break;   /* the newest, maybe still being written: next pass */
		h->next++;
		store_cursor(h);
		if (ok && hooked(ev.type))
			start(h, &ev, now_ms);
	}
}

uint64_t ag_hooks_runs(const struct hooks *h)
{
	return h ? h->started : 0;
}

int ag_hooks_running(const struct hooks *h)
{
	return h->nrun;
}

void ag_hooks_free(struct hooks *h)
{
	if (!h)
		return;
	free(h->runs);
	free(h);
}

/* goexec.c -- a governed process's exec of a Go program: the one stop in
 * which shimrun puts its hook on net/http's answers (goexec.h).
 *
 * The seccomp filter sends shimrun each execve. Its file is read first
 * (goelf.c): a program that is not Go, or whose Go version, function or
 * instructions are not exactly what the hook expects, execs untouched
 * (a Go one says why, once). For one that matches, shimrun seizes the
 * calling thread (PTRACE_SEIZE: no signal, no stop yet), lets the exec go
 * on, and takes the exec's stop: before any of the new program's code has
 * run, with one thread. It checks that what the kernel loaded is the file
 * it read, puts the hook (gohook.c) and detaches: no tracer stays, and a
 * debugger or strace can attach afterwards. A descendant started by a
 * shell is reached the same way, since every process under the filter
 * sends its execs. */
#include "goexec.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "gohook.h"
#include "govern.h"
#include "sockwatch.h"

#define EXEC_WAIT_MS 3000 /* an exec that failed after shimrun let it go: the tracer leaves then */

/* a string of process pid at addr (read page by page: it may end at a
 * page's end), into buf */
static int read_str(pid_t pid, uint64_t addr, char *buf, size_t len)
{
	size_t got = 0;

	while (got + 1 < len) {
		size_t chunk = 4096 - ((addr + got) & 4095);
		struct iovec l, r;
		ssize_t n;
		char *z;

		if (chunk > len - 1 - got)
			chunk = len - 1 - got;
		l.iov_base = buf + got;
		l.iov_len = chunk;
		r.iov_base = (void *)(uintptr_t)(addr + got);
		r.iov_len = chunk;
		if ((n = process_vm_readv(pid, &l, 1, &r, 1, 0)) <= 0)
			return -1;
		if ((z = memchr(buf + got, 0, (size_t)n)))
			return 0;
		got += (size_t)n;
	}
	return -1;
}

/* the file exec'd, as shimrun can open it */
static int exec_path(const struct seccomp_notif *n, char *out, size_t len)
{
	char p[4096];
	int at = n->data.nr == __NR_execveat;
	long dirfd = at ? (long)(int)n->data.args[0] : AT_FDCWD;

	if (read_str((pid_t)n->pid, n->data.args[at ? 1 : 0], p, sizeof(p)) < 0)
		return -1;
	if (at && (n->data.args[4] & AT_EMPTY_PATH) && !p[0])
		return snprintf(out, len, "/proc/%d/fd/%ld", (int)n->pid, dirfd) < (int)len ? 0 : -1;
	if (p[0] == '/')
		return snprintf(out, len, "%s", p) < (int)len ? 0 : -1;
	if (dirfd == AT_FDCWD)
		return snprintf(out, len, "/proc/%d/cwd/%s", (int)n->pid, p) < (int)len ? 0 : -1;
	return snprintf(out, len, "/proc/%d/fd/%ld/%s", (int)n->pid, dirfd, p) < (int)len ? 0 : -1;
}

/* the refusals said, once each (a program exec'd a thousand times says it once) */
static void say_once(struct ns_goexec *x, const char *path, const char *why)
{
	unsigned h = 2166136261u;

	for (const char *p = why; *p; p++)
		h = (h ^ (unsigned char)*p) * 16777619u;
	for (unsigned i = 0; i < x->nsaid; i++)
		if (x->said[i] == h)
			return;
	if (x->nsaid < sizeof(x->said) / sizeof(x->said[0]))
		x->said[x->nsaid++] = h;
	fprintf(stderr, "shimrun: %s: a Go program whose HTTP statuses are not read: %s\n", path, why);
}

/* the exec's stop, within EXEC_WAIT_MS: 1; the process ended: -1; no
 * exec (it failed): 0, the process still traced */
static int exec_stop(struct ns_goexec *x, pid_t tid, pid_t tgid)
{
	uint64_t until = ns_gov_mono_us() + EXEC_WAIT_MS * 1000ull;
	int st;

	while (ns_gov_mono_us() < until) {
		pid_t w = waitpid(tgid, &st, __WALL | WNOHANG);

		if (w == 0 ||
		    (w < 0 && errno == ECHILD && tid != tgid && (w = waitpid(tid, &st, __WALL | WNOHANG)) == 0)) {
			struct timespec ts = { 0, 100000 };

			nanosleep(&ts, NULL);
			continue;
		}
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		if (WIFEXITED(st) || WIFSIGNALED(st)) {
			if (w == x->child) { /* (reaped here: its status kept for shimrun's own exit) */
				x->child_status = st;
				x->child_done = 1;
			}
			return -1;
		}
		if (WIFSTOPPED(st) && (st >> 8) == (SIGTRAP | (PTRACE_EVENT_EXEC << 8)))
			return 1;
		/* a signal that came meanwhile: delivered as it was */
		(void)ptrace(PTRACE_CONT, w, 0, (void *)(uintptr_t)(WIFSTOPPED(st) ? WSTOPSIG(st) : 0));
	}
	return 0;
}

/* let a tracee go that is not (or no longer) at a stop */
static void leave(pid_t pid)
{
	int st;

	if (ptrace(PTRACE_INTERRUPT, pid, 0, 0) == 0 && waitpid(pid, &st, __WALL) == pid && WIFSTOPPED(st))
		(void)ptrace(PTRACE_DETACH, pid, 0, 0);
}

/* The last file read and what its reading gave (the program shimrun
 * starts is read at its start line and again at its exec; a program
 * exec'd again and again is read once): read anew when the file at path
 * is not that one (its identity, size and times). */
static struct ns_goelf g;
static int g_rc = -2; /* -2: none read yet */
static char g_why[160];

static int go_read(const char *path, const struct stat *st, char *why, size_t wl)
{
	if (g_rc == -2 || st->st_dev != g.dev || st->st_ino != g.ino || st->st_size != g.fsize ||
	    st->st_mtim.tv_sec != g.mtime.tv_sec || st->st_mtim.tv_nsec != g.mtime.tv_nsec ||
	    st->st_ctim.tv_sec != g.ctime.tv_sec || st->st_ctim.tv_nsec != g.ctime.tv_nsec)
		g_rc = ns_goelf_read(path, NS_GOHOOK_FUNC, &g, g_why, sizeof(g_why));
	snprintf(why, wl, "%s", g_why);
	return g_rc;
}

int ns_goexec_off(void)
{
	const char *v = getenv("NETSHIM_GO_STATUS");

	return v && strcmp(v, "off") == 0;
}

int ns_goexec_probe(const char *path, char *what, size_t len)
{
	struct stat st;

	if (stat(path, &st) < 0) {
		snprintf(what, len, "cannot read it");
		return -1;
	}
	if (go_read(path, &st, what, len) == 0) {
		snprintf(what, len, "%s", g.version);
		return 1;
	}
	return g.is_go ? 0 : -1;
}

void ns_goexec(struct ns_goexec *x, const struct seccomp_notif *n, ns_goexec_cont_fn *cont, void *ctx)
{
	char path[4200], why[200];
	pid_t tid = (pid_t)n->pid, tgid;
	struct stat st;
	uint64_t t0, took;
	int memfd, ok, r, read = 0, sig = 0;

	if (x->off) {
		cont(ctx, n->id);
		return;
	}
	if (exec_path(n, path, sizeof(path)) < 0)
		path[0] = '\0';
	if (x->level >= 4)
		fprintf(stderr, "shimrun: an exec stopped in shimrun: %s (pid %d)\n", path[0] ? path : "?", (int)tid);
	if (!path[0] || stat(path, &st) < 0 || !S_ISREG(st.st_mode) || !(st.st_mode & 0111) ||
	    (read = 1, go_read(path, &st, why, sizeof(why))) < 0) {
		if (read && g.is_go)
			say_once(x, path, why);
		cont(ctx, n->id);
		return;
	}
	tgid = ns_sw_tgid(tid);
	t0 = ns_gov_mono_us();
	if (ptrace(PTRACE_SEIZE, tid, 0, (void *)(uintptr_t)PTRACE_O_TRACEEXEC) < 0) {
		snprintf(why, sizeof(why), "shimrun cannot trace it at its exec (%s)", strerror(errno));
		say_once(x, path, why);
		cont(ctx, n->id);
		return;
	}
	cont(ctx, n->id);
	if ((r = exec_stop(x, tid, tgid)) <= 0) {
		if (r == 0)
			leave(tid);
		return; /* (the exec failed, or the process ended: nothing to hook) */
	}
	snprintf(why, sizeof(why), "/proc/%d/exe", (int)tgid);
	ok = 0;
	if (stat(why, &st) < 0 || st.st_dev != g.dev || st.st_ino != g.ino)
		snprintf(why, sizeof(why), "the file exec'd is not the one read");
	else if ((memfd = ns_gostat_ring(x->go, tgid)) < 0)
		snprintf(why, sizeof(why), "%d Go programs are hooked already", NS_GOSTAT_PROCS);
	else {
		ok = ns_gohook_inject(tgid, &g, memfd, &sig, why, sizeof(why)) == 0;
		ns_gostat_hooked(x->go, tgid, ok);
	}
	(void)ptrace(PTRACE_DETACH, tgid, 0, (void *)(uintptr_t)sig);
	took = ns_gov_mono_us() - t0;
	if (took > x->max_stop_us)
		x->max_stop_us = took;
	if (!ok)
		say_once(x, path, why);
	else if (x->level >= 3)
		fprintf(stderr,
			"shimrun: %s (pid %d, %s): HTTP status read (%u return sites of %s hooked; stopped %llu us)\n",
			path, (int)tgid, g.version, g.nsites, NS_GOHOOK_FUNC, (unsigned long long)took);
}

/* gostat.c -- shimrun's side of the Go programs it hooked (gostat.h): one
 * ring per program (a memfd the program maps: it outlives the program, so
 * its last answers are read after it ended), read in shimrun's loop with
 * plain loads, and each answer's URL host made the destination its
 * connects were counted on. */
#include "gostat.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000 + (uint64_t)ts.tv_nsec;
}

uint64_t ns_gostat_us(const struct ns_gostat *s, uint64_t ticks)
{
	uint64_t ns = mono_ns(), tsc = __builtin_ia32_rdtsc();

	if (!ticks || !s->ns0 || ns - s->ns0 < 2000000 || tsc <= s->tsc0 || ticks > tsc - s->tsc0)
		return 0; /* (a start older than the first ring: not this run's) */
	return (uint64_t)((double)ticks * (double)(ns - s->ns0) / (double)(tsc - s->tsc0) / 1000.0);
}

/* p's place freed (its ring unmapped) */
static void ring_free(struct ns_gostat *s, struct ns_goproc *p)
{
	munmap(p->ring, sizeof(struct ns_goring));
	p->ring = NULL;
	s->n--;
}

/* p's program is gone and its ring read to its end (a system call) */
static int spent(const struct ns_goproc *p)
{
	return p->hooked && p->tail == __atomic_load_n(&p->ring->head, __ATOMIC_ACQUIRE) && kill(p->tgid, 0) < 0;
}

int ns_gostat_ring(struct ns_gostat *s, pid_t tgid)
{
	struct ns_goproc *p = NULL;
	void *m;
	int fd;

	for (unsigned i = 0; i < NS_GOSTAT_PROCS && !p; i++)
		if (!s->p[i].ring)
			p = &s->p[i];
	/* all in use: a program gone whose ring was read to its end gives its own */
	for (unsigned i = 0; i < NS_GOSTAT_PROCS && !p; i++)
		if (spent(&s->p[i])) {
			ring_free(s, &s->p[i]);
			p = &s->p[i];
		}
	if (!p)
		return -1;
	if (!s->ns0) {
		s->ns0 = mono_ns();
		s->tsc0 = __builtin_ia32_rdtsc();
	}
	if ((fd = memfd_create("netshim-goring", MFD_CLOEXEC)) < 0)
		return -1;
	if (ftruncate(fd, sizeof(struct ns_goring)) < 0 ||
	    (m = mmap(NULL, sizeof(struct ns_goring), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED) {
		close(fd);
		return -1;
	}
	p->ring = m;
	p->ring->magic = NS_GORING_MAGIC;
	p->tail = 0;
	p->tgid = tgid;
	p->fd = fd;
	p->hooked = 0;
	s->n++;
	return fd;
}

void ns_gostat_hooked(struct ns_gostat *s, pid_t tgid, int ok)
{
	for (unsigned i = 0; i < NS_GOSTAT_PROCS; i++) {
		struct ns_goproc *p = &s->p[i];

		if (!p->ring || p->tgid != tgid || p->hooked)
			continue;
		/* the program holds the ring now (or never will): shimrun's
		 * descriptor is no longer needed for it to open */
		close(p->fd);
		p->fd = -1;
		if (ok)
			p->hooked = 1;
		else
			ring_free(s, p);
	}
}

/* one process's new answers */
static void drain_one(struct ns_gostat *s, struct ns_goproc *p, ns_gostat_fn *fn, void *ctx)
{
	uint64_t head = __atomic_load_n(&p->ring->head, __ATOMIC_ACQUIRE);

	if (head - p->tail > NS_GORING_SLOTS) {
		s->lost += head - p->tail - NS_GORING_SLOTS; /* (overwritten before read) */
		p->tail = head - NS_GORING_SLOTS;
	}
	while (p->tail < head) {
		const struct ns_goslot *sl = &p->ring->slot[p->tail & (NS_GORING_SLOTS - 1)];
		struct ns_goslot copy;

		if (__atomic_load_n(&sl->seq, __ATOMIC_ACQUIRE) != p->tail + 1)
			break; /* claimed, not yet whole */
		memcpy(&copy, sl, sizeof(copy));
		__atomic_thread_fence(__ATOMIC_ACQUIRE);
		if (__atomic_load_n(&sl->seq, __ATOMIC_RELAXED) == p->tail + 1) /* (not overwritten while copied) */
			fn(ctx, p->tgid, &copy);
		else
			s->lost++;
		p->tail++;
	}
}

void ns_gostat_drain(struct ns_gostat *s, ns_gostat_fn *fn, void *ctx, int reap)
{
	if (!s->n)
		return;
	for (unsigned i = 0; i < NS_GOSTAT_PROCS; i++) {
		struct ns_goproc *p = &s->p[i];

		if (!p->ring || !p->hooked)
			continue;
		drain_one(s, p, fn, ctx);
		/* a program gone (its ring read to its end): its place freed */
		if (reap && spent(p))
			ring_free(s, p);
	}
}

/* name in /etc/hosts: its first address into d (shimrun never asks DNS:
 * its loop must not wait on the network) */
static int hosts_file(const char *name, struct ns_dest *d)
{
	FILE *f = fopen("/etc/hosts", "re");
	char line[512];
	int found = -1;

	if (!f)
		return -1;
	while (found < 0 && fgets(line, sizeof(line), f)) {
		char *save = NULL, *addr = strtok_r(line, " \t\r\n", &save), *w;

		if (!addr || addr[0] == '#')
			continue;
		while ((w = strtok_r(NULL, " \t\r\n", &save)) && w[0] != '#')
			if (strcasecmp(w, name) == 0) {
				if (inet_pton(AF_INET, addr, d->addr) == 1)
					d->family = AF_INET, found = 0;
				else if (inet_pton(AF_INET6, addr, d->addr) == 1)
					d->family = AF_INET6, found = 0;
				break;
			}
	}
	fclose(f);
	return found;
}

int ns_gostat_dest(const struct ns_goslot *sl, struct ns_dest *d)
{
	char host[NS_GOHOST_MAX + 8], name[NS_GOHOST_MAX + 1];
	size_t n = (sl->flags >> 8) & 0xff;
	const char *colon;
	unsigned port = (sl->flags & 1) ? 443 : 80;

	if (n == 0 || n > NS_GOHOST_MAX)
		return -1;
	memcpy(host, sl->host, n);
	host[n] = 0;
	for (size_t i = 0; i < n; i++)
		if (!isgraph((unsigned char)host[i]))
			return -1;
	/* "host:port", "[v6]:port", "host" (the scheme's port) */
	colon = strrchr(host, ':');
	if (colon && (host[0] != '[' || colon > strchr(host, ']'))) {
		char *end;
		unsigned long p = strtoul(colon + 1, &end, 10);

		if (*end || !p || p > 65535)
			return -1;
		port = (unsigned)p;
		n = (size_t)(colon - host);
	}
	if (host[0] == '[' && n >= 2 && host[n - 1] == ']') {
		memcpy(name, host + 1, n - 2);
		name[n - 2] = 0;
	} else {
		memcpy(name, host, n);
		name[n] = 0;
	}
	memset(d, 0, sizeof(*d));
	d->port = (uint16_t)port;
	if (inet_pton(AF_INET, name, d->addr) == 1)
		d->family = AF_INET;
	else if (inet_pton(AF_INET6, name, d->addr) == 1)
		d->family = AF_INET6;
	else if (hosts_file(name, d) < 0)
		return 1; /* a name only DNS knows: not counted (said once) */
	return 0;
}

int ns_gostat_is_hooked(const struct ns_gostat *s, pid_t tgid)
{
	for (unsigned i = 0; s->n && i < NS_GOSTAT_PROCS; i++)
		if (s->p[i].ring && s->p[i].hooked && s->p[i].tgid == tgid)
			return 1;
	return 0;
}

/* the entry of (tgid, slot) that is an own success (own) or the mark of
 * an answer that came before any (!own), or -1 */
static int own_find(const struct ns_gostat *s, pid_t tgid, int slot, int own)
{
	for (unsigned i = 0; i < s->nown; i++)
		if (s->own[i].tgid == tgid && s->own[i].slot == slot && (s->own[i].at_ms != 0) == own)
			return (int)i;
	return -1;
}

static void own_drop(struct ns_gostat *s, unsigned i)
{
	memmove(&s->own[i], &s->own[i + 1], sizeof(s->own[0]) * (s->nown - i - 1));
	s->nown--;
}

static void own_put(struct ns_gostat *s, pid_t tgid, int slot, uint64_t at_ms)
{
	if (s->nown == NS_GOSTAT_OWNS) /* the oldest goes */
		own_drop(s, 0);
	s->own[s->nown].tgid = tgid;
	s->own[s->nown].slot = slot;
	s->own[s->nown].at_ms = at_ms;
	s->nown++;
}

int ns_gostat_own_add(struct ns_gostat *s, pid_t tgid, int slot, uint64_t at_ms)
{
	int i = own_find(s, tgid, slot, 0);

	if (i >= 0) /* this destination's answers are this program's outcomes there */
		return 1;
	own_put(s, tgid, slot, at_ms ? at_ms : 1);
	return 0;
}

int ns_gostat_own_take(struct ns_gostat *s, pid_t tgid, int slot, uint64_t *at_ms)
{
	int i = own_find(s, tgid, slot, 1);

	if (i >= 0) {
		*at_ms = s->own[i].at_ms;
		own_drop(s, (unsigned)i);
		return 1;
	}
	if (own_find(s, tgid, slot, 0) < 0)
		own_put(s, tgid, slot, 0); /* its connection's success, when it comes, is not counted */
	return 0;
}

int ns_gostat_retry_after(const struct ns_goslot *answer, char ra[NS_GORA_MAX + 1])
{
	size_t n = (answer->flags >> 16) & 0xff;

	ra[0] = '\0';
	if (answer->status != 429 && answer->status != 503)
		return 1;
	if (!(answer->flags & NS_GOSLOT_HDRS))
		return 0;
	if (n > NS_GORA_MAX)
		n = NS_GORA_MAX; /* (cut: as the library keeps a value) */
	memcpy(ra, answer->ra, n);
	ra[n] = '\0';
	return 1;
}

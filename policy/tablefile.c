/* tablefile.c -- create, check and map the breaker table file under /dev/shm.
 *
 * The one part of policy/ that makes system calls, kept apart so the
 * decision code stays pure. A table is created whole under a private name
 * and then linked into place, so nobody ever maps a half-written header. */
#include "table.h"
#include "ocring.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define SHM_DIR "/dev/shm/"

int ns_table_size_env(const char *val, uint32_t max, uint32_t *out)
{
	unsigned long long v = 0;

	*out = 0;
	if (!val || !*val)
		return 0;
	for (const char *p = val; *p; p++) {
		if (*p < '0' || *p > '9' || v > max)
			return -1;
		v = v * 10 + (unsigned)(*p - '0');
	}
	if (v == 0 || v > max)
		return -1;
	*out = (uint32_t)v;
	return 0;
}

/**** the SIGBUS guard ****/

/* Mapped tables, for the handler: a fixed array of atomics, since the
 * handler may run at any instruction and can take no lock. */
#define GUARDS 16   /* the table, and the outcome rings a process maps (shim/history.c: at most 8) */
static struct guard {
	uintptr_t start, end;       /* atomic; start 0 = free */
	struct ns_table *t;
} guards[GUARDS];
static struct sigaction bus_prev;
static int bus_installed;       /* atomic */

static void on_sigbus(int sig, siginfo_t *si, void *uc)
{
	uintptr_t a = (uintptr_t)si->si_addr;
	int saved = errno;

	for (int i = 0; si->si_code > 0 && i < GUARDS; i++) {
		uintptr_t s = __atomic_load_n(&guards[i].start, __ATOMIC_ACQUIRE);
		uintptr_t e = __atomic_load_n(&guards[i].end, __ATOMIC_ACQUIRE);

		if (!s || a < s || a >= e)
			continue;
		/* the file shrank: private zero pages in its place, and the
		 * faulting access runs again on them */
		if (mmap((void *)s, e - s, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
			 -1, 0) != MAP_FAILED) {
			__atomic_store_n(&guards[i].t->broken, 1, __ATOMIC_RELEASE);
			errno = saved;
			return;
		}
	}
	/* not ours: what the program had */
	if (bus_prev.sa_flags & SA_SIGINFO) {
		bus_prev.sa_sigaction(sig, si, uc);
	} else if (bus_prev.sa_handler != SIG_DFL && bus_prev.sa_handler != SIG_IGN) {
		bus_prev.sa_handler(sig);
	} else {
		/* the default action: a fault runs again and kills as before;
		 * a SIGBUS sent by kill() is raised again to do the same */
		struct sigaction dfl;

		memset(&dfl, 0, sizeof(dfl));
		dfl.sa_handler = SIG_DFL;
		sigaction(SIGBUS, &dfl, NULL);
		if (si->si_code <= 0)
			raise(SIGBUS);
	}
	errno = saved;
}

static void guard_add(struct ns_table *t)
{
	int zero = 0;

	if (__atomic_compare_exchange_n(&bus_installed, &zero, 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
		struct sigaction sa;

		memset(&sa, 0, sizeof(sa));
		sa.sa_sigaction = on_sigbus;
		sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESTART;
		sigemptyset(&sa.sa_mask);
		sigaction(SIGBUS, &sa, &bus_prev);
	}
	for (int i = 0; i < GUARDS; i++) {
		uintptr_t free_ = 0;

		if (__atomic_load_n(&guards[i].start, __ATOMIC_RELAXED))
			continue;
		guards[i].t = t;
		__atomic_store_n(&guards[i].end, (uintptr_t)t->hdr + t->size, __ATOMIC_RELEASE);
		if (__atomic_compare_exchange_n(&guards[i].start, &free_, (uintptr_t)t->hdr, 0,
						__ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
			return;
	}
}

static void guard_remove(const struct ns_table *t)
{
	for (int i = 0; i < GUARDS; i++)
		if (__atomic_load_n(&guards[i].start, __ATOMIC_ACQUIRE) == (uintptr_t)t->hdr)
			__atomic_store_n(&guards[i].start, 0, __ATOMIC_RELEASE);
}

/**** place holders (max_connections) ****/

uint64_t ns_proc_start_time(unsigned pid, char *state)
{
	return ns_proc_stat_field(pid, 22, state);
}

uint64_t ns_proc_stat_field(unsigned pid, int want, char *state)
{
	char path[64], buf[512], *p;
	ssize_t n;
	int fd, saved = errno;
	uint64_t v = 0;

	snprintf(path, sizeof(path), "/proc/%u/stat", pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		errno = saved;
		return 0;
	}
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	errno = saved;
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	p = strrchr(buf, ')');   /* the command name may hold spaces and parentheses */
	if (state && p && p[1] == ' ')
		*state = p[2];   /* field 3: R, S, D, Z (a zombie: it died) ... */
	for (int field = 2; p && field < want; field++)
		p = strchr(p + 1, ' ');
	if (p)
		v = strtoull(p + 1, NULL, 10);
	return v;
}

uint32_t ns_place_holder(unsigned pid, uint64_t start)
{
	return (uint32_t)pid << NS_PLACE_TAG_BITS | (uint32_t)(start & ((1u << NS_PLACE_TAG_BITS) - 1));
}

int ns_place_holder_lives(uint32_t h, int deep)
{
	unsigned pid = h >> NS_PLACE_TAG_BITS;
	int saved = errno, dead;
	uint64_t start;
	char state = 0;

	if (pid <= 1)
		return pid == 1;   /* (no holder writes such a word: 0 is freed, init never signalled) */
	dead = kill((pid_t)pid, 0) < 0 && errno == ESRCH;
	errno = saved;
	if (dead)
		return 0;
	if (!deep)
		return 1;
	start = ns_proc_start_time(pid, &state);
	if (state == 'Z' || state == 'X')
		return 0;   /* killed, not yet reaped by its parent */
	return start == 0 || ns_place_holder(pid, start) == h;   /* unreadable: taken as alive */
}

uint32_t ns_table_inflight_live(const struct ns_table *t, int idx)
{
	uint32_t n = 0;

	for (int p = 0; p < (int)NS_PLACES; p++) {
		uint32_t h = ns_table_place_holder((struct ns_table *)t, idx, p);

		n += h && ns_place_holder_lives(h, 1);
	}
	return n;
}

void ns_table_default_name(char *buf, size_t len)
{
	ns_uint_put(buf, len, ns_str_put(buf, len, 0, "netshim."), (unsigned)geteuid());
}

static int bad(char *err, size_t errlen, const char *fmt, const char *a, const char *b)
{
	if (err && errlen)
		snprintf(err, errlen, fmt, a, b);
	return NS_TBL_BAD;
}

int ns_table_validate(const void *map, size_t size, char *err, size_t errlen)
{
	const struct ns_table_hdr *h = map;
	uint64_t want;

	if (size < sizeof(*h)) {
		snprintf(err, errlen, "too short (%zu bytes) for a table header", size);
		return -1;
	}
	if (h->magic != NS_TABLE_MAGIC) {
		snprintf(err, errlen, "not a netshim table (bad magic)");
		return -1;
	}
	if (h->version != NS_TABLE_VERSION) {
		snprintf(err, errlen, "table version %u, this build reads version %u (a table from %s netshim: "
			 "stop the programs using it and remove the file, or choose another NETSHIM_TABLE)",
			 h->version, NS_TABLE_VERSION, h->version < NS_TABLE_VERSION ? "an older" : "a newer");
		return -1;
	}
	if (h->hdr_size != sizeof(struct ns_table_hdr) || h->slot_size != sizeof(struct ns_slot)) {
		snprintf(err, errlen, "table layout differs from this build (header %u, slot %u bytes)",
			 h->hdr_size, h->slot_size);
		return -1;
	}
	if (h->nslots == 0 || h->nslots > NS_TABLE_MAX_SLOTS) {
		snprintf(err, errlen, "corrupt slot count %u", h->nslots);
		return -1;
	}
	if (h->ev_cap == 0 || h->ev_cap > NS_EVENTS_MAX || h->ev_size != sizeof(struct ns_evrec)) {
		snprintf(err, errlen, "corrupt event ring (%u records of %u bytes)", h->ev_cap, h->ev_size);
		return -1;
	}
	want = sizeof(struct ns_table_hdr) + (uint64_t)h->nslots * sizeof(struct ns_slot);
	if (h->ev_off != want) {
		snprintf(err, errlen, "corrupt event ring offset %llu", (unsigned long long)h->ev_off);
		return -1;
	}
	want += (uint64_t)h->ev_cap * sizeof(struct ns_evrec);
	if (h->flt_off != want || h->flt_cap != NS_FAULT_RECS || h->flt_size != sizeof(struct ns_fltrec)) {
		snprintf(err, errlen, "corrupt fault records (%u of %u bytes at %llu)", h->flt_cap, h->flt_size,
			 (unsigned long long)h->flt_off);
		return -1;
	}
	want += (uint64_t)h->flt_cap * sizeof(struct ns_fltrec);
	if (h->total_size != want || size < want) {
		snprintf(err, errlen, "too short: %zu bytes for %u slots and %u events (needs %llu)", size,
			 h->nslots, h->ev_cap, (unsigned long long)want);
		return -1;
	}
	return 0;
}

static int valid_name(const char *name)
{
	size_t n = strlen(name);

	return n > 0 && n < 200 && !strchr(name, '/') && strcmp(name, ".") != 0 && strcmp(name, "..") != 0;
}

int ns_table_name_ok(const char *name)
{
	return name && valid_name(name);
}

static int create_table(const char *dir, const char *path, const char *name, uint32_t nslots, uint32_t nevents,
			char *err, size_t errlen)
{
	char tmp[288];
	size_t ev_off = sizeof(struct ns_table_hdr) + (size_t)nslots * sizeof(struct ns_slot);
	size_t flt_off = ev_off + (size_t)nevents * sizeof(struct ns_evrec);
	size_t size = flt_off + (size_t)NS_FAULT_RECS * sizeof(struct ns_fltrec);
	struct ns_table_hdr *h;
	struct timespec ts;
	int fd, r;

	snprintf(tmp, sizeof(tmp), "%s.%s.%ld.tmp", dir, name, (long)getpid());
	unlink(tmp);
	fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return bad(err, errlen, "%s: cannot create: %s", tmp, strerror(errno));
	/* the umask could only narrow 0600, but be exact about what we promise */
	if (fchmod(fd, 0600) < 0 || ftruncate(fd, (off_t)size) < 0) {
		r = bad(err, errlen, "%s: cannot size: %s", tmp, strerror(errno));
		goto out_unlink;
	}
	h = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (h == MAP_FAILED) {
		r = bad(err, errlen, "%s: cannot map: %s", tmp, strerror(errno));
		goto out_unlink;
	}
	clock_gettime(CLOCK_REALTIME, &ts);
	h->version = NS_TABLE_VERSION;
	h->hdr_size = sizeof(struct ns_table_hdr);
	h->slot_size = sizeof(struct ns_slot);
	h->nslots = nslots;
	h->total_size = size;
	h->ev_cap = nevents;
	h->ev_size = sizeof(struct ns_evrec);
	h->ev_off = ev_off;
	h->flt_off = flt_off;
	h->flt_cap = NS_FAULT_RECS;
	h->flt_size = sizeof(struct ns_fltrec);
	h->created_wall_ms = (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
	__atomic_store_n(&h->magic, NS_TABLE_MAGIC, __ATOMIC_RELEASE);
	munmap(h, size);
	/* link() fails if another process won the race: then we use theirs */
	if (link(tmp, path) < 0 && errno != EEXIST) {
		r = bad(err, errlen, "%s: cannot create: %s", path, strerror(errno));
		goto out_unlink;
	}
	r = NS_TBL_OK;
out_unlink:
	unlink(tmp);
	close(fd);
	return r;
}

/* Open path read-write and check it is a file this user may trust: a
 * regular file of its own, not writable by others, at least min bytes.
 * Returns the descriptor, or -1 with the reason in err (*foreign: the file
 * is another user's). */
static int open_checked(const char *path, size_t min, struct stat *st, char *err, size_t errlen, int *foreign)
{
	char reason[400];
	int fd = open(path, O_RDWR | O_NOFOLLOW | O_CLOEXEC);

	if (fd < 0) {
		int e = errno;

		if (e == ELOOP)
			bad(err, errlen, "%s: is a symbolic link, refused%s", path, "");
		else
			bad(err, errlen, "%s: cannot open: %s", path, strerror(e));
		errno = e;
		return -1;
	}
	if (fstat(fd, st) < 0) {
		bad(err, errlen, "%s: cannot stat: %s", path, strerror(errno));
	} else if (!S_ISREG(st->st_mode)) {
		bad(err, errlen, "%s: not a regular file, refused%s", path, "");
	} else if (st->st_uid != geteuid()) {
		/* /dev/shm is shared by every user: another may have made the
		 * file first (on purpose, to switch this user's breakers off).
		 * Say so, and how to get out of it. */
		snprintf(reason, sizeof(reason), " (uid %u, not you: uid %u); someone made it before you, which "
			 "switches your breakers off: remove it (rm -f %.120s, as its owner or root) or use "
			 "another table (NETSHIM_TABLE=NAME)", (unsigned)st->st_uid, (unsigned)geteuid(), path);
		bad(err, errlen, "%s: owned by another user, refused%s", path, reason);
		*foreign = 1;
	} else if (st->st_mode & 0022) {
		bad(err, errlen, "%s: writable by group or others, refused%s", path, "");
	} else if ((size_t)st->st_size < min) {
		snprintf(reason, sizeof(reason), "too short (%lld bytes) for a %s header", (long long)st->st_size,
			 min == sizeof(struct ns_table_hdr) ? "table" : "ring");
		bad(err, errlen, "%s: %s, refused", path, reason);
	} else {
		return fd;
	}
	close(fd);
	errno = EINVAL;
	return -1;
}

/* Map what open_checked opened into m (hdr, size), under the SIGBUS guard
 * once valid. Returns 0, or -1 with the reason in err. fd is closed. */
static int map_checked(int fd, const struct stat *st, struct ns_table *m,
		       int (*valid)(const void *, size_t, char *, size_t), char *err, size_t errlen)
{
	char reason[400];
	void *map = mmap(NULL, (size_t)st->st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);

	close(fd);
	if (map == MAP_FAILED) {
		bad(err, errlen, "%s: cannot map: %s", m->path, strerror(errno));
		return -1;
	}
	if (valid(map, (size_t)st->st_size, reason, sizeof(reason)) < 0) {
		munmap(map, (size_t)st->st_size);
		bad(err, errlen, "%s: %s, refused", m->path, reason);
		return -1;
	}
	m->hdr = map;
	m->size = (size_t)st->st_size;
	guard_add(m);
	return 0;
}

/* Open (or make) the table NAME in directory dir ("/dev/shm/"). *foreign:
 * set when the file there belongs to another user. */
static int open_in(const char *dir, const char *name, int create, uint32_t nslots, uint32_t nevents,
		   struct ns_table *t, char *err, size_t errlen, int *foreign)
{
	struct stat st;
	int fd, r;

	memset(t, 0, sizeof(*t));
	ns_str_put(t->path, sizeof(t->path), ns_str_put(t->path, sizeof(t->path), 0, dir), name);
	fd = open_checked(t->path, sizeof(struct ns_table_hdr), &st, err, errlen, foreign);
	if (fd < 0 && errno == ENOENT && create) {
		r = create_table(dir, t->path, name, nslots, nevents, err, errlen);
		if (r != NS_TBL_OK)
			return r;
		fd = open_checked(t->path, sizeof(struct ns_table_hdr), &st, err, errlen, foreign);
	}
	if (fd < 0) {
		if (errno == ENOENT) {
			bad(err, errlen, "%s: no such table%s", t->path, " (no program has used it yet)");
			return NS_TBL_MISSING;
		}
		return NS_TBL_BAD;
	}
	if (map_checked(fd, &st, t, ns_table_validate, err, errlen) < 0)
		return NS_TBL_BAD;
	t->nslots = t->hdr->nslots;
	t->slots = (struct ns_slot *)((char *)t->hdr + sizeof(struct ns_table_hdr));
	t->ev_cap = t->hdr->ev_cap;
	t->events = (struct ns_evrec *)((char *)t->hdr + t->hdr->ev_off);
	t->flt_cap = NS_FAULT_RECS;
	t->faults = (struct ns_fltrec *)((char *)t->hdr + t->hdr->flt_off);
	return NS_TBL_OK;
}

/* The user's own runtime directory (systemd's /run/user/UID, the usual
 * XDG_RUNTIME_DIR), when it is there, theirs and private; the same for
 * every process of the user, with or without a login session's
 * environment (cron has none). */
static int private_dir(char *out, size_t len)
{
	struct stat st;

	ns_str_put(out, len, ns_uint_put(out, len, ns_str_put(out, len, 0, "/run/user/"), (unsigned)geteuid()), "/");
	return lstat(out, &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == geteuid() && !(st.st_mode & 077) ? 0 : -1;
}

int ns_table_open(const char *name, int create, uint32_t nslots, uint32_t nevents,
		  struct ns_table *t, char *err, size_t errlen)
{
	char dir[64], first[NS_ERRBUF];
	int foreign = 0, r;

	memset(t, 0, sizeof(*t));
	if (!valid_name(name))
		return bad(err, errlen, "bad table name '%s'%s", name, ": use a plain file name");
	if (nslots == 0 || nslots > NS_TABLE_MAX_SLOTS)
		nslots = NS_TABLE_DEFAULT_SLOTS;
	if (nevents == 0 || nevents > NS_EVENTS_MAX)
		nevents = NS_EVENTS_DEFAULT;
	r = open_in(SHM_DIR, name, create, nslots, nevents, t, err, errlen, &foreign);
	if (r == NS_TBL_OK || !foreign || private_dir(dir, sizeof(dir)) < 0)
		return r;
	/* fail safe: another user squats the shared name; every process of
	 * this user moves to the same private place, and says so */
	snprintf(first, sizeof(first), "%s", err);
	r = open_in(dir, name, create, nslots, nevents, t, err, errlen, &foreign);
	if (r != NS_TBL_OK) {
		snprintf(err, errlen, "%s", first);
		return NS_TBL_BAD;
	}
	t->moved = 1;
	snprintf(err, errlen, "%s" SHM_DIR "%.80s is owned by another user (someone made it first, which "
		 "would switch your breakers off); using %.200s instead, as every process of yours does until "
		 "it is removed (rm -f " SHM_DIR "%.80s, as its owner or root)", "", name, t->path, name);
	return NS_TBL_OK;
}

void ns_table_close(struct ns_table *t)
{
	if (t->hdr) {
		guard_remove(t);
		munmap(t->hdr, t->size);
	}
	t->hdr = NULL;
	t->slots = NULL;
	t->events = NULL;
	t->faults = NULL;
	t->nslots = 0;
	t->ev_cap = 0;
	t->flt_cap = 0;
}

/**** walking the written slots ****/

uint32_t ns_scan_next(const struct ns_table *t, struct ns_scan *sc, uint32_t i)
{
	uint64_t base = (uint64_t)((const char *)t->slots - (const char *)t->hdr), off;
	off_t d, h;

	/* A slot can be ready only if its first bytes (its tag) were written:
	 * slots are not page-aligned, so a slot whose start lies in a hole is
	 * never read, not even for its tag, or reading it would allocate the
	 * page before a written one, pass after pass. */
	for (;;) {
		if (i >= t->nslots || sc->fd < 0)
			return i;
		off = base + (uint64_t)i * sizeof(struct ns_slot);
		if (off >= sc->data_start && off < sc->data_end)
			return i;
		d = lseek(sc->fd, (off_t)off, SEEK_DATA);
		if (d < 0) {
			if (errno == ENXIO)
				return t->nslots;   /* nothing written after it */
			close(sc->fd);          /* the file cannot say: every slot from here */
			sc->fd = -1;
			return i;
		}
		h = lseek(sc->fd, d, SEEK_HOLE);
		sc->data_start = (uint64_t)d;
		sc->data_end = h > d ? (uint64_t)h : (uint64_t)d + 1;
		if ((uint64_t)d <= off)
			return i;
		/* the first slot that starts at or after the written bytes */
		if ((uint64_t)d - base >= (uint64_t)t->nslots * sizeof(struct ns_slot))
			return t->nslots;
		i = (uint32_t)(((uint64_t)d - base + sizeof(struct ns_slot) - 1) / sizeof(struct ns_slot));
	}
}

uint32_t ns_scan_begin(const struct ns_table *t, struct ns_scan *sc)
{
	int saved = errno;

	sc->data_start = sc->data_end = 0;
	sc->fd = t->hdr && t->path[0] ? open(t->path, O_RDONLY | O_CLOEXEC) : -1;
	errno = saved;
	return ns_scan_next(t, sc, 0);
}

void ns_scan_end(struct ns_scan *sc)
{
	if (sc->fd >= 0)
		close(sc->fd);
	sc->fd = -1;
}

/**** the outcome ring's file (ocring.h) ****/

int ns_ocring_path(const char *table_path, char *out, size_t len)
{
	size_t n = ns_str_put(out, len, ns_str_put(out, len, 0, table_path), ".outcomes");

	return n + 1 < len ? 0 : -1;
}

static int oc_validate(const void *map, size_t size, char *err, size_t errlen)
{
	const struct ns_oc_hdr *h = map;

	if (h->magic != NS_OC_MAGIC || h->version != NS_OC_VERSION || h->rec_size != sizeof(struct ns_ocrec)) {
		snprintf(err, errlen, "not an outcome ring of this build (magic, version %u, record %u bytes)",
			 h->version, h->rec_size);
		return -1;
	}
	if (h->cap == 0 || h->cap > NS_OC_MAX_CAP || (h->cap & (h->cap - 1)) ||
	    size < sizeof(*h) + (size_t)h->cap * sizeof(struct ns_ocrec)) {
		snprintf(err, errlen, "corrupt outcome ring (%u records in %zu bytes)", h->cap, size);
		return -1;
	}
	return 0;
}

int ns_ocring_create(const char *path, uint32_t cap, char *err, size_t errlen)
{
	char tmp[320];
	size_t size = sizeof(struct ns_oc_hdr) + (size_t)cap * sizeof(struct ns_ocrec);
	struct ns_oc_hdr h;
	struct timespec ts;
	int fd;

	if (cap == 0 || cap > NS_OC_MAX_CAP || (cap & (cap - 1))) {
		bad(err, errlen, "%s: %s", path, "a ring's size is a power of two up to 16777216");
		return -1;
	}
	{
		struct stat st;

		/* another user's file in its place (/dev/shm is everyone's):
		 * the rename below could not replace it, and programs would
		 * refuse it; say whose it is and the way out */
		if (lstat(path, &st) == 0 && st.st_uid != geteuid()) {
			if (err && errlen)
				snprintf(err, errlen, "%s: owned by another user (uid %u, not you: uid %u), refused: someone "
					 "made it before you, which keeps your history off; remove it (rm -f %.120s, as "
					 "its owner or root) or use another table (NETSHIM_TABLE=NAME)", path,
					 (unsigned)st.st_uid, (unsigned)geteuid(), path);
			return -1;
		}
	}
	snprintf(tmp, sizeof(tmp), "%s.%d.tmp", path, (int)getpid());
	fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0) {
		bad(err, errlen, "%s: cannot create: %s", tmp, strerror(errno));
		return -1;
	}
	memset(&h, 0, sizeof(h));
	clock_gettime(CLOCK_REALTIME, &ts);
	h.magic = NS_OC_MAGIC;
	h.version = NS_OC_VERSION;
	h.rec_size = sizeof(struct ns_ocrec);
	h.cap = cap;
	h.created_wall_ms = (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
	/* the records stay a hole until written: pages as outcomes come */
	if (fchmod(fd, 0600) < 0 || ftruncate(fd, (off_t)size) < 0 || pwrite(fd, &h, sizeof(h), 0) != (ssize_t)sizeof(h) ||
	    rename(tmp, path) < 0) {
		bad(err, errlen, "%s: cannot write: %s", tmp, strerror(errno));
		unlink(tmp);
		close(fd);
		return -1;
	}
	close(fd);
	return 0;
}

int ns_ocring_open(const char *path, struct ns_ocring *r, char *err, size_t errlen)
{
	struct stat st;
	int foreign = 0, fd;

	memset(r, 0, sizeof(*r));
	ns_str_put(r->m.path, sizeof(r->m.path), 0, path);
	fd = open_checked(path, sizeof(struct ns_oc_hdr), &st, err, errlen, &foreign);
	if (fd < 0 || map_checked(fd, &st, &r->m, oc_validate, err, errlen) < 0)
		return -1;
	r->h = (struct ns_oc_hdr *)(void *)r->m.hdr;
	r->cap = r->h->cap;
	r->recs = (struct ns_ocrec *)((char *)r->m.hdr + sizeof(struct ns_oc_hdr));
	return 0;
}

void ns_ocring_close(struct ns_ocring *r)
{
	if (r->m.hdr) {
		guard_remove(&r->m);
		munmap(r->m.hdr, r->m.size);
	}
	memset(r, 0, sizeof(*r));
}

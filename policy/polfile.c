/* polfile.c -- a policy's compiled image as a file of the machine
 * (polimage.h): found for a policy file and mapped, or written for the
 * next process. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "polimage.h"

#define PIMG_MAX (512u << 20) /* no image is larger (1 MiB of policy text is ~25,000 sections) */
#define PIMG_DIR "/dev/shm"

/* One image a policy file's path (an edit that makes a new file, as an
 * editor's save does, replaces it; the header says which file it is). */
static int image_name(const char *path, unsigned uid, char *name, size_t len)
{
	int n = snprintf(name, len, PIMG_DIR "/netshim-policy.%u.%d.%016llx", uid, NS_PIMG_VERSION,
			 (unsigned long long)ns_pimg_hash(path, strlen(path)));

	return n > 0 && (size_t)n < len;
}

static void identity(struct ns_pidx *h, const struct stat *st)
{
	h->dev = (uint64_t)st->st_dev;
	h->ino = (uint64_t)st->st_ino;
	h->size = (uint64_t)st->st_size;
	h->mtime_s = st->st_mtim.tv_sec;
	h->mtime_ns = st->st_mtim.tv_nsec;
	h->ctime_s = st->st_ctim.tv_sec;
	h->ctime_ns = st->st_ctim.tv_nsec;
}

static int same_file(const struct ns_pidx *h, const struct stat *st)
{
	struct ns_pidx now;

	identity(&now, st);
	return h->dev == now.dev && h->ino == now.ino && h->size == now.size && h->mtime_s == now.mtime_s &&
		h->mtime_ns == now.mtime_ns && h->ctime_s == now.ctime_s && h->ctime_ns == now.ctime_ns;
}

/* The image of the file st is, mapped into out: 0; -1 none, or another
 * version of the file's; -2 not sound (why says how: not only its owner's
 * to write, cut short, its header or first section broken). */
static int map_image_of(const char *path, unsigned uid, const struct stat *st, struct ns_policy *out, char *why,
			size_t whylen)
{
	const struct ns_pidx *h;
	char name[200];
	struct stat is;
	void *m;
	int fd;

	if (!image_name(path, uid, name, sizeof(name)) || (fd = open(name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)) < 0)
		return -1;
	if (fstat(fd, &is) < 0 || !S_ISREG(is.st_mode) || is.st_uid != uid || (is.st_mode & 022) ||
	    is.st_size < (off_t)sizeof(struct ns_pidx) || (uint64_t)is.st_size > PIMG_MAX) {
		close(fd);
		snprintf(why, whylen, "%s: not a file only its owner (uid %u) may write, or of no image's size", name,
			 uid);
		return -2;
	}
	m = mmap(NULL, (size_t)is.st_size, PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	if (m == MAP_FAILED)
		return -1;
	if (!ns_pimg_header_ok(m, (uint64_t)is.st_size)) {
		munmap(m, (size_t)is.st_size);
		snprintf(why, whylen, "%s: its header is broken, or it is cut short", name);
		return -2;
	}
	if (!same_file(m, st)) {
		munmap(m, (size_t)is.st_size);
		return -1; /* (the file changed since: it is written again) */
	}
	h = m;
	memset(out, 0, sizeof(*out));
	snprintf(out->path, sizeof(out->path), "%s", path);
	memcpy(out->shadow, h->shadow, sizeof(out->shadow));
	out->nsections = (int)h->nsections;
	out->has_faults = h->has_faults != 0;
	out->has_addr_choice = h->has_addr_choice != 0;
	out->has_max_requests = h->has_max_requests != 0;
	out->sec = (struct ns_section *)((char *)m + h->sec_off);
	out->idx = h;
	out->img = m;
	out->img_len = (size_t)is.st_size;
	out->img_mapped = 1;
	if (!ns_pimg_section_ok(out, 0)) {
		ns_policy_free(out);
		snprintf(why, whylen, "%s: its [defaults] section is broken", name);
		return -2;
	}
	return 0;
}

/* ...the process's user's, else root's (shimctl check --install as root,
 * for every user that may read the file): as map_image_of. */
static int map_image(const char *path, const struct stat *st, struct ns_policy *out, char *why, size_t whylen)
{
	int r = map_image_of(path, (unsigned)geteuid(), st, out, why, whylen), r0;

	if (r == 0 || geteuid() == 0)
		return r;
	r0 = map_image_of(path, 0, st, out, why, whylen);
	return r0 == 0 ? 0 : r == -2 ? -2 : r0;
}

/* Write p's image as the file st is: to a name of its own, then renamed
 * over the image's (a process mapping the old one keeps it). */
static int publish_as(const struct ns_policy *p, const char *path, const struct stat *st, char *name, size_t namelen,
		      char *why, size_t whylen)
{
	struct ns_pidx h;
	char tmp[240];
	const char *b;
	size_t left;
	int fd;

	if (!p->idx || p->img_mapped) {
		snprintf(why, whylen, "not indexed");
		return -1;
	}
	if (!image_name(path, (unsigned)geteuid(), name, namelen) ||
	    snprintf(tmp, sizeof(tmp), "%s.%d", name, (int)getpid()) >= (int)sizeof(tmp)) {
		snprintf(why, whylen, "name too long");
		return -1;
	}
	(void)unlink(tmp); /* (a dead process's of the same pid) */
	/* readable by whom the policy file is (its owner always), written by no one */
	if ((fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, (st->st_mode & 0444) | 0400)) < 0) {
		snprintf(why, whylen, "%s: %s", tmp, strerror(errno));
		return -1;
	}
	h = *p->idx;
	identity(&h, st);
	b = (const char *)&h;
	left = sizeof(h);
	for (int part = 0; part < 2; part++) {
		while (left) {
			ssize_t w = write(fd, b, left);

			if (w < 0 && errno == EINTR)
				continue;
			if (w <= 0) {
				snprintf(why, whylen, "%s: %s", tmp, w < 0 ? strerror(errno) : "short write");
				close(fd);
				unlink(tmp);
				return -1;
			}
			b += w;
			left -= (size_t)w;
		}
		b = (const char *)p->img + sizeof(h);
		left = p->img_len - sizeof(h);
	}
	left = fchmod(fd, (st->st_mode & 0444) | 0400) < 0; /* (past the umask) */
	if (close(fd) < 0 || left || rename(tmp, name) < 0) {
		snprintf(why, whylen, "%s: %s", name, strerror(errno));
		unlink(tmp);
		return -1;
	}
	return 0;
}

int ns_pimg_publish(const struct ns_policy *p, const char *path, char *name, size_t namelen, char *why, size_t whylen)
{
	struct stat st;

	if (stat(path, &st) < 0) {
		snprintf(why, whylen, "%s: %s", path, strerror(errno));
		return -1;
	}
	return publish_as(p, path, &st, name, namelen, why, whylen);
}

int ns_policy_load_shared(const char *path, struct ns_policy *out, char *err, size_t errlen, int *mapped)
{
	struct stat before, after;
	char name[200], why[300] = "";
	int have = stat(path, &before) == 0 && S_ISREG(before.st_mode), r, m = -1;

	*mapped = 0;
	if (have && (m = map_image(path, &before, out, why, sizeof(why))) == 0) {
		*mapped = 1;
		return 0;
	}
	if ((r = ns_policy_load(path, out, err, errlen)) != 0)
		return r;
	if (m == -2) { /* said by the caller; the image is written again below */
		*mapped = -1;
		if (err && errlen)
			snprintf(err, errlen, "%s", why);
	}
	/* published only when it is worth a file (parsing takes ~2 us a
	 * section) and the file did not change while it was read */
	if (out->nsections >= NS_PIMG_MIN_SECTIONS && ns_policy_index(out) == 0 && have && stat(path, &after) == 0) {
		struct ns_pidx was;

		identity(&was, &before);
		if (same_file(&was, &after))
			(void)publish_as(out, path, &after, name, sizeof(name), why, sizeof(why));
	}
	return 0;
}

/* test_polimage.c -- a policy compiled once for the machine
 * (policy/polimage.c): resolved through its index it gives what every
 * section looked at gives, for every kind of destination; its image,
 * written and mapped, the same; an image of another version of the file,
 * or one that is not sound, is never used (said, and written again), and
 * never makes a crash. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../policy/polimage.h"
#include "testdest.h"

static char err[4096];

/* A policy of n name sections plus wildcards, CIDRs, ports, a duplicate
 * name on another port, and keys of several types. */
static char *policy_text(int n)
{
	size_t cap = (size_t)n * 96 + 4096, used = 0;
	char *t = malloc(cap);

	cr_assert_not_null(t);
	used += (size_t)snprintf(t + used, cap - used, "[defaults]\nconnect_timeout = 2s\nmode = enforce\n");
	for (int i = 0; i < n; i++)
		used += (size_t)snprintf(t + used, cap - used, "[host \"h%d.example.com\"]\nread_timeout = %ds\n", i,
					 i % 50 + 1);
	used += (size_t)snprintf(t + used, cap - used,
				 "[host \"*.example.com\"]\nmax_connections = 7\n"
				 "[host \"*.b.example.com\"]\nmax_connections = 9\nmode = monitor\n"
				 "[host \"h3.example.com:8443\"]\nread_timeout = 99s\n"
				 "[host \"10.0.0.0/8\"]\nrate = 5/s\n"
				 "[host \"10.1.0.0/16\"]\nrate = 7/s\n"
				 "[host \"10.1.2.3:80\"]\nmode = bypass\n"
				 "[host \"::1\"]\nretry_after = off\n"
				 "[host \"API.Other.Org\"]\nfault = reset 50%%\n");
	return t;
}

static const struct {
	const char *name, *addr;
	int port;
} dests[] = {
	{ "h0.example.com", "192.0.2.1", 80 },
	{ "H17.Example.COM", "192.0.2.1", 443 },
	{ "h3.example.com", "192.0.2.1", 8443 },
	{ "h3.example.com", "192.0.2.1", 80 },
	{ "x.example.com", "192.0.2.1", 80 },
	{ "a.b.example.com", "192.0.2.1", 80 },
	{ "deep.a.b.example.com", "10.1.2.3", 80 },
	{ "example.com", "192.0.2.1", 80 },
	{ ".example.com", "192.0.2.1", 80 },
	{ "b.example.com", "10.9.9.9", 81 },
	{ "", "10.1.2.3", 80 },
	{ "", "10.1.2.3", 81 },
	{ "", "10.200.0.1", 80 },
	{ "", "::1", 443 },
	{ "api.other.org", "192.0.2.9", 443 },
	{ "h1999.example.com", "192.0.2.1", 80 },
	{ "h2000.example.com", "192.0.2.1", 80 },
	{ "nowhere.test", "192.0.2.1", 80 },
	{ "", "0.0.0.0", 0 },
};

/* Every destination resolves the same under a and b (settings and where
 * each came from). */
static void same_everywhere(const struct ns_policy *a, const struct ns_policy *b)
{
	for (size_t i = 0; i < sizeof(dests) / sizeof(dests[0]); i++) {
		struct ns_dest d = dest(dests[i].name, dests[i].addr, dests[i].port);
		struct ns_settings sa, sb;
		struct ns_origin oa, ob;

		memset(&sa, 0, sizeof(sa));
		memset(&sb, 0, sizeof(sb));
		ns_policy_resolve(a, &d, &sa, &oa);
		ns_policy_resolve(b, &d, &sb, &ob);
		cr_assert(memcmp(&oa, &ob, sizeof(oa)) == 0, "%s %s:%d: another section", dests[i].name, dests[i].addr,
			  dests[i].port);
		cr_assert(memcmp(&sa, &sb, offsetof(struct ns_settings, fault)) == 0 && sa.fault.n == sb.fault.n,
			  "%s %s:%d: other settings", dests[i].name, dests[i].addr, dests[i].port);
	}
}

static void parse(const char *text, struct ns_policy *p)
{
	cr_assert_eq(ns_policy_parse(text, strlen(text), "t.conf", p, err, sizeof(err)), 0, "%s", err);
}

Test(polimage, the_index_resolves_as_every_section_looked_at_does)
{
	char *t = policy_text(2000);
	struct ns_policy all, idx;
	struct ns_dest d = dest("h1234.example.com", "192.0.2.1", 80);
	uint32_t cand[NS_PIMG_CANDIDATES];

	parse(t, &all);
	parse(t, &idx);
	cr_assert_eq(ns_policy_index(&idx), 0);
	same_everywhere(&all, &idx);
	/* and it looks at few: the name, the wildcard, the CIDR and address ones */
	cr_assert_eq(ns_pimg_candidates(&idx, &d, cand, NS_PIMG_CANDIDATES), 6);
	cr_assert_eq(ns_pimg_candidates(&all, &d, cand, NS_PIMG_CANDIDATES), -1);
	ns_policy_free(&all);
	ns_policy_free(&idx);
	free(t);
}

/* A policy file of its own, and its image's file gone when done. */
struct fixture {
	char path[64], image[256];
};

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	cr_assert_not_null(f);
	fputs(text, f);
	fclose(f);
}

static void published(struct fixture *fx, const char *text)
{
	struct ns_policy p;
	char why[400];
	int fd;

	snprintf(fx->path, sizeof(fx->path), "/tmp/ns-polimage-XXXXXX");
	fd = mkstemp(fx->path);
	cr_assert_geq(fd, 0);
	close(fd);
	write_file(fx->path, text);
	cr_assert_eq(ns_policy_load(fx->path, &p, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(ns_policy_index(&p), 0);
	cr_assert_eq(ns_pimg_publish(&p, fx->path, fx->image, sizeof(fx->image), why, sizeof(why)), 0, "%s", why);
	ns_policy_free(&p);
}

static void done(struct fixture *fx)
{
	unlink(fx->path);
	unlink(fx->image);
}

Test(polimage, an_image_mapped_resolves_as_the_file_parsed)
{
	char *t = policy_text(300);
	struct fixture fx;
	struct ns_policy parsed, mapped;
	int m = 0;

	published(&fx, t);
	parse(t, &parsed);
	cr_assert_eq(ns_policy_load_shared(fx.path, &mapped, err, sizeof(err), &m), 0, "%s", err);
	cr_assert_eq(m, 1, "the image was not mapped");
	cr_assert(mapped.img_mapped && mapped.idx);
	same_everywhere(&parsed, &mapped);
	ns_policy_free(&mapped);
	ns_policy_free(&parsed);
	done(&fx);
	free(t);
}

Test(polimage, a_file_changed_since_its_image_is_read_again)
{
	char *t = policy_text(300);
	struct fixture fx;
	struct ns_policy p;
	struct ns_dest d = dest("h5.example.com", "192.0.2.1", 80);
	struct ns_settings s;
	int m = 1;

	published(&fx, t);
	/* the same size, another value: the times say it changed */
	t[strstr(t, "h5.example.com\"]\nread_timeout = 6s") - t + strlen("h5.example.com\"]\nread_timeout = ")] = '7';
	usleep(20000);
	write_file(fx.path, t);
	cr_assert_eq(ns_policy_load_shared(fx.path, &p, err, sizeof(err), &m), 0, "%s", err);
	cr_assert_eq(m, 0, "an image of the file before it changed was used");
	ns_policy_resolve(&p, &d, &s, NULL);
	cr_assert_eq(s.read_timeout_ms, 7000);
	ns_policy_free(&p);
	/* ...and its image is the new one now (300 sections: worth one) */
	cr_assert_eq(ns_policy_load_shared(fx.path, &p, err, sizeof(err), &m), 0, "%s", err);
	cr_assert_eq(m, 1);
	ns_policy_resolve(&p, &d, &s, NULL);
	cr_assert_eq(s.read_timeout_ms, 7000);
	ns_policy_free(&p);
	done(&fx);
	free(t);
}

/* The image's file with its bytes at off replaced by len bytes of v. */
static void poke(const char *image, off_t off, const void *v, size_t len)
{
	int fd;

	chmod(image, 0600);
	fd = open(image, O_WRONLY);
	cr_assert_geq(fd, 0);
	cr_assert_eq(pwrite(fd, v, len, off), (ssize_t)len);
	close(fd);
	chmod(image, 0400);
}

static uint32_t word_at(const char *image, off_t off)
{
	uint32_t v = 0;
	int fd = open(image, O_RDONLY);

	cr_assert_eq(pread(fd, &v, sizeof(v), off), (ssize_t)sizeof(v));
	close(fd);
	return v;
}

/* The header's layout (polimage.c struct ns_pidx): its offsets. */
enum {
	H_NSECTIONS = 8 + 4 * 4 + 3 * 8 + 4 * 8 + 8,
	H_NBUCKETS = H_NSECTIONS + 4,
	H_NENTRIES = H_NBUCKETS + 4,
	H_SEC_OFF = H_NENTRIES + 8,
	H_ENTRY_OFF = H_SEC_OFF + 16,
};

Test(polimage, an_image_that_is_not_sound_is_not_used_and_never_crashes)
{
	char *t = policy_text(300);
	struct ns_policy parsed;
	uint32_t bad;
	int m;

	parse(t, &parsed);
	/* header words past their bounds: not mapped, the file parsed */
	for (int k = 0; k < 4; k++) {
		struct fixture fx;
		struct ns_policy p;
		static const off_t at[] = { H_NSECTIONS, H_NBUCKETS, H_SEC_OFF, 0 };
		static const uint32_t v[] = { 0x7fffffff, 3, 0xfffffff0, 0x58585858 };

		published(&fx, t);
		poke(fx.image, at[k], &v[k], sizeof(v[k]));
		m = 1;
		cr_assert_eq(ns_policy_load_shared(fx.path, &p, err, sizeof(err), &m), 0, "%s", err);
		cr_assert_eq(m, -1, "a broken header (%d) was mapped, or not said", k);
		cr_assert(strstr(err, fx.image) && strstr(err, "header is broken"), "%s", err);
		same_everywhere(&parsed, &p);
		ns_policy_free(&p);
		/* ...and written again: the next process maps it */
		cr_assert_eq(ns_policy_load_shared(fx.path, &p, err, sizeof(err), &m), 0, "%s", err);
		cr_assert_eq(m, 1, "the broken image (%d) was not written again", k);
		same_everywhere(&parsed, &p);
		ns_policy_free(&p);
		done(&fx);
	}
	/* an entry naming a section past the last, a section whose name has no
	 * end: mapped, and resolved without a crash (the entry and the section
	 * passed over) */
	{
		struct fixture fx;
		struct ns_policy p;
		struct ns_settings s;
		struct ns_dest d = dest("h1.example.com", "192.0.2.1", 80);
		uint32_t eoff, soff, n;
		char junk[300];

		published(&fx, t);
		eoff = word_at(fx.image, H_ENTRY_OFF);
		soff = word_at(fx.image, H_SEC_OFF);
		n = word_at(fx.image, H_NENTRIES);
		bad = 0xfffffff0;
		for (uint32_t e = 0; e < n; e++)
			poke(fx.image, eoff + e * 16 + 8, &bad, sizeof(bad));
		memset(junk, 'x', sizeof(junk));
		poke(fx.image, soff + 2 * sizeof(struct ns_section) + offsetof(struct ns_section, name), junk,
		     sizeof(((struct ns_section *)0)->name));
		m = 0;
		cr_assert_eq(ns_policy_load_shared(fx.path, &p, err, sizeof(err), &m), 0, "%s", err);
		cr_assert_eq(m, 1);
		ns_policy_resolve(&p, &d, &s, NULL);
		cr_assert_eq(s.read_timeout_ms, ns_builtin_settings.read_timeout_ms,
			     "a section the index no longer finds gave its value");
		cr_assert_not(ns_pimg_section_ok(&p, 2));
		ns_policy_free(&p);
		done(&fx);
	}
	/* writable by others: not used */
	{
		struct fixture fx;
		struct ns_policy p;

		published(&fx, t);
		chmod(fx.image, 0622);
		m = 1;
		cr_assert_eq(ns_policy_load_shared(fx.path, &p, err, sizeof(err), &m), 0, "%s", err);
		cr_assert_eq(m, -1, "an image others may write was mapped, or not said");
		cr_assert(strstr(err, "only its owner"), "%s", err);
		ns_policy_free(&p);
		done(&fx);
	}
	ns_policy_free(&parsed);
	free(t);
}

/* What a mapped image's owner may rewrite after a section was checked:
 * settings taken from it never index past an array nor name a choice that
 * is not one. */
Test(polimage, settings_taken_from_an_image_are_made_sound)
{
	struct ns_settings s = ns_builtin_settings;

	s.fault.n = 1000;
	s.mode = 7;
	s.recovery = 9;
	ns_pimg_settings_sane(&s);
	cr_assert_eq(s.fault.n, 0);
	cr_assert_eq(s.mode, NS_MODE_ENFORCE);
	cr_assert_eq(s.recovery, NS_RECOVERY_AUTO);
	s.fault.n = 1;
	s.fault.f[0].kind = NS_F_KINDS + 3;
	ns_pimg_settings_sane(&s);
	cr_assert_eq(s.fault.n, 0);
	s.fault.n = 1;
	s.fault.f[0].kind = NS_F_RESET;
	s.mode = NS_MODE_MONITOR;
	ns_pimg_settings_sane(&s);
	cr_assert_eq(s.fault.n, 1);
	cr_assert_eq(s.mode, NS_MODE_MONITOR);
}

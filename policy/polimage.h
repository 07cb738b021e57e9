/* polimage.h -- a policy compiled once for the machine.
 *
 * Every process used to parse the policy file at its first connect (about
 * 2 us a section: 20 ms for 10,000 sections) and then looked at every
 * section for each destination it resolved. Compiled, the policy is its
 * sections as the parser made them and an index of them by name (a hash
 * of each exact name and each wildcard's suffix; the CIDR sections in a
 * list of their own), in one image. The first process that parses a file
 * (or `shimctl check --install`) writes it to
 * /dev/shm/netshim-policy.UID.V.HASH (HASH: of the file's path), with the
 * file's identity (device, inode, size, modification and change times)
 * in its header; every other process whose file has that identity maps it
 * read-only, shared, and resolves through the index: a destination looks
 * at the sections that can match it (and the CIDR ones), whatever the
 * policy's size. An image whose identity differs is replaced by the next
 * process that parses the file.
 *
 * The image is untrusted input: owned by the process's user and writable
 * by no one else, or it is not mapped; every offset and count in its header
 * is checked when it is mapped, every index read from it when it is used,
 * and a section is checked (its strings end, its counts and choices are in
 * range) before its values are taken. */
#ifndef NS_POLIMAGE_H
#define NS_POLIMAGE_H

#include <stddef.h>
#include <stdint.h>

#include "policy.h"

/* The most sections one destination's resolution looks at through the
 * index (more: every section, as without one). */
#define NS_PIMG_CANDIDATES   256
/* A policy of fewer sections parses in less time than its image takes to
 * map: none is written for it (one is used when there is). */
#define NS_PIMG_MIN_SECTIONS 64

#define NS_PIMG_VERSION 1

/* The image's format: its header, then the sections and the index's words
 * (offsets from the header's start). */
/* The image's header; the index's words follow it (offsets from its start). */
struct ns_pidx {
	char magic[8];
	uint32_t version, sec_size, set_size, nkeys;
	/* the policy file it was compiled from, as stat() saw it */
	uint64_t dev, ino, size;
	int64_t mtime_s, mtime_ns, ctime_s, ctime_ns;
	uint64_t total; /* the image's length */
	uint32_t nsections, nbuckets, nentries, nother;
	uint64_t sec_off;    /* struct ns_section[nsections] */
	uint64_t bucket_off; /* uint32_t[nbuckets]: an entry's index + 1, 0 none */
	uint64_t entry_off;  /* struct ns_pentry[nentries] */
	uint64_t other_off;  /* uint32_t[nother]: the sections no name finds (CIDR), ascending */
	char path[256], shadow[256];
	int32_t has_faults, has_addr_choice, has_max_requests, pad;
};

/* A name or wildcard section under the hash of its name (a wildcard's: its
 * suffix with the dot), chained in its bucket. */
struct ns_pentry {
	uint64_t hash;
	uint32_t sec, next; /* next: an entry's index + 1, 0 none */
};

/* Load path as the programs do: its compiled image when one matches the
 * file as it is now, mapped (*mapped 1); else the file parsed and indexed
 * (*mapped 0), and its image written for the next process (best effort,
 * silent). *mapped -1: an image was there and was not sound (err says
 * which and how: the caller says it once); it was written again. Returns
 * as ns_policy_load. */
int ns_policy_load_shared(const char *path, struct ns_policy *out, char *err, size_t errlen, int *mapped);
/* Index a parsed policy (its sections move into a heap image): 0, or -1
 * when memory ran out (it is then resolved without one). */
int ns_policy_index(struct ns_policy *p);
/* Write p's image (indexed) for path, as ns_policy_load_shared would:
 * 0 and the image's file name in name, or -1 with why. */
int ns_pimg_publish(const struct ns_policy *p, const char *path, char *name, size_t namelen, char *why, size_t whylen);

/* The sections that can match d, ascending, into cand (at most max): how
 * many, or -1 when p has no index or more would match (look at all). */
int ns_pimg_candidates(const struct ns_policy *p, const struct ns_dest *d, uint32_t *cand, int max);
/* FNV-1a of s[0, n) in lower case (the index's names, the image's file name). */
uint64_t ns_pimg_hash(const char *s, size_t n);
/* Is the header of an image of len bytes sound: its format this build's,
 * every array it names within it? */
int ns_pimg_header_ok(const struct ns_pidx *h, uint64_t len);
/* Settings resolved from a mapped image made sound again (a count past its
 * array, a choice out of range: none, the default). */
void ns_pimg_settings_sane(struct ns_settings *s);
/* Is section i of p sound to take values from (always, without an image
 * mapped)? */
int ns_pimg_section_ok(const struct ns_policy *p, int i);

#endif

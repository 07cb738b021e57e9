/* polimage.c -- a policy compiled once for the machine (polimage.h). */
#include "polimage.h"

#include <arpa/inet.h>
#include <stdlib.h>
#include <string.h>

#include "faultspec.h"
#include "internal.h"

#define PIMG_SECTIONS (1u << 20)

static const char magic[8] = { 'N', 'S', 'P', 'O', 'L', 'I', 'M', '1' };

uint64_t ns_pimg_hash(const char *s, size_t n)
{
	uint64_t h = 0xcbf29ce484222325ULL;

	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];

		h = (h ^ (c >= 'A' && c <= 'Z' ? c + 32u : c)) * 0x100000001b3ULL;
	}
	return h;
}

static size_t align8(size_t n)
{
	return (n + 7) & ~(size_t)7;
}

static int by_name(const struct ns_section *s)
{
	return s->kind == NS_MATCH_NAME || s->kind == NS_MATCH_WILDCARD;
}

int ns_policy_index(struct ns_policy *p)
{
	uint32_t n = (uint32_t)p->nsections, ne = 0, no = 0, nb = 16, k = 0, j = 0, *bk, *other;
	size_t sec_off = align8(sizeof(struct ns_pidx)), bucket_off, entry_off, other_off, total;
	struct ns_pidx *h;
	struct ns_pentry *en;

	if (p->img || p->nsections < 1 || (uint32_t)p->nsections > PIMG_SECTIONS)
		return p->img ? 0 : -1;
	for (uint32_t i = 1; i < n; i++)
		by_name(&p->sec[i]) ? ne++ : no++;
	while (nb < 2 * ne)
		nb <<= 1;
	bucket_off = sec_off + (size_t)n * sizeof(struct ns_section);
	entry_off = align8(bucket_off + (size_t)nb * sizeof(uint32_t));
	other_off = entry_off + (size_t)ne * sizeof(struct ns_pentry);
	total = align8(other_off + (size_t)no * sizeof(uint32_t));
	if (!(h = calloc(1, total)))
		return -1;
	memcpy(h->magic, magic, sizeof(magic));
	h->version = NS_PIMG_VERSION;
	h->sec_size = sizeof(struct ns_section);
	h->set_size = sizeof(struct ns_settings);
	h->nkeys = NS_K_COUNT;
	h->total = total;
	h->nsections = n;
	h->nbuckets = nb;
	h->nentries = ne;
	h->nother = no;
	h->sec_off = sec_off;
	h->bucket_off = bucket_off;
	h->entry_off = entry_off;
	h->other_off = other_off;
	memcpy(h->path, p->path, sizeof(h->path));
	memcpy(h->shadow, p->shadow, sizeof(h->shadow));
	h->has_faults = p->has_faults;
	h->has_addr_choice = p->has_addr_choice;
	h->has_max_requests = p->has_max_requests;
	memcpy((char *)h + sec_off, p->sec, (size_t)n * sizeof(struct ns_section));
	bk = (uint32_t *)((char *)h + bucket_off);
	en = (struct ns_pentry *)((char *)h + entry_off);
	other = (uint32_t *)((char *)h + other_off);
	for (uint32_t i = 1; i < n; i++) {
		const struct ns_section *s = &p->sec[i];

		if (by_name(s)) {
			uint64_t hv = ns_pimg_hash(s->name, strnlen(s->name, sizeof(s->name)));

			en[k] = (struct ns_pentry){ hv, i, bk[hv & (nb - 1)] };
			bk[hv & (nb - 1)] = ++k;
		} else {
			other[j++] = i;
		}
	}
	free(p->sec);
	p->sec = (struct ns_section *)((char *)h + sec_off);
	p->idx = h;
	p->img = h;
	p->img_len = total;
	p->img_mapped = 0;
	return 0;
}

/* The sections of one hash, appended to cand[*n, max): 0, or -1 full. An
 * index read from the image is looked at before it is used; a chain longer
 * than the entries is a loop, and ends. */
static int look(const struct ns_pidx *h, uint64_t hv, uint32_t *cand, int *n, int max)
{
	const uint32_t *bk = (const uint32_t *)((const char *)h + h->bucket_off);
	const struct ns_pentry *en = (const struct ns_pentry *)((const char *)h + h->entry_off);
	uint32_t e = bk[hv & (h->nbuckets - 1)];

	for (uint32_t steps = 0; e && e <= h->nentries && steps < h->nentries; steps++) {
		const struct ns_pentry *x = &en[e - 1];

		if (x->hash == hv && x->sec && x->sec < h->nsections) {
			if (*n >= max)
				return -1;
			cand[(*n)++] = x->sec;
		}
		e = x->next;
	}
	return 0;
}

int ns_pimg_candidates(const struct ns_policy *p, const struct ns_dest *d, uint32_t *cand, int max)
{
	const struct ns_pidx *h = p->idx;
	const uint32_t *other;
	size_t len;
	int n = 0;

	if (!h)
		return -1;
	len = strnlen(d->name, sizeof(d->name));
	if (len && look(h, ns_pimg_hash(d->name, len), cand, &n, max) < 0)
		return -1;
	/* a wildcard's name is a suffix with its dot, shorter than the name */
	for (size_t i = 1; i < len; i++)
		if (d->name[i] == '.' && look(h, ns_pimg_hash(d->name + i, len - i), cand, &n, max) < 0)
			return -1;
	other = (const uint32_t *)((const char *)h + h->other_off);
	for (uint32_t j = 0; j < h->nother; j++) {
		if (!other[j] || other[j] >= h->nsections)
			continue;
		if (n >= max)
			return -1;
		cand[n++] = other[j];
	}
	/* in the policy's order: of two as specific, the first wins */
	for (int a = 1; a < n; a++)
		for (int b = a; b > 0 && cand[b - 1] > cand[b]; b--) {
			uint32_t t = cand[b];

			cand[b] = cand[b - 1];
			cand[b - 1] = t;
		}
	return n;
}

void ns_pimg_settings_sane(struct ns_settings *s)
{
	/* (what was checked in a section may have changed since in a mapped
	 * image its owner rewrote: nothing taken from one indexes past its
	 * array, nor names a choice that is not one) */
	if (s->fault.n > NS_FAULTS_MAX)
		s->fault.n = 0;
	for (uint32_t f = 0; f < s->fault.n; f++)
		if (s->fault.f[f].kind >= NS_F_KINDS)
			s->fault.n = 0;
	if (s->mode > NS_MODE_BYPASS)
		s->mode = NS_MODE_ENFORCE;
	if (s->recovery > NS_RECOVERY_MANUAL)
		s->recovery = NS_RECOVERY_AUTO;
}

int ns_pimg_section_ok(const struct ns_policy *p, int i)
{
	const struct ns_section *s;
	uint32_t v;

	if (!p->img_mapped)
		return 1; /* (made by this process's parser) */
	if (i < 0 || i >= p->nsections)
		return 0;
	s = &p->sec[i];
	if (s->kind < NS_MATCH_DEFAULTS || s->kind > NS_MATCH_CIDR || (i == 0) != (s->kind == NS_MATCH_DEFAULTS) ||
	    !memchr(s->name, '\0', sizeof(s->name)) || !memchr(s->pattern, '\0', sizeof(s->pattern)) || s->port < 0 ||
	    s->port > 65535 || s->prefix < 0 || s->prefix > 128 ||
	    (s->kind == NS_MATCH_CIDR && s->family != AF_INET && s->family != AF_INET6) ||
	    (NS_K_COUNT < 64 && (s->set >> NS_K_COUNT)))
		return 0;
	for (int k = 0; k < NS_K_COUNT; k++) {
		if (!(s->set & NS_KBIT(k)))
			continue;
		switch (ns_keydefs[k].type) {
		case T_MODE:
		case T_RECOVERY:
		case T_BOOL:
		case T_THROTTLE:
		case T_ADDRCHOICE:
			memcpy(&v, (const char *)&s->v + ns_keydefs[k].off, sizeof(v));
			if (v > (ns_keydefs[k].type == T_MODE ? (uint32_t)NS_MODE_BYPASS : 1u))
				return 0;
			break;
		case T_FAULT:
			if (s->v.fault.n > NS_FAULTS_MAX)
				return 0;
			for (uint32_t f = 0; f < s->v.fault.n; f++)
				if (s->v.fault.f[f].kind >= NS_F_KINDS)
					return 0;
			break;
		default:
			break;
		}
	}
	return 1;
}

/* An array of n items of sz bytes at off lies within total. */
static int within(uint64_t off, uint64_t n, uint64_t sz, uint64_t total)
{
	return off <= total && n <= (total - off) / sz;
}

int ns_pimg_header_ok(const struct ns_pidx *h, uint64_t len)
{
	return memcmp(h->magic, magic, sizeof(magic)) == 0 && h->version == NS_PIMG_VERSION &&
		h->sec_size == sizeof(struct ns_section) && h->set_size == sizeof(struct ns_settings) &&
		h->nkeys == NS_K_COUNT && h->total == len && h->nsections >= 1 && h->nsections <= PIMG_SECTIONS &&
		h->nbuckets && !(h->nbuckets & (h->nbuckets - 1)) && h->sec_off >= sizeof(*h) && !(h->sec_off % 8) &&
		!(h->entry_off % 8) && !(h->bucket_off % 4) && !(h->other_off % 4) &&
		within(h->sec_off, h->nsections, sizeof(struct ns_section), len) &&
		within(h->bucket_off, h->nbuckets, sizeof(uint32_t), len) &&
		within(h->entry_off, h->nentries, sizeof(struct ns_pentry), len) &&
		within(h->other_off, h->nother, sizeof(uint32_t), len) && memchr(h->path, '\0', sizeof(h->path)) &&
		memchr(h->shadow, '\0', sizeof(h->shadow));
}

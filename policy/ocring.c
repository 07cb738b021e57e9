/* ocring.c -- the outcome ring's records, written and read (ocring.h).
 * Pure: the file is made and mapped in tablefile.c. Every word of a record
 * is moved with a relaxed atomic, so a reader racing a writer a whole ring
 * ahead reads old or new words, never a torn one, and the sequence number
 * read before and after the copy says which. (Two writers a ring apart on
 * one record at once, a writer stopped mid-record for a whole ring's worth
 * of outcomes, can leave one record mixed: the reader bounds every field
 * it uses.) */
#include "ocring.h"

#include <string.h>

#define WORDS (sizeof(struct ns_ocrec) / sizeof(uint64_t))

void ns_ocring_put(struct ns_ocring *r, const struct ns_ocrec *rec)
{
	uint64_t pos, w[WORDS], *d;

	if (!r->h || ns_table_broken(&r->m))
		return;
	memcpy(w, rec, sizeof(w));
	pos = __atomic_fetch_add(&r->h->head, 1, __ATOMIC_RELAXED);
	d = (uint64_t *)&r->recs[pos & (r->cap - 1)];
	__atomic_store_n(&d[0], 0, __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_RELEASE);
	for (size_t i = 1; i < WORDS; i++)
		__atomic_store_n(&d[i], w[i], __ATOMIC_RELAXED);
	__atomic_store_n(&d[0], pos + 1, __ATOMIC_RELEASE);
}

uint64_t ns_ocring_head(const struct ns_ocring *r)
{
	return r->h && !ns_table_broken(&r->m) ? __atomic_load_n(&r->h->head, __ATOMIC_ACQUIRE) : 0;
}

int ns_ocring_get(const struct ns_ocring *r, uint64_t pos, struct ns_ocrec *out)
{
	uint64_t w[WORDS], s;
	const uint64_t *d;

	if (!r->h || ns_table_broken(&r->m))
		return -1;
	d = (const uint64_t *)&r->recs[pos & (r->cap - 1)];
	s = __atomic_load_n(&d[0], __ATOMIC_ACQUIRE);
	if (s != pos + 1)
		return s > pos + 1 ? -1 : 1;
	w[0] = s;
	for (size_t i = 1; i < WORDS; i++)
		w[i] = __atomic_load_n(&d[i], __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_ACQUIRE);
	if (__atomic_load_n(&d[0], __ATOMIC_RELAXED) != s)
		return -1;   /* a writer a ring ahead took it meanwhile */
	memcpy(out, w, sizeof(*out));
	return 0;
}

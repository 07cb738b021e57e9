/* ctl_shadow.c -- the shadow policy's breakers (shim/shadow.c) as shimctl
 * status shows them: read once, through the written slots only (a lookup
 * by key would read, and so allocate, the shadow table's never-written
 * pages). */
#include <err.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../policy/breaker.h"
#include "shimctl.h"

struct shadow_entry {
	char key[NS_KEY_MAX];
	const char *state;
	uint64_t rejected;
};
static struct shadow_entry *shadows;
static size_t nshadows;

static int cmp_shadow(const void *a, const void *b)
{
	return strcmp(((const struct shadow_entry *)a)->key, ((const struct shadow_entry *)b)->key);
}

void ctl_shadow_load(const char *table)
{
	char sname[256], why[NS_ERRBUF];
	struct ns_table st;
	struct ns_scan sc;
	struct ns_entry e;
	size_t cap = 0;
	uint64_t now = ctl_mono_ms();

	snprintf(sname, sizeof(sname), "%s.shadow", table);
	if (ns_table_open(sname, 0, 0, 0, &st, why, sizeof(why)) != NS_TBL_OK)
		return;   /* no shadow policy anywhere: nothing to show */
	for (uint32_t i = ns_scan_begin(&st, &sc); i < st.nslots; i = ns_scan_next(&st, &sc, i + 1)) {
		if (ns_table_read(&st, (int)i, now, &e) != 0)
			continue;
		if (nshadows == cap && !(shadows = realloc(shadows, (cap = cap ? cap * 2 : 16) * sizeof(*shadows))))
			err(1, "out of memory");
		memcpy(shadows[nshadows].key, e.key, sizeof(e.key));
		shadows[nshadows].state = ns_state_name(e.brk.state);
		shadows[nshadows++].rejected = e.rejected;
	}
	ns_scan_end(&sc);
	ns_table_close(&st);
	qsort(shadows, nshadows, sizeof(*shadows), cmp_shadow);
}

const char *ctl_shadow_find(const char *key, uint64_t *rejected)
{
	struct shadow_entry k;
	const struct shadow_entry *s;

	*rejected = 0;
	if (!nshadows)
		return NULL;
	snprintf(k.key, sizeof(k.key), "%s", key);
	s = bsearch(&k, shadows, nshadows, sizeof(*shadows), cmp_shadow);
	if (!s)
		return NULL;
	*rejected = s->rejected;
	return s->state;
}

void ctl_shadow_free(void)
{
	free(shadows);
	shadows = NULL;
	nshadows = 0;
}

/* histread.c -- the history database read back (shimctl history,
 * backtest, suggest, report): the outcomes and the breakers' transitions
 * of a span, by destination. */
#include <err.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/histdb.h"
#include "histread.h"
#include "shimctl.h"

/**** the database ****/

sqlite3 *hr_open(const char *file)
{
	sqlite3 *db = NULL;
	sqlite3_stmt *st;
	int ok = 0;

	if (access(file, R_OK) < 0) {
		warnx("%s: no history there (netshim-agent --history %s records it)", file, file);
		return NULL;
	}
	if (sqlite3_open_v2(file, &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) {
		warnx("%s: %s", file, db ? sqlite3_errmsg(db) : "cannot open");
		sqlite3_close(db);
		return NULL;
	}
	sqlite3_busy_timeout(db, 2000);
	if (sqlite3_prepare_v2(db, "SELECT value FROM meta WHERE key = 'schema'", -1, &st, NULL) == SQLITE_OK) {
		ok = sqlite3_step(st) == SQLITE_ROW && sqlite3_column_text(st, 0) &&
		     strcmp((const char *)sqlite3_column_text(st, 0), HIST_SCHEMA_VERSION) == 0;
		sqlite3_finalize(st);
	}
	if (!ok) {
		warnx("%s: not a netshim history of schema %s", file, HIST_SCHEMA_VERSION);
		sqlite3_close(db);
		return NULL;
	}
	return db;
}

static int64_t hr_since_wall(const struct hopt *o)
{
	return o->since_ms ? (int64_t)ctl_wall_ms() - (int64_t)o->since_ms : 0;
}




/* Load the outcomes since o->since_ms (of o->dest alone when given). */
int hr_load(sqlite3 *db, const struct hopt *o, struct hist *h)
{
	sqlite3_stmt *st;
	int64_t *ids = NULL, maxid = 0;
	int *by_id, rc;

	memset(h, 0, sizeof(*h));
	if (sqlite3_prepare_v2(db, "SELECT id, key FROM dests ORDER BY key", -1, &st, NULL) != SQLITE_OK)
		return -1;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		const char *k = (const char *)sqlite3_column_text(st, 1);

		if (!k || (o->dest && strcmp(k, o->dest) != 0))
			continue;
		h->dests = realloc(h->dests, (size_t)(h->ndests + 1) * sizeof(*h->dests));
		ids = realloc(ids, (size_t)(h->ndests + 1) * sizeof(*ids));
		if (!h->dests || !ids)
			errx(1, "out of memory");
		memset(&h->dests[h->ndests], 0, sizeof(*h->dests));
		snprintf(h->dests[h->ndests].key, NS_KEY_MAX, "%s", k);
		ids[h->ndests] = sqlite3_column_int64(st, 0);
		if (ids[h->ndests] > maxid)
			maxid = ids[h->ndests];
		h->ndests++;
	}
	sqlite3_finalize(st);
	/* dests.id -> index: ids are the recorder's rowids, small and dense */
	if (maxid > 100000000 || !(by_id = malloc((size_t)(maxid + 1) * sizeof(*by_id))))
		errx(1, "out of memory");
	for (int64_t i = 0; i <= maxid; i++)
		by_id[i] = -1;
	for (int i = 0; i < h->ndests; i++)
		if (ids[i] > 0)
			by_id[ids[i]] = i;
	if (sqlite3_prepare_v2(db, "SELECT at_us, conn_us, wall_ms, conn, latency_us, dest, status, kind, err "
			       "FROM outcomes WHERE wall_ms >= ?", -1, &st, NULL) != SQLITE_OK)
		return -1;
	sqlite3_bind_int64(st, 1, hr_since_wall(o));
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		struct row r;
		int k = sqlite3_column_int(st, 7);

		int64_t id = sqlite3_column_int64(st, 5);

		r.dest = id > 0 && id <= maxid ? by_id[id] : -1;
		if (r.dest < 0 || k < NS_OC_SUCCESS || k > NS_OC_KIND_MAX)
			continue;
		r.at_us = sqlite3_column_int64(st, 0);
		r.conn_us = sqlite3_column_int64(st, 1);
		r.wall_ms = sqlite3_column_int64(st, 2);
		r.conn = sqlite3_column_int64(st, 3);
		r.latency_us = (uint32_t)sqlite3_column_int64(st, 4);
		r.status = (uint16_t)sqlite3_column_int(st, 6);
		r.kind = (uint8_t)k;
		r.err = sqlite3_column_int(st, 8);
		r.att = -1;
		if (h->nrows == h->caprows) {
			h->caprows = h->caprows ? h->caprows * 2 : 4096;
			h->rows = realloc(h->rows, h->caprows * sizeof(*h->rows));
			if (!h->rows)
				errx(1, "out of memory");
		}
		h->rows[h->nrows++] = r;
		if (!h->first_wall || r.wall_ms < h->first_wall)
			h->first_wall = r.wall_ms;
		if (r.wall_ms > h->last_wall)
			h->last_wall = r.wall_ms;
		h->dests[r.dest].n[k]++;
		if (k == NS_OC_SUCCESS) {
			struct dest *d = &h->dests[r.dest];

			if (d->nlat == d->caplat) {
				d->caplat = d->caplat ? d->caplat * 2 : 256;
				d->lat = realloc(d->lat, d->caplat * sizeof(*d->lat));
				if (!d->lat)
					errx(1, "out of memory");
			}
			d->lat[d->nlat++] = r.latency_us;
		}
	}
	sqlite3_finalize(st);
	free(ids);
	free(by_id);
	return rc == SQLITE_DONE ? 0 : -1;
}

void hr_free(struct hist *h)
{
	for (int i = 0; i < h->ndests; i++)
		free(h->dests[i].lat);
	free(h->dests);
	free(h->rows);
}

int hr_cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

/* The value at fraction bp/10000 of the sorted v (the smallest that keeps
 * at least that share at or under it). */
uint32_t hr_quantile(const uint32_t *v, size_t n, uint32_t bp)
{
	size_t i;

	if (!n)
		return 0;
	i = (size_t)(((unsigned __int128)n * bp + 9999) / 10000);
	return v[i ? i - 1 : 0];
}

/**** events, as the recorder kept them ****/


struct event *hr_load_events(sqlite3 *db, const struct hopt *o, size_t *n)
{
	sqlite3_stmt *st;
	struct event *ev = NULL;
	size_t cap = 0;

	*n = 0;
	if (sqlite3_prepare_v2(db, "SELECT at_us, wall_ms, dest, type, rule FROM events WHERE wall_ms >= ? AND type IN "
			       "('opened', 'probe_failed', 'closed', 'reset', 'forced_open') ORDER BY at_us", -1, &st,
			       NULL) != SQLITE_OK)
		return NULL;
	sqlite3_bind_int64(st, 1, hr_since_wall(o));
	while (sqlite3_step(st) == SQLITE_ROW) {
		const char *d = (const char *)sqlite3_column_text(st, 2);

		if (!d || (o->dest && strcmp(d, o->dest) != 0))
			continue;
		if (*n == cap) {
			cap = cap ? cap * 2 : 64;
			ev = realloc(ev, cap * sizeof(*ev));
			if (!ev)
				errx(1, "out of memory");
		}
		memset(&ev[*n], 0, sizeof(ev[*n]));
		ev[*n].at_us = sqlite3_column_int64(st, 0);
		ev[*n].wall_ms = sqlite3_column_int64(st, 1);
		snprintf(ev[*n].dest, sizeof(ev[*n].dest), "%s", d);
		snprintf(ev[*n].type, sizeof(ev[*n].type), "%s", (const char *)sqlite3_column_text(st, 3));
		snprintf(ev[*n].rule, sizeof(ev[*n].rule), "%s", (const char *)sqlite3_column_text(st, 4));
		(*n)++;
	}
	sqlite3_finalize(st);
	return ev;
}

/* ctl_history.c -- shimctl history, backtest and suggest: what the history
 * recorder (netshim-agent --history, tools/common/histdb.h) kept, read back.
 *
 * backtest replays the recorded outcomes through the same breaker code the
 * shim runs (policy/table.c and breaker.c, on slots in this process's
 * memory): one attempt when each connection's connect was admitted, one
 * outcome per exchange, in the order of the breakers' own clock, with the
 * operators' resets and forced opens at their times. A connect the
 * candidate turns away takes its connection's outcomes with it; one the
 * live breaker turned away and the candidate would let through is counted
 * apart (what it would have met is not known). */
#include <err.h>
#include <getopt.h>
#include <sqlite3.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../../policy/ocring.h"
#include "../../policy/policy.h"
#include "histread.h"
#include "shimctl.h"

#define MATCH_US 10000              /* a replayed transition matches a real one this close */

/**** backtest ****/

enum { E_RESET, E_FORCE, E_ATTEMPT, E_REJECTED, E_OUTCOME };

struct rev {
	int64_t t_us;
	uint32_t what;
	uint32_t i;
};

struct att {
	int64_t conn, conn_us;
	uint32_t row;
};

struct trans {
	int64_t at_us, wall_ms;
	int dest;
	const char *type, *rule;
	int64_t real_delta_us;      /* matched: replayed minus real; INT64_MIN = no real one */
};

struct dres {
	uint64_t rejected, real_rejected, let_through, held, dropped, real_transitions, missing;
};

/* Three keys compared in turn: -1, 0 or 1. */
static int cmp3(int64_t a1, int64_t b1, int64_t a2, int64_t b2, int64_t a3, int64_t b3)
{
	if (a1 != b1)
		return a1 < b1 ? -1 : 1;
	if (a2 != b2)
		return a2 < b2 ? -1 : 1;
	return a3 < b3 ? -1 : a3 > b3;
}

static int cmp_att(const void *a, const void *b)
{
	const struct att *x = a, *y = b;

	return cmp3(x->conn, y->conn, x->conn_us, y->conn_us, x->row, y->row);
}

static int cmp_rev(const void *a, const void *b)
{
	const struct rev *x = a, *y = b;

	return cmp3(x->t_us, y->t_us, x->what, y->what, x->i, y->i);
}

static void *grow(void *p, size_t *cap, size_t n, size_t size)
{
	if (n < *cap)
		return p;
	*cap = *cap ? *cap * 2 : 1024;
	p = realloc(p, *cap * size);
	if (!p)
		errx(1, "out of memory");
	return p;
}

static int find_dest_key(const struct hist *h, const char *key)
{
	for (int i = 0; i < h->ndests; i++)
		if (strcmp(h->dests[i].key, key) == 0)
			return i;
	return -1;
}

/* The timeline: one attempt per connection (at its connect), its
 * outcomes, the connects turned away, and the operators' actions. */
static struct rev *timeline(struct hist *h, const struct event *ev, size_t nev, size_t *nrev, uint32_t *natt_out,
			    int **att_dest_out)
{
	struct att *a = malloc((h->nrows + 1) * sizeof(*a));
	struct rev *r = NULL;
	size_t na = 0, n = 0, cap = 0;
	uint32_t natt = 0;
	int *att_dest;

	if (!a)
		errx(1, "out of memory");
	for (size_t i = 0; i < h->nrows; i++)
		if (h->rows[i].conn)
			a[na++] = (struct att){ h->rows[i].conn, h->rows[i].conn_us, (uint32_t)i };
	qsort(a, na, sizeof(*a), cmp_att);
	att_dest = malloc((na + 1) * sizeof(*att_dest));
	if (!att_dest)
		errx(1, "out of memory");
	for (size_t i = 0; i < na; i++) {
		if (i == 0 || a[i].conn != a[i - 1].conn || a[i].conn_us != a[i - 1].conn_us) {
			att_dest[natt] = h->rows[a[i].row].dest;
			r = grow(r, &cap, n, sizeof(*r));
			r[n++] = (struct rev){ a[i].conn_us, E_ATTEMPT, natt++ };
		}
		h->rows[a[i].row].att = (int)natt - 1;
	}
	free(a);
	for (size_t i = 0; i < h->nrows; i++) {
		r = grow(r, &cap, n, sizeof(*r));
		r[n++] = (struct rev){ h->rows[i].at_us, h->rows[i].conn ? E_OUTCOME : E_REJECTED, (uint32_t)i };
	}
	for (size_t i = 0; i < nev; i++) {
		if (strcmp(ev[i].type, "reset") != 0 && strcmp(ev[i].type, "forced_open") != 0)
			continue;
		r = grow(r, &cap, n, sizeof(*r));
		r[n++] = (struct rev){ ev[i].at_us, ev[i].type[0] == 'r' ? E_RESET : E_FORCE, (uint32_t)i };
	}
	qsort(r, n, sizeof(*r), cmp_rev);
	*nrev = n;
	*natt_out = natt;
	*att_dest_out = att_dest;
	return r;
}

static const char *tr_type(int tr)
{
	return tr == NS_TR_OPENED ? "opened" : tr == NS_TR_REOPENED ? "probe_failed" : tr == NS_TR_CLOSED ? "closed" : NULL;
}

static void report_backtest(const char *cand, const struct hopt *o, const struct hist *h, const struct dres *res,
			    const struct trans *tr, size_t ntr, const struct event *ev, size_t nev)
{
	char t1[40], t2[40];

	if (o->json) {
		printf("{\"candidate\":");
		ctl_json_string(stdout, cand);
		printf(",\"history\":");
		ctl_json_string(stdout, o->file);
		printf(",\"outcomes\":%zu,\"destinations\":[", h->nrows);
		for (int d = 0; d < h->ndests; d++) {
			const struct dres *x = &res[d];
			int first = 1;

			printf("%s{\"destination\":", d ? "," : "");
			ctl_json_string(stdout, h->dests[d].key);
			printf(",\"rejected\":%llu,\"real_rejected\":%llu,\"let_through\":%llu,\"held\":%llu,"
			       "\"outcomes_not_reached\":%llu,\"real_transitions\":%llu,\"missing\":%llu,\"transitions\":[",
			       (unsigned long long)x->rejected, (unsigned long long)x->real_rejected,
			       (unsigned long long)x->let_through, (unsigned long long)x->held, (unsigned long long)x->dropped,
			       (unsigned long long)x->real_transitions, (unsigned long long)x->missing);
			for (size_t i = 0; i < ntr; i++) {
				if (tr[i].dest != d)
					continue;
				ctl_rfc3339((uint64_t)tr[i].wall_ms, t1, sizeof(t1));
				printf("%s{\"time\":\"%s\",\"at_us\":%lld,\"transition\":\"%s\",\"rule\":\"%s\",\"real\":%s",
				       first ? "" : ",", t1, (long long)tr[i].at_us, tr[i].type, tr[i].rule,
				       tr[i].real_delta_us == INT64_MIN ? "false" : "true");
				if (tr[i].real_delta_us != INT64_MIN)
					printf(",\"real_delta_ms\":%.3f", (double)tr[i].real_delta_us / 1000.0);
				printf("}");
				first = 0;
			}
			printf("],\"missing_transitions\":[");
			first = 1;
			for (size_t j = 0; j < nev; j++) {
				if (ev[j].matched || strcmp(ev[j].dest, h->dests[d].key) != 0 || !strcmp(ev[j].type, "reset") ||
				    !strcmp(ev[j].type, "forced_open"))
					continue;
				ctl_rfc3339((uint64_t)ev[j].wall_ms, t1, sizeof(t1));
				printf("%s{\"time\":\"%s\",\"transition\":\"%s\",\"rule\":\"%s\"}", first ? "" : ",", t1,
				       ev[j].type, ev[j].rule);
				first = 0;
			}
			printf("]}");
		}
		printf("]}\n");
		return;
	}
	ctl_rfc3339((uint64_t)h->first_wall, t1, sizeof(t1));
	ctl_rfc3339((uint64_t)h->last_wall, t2, sizeof(t2));
	printf("# backtest of %s: %zu outcomes, %s to %s (%s)\n", cand, h->nrows, h->nrows ? t1 : "-",
	       h->nrows ? t2 : "-", o->file);
	printf("%-28s %10s %10s %8s %8s %12s %10s %12s\n", "DESTINATION", "REAL_TRIPS", "TRIPS", "EXTRA", "MISSING",
	       "REAL_REJECTED", "REJECTED", "LET_THROUGH");
	for (int d = 0; d < h->ndests; d++) {
		uint64_t n = 0, extra = 0;

		for (size_t i = 0; i < ntr; i++)
			if (tr[i].dest == d) {
				n++;
				extra += tr[i].real_delta_us == INT64_MIN;
			}
		printf("%-28s %10llu %10llu %8llu %8llu %12llu %10llu %12llu\n", h->dests[d].key,
		       (unsigned long long)res[d].real_transitions, (unsigned long long)n, (unsigned long long)extra,
		       (unsigned long long)res[d].missing, (unsigned long long)res[d].real_rejected,
		       (unsigned long long)res[d].rejected, (unsigned long long)res[d].let_through);
	}
	printf("(TRIPS: the candidate's opens, failed probes and closes; EXTRA: not among the real ones within %d ms; "
	       "MISSING: real ones it would not make)\n", MATCH_US / 1000);
	for (size_t i = 0; i < ntr; i++) {
		ctl_rfc3339((uint64_t)tr[i].wall_ms, t1, sizeof(t1));
		printf("  %s  %-28s %-13s %-22s ", t1, h->dests[tr[i].dest].key, tr[i].type, tr[i].rule);
		if (tr[i].real_delta_us == INT64_MIN)
			printf("EXTRA (did not happen)\n");
		else
			printf("as it happened (%+.1f ms)\n", (double)tr[i].real_delta_us / 1000.0);
	}
	for (size_t j = 0; j < nev; j++) {
		if (ev[j].matched || !strcmp(ev[j].type, "reset") || !strcmp(ev[j].type, "forced_open") ||
		    find_dest_key(h, ev[j].dest) < 0)
			continue;
		ctl_rfc3339((uint64_t)ev[j].wall_ms, t1, sizeof(t1));
		printf("  %s  %-28s %-13s %-22s MISSING (happened, the candidate would not)\n", t1, ev[j].dest, ev[j].type,
		       ev[j].rule);
	}
}

static int backtest(const char *cand, const struct hopt *o)
{
	struct ns_policy pol;
	char errs[4096];
	sqlite3 *db;
	struct hist h;
	struct event *ev;
	struct rev *r;
	struct ns_settings *sets;
	struct dres *res;
	struct trans *tr = NULL;
	struct ns_table rt;
	size_t nev, nrev, ntr = 0, captr = 0;
	uint32_t natt;
	int *att_dest;
	uint8_t *away;

	if (ns_policy_load(cand, &pol, errs, sizeof(errs)) != 0) {
		fputs(errs, stderr);
		return 2;
	}
	for (int i = 0; i < pol.nsections; i++)
		if (pol.sec[i].v.max_connections == NS_MAXCONN_AUTO || pol.sec[i].v.throttle) {
			/* what they would have refused depends on what was in
			 * flight, which the history does not keep */
			warnx("%s: max_connections = auto and throttle = adaptive are not replayed (the history keeps "
			      "no connections in flight): the breakers alone are",
			      cand);
			break;
		}
	if (!(db = hr_open(o->file)))
		return 1;
	if (hr_load(db, o, &h) < 0) {
		warnx("%s: %s", o->file, sqlite3_errmsg(db));
		sqlite3_close(db);
		ns_policy_free(&pol);
		return 1;
	}
	ev = hr_load_events(db, o, &nev);
	sqlite3_close(db);
	if (!ev && !(ev = calloc(1, sizeof(*ev))))
		errx(1, "out of memory");
	r = timeline(&h, ev, nev, &nrev, &natt, &att_dest);
	sets = calloc((size_t)h.ndests + 1, sizeof(*sets));
	res = calloc((size_t)h.ndests + 1, sizeof(*res));
	away = calloc((size_t)natt + 1, 1);
	memset(&rt, 0, sizeof(rt));
	rt.nslots = (uint32_t)h.ndests;
	rt.slots = calloc((size_t)h.ndests + 1, sizeof(*rt.slots));
	if (!sets || !res || !away || !rt.slots)
		errx(1, "out of memory");
	for (int i = 0; i < h.ndests; i++) {
		struct ns_dest d;

		memset(&d, 0, sizeof(d));
		if (ns_dest_parse(h.dests[i].key, &d) < 0)
			d.family = AF_INET;
		ns_policy_resolve(&pol, &d, &sets[i], NULL);
		res[i].real_rejected = h.dests[i].n[NS_OC_REJECTED];
		res[i].held = h.dests[i].n[NS_OC_REJECTED_FLEET] + h.dests[i].n[NS_OC_REJECTED_COOLDOWN];
	}
	for (size_t k = 0; k < nrev; k++) {
		const struct rev *e = &r[k];
		uint64_t ms = (uint64_t)e->t_us / 1000;
		struct ns_step st;
		const struct row *w = e->what == E_OUTCOME || e->what == E_REJECTED ? &h.rows[e->i] : NULL;
		int d = e->what == E_ATTEMPT ? att_dest[e->i] : w ? w->dest : find_dest_key(&h, ev[e->i].dest);

		if (d < 0 || sets[d].mode == NS_MODE_BYPASS)
			continue;
		memset(&st, 0, sizeof(st));
		switch (e->what) {
		case E_RESET:
			ns_table_reset(&rt, d);
			continue;
		case E_FORCE:
			ns_table_force_open(&rt, d, ms, (uint64_t)ev[e->i].wall_ms);
			continue;
		case E_ATTEMPT:
			if (ns_table_attempt(&rt, d, sets[d].mode == NS_MODE_ENFORCE, ms, &sets[d], &st) == NS_REJECT) {
				away[e->i] = 1;
				res[d].rejected++;
			}
			continue;
		case E_REJECTED:
			if (w->kind != NS_OC_REJECTED)
				continue;   /* held by the fleet or a Retry-After: not the breaker's to say */
			if (ns_table_attempt(&rt, d, sets[d].mode == NS_MODE_ENFORCE, ms, &sets[d], &st) == NS_REJECT)
				res[d].rejected++;
			else
				res[d].let_through++;
			continue;
		default:
			break;
		}
		if (w->att >= 0 && away[w->att]) {
			res[d].dropped++;
			continue;
		}
		ns_table_outcome_at(&rt, d, w->kind == NS_OC_SUCCESS ? NS_OUT_SUCCESS : w->kind == NS_OC_TIMEOUT ?
				    NS_OUT_TIMEOUT : NS_OUT_FAILURE, w->err, w->kind == NS_OC_SUCCESS ? w->latency_us : 0,
				    ms, (uint64_t)w->wall_ms, &sets[d], &st);
		if (tr_type(st.transition)) {
			tr = grow(tr, &captr, ntr, sizeof(*tr));
			tr[ntr++] = (struct trans){ e->t_us, w->wall_ms, d, tr_type(st.transition),
						    st.transition == NS_TR_CLOSED ? "" : ns_rule_name(st.rule), INT64_MIN };
		}
	}
	/* each replayed transition against the real ones of its destination */
	for (size_t i = 0; i < ntr; i++) {
		for (size_t j = 0; j < nev; j++) {
			int64_t dt = tr[i].at_us - ev[j].at_us;

			if (ev[j].matched || strcmp(ev[j].type, tr[i].type) != 0 ||
			    strcmp(ev[j].dest, h.dests[tr[i].dest].key) != 0 || dt > MATCH_US || dt < -MATCH_US)
				continue;
			ev[j].matched = 1;
			tr[i].real_delta_us = dt;
			break;
		}
	}
	for (size_t j = 0; j < nev; j++) {
		int d = find_dest_key(&h, ev[j].dest);

		if (d >= 0 && strcmp(ev[j].type, "reset") != 0 && strcmp(ev[j].type, "forced_open") != 0) {
			res[d].real_transitions++;
			res[d].missing += !ev[j].matched;
		}
	}
	report_backtest(cand, o, &h, res, tr, ntr, ev, nev);
	free(tr);
	free(res);
	free(sets);
	free(away);
	free(att_dest);
	free(r);
	free(ev);
	free(rt.slots);
	hr_free(&h);
	ns_policy_free(&pol);
	return 0;
}

/**** history, suggest ****/

static void summary_line(const struct dest *d, char *out, size_t len)
{
	uint64_t p50 = 0, p99 = 0;

	if (d->nlat) {
		p50 = hr_quantile(d->lat, d->nlat, 5000);
		p99 = hr_quantile(d->lat, d->nlat, 9900);
	}
	snprintf(out, len, "%-28s %9llu %9llu %9llu %9llu %9llu %10.1f %10.1f", d->key,
		 (unsigned long long)d->n[NS_OC_SUCCESS], (unsigned long long)d->n[NS_OC_FAILURE],
		 (unsigned long long)d->n[NS_OC_TIMEOUT], (unsigned long long)d->n[NS_OC_REJECTED],
		 (unsigned long long)(d->n[NS_OC_REJECTED_FLEET] + d->n[NS_OC_REJECTED_COOLDOWN]), (double)p50 / 1000.0,
		 (double)p99 / 1000.0);
}

static int history(const struct hopt *o)
{
	sqlite3 *db = hr_open(o->file);
	struct hist h;
	struct event *ev;
	size_t nev;
	char line[512], t[40];

	if (!db)
		return 1;
	if (hr_load(db, o, &h) < 0) {
		warnx("%s: %s", o->file, sqlite3_errmsg(db));
		sqlite3_close(db);
		return 1;
	}
	ev = hr_load_events(db, o, &nev);
	sqlite3_close(db);
	for (int i = 0; i < h.ndests; i++)
		qsort(h.dests[i].lat, h.dests[i].nlat, sizeof(uint32_t), hr_cmp_u32);
	if (o->json) {
		printf("{\"history\":");
		ctl_json_string(stdout, o->file);
		printf(",\"outcomes\":%zu,\"destinations\":[", h.nrows);
		for (int i = 0; i < h.ndests; i++) {
			const struct dest *d = &h.dests[i];

			printf("%s{\"destination\":", i ? "," : "");
			ctl_json_string(stdout, d->key);
			printf(",\"success\":%llu,\"failure\":%llu,\"timeout\":%llu,\"rejected\":%llu,\"held\":%llu,"
			       "\"first_byte_p50_ms\":%.3f,\"first_byte_p99_ms\":%.3f}",
			       (unsigned long long)d->n[NS_OC_SUCCESS], (unsigned long long)d->n[NS_OC_FAILURE],
			       (unsigned long long)d->n[NS_OC_TIMEOUT], (unsigned long long)d->n[NS_OC_REJECTED],
			       (unsigned long long)(d->n[NS_OC_REJECTED_FLEET] + d->n[NS_OC_REJECTED_COOLDOWN]),
			       (double)hr_quantile(d->lat, d->nlat, 5000) / 1000.0, (double)hr_quantile(d->lat, d->nlat, 9900) / 1000.0);
		}
		printf("],\"events\":[");
		for (size_t j = 0; j < nev; j++) {
			ctl_rfc3339((uint64_t)ev[j].wall_ms, t, sizeof(t));
			printf("%s{\"time\":\"%s\",\"destination\":", j ? "," : "", t);
			ctl_json_string(stdout, ev[j].dest);
			printf(",\"type\":\"%s\",\"rule\":\"%s\"}", ev[j].type, ev[j].rule);
		}
		printf("]}\n");
	} else {
		printf("%-28s %9s %9s %9s %9s %9s %10s %10s\n", "DESTINATION", "SUCCESS", "FAILURE", "TIMEOUT", "REJECTED",
		       "HELD", "FB_P50", "FB_P99");
		for (int i = 0; i < h.ndests; i++) {
			summary_line(&h.dests[i], line, sizeof(line));
			printf("%s\n", line);
		}
		printf("(HELD: turned away by the fleet or a server's Retry-After; FB: first byte after the exchange "
		       "began, ms)\n");
		for (size_t j = 0; j < nev; j++) {
			ctl_rfc3339((uint64_t)ev[j].wall_ms, t, sizeof(t));
			printf("  %s  %-28s %-13s %s\n", t, ev[j].dest, ev[j].type, ev[j].rule);
		}
	}
	free(ev);
	hr_free(&h);
	return 0;
}

/* The upper bound of the histogram bucket that holds us (the table's
 * buckets, 1-2.5-5 steps): what a suggested deadline is rounded up to. */
static uint64_t bucket_up(uint64_t us)
{
	for (unsigned b = 0; b < NS_HIST_BUCKETS - 1; b++)
		if (us <= ns_hist_bounds_us[b])
			return ns_hist_bounds_us[b];
	return us;
}

/* A read_timeout is never suggested below 100 ms, nor below ten times the
 * median first byte (a quiet loopback history would cut the first slow
 * day), nor from fewer samples than the share asks to see: a percentile
 * that keeps keep_bp needs at least ten samples beyond it. */
#define SUGGEST_FLOOR_US 100000u
#define SUGGEST_MEDIAN_TIMES 10u

static uint64_t samples_needed(uint32_t keep_bp)
{
	return keep_bp >= 10000 ? UINT64_MAX : (10ull * 10000 + (10000 - keep_bp) - 1) / (10000 - keep_bp);
}

static int suggest(const struct hopt *o)
{
	sqlite3 *db = hr_open(o->file);
	struct ns_policy pol;
	char errs[4096], cur[32];
	struct hist h;
	int first = 1;
	const char *policy = o->policy ? o->policy : ns_policy_path();   /* the policy in force */
	uint64_t need = samples_needed(o->keep_bp);

	if (!db)
		return 1;
	if ((policy ? ns_policy_load(policy, &pol, errs, sizeof(errs)) : ns_policy_builtin(&pol)) != 0) {
		fputs(errs, stderr);
		sqlite3_close(db);
		return 2;
	}
	if (hr_load(db, o, &h) < 0) {
		warnx("%s: %s", o->file, sqlite3_errmsg(db));
		sqlite3_close(db);
		return 1;
	}
	sqlite3_close(db);
	if (o->json)
		printf("{\"keep\":%.2f,\"destinations\":[", o->keep_bp / 100.0);
	else
		printf("# keep %.2f%% of the recorded successes; policy %s\n%-28s %9s %12s %14s %12s %s\n",
		       o->keep_bp / 100.0, policy ? policy : "(built-in defaults)", "DESTINATION", "SUCCESSES",
		       "FIRST_BYTE", "READ_TIMEOUT", "POLICY", "CUT_BY_POLICY");
	for (int i = 0; i < h.ndests; i++) {
		struct dest *d = &h.dests[i];
		struct ns_settings s;
		struct ns_dest nd;
		uint64_t q, sug, cut = 0, rt, med;
		const char *by = "percentile";
		int enough = (uint64_t)d->nlat >= need;

		if (!d->nlat)
			continue;
		qsort(d->lat, d->nlat, sizeof(uint32_t), hr_cmp_u32);
		q = hr_quantile(d->lat, d->nlat, o->keep_bp);
		med = hr_quantile(d->lat, d->nlat, 5000);
		sug = q;
		if (sug < med * SUGGEST_MEDIAN_TIMES) {
			sug = med * SUGGEST_MEDIAN_TIMES;
			by = "10x median";
		}
		if (sug < SUGGEST_FLOOR_US) {
			sug = SUGGEST_FLOOR_US;
			by = "minimum";
		}
		sug = bucket_up(sug);
		memset(&nd, 0, sizeof(nd));
		if (ns_dest_parse(d->key, &nd) < 0)
			nd.family = AF_INET;
		ns_policy_resolve(&pol, &nd, &s, NULL);
		rt = (uint64_t)s.read_timeout_ms * 1000;
		for (size_t k = 0; rt && k < d->nlat; k++)
			cut += d->lat[k] > rt;
		snprintf(cur, sizeof(cur), "%llums", (unsigned long long)s.read_timeout_ms);
		if (o->json) {
			printf("%s{\"destination\":", first ? "" : ",");
			ctl_json_string(stdout, d->key);
			printf(",\"successes\":%zu,\"samples_needed\":%llu,\"first_byte_at_keep_ms\":%.3f,\"median_ms\":%.3f,",
			       d->nlat, (unsigned long long)need, q / 1000.0, med / 1000.0);
			if (enough)
				printf("\"read_timeout_ms\":%.3f,\"suggested_by\":\"%s\",", sug / 1000.0, by);
			else
				printf("\"read_timeout_ms\":null,\"suggested_by\":null,");
			printf("\"policy_read_timeout_ms\":%llu,\"cut_by_policy\":%llu}", (unsigned long long)s.read_timeout_ms,
			       (unsigned long long)cut);
		} else if (enough) {
			printf("%-28s %9zu %10.1fms %12.1fms %12s %llu (%.3f%%)%s%s\n", d->key, d->nlat, q / 1000.0, sug / 1000.0,
			       s.read_timeout_ms ? cur : "none", (unsigned long long)cut, 100.0 * (double)cut / (double)d->nlat,
			       strcmp(by, "percentile") ? " raised to the " : "", strcmp(by, "percentile") ? by : "");
		} else {
			printf("%-28s %9zu %10.1fms %12s %12s %llu (%.3f%%) too few: %.2f%% needs %llu samples\n", d->key,
			       d->nlat, q / 1000.0, "-", s.read_timeout_ms ? cur : "none", (unsigned long long)cut,
			       100.0 * (double)cut / (double)d->nlat, o->keep_bp / 100.0, (unsigned long long)need);
		}
		first = 0;
	}
	if (o->json)
		printf("]}\n");
	else
		printf("(FIRST_BYTE: the time to the first byte that keeps that share; READ_TIMEOUT: it, but at least 10 "
		       "times the median and 100 ms, rounded up to the bucket the table's histograms use; none from fewer "
		       "samples than 10 beyond the share. connect_timeout and total_timeout are not suggested: the "
		       "history keeps first-byte times only)\n");
	hr_free(&h);
	ns_policy_free(&pol);
	return 0;
}

void ctl_history_default(const char *table, char *buf, size_t len)
{
	const char *state = getenv("XDG_STATE_HOME"), *home = getenv("HOME");
	struct passwd *pw;

	if (!(home && home[0] == '/') && (pw = getpwuid(geteuid())) && pw->pw_dir && pw->pw_dir[0] == '/')
		home = pw->pw_dir;   /* (cron: no HOME) the user's own, never a shared directory */
	if (geteuid() == 0)
		snprintf(buf, len, "/var/lib/netshim/%s.history.db", table);
	else if (state && state[0] == '/')
		snprintf(buf, len, "%s/netshim/%s.history.db", state, table);
	else if (home && home[0] == '/')
		snprintf(buf, len, "%s/.local/state/netshim/%s.history.db", home, table);
	else
		snprintf(buf, len, "/run/user/%u/netshim/%s.history.db", (unsigned)geteuid(), table);
}

int ctl_history_main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "history", required_argument, NULL, 'H' }, { "since", required_argument, NULL, 's' },
		{ "json", no_argument, NULL, 'j' }, { "keep", required_argument, NULL, 'k' },
		{ "policy", required_argument, NULL, 'p' }, { "table", required_argument, NULL, 't' },
		{ "html", required_argument, NULL, 'o' }, { NULL, 0, NULL, 0 },
	};
	struct hopt o;
	const char *table = NULL, *cmd, *html = NULL;
	char tbuf[64], def[512];
	int c, nargs;

	memset(&o, 0, sizeof(o));
	o.keep_bp = 9990;
	optind = 1;
	while ((c = getopt_long(argc, argv, "t:jp:", opts, NULL)) != -1) {
		switch (c) {
		case 'H': o.file = optarg; break;
		case 's':
			if (ctl_span_parse(optarg, &o.since_ms) < 0) {
				warnx("--since %s: a span (90s, 30m, 24h, 7d)", optarg);
				return 2;
			}
			break;
		case 'j': o.json = 1; break;
		case 'k':
			if (ns_pct_parse(optarg, &o.keep_bp) != 0 || o.keep_bp == 0) {
				warnx("--keep %s: a share above 0%%, as 99.9%%", optarg);
				return 2;
			}
			break;
		case 'p': o.policy = optarg; break;
		case 't': table = optarg; break;
		case 'o': html = optarg; break;
		default: return 2;
		}
	}
	if (optind >= argc)
		return 2;
	cmd = argv[optind++];
	nargs = argc - optind;
	if (!o.file) {
		ctl_history_default(ctl_table_name(table, tbuf, sizeof(tbuf)), def, sizeof(def));
		o.file = def;
	}
	if (strcmp(cmd, "history") == 0 && nargs <= 1) {
		o.dest = nargs ? argv[optind] : NULL;
		return history(&o);
	}
	if (strcmp(cmd, "backtest") == 0 && nargs == 1)
		return backtest(argv[optind], &o);
	if (strcmp(cmd, "suggest") == 0 && nargs <= 1) {
		o.dest = nargs ? argv[optind] : NULL;
		return suggest(&o);
	}
	if (strcmp(cmd, "report") == 0 && nargs == 0 && html)
		return ctl_report_html(o.file, html, o.since_ms);
	warnx("usage: shimctl history [DEST] | backtest CANDIDATE.conf | suggest [DEST] [--keep 99.9%%] [--policy FILE]"
	      " | report --html FILE; each with [--history FILE] [--since SPAN] [--json]");
	return 2;
}

/* ctl_status.c -- shimctl status, reset, open, watch: the commands that read
 * and write the breaker table's entries (events, metrics: ctl_events.c). */
#include <err.h>
#include <stddef.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "../../policy/breaker.h"
#include "../../policy/reqq.h"
#include "../../policy/policy.h"
#include "../../policy/table.h"
#include "shimctl.h"

void ctl_normalise_dest(const char *in, char *out, size_t len)
{
	struct ns_dest d;

	if (ns_dest_parse(in, &d) == 0 && ns_dest_key(&d, out, len) > 0)
		return;
	snprintf(out, len, "%s", in);
}

static int find_dest(struct ns_table *t, const char *arg)
{
	char key[NS_KEY_MAX];
	int idx;

	ctl_normalise_dest(arg, key, sizeof(key));
	idx = ns_table_find(t, key, 0, ctl_mono_ms());
	if (idx < 0) {
		char esc[NS_KEY_MAX * 4];

		ctl_escape_text(arg, esc, sizeof(esc));
		warnx("%s: no such destination in %s", esc, t->path);
	}
	return idx;
}

/**** latency ****/

static void pct_text(const struct ns_hist *h, unsigned p, char *buf, size_t len)
{
	int64_t us = ns_hist_percentile(h, p);

	if (us < 0)
		snprintf(buf, len, "-");
	else if (us < 1000)
		snprintf(buf, len, "%.2g", (double)us / 1000.0);
	else
		snprintf(buf, len, "%lld", (long long)(us / 1000));
}

static void pct_json(const char *name, const struct ns_hist *h, unsigned p)
{
	int64_t us = ns_hist_percentile(h, p);

	if (us < 0)
		printf(", \"%s\": null", name);
	else
		printf(", \"%s\": %g", name, (double)us / 1000.0);
}

/**** status, reset, open ****/

struct row {
	struct ns_entry e;
	const char *state;
	const char *shadow_state;   /* the shadow policy's breaker, NULL = none */
	uint64_t shadow_rejected;   /* ...the connects it would have turned away */
};

static void shadow_row(struct row *r)
{
	r->shadow_state = ctl_shadow_find(r->e.key, &r->shadow_rejected);
}

/* When half-open may begin (open) or began (half-open); not while manual. */
static int shows_half_open(const struct ns_entry *e)
{
	return e->brk.state == NS_OPEN || e->brk.state == NS_HALF_OPEN;
}

/* The nodes that report e open (the fleet), comma-separated in the
 * slot, as JSON strings. */
/* "fleet_share": this machine's share of each fleet limit the agent
 * leases (null: none written), with its machines and its lease's rest */
static void fleet_share_json(const struct ns_entry *e)
{
	static const char *const name[3] = { "requests", "connections", "rate_per_s" };
	int any = 0;

	printf(", \"fleet_share\": ");
	for (int k = 0; k < 3; k++) {
		if (e->fleet_share[k] < 0)
			continue;
		printf("%s\"%s\": ", any ? ", " : "{", name[k]);
		if (k == NS_FLEET_K_RATE)
			printf("%.3f", (double)e->fleet_share[k] / 3600000.0);
		else
			printf("%lld", (long long)e->fleet_share[k]);
		any = 1;
	}
	if (any) {
		printf(", \"limits\": {");
		for (int k = 0, n = 0; k < 3; k++) {
			if (e->fleet_share[k] < 0)
				continue;
			printf("%s\"%s\": ", n++ ? ", " : "", name[k]);
			if (k == NS_FLEET_K_RATE)
				printf("%.3f", (double)e->fleet_whole[k] / 3600000.0);
			else
				printf("%llu", (unsigned long long)e->fleet_whole[k]);
		}
		printf("}, \"machines\": %u, \"lease_left_ms\": %llu}", e->fleet_live,
		       (unsigned long long)e->fleet_left_ms);
	} else
		printf("null");
}

static void print_fleet_nodes(const struct ns_entry *e)
{
	char one[NS_FLEET_NODES_LEN];
	const char *p = e->fleet_nodes;
	int first = 1;

	while (e->fleet_open && *p) {
		size_t n = strcspn(p, ",");

		snprintf(one, sizeof(one), "%.*s", (int)n, p);
		printf("%s", first ? "" : ", ");
		ctl_json_string(stdout, one);
		first = 0;
		p += n + (p[n] == ',');
	}
}

/* The agent beside this table (netshim-agent), if one runs. */
struct agent_view {
	int present;
	uint32_t pid, flags, open, dests;
	uint64_t beat_ms, polls, cpu_ns;
	char node[64];
};

static void agent_read(const struct ns_table *t, struct agent_view *a)
{
	const struct ns_table_hdr *h = t->hdr;

	memset(a, 0, sizeof(*a));
	a->pid = __atomic_load_n(&h->agent_pid, __ATOMIC_ACQUIRE);
	/* an agent killed without its clean exit leaves its pid: not shown */
	if (!a->pid || a->pid > INT32_MAX || (kill((pid_t)a->pid, 0) < 0 && errno == ESRCH))
		return;
	a->present = 1;
	a->flags = __atomic_load_n(&h->agent_flags, __ATOMIC_RELAXED);
	a->open = __atomic_load_n(&h->agent_open, __ATOMIC_RELAXED);
	a->dests = __atomic_load_n(&h->agent_dests, __ATOMIC_RELAXED);
	a->beat_ms = __atomic_load_n(&h->agent_beat_ms, __ATOMIC_RELAXED);
	a->polls = __atomic_load_n(&h->agent_polls, __ATOMIC_RELAXED);
	a->cpu_ns = __atomic_load_n(&h->agent_cpu_ns, __ATOMIC_RELAXED);
	memcpy(a->node, h->agent_node, sizeof(a->node));
	a->node[sizeof(a->node) - 1] = '\0';
}

/* The addresses of the names (address_choice = healthy-first), by key:
 * each name's together, in the table's own slots. */
struct addrs {
	struct ns_addr_entry *a;
	int n;
};

static int cmp_addrs(const void *x, const void *y)
{
	return strcmp(((const struct ns_addr_entry *)x)->key, ((const struct ns_addr_entry *)y)->key);
}

static struct addrs load_addrs(const struct ns_table *t)
{
	struct addrs as = { NULL, 0 };
	size_t cap = 0;
	uint64_t now = ctl_mono_ms();
	struct ns_scan sc;

	for (uint32_t i = ns_scan_begin(t, &sc); i < t->nslots; i = ns_scan_next(t, &sc, i + 1)) {
		if ((size_t)as.n == cap && !(as.a = realloc(as.a, (cap = cap ? cap * 2 : 16) * sizeof(*as.a))))
			err(1, "out of memory");
		if (ns_table_addr_read(t, (int)i, now, &as.a[as.n]) == 0)
			as.n++;
	}
	ns_scan_end(&sc);
	if (as.n)
		qsort(as.a, (size_t)as.n, sizeof(*as.a), cmp_addrs);
	return as;
}

/* Is address entry a one of the name key's? */
static int addr_of(const struct ns_addr_entry *a, const char *key)
{
	return strlen(key) == a->name_len && strncmp(a->key, key, a->name_len) == 0;
}

static void print_addrs_json(const struct addrs *as, const char *key)
{
	int k = 0;

	printf(", \"addresses\": [");
	for (int i = 0; i < as->n; i++) {
		const struct ns_addr_entry *a = &as->a[i];
		const char *en = ctl_errname(a->last_error);

		if (!addr_of(a, key))
			continue;
		printf("%s{\"address\": ", k++ ? ", " : "");
		ctl_json_string(stdout, a->key + a->name_len + 1);
		printf(", \"state\": \"%s\", \"failures_in_a_row\": %u, \"calls\": %llu, \"successes\": %llu, "
		       "\"failures\": %llu, \"last_error\": ",
		       ns_addr_state_name(a->state), a->fails_in_a_row, (unsigned long long)a->calls,
		       (unsigned long long)a->successes, (unsigned long long)a->failures);
		if (en && a->failures)
			printf("\"%s\"", en);
		else
			printf("null");
		if (a->state == NS_ADDR_DOWN)
			printf(", \"probe_in_ms\": %llu}", (unsigned long long)a->next_probe_ms);
		else
			printf(", \"probe_in_ms\": null}");
	}
	printf("]");
}

/* The text report's addresses: one line each, under a heading. */
static void print_addrs_text(const struct addrs *as, const struct row *rows, int n)
{
	int said = 0;

	for (int i = 0; i < as->n; i++) {
		const struct ns_addr_entry *a = &as->a[i];
		const char *en = ctl_errname(a->last_error);
		char raw[NS_KEY_MAX], name[NS_KEY_MAX * 4], addr[NS_KEY_MAX * 4];
		int shown = 0;

		for (int r = 0; r < n && !shown; r++)
			shown = addr_of(a, rows[r].e.key);
		if (!shown)
			continue;
		if (!said++)
			printf("addresses (address_choice = healthy-first; open ones are listed last by getaddrinfo):\n");
		memcpy(raw, a->key, a->name_len); /* (name_len < NS_KEY_MAX: the key's own '@') */
		raw[a->name_len] = '\0';
		ctl_escape_text(raw, name, sizeof(name));
		ctl_escape_text(a->key + a->name_len + 1, addr, sizeof(addr));
		printf("  %s  %s  %s", name, addr, ns_addr_state_name(a->state));
		if (a->fails_in_a_row)
			printf(", %u failed in a row (%s)", a->fails_in_a_row, en ? en : "?");
		if (a->state == NS_ADDR_DOWN)
			printf(", probe in %.1f s", (double)a->next_probe_ms / 1000);
		printf("; %llu connects, %llu failed\n", (unsigned long long)a->calls, (unsigned long long)a->failures);
	}
}

static void print_json(const char *name, const struct ns_table *t, struct row *rows, int n, const struct addrs *as)
{
	struct agent_view a;
	char ts[40];

	printf("{\"table\": ");
	ctl_json_string(stdout, name);
	printf(", \"capacity\": %u, \"used\": %llu, \"turned_away\": %llu, \"ungoverned_connects\": %llu, "
	       "\"agent\": ",
	       t->nslots, (unsigned long long)__atomic_load_n(&t->hdr->used, __ATOMIC_RELAXED),
	       (unsigned long long)__atomic_load_n(&t->hdr->full_count, __ATOMIC_RELAXED),
	       (unsigned long long)__atomic_load_n(&t->hdr->ungoverned, __ATOMIC_RELAXED));
	agent_read(t, &a);
	if (a.present) {
		ctl_rfc3339(a.beat_ms, ts, sizeof(ts));
		printf("{\"node\": ");
		ctl_json_string(stdout, a.node);
		printf(", \"pid\": %u, \"fleet\": %s, \"history\": %s, \"redis_connected\": %s, \"suspect\": %s, \"open\": %u, "
		       "\"destinations\": %u, \"last_pass\": \"%s\", \"polls\": %llu, \"cpu_ms_per_poll\": %.3f}",
		       a.pid, a.flags & NS_AGENT_NOFLEET ? "false" : "true", a.flags & NS_AGENT_HISTORY ? "true" : "false",
		       a.flags & NS_AGENT_CONNECTED ? "true" : "false",
		       a.flags & NS_AGENT_SUSPECT ? "true" : "false", a.open, a.dests, ts,
		       (unsigned long long)a.polls, a.polls ? (double)a.cpu_ns / 1e6 / (double)a.polls : 0.0);
	} else {
		printf("null");
	}
	printf(", \"entries\": [");
	for (int i = 0; i < n; i++) {
		const struct ns_entry *e = &rows[i].e;
		const char *en = ctl_errname(e->last_error);

		printf("%s\n  {\"destination\": ", i ? "," : "");
		ctl_json_string(stdout, e->key);
		printf(", \"state\": \"%s\", \"calls\": %llu, \"successes\": %llu, \"failures\": %llu, "
		       "\"failures_in_window\": %u, \"consecutive_failures\": %u, \"timeouts\": %llu, "
		       "\"rejected\": %llu, \"retries\": %llu, \"last_error\": ",
		       rows[i].state, (unsigned long long)e->calls, (unsigned long long)e->successes,
		       (unsigned long long)e->failures, e->failures_in_window, e->brk.consec,
		       (unsigned long long)e->timeouts, (unsigned long long)e->rejected,
		       (unsigned long long)e->retries);
		if (en)
			printf("\"%s\"", en);
		else
			printf("null");
		printf(", \"opened_at\": ");
		if (e->opened_wall_ms) {
			ctl_rfc3339(e->opened_wall_ms, ts, sizeof(ts));
			printf("\"%s\"", ts);
		} else {
			printf("null");
		}
		printf(", \"half_open_at\": ");
		if (e->half_open_wall_ms && shows_half_open(e)) {
			ctl_rfc3339(e->half_open_wall_ms, ts, sizeof(ts));
			printf("\"%s\"", ts);
		} else {
			printf("null");
		}
		printf(", \"mode\": \"%s\", \"injected\": %llu, \"exchanges\": %llu, \"slow_calls\": %llu, "
		       "\"http_failures\": %llu, \"stale_reuses\": %llu, \"slow_in_window\": %u, "
		       "\"timeouts_in_window\": %u, \"first_byte_ms_p99_in_window\": ", e->monitor ? "monitor" : "enforce",
		       (unsigned long long)e->injected, (unsigned long long)e->exchanges,
		       (unsigned long long)e->slow_calls, (unsigned long long)e->http_failures,
		       (unsigned long long)e->stale_reuses, e->slow_in_window, e->timeouts_in_window);
		if (e->p99_in_window_us)
			printf("%.2f", (double)e->p99_in_window_us / 1000);
		else
			printf("null");
		printf(", \"last_status\": ");
		if (e->last_status >= 100 && e->last_status <= 999)
			printf("%u", e->last_status);
		else
			printf("null");
		printf(", \"h2_unprocessed\": %llu, \"h2_blind\": %llu, \"grpc_failures\": %llu, \"last_grpc_status\": ",
		       (unsigned long long)e->h2_unprocessed, (unsigned long long)e->h2_blind,
		       (unsigned long long)e->grpc_failures);
		if (e->last_grpc_status >= 0)
			printf("%d", e->last_grpc_status);
		else
			printf("null");
		/* which engines fed it: the preload library's connects are the
		 * calls the seccomp engine did not make (shared memory: either
		 * count may be anything) */
		/* max_connections = auto's limit (null before one), and the
		 * adaptive throttle's counts */
		if (e->limit)
			printf(", \"limit\": %u.%03u", e->limit / 1000, e->limit % 1000);
		else
			printf(", \"limit\": null");
		printf(", \"throttle_requests\": %u, \"throttle_accepts\": %u", e->thr_requests, e->thr_accepts);
		printf(", \"seccomp_calls\": %llu, \"engines\": [%s%s%s]", (unsigned long long)e->seccomp_calls,
		       e->calls > e->seccomp_calls ? "\"preload\"" : "",
		       e->calls > e->seccomp_calls && e->seccomp_calls ? ", " : "",
		       e->seccomp_calls ? "\"seccomp\"" : "");
		pct_json("connect_ms_p50", &e->connect_hist, 50);
		pct_json("connect_ms_p99", &e->connect_hist, 99);
		pct_json("first_byte_ms_p50", &e->first_byte_hist, 50);
		pct_json("first_byte_ms_p99", &e->first_byte_hist, 99);
		printf(", \"inflight\": %u, \"throttled\": %llu, \"waited_ms_p99\": ", e->inflight,
		       (unsigned long long)e->throttled);
		if (e->waited_ms_p99)
			printf("%llu", (unsigned long long)e->waited_ms_p99);
		else
			printf("null");
		printf(", \"retry_throttled\": %llu, \"paced\": %llu", (unsigned long long)e->retry_throttled,
		       (unsigned long long)e->paced);
		if (e->req_limit)
			printf(", \"requests_limit\": %u.%03u", e->req_limit / 1000, e->req_limit % 1000);
		else
			printf(", \"requests_limit\": null");
		printf(", \"requests_inflight\": %u, \"requests_queued\": %u, \"requests_throttled\": %llu, "
		       "\"requests_held\": %llu, \"requests_over\": %u",
		       e->req_inflight, e->req_queued, (unsigned long long)e->req_throttled,
		       (unsigned long long)e->req_held, e->req_over);
		printf(", \"cooldown_until\": ");
		if (e->cooldown_left_ms) {
			ctl_rfc3339(ctl_wall_ms() + e->cooldown_left_ms, ts, sizeof(ts));
			printf("\"%s\"", ts);
		} else {
			printf("null");
		}
		fleet_share_json(e);
		printf(", \"fleet_open_nodes\": [");
		print_fleet_nodes(e);
		printf("]");
		if (rows[i].shadow_state)
			printf(", \"shadow_state\": \"%s\", \"shadow_would_reject\": %llu", rows[i].shadow_state,
			       (unsigned long long)rows[i].shadow_rejected);
		else
			printf(", \"shadow_state\": null, \"shadow_would_reject\": null");
		print_addrs_json(as, e->key);
		printf("}");
	}
	printf("%s]}\n", n ? "\n" : "");
}

static const char *state_color(uint32_t state)
{
	switch (state) {
	case NS_OPEN: return "\033[1;31m";
	case NS_FORCED_OPEN: return "\033[1;35m";
	case NS_HALF_OPEN: return "\033[1;33m";
	default: return "\033[32m";
	}
}

/* The terminal's width for the rows: the terminal on stdout, else COLUMNS,
 * else 0 (no limit: a pipe gets every column, as scripts expect). */
static int out_width(void)
{
	struct winsize ws;
	const char *cols = getenv("COLUMNS");

	if (isatty(1) && ioctl(1, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0)
		return ws.ws_col;
	if (cols && atoi(cols) > 0)
		return atoi(cols);
	return 0;
}

/* The columns to show in width (0: all): the least telling go first, in
 * drop[]'s order, then the destination is cut down to what is left (at
 * least 16 characters). Returns the columns dropped. */
static int fit_columns(int *w, int *show, int nc, int width)
{
	/* DESTINATION (0) and STATE (1) always stay */
	static const int drop[] = { 12, 10, 16, 9, 11, 3, 5, 7, 8, 13, 20, 19, 18, 17, 15, 14, 2, 6, 4 };
	int total = 0, dropped = 0;

	for (int c = 0; c < nc; c++) {
		show[c] = 1;
		total += w[c] + (c ? 2 : 0);
	}
	for (size_t k = 0; width > 0 && total > width && k < sizeof(drop) / sizeof(drop[0]); k++) {
		if (drop[k] >= nc || !show[drop[k]])
			continue;
		show[drop[k]] = 0;
		total -= w[drop[k]] + 2;
		dropped++;
	}
	if (width > 0 && total > width)
		w[0] = w[0] - (total - width) > 16 ? w[0] - (total - width) : (w[0] < 16 ? w[0] : 16);
	return dropped;
}

static void print_text(const struct ns_table *t, struct row *rows, int n, int color, int width)
{
	static const char *const hdr[] = { "DESTINATION", "STATE",        "WIN_FAIL", "CONSEC",   "CALLS",
					   "OK",          "FAIL",         "TIMEOUT",  "REJECTED", "RETRIES",
					   "CONN_P50",    "CONN_P99",     "FB_P50",   "FB_P99",   "LAST_ERROR",
					   "OPENED_AT",   "HALF_OPEN_AT", "FLEET",    "INFLIGHT", "THROTTLED",
					   "REQ_INFLIGHT" };
	enum { NC = 21 };
	struct agent_view a;
	char (*cells)[NC][NS_KEY_MAX * 4] = calloc((size_t)n + 1, sizeof(*cells));
	int w[NC] = { 0 }, show[NC], dropped, last;
	uint64_t full = __atomic_load_n(&t->hdr->full_count, __ATOMIC_RELAXED);

	if (!cells)
		err(1, "out of memory");
	for (int c = 0; c < NC; c++)
		snprintf(cells[0][c], sizeof(cells[0][c]), "%s", hdr[c]);
	for (int i = 0; i < n; i++) {
		const struct ns_entry *e = &rows[i].e;
		char (*r)[NS_KEY_MAX * 4] = cells[i + 1];
		const char *en = ctl_errname(e->last_error);

		ctl_escape_text(e->key, r[0], sizeof(r[0]));
		/* monitor mode counts and opens but never fails a connect: say so */
		snprintf(r[1], sizeof(r[1]), "%s%s", rows[i].state,
			 e->monitor && e->brk.state != NS_CLOSED ? "(monitor)" : "");
		snprintf(r[2], sizeof(r[2]), "%u", e->failures_in_window);
		snprintf(r[3], sizeof(r[3]), "%u", e->brk.consec);
		snprintf(r[4], sizeof(r[4]), "%llu", (unsigned long long)e->calls);
		snprintf(r[5], sizeof(r[5]), "%llu", (unsigned long long)e->successes);
		snprintf(r[6], sizeof(r[6]), "%llu", (unsigned long long)e->failures);
		snprintf(r[7], sizeof(r[7]), "%llu", (unsigned long long)e->timeouts);
		snprintf(r[8], sizeof(r[8]), "%llu", (unsigned long long)e->rejected);
		snprintf(r[9], sizeof(r[9]), "%llu", (unsigned long long)e->retries);
		pct_text(&e->connect_hist, 50, r[10], sizeof(r[10]));
		pct_text(&e->connect_hist, 99, r[11], sizeof(r[11]));
		pct_text(&e->first_byte_hist, 50, r[12], sizeof(r[12]));
		pct_text(&e->first_byte_hist, 99, r[13], sizeof(r[13]));
		snprintf(r[14], sizeof(r[14]), "%s", en ? en : "-");
		if (e->opened_wall_ms)
			ctl_rfc3339(e->opened_wall_ms, r[15], sizeof(r[15]));
		else
			snprintf(r[15], sizeof(r[15]), "-");
		if (e->half_open_wall_ms && shows_half_open(e))
			ctl_rfc3339(e->half_open_wall_ms, r[16], sizeof(r[16]));
		else
			snprintf(r[16], sizeof(r[16]), "-");
		/* the nodes reporting it open, as the agent last wrote them */
		if (e->fleet_open)
			ctl_escape_text(e->fleet_nodes[0] ? e->fleet_nodes : "?", r[17], sizeof(r[17]));
		else
			snprintf(r[17], sizeof(r[17]), "-");
		snprintf(r[18], sizeof(r[18]), "%u", e->inflight);
		snprintf(r[19], sizeof(r[19]), "%llu", (unsigned long long)e->throttled);
		snprintf(r[20], sizeof(r[20]), "%u", e->req_inflight);
	}
	for (int i = 0; i <= n; i++)
		for (int c = 0; c < NC; c++) {
			int l = (int)strlen(cells[i][c]);

			if (l > w[c])
				w[c] = l;
		}
	dropped = fit_columns(w, show, NC, width);
	for (last = NC - 1; !show[last]; last--)
		;
	for (int i = 0; i <= n; i++) {
		for (int c = 0; c < NC; c++) {
			if (!show[c])
				continue;
			if (c == 1 && color && i > 0)
				printf("%s%-*s\033[0m", rows[i - 1].e.fleet_open && rows[i - 1].e.brk.state == NS_CLOSED ?
				       "\033[1;31m" : state_color(rows[i - 1].e.brk.state), w[c], cells[i][c]);
			else if (c == 0)
				printf("%-*.*s", w[c], w[c], cells[i][c]);
			else if (c == 1 || c >= 14)
				printf("%-*s", c == last ? 0 : w[c], cells[i][c]);
			else
				printf("%*s", w[c], cells[i][c]);
			if (c != last)
				printf("  ");
		}
		printf("\n");
	}
	if (n == 0)
		printf("(no destinations yet)\n");
	if (dropped)
		printf("%d column%s hidden to fit %d columns (all of them: shimctl status, or --json)\n", dropped,
		       dropped == 1 ? "" : "s", width);
	printf("ms (CONN connect, FB first byte): bucket upper bounds, steps of 1-2.5-5\n");
	if (full)
		printf("table full: %llu connects to new destinations passed through uncounted (capacity %u)\n",
		       (unsigned long long)full, t->nslots);
	if (__atomic_load_n(&t->hdr->ungoverned, __ATOMIC_RELAXED))
		printf("ungoverned: %llu connects the seccomp engine could not act on (processes it cannot read: "
		       "non-dumpable, another user's) went uncounted, without deadlines\n",
		       (unsigned long long)__atomic_load_n(&t->hdr->ungoverned, __ATOMIC_RELAXED));
	agent_read(t, &a);
	if (a.present) {
		char node[64 * 4];

		ctl_escape_text(a.node, node, sizeof(node));
		printf("%s: node %s, agent pid %u, redis %s%s\n", a.flags & NS_AGENT_NOFLEET ? "agent" : "fleet", node, a.pid,
		       a.flags & NS_AGENT_NOFLEET ? "not used (no fleet)" : a.flags & NS_AGENT_CONNECTED ? "connected" :
		       "unreachable (local breakers only)", a.flags & NS_AGENT_HISTORY ? "; recording the history" : "");
		if (a.flags & NS_AGENT_SUSPECT)
			printf("fleet: this node is suspect (%u of %u destinations open at once): its votes are withheld\n",
			       a.open, a.dests);
	}
	free(cells);
}

static int rank(const struct row *r)
{
	switch (r->e.brk.state) {
	case NS_FORCED_OPEN: return 0;
	case NS_OPEN: return 1;
	case NS_HALF_OPEN: return 2;
	default: return r->e.fleet_open ? 3 : 4;
	}
}

static int cmp_rows(const void *a, const void *b)
{
	const struct row *x = a, *y = b;

	if (rank(x) != rank(y))
		return rank(x) - rank(y);
	return strcmp(x->e.key, y->e.key);
}

/* Every ready slot (or only `only`), open breakers first. */
static struct row *load_rows(const struct ns_table *t, int only, int *n)
{
	/* grown as ready slots are found: memory follows the destinations
	 * used, not the table's capacity (a 1,048,576-slot table would
	 * otherwise cost a gigabyte of rows) */
	size_t cap = 64;
	struct row *rows = malloc(cap * sizeof(*rows));
	uint64_t now = ctl_mono_ms();
	struct ns_scan sc;

	if (!rows)
		err(1, "out of memory");
	*n = 0;
	for (uint32_t i = ns_scan_begin(t, &sc); i < t->nslots; i = ns_scan_next(t, &sc, i + 1)) {
		if (only >= 0 && (int)i != only)
			continue;
		if ((size_t)*n == cap && !(rows = realloc(rows, (cap *= 2) * sizeof(*rows))))
			err(1, "out of memory");
		if (ns_table_read(t, (int)i, now, &rows[*n].e) == 0) {
			/* closed here, held open by the fleet: fleet_open */
			rows[*n].state = ctl_entry_state(&rows[*n].e);
			/* places whose holders died are not connections open */
			if (rows[*n].e.inflight)
				rows[*n].e.inflight = ns_table_inflight_live(t, (int)i);
			if (rows[*n].e.req_inflight)
				rows[*n].e.req_inflight = ns_reqq_inflight_live(&t->slots[i].req);
			shadow_row(&rows[*n]);
			(*n)++;
		}
	}
	ns_scan_end(&sc);
	qsort(rows, (size_t)*n, sizeof(*rows), cmp_rows);
	return rows;
}

int ctl_cmd_status(const char *name, int json, const char *dest)
{
	struct ns_table t;
	struct row *rows;
	struct addrs as;
	int n, only = -1;

	if (ctl_open_table(name, 0, &t) < 0)
		return 1;
	if (dest) {
		only = find_dest(&t, dest);
		if (only < 0) {
			ctl_close_table(&t);
			return 1;
		}
	}
	ctl_shadow_load(name);
	rows = load_rows(&t, only, &n);
	as = load_addrs(&t);
	if (json) {
		print_json(name, &t, rows, n, &as);
	} else {
		print_text(&t, rows, n, 0, isatty(1) ? out_width() : 0);
		ctl_limits_begin();
		for (int i = 0; i < n; i++)
			ctl_limits_line(&rows[i].e);
		ctl_limits_end();
		print_addrs_text(&as, rows, n);
	}
	for (int i = 0; !json && i < n; i++)
		if (rows[i].shadow_state)
			printf("shadow policy: %s %s, would have turned away %llu\n", rows[i].e.key, rows[i].shadow_state,
			       (unsigned long long)rows[i].shadow_rejected);
	ctl_shadow_free();
	free(rows);
	free(as.a);
	ctl_close_table(&t);
	return 0;
}

/* An operator's action, in the event ring like the shim's own. */
int ctl_cmd_reset(const char *name, int all, const char *dest)
{
	struct ns_table t;
	struct ns_entry e;
	int idx, n = 0;

	if (ctl_open_table(name, 0, &t) < 0)
		return 1;
	if (all) {
		for (uint32_t i = 0; i < t.nslots; i++)
			if (ns_table_read(&t, (int)i, ctl_mono_ms(), &e) == 0) {
				ns_table_reset(&t, (int)i);
				ctl_note_action(&t, NS_E_RESET, e.key, NULL);
				n++;
			}
		for (uint32_t i = 0; i < t.nslots; i++) {
			struct ns_addr_entry a;

			if (ns_table_addr_read(&t, (int)i, ctl_mono_ms(), &a) == 0)
				ns_table_addr_reset(&t, (int)i); /* its failures forgotten: listed in its place */
		}
		printf("reset %d destination%s\n", n, n == 1 ? "" : "s");
		ctl_close_table(&t);
		return 0;
	}
	idx = find_dest(&t, dest);
	if (idx < 0) {
		ctl_close_table(&t);
		return 1;
	}
	ns_table_reset(&t, idx);
	ns_table_read(&t, idx, ctl_mono_ms(), &e);
	ctl_note_action(&t, NS_E_RESET, e.key, NULL);
	printf("%s: closed\n", e.key);
	ctl_close_table(&t);
	return 0;
}

int ctl_cmd_open(const char *name, const char *dest)
{
	char key[NS_KEY_MAX], esc[NS_KEY_MAX * 4];
	struct ns_table t;
	struct ns_dest d;
	int idx;

	if (ns_dest_parse(dest, &d) < 0 || ns_dest_key(&d, key, sizeof(key)) < 0) {
		ctl_escape_text(dest, esc, sizeof(esc));
		warnx("%s: not a destination (expected HOST:PORT, ADDRESS:PORT or [IPV6]:PORT)", esc);
		return 2;
	}
	if (ctl_open_table(name, 1, &t) < 0)
		return 1;
	idx = ns_table_find(&t, key, 1, ctl_mono_ms());
	if (idx < 0) {
		warnx("%s: cannot add %s (table full)", t.path, key);
		ctl_close_table(&t);
		return 1;
	}
	ns_table_force_open(&t, idx, ctl_mono_ms(), ctl_wall_ms());
	ctl_note_action(&t, NS_E_FORCED_OPEN, key, NULL);
	printf("%s: forced open until shimctl reset\n", key);
	ctl_close_table(&t);
	return 0;
}

/**** watch ****/

static volatile sig_atomic_t stop_flag;

static void on_stop(int sig)
{
	(void)sig;
	stop_flag = 1;
}

int ctl_cmd_watch(const char *name)
{
	int tty_out = isatty(1), tty_in = isatty(0), color = tty_out && !getenv("NO_COLOR");
	struct termios saved, raw;
	struct sigaction sa;
	struct ns_table t;

	if (ctl_open_table(name, 0, &t) < 0)
		return 1;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_stop;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	if (tty_in && tcgetattr(0, &saved) == 0) {
		raw = saved;
		raw.c_lflag &= (tcflag_t)~(ICANON | ECHO);
		tcsetattr(0, TCSANOW, &raw);
	} else {
		tty_in = 0;
	}
	while (!stop_flag) {
		struct pollfd p = { .fd = 0, .events = POLLIN };
		char ts[40], top[256], ch;
		struct row *rows;
		int n, width;

		rows = load_rows(&t, -1, &n);
		ctl_rfc3339(ctl_wall_ms(), ts, sizeof(ts));
		if (tty_out)
			printf("\033[H\033[2J");
		width = out_width();
		snprintf(top, sizeof(top), "shimctl watch  %s  %s  %d destination%s  q quits", ts, name, n,
			 n == 1 ? "" : "s");
		printf("%.*s\n\n", width > 0 ? width : (int)sizeof(top), top);
		print_text(&t, rows, n, color, width);
		fflush(stdout);
		free(rows);
		if (poll(&p, 1, 1000) > 0 && read(0, &ch, 1) == 1 && (ch == 'q' || ch == 'Q'))
			break;
		if (p.revents & POLLHUP)
			break;
	}
	if (tty_in)
		tcsetattr(0, TCSANOW, &saved);
	ctl_close_table(&t);
	return 0;
}

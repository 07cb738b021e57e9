/* promtext.c -- a table in the Prometheus text exposition format, for
 * `shimctl metrics` and netshim-agent's /metrics.
 *
 * Names follow Prometheus's conventions (a unit suffix, `_total` for
 * counters, histograms as `_bucket`/`_sum`/`_count`); every per-destination
 * series carries `destination` (the table's key) and OpenTelemetry's
 * `server_address` and `server_port`. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../policy/breaker.h"
#include "../../policy/reqq.h"
#include "../../policy/table.h"
#include "tablekit.h"

/* The exposition format escapes backslash, double quote and newline; other
 * control bytes are shown as \xNN so the line stays printable. */
static void label(FILE *f, const char *s)
{
	for (; *s; s++) {
		unsigned char ch = (unsigned char)*s;

		if (ch == '\\')
			fputs("\\\\", f);
		else if (ch == '"')
			fputs("\\\"", f);
		else if (ch == '\n')
			fputs("\\n", f);
		else if (ch < 0x20 || ch == 0x7f)
			fprintf(f, "\\\\x%02x", ch);
		else
			fputc(ch, f);
	}
}

/* destination="api.example.com:443",server_address="api.example.com",server_port="443" */
void ctl_prom_dest_labels(FILE *f, const char *key)
{
	char addr[NS_KEY_MAX];
	const char *colon = strrchr(key, ':');
	size_t n = colon ? (size_t)(colon - key) : strlen(key);

	if (n >= sizeof(addr))
		n = sizeof(addr) - 1;
	memcpy(addr, key, n);
	addr[n] = '\0';
	if (addr[0] == '[' && n > 1 && addr[n - 1] == ']') {   /* [v6]:port: the address without brackets */
		memmove(addr, addr + 1, n - 2);
		addr[n - 2] = '\0';
	}
	fputs("destination=\"", f);
	label(f, key);
	fputs("\",server_address=\"", f);
	label(f, addr);
	fputs("\",server_port=\"", f);
	label(f, colon ? colon + 1 : "");
	fputc('"', f);
}

static void series(FILE *f, const char *metric, const char *key, const char *extra, const char *fmt,
		   unsigned long long v)
{
	fprintf(f, "%s{", metric);
	ctl_prom_dest_labels(f, key);
	fprintf(f, "%s} ", extra ? extra : "");
	fprintf(f, fmt, v);
	fputc('\n', f);
}

static void head(FILE *f, const char *metric, const char *help, const char *type)
{
	fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", metric, help, metric, type);
}

/* An adaptive limit, a decimal (it is kept in thousandths). */
static void limit_series(FILE *f, const char *metric, const struct ns_entry *e, uint32_t milli)
{
	fprintf(f, "%s{", metric);
	ctl_prom_dest_labels(f, e->key);
	fprintf(f, "} %u.%03u\n", milli / 1000, milli % 1000);
}

/* The fleet's limits (share 0) or this machine's shares of them (share
 * 1; 0 while lapsed), one series a limit leased; rate a decimal a second
 * (kept in thousandths an hour). */
static void fleet_series(FILE *f, const char *metric, const struct ns_entry *e, int n, int share)
{
	for (int i = 0; i < n; i++)
		for (int k = 0; k < 3; k++) {
			uint64_t v = share ? (e[i].fleet_left_ms ? (uint64_t)e[i].fleet_share[k] : 0)
					   : e[i].fleet_whole[k];

			if (e[i].fleet_share[k] < 0)
				continue;
			fprintf(f, "%s{", metric);
			ctl_prom_dest_labels(f, e[i].key);
			if (k == NS_FLEET_K_RATE)
				fprintf(f, ",limit=\"%s\"} %llu.%03llu\n", ns_key_names[NS_FLEET_KEY(k)],
					(unsigned long long)v / 3600000, (unsigned long long)(v % 3600000) / 3600);
			else
				fprintf(f, ",limit=\"%s\"} %llu\n", ns_key_names[NS_FLEET_KEY(k)],
					(unsigned long long)v);
		}
}

static void counter(FILE *f, const char *metric, const char *help, const char *type, const struct ns_entry *e,
		    int n, size_t off, int u32)
{
	head(f, metric, help, type);
	for (int i = 0; i < n; i++) {
		const char *base = (const char *)&e[i];

		series(f, metric, e[i].key, NULL, "%llu",
		       u32 ? *(const uint32_t *)(base + off) : (unsigned long long)*(const uint64_t *)(base + off));
	}
}

static void hist(FILE *f, const char *metric, const char *help, const struct ns_entry *e, int n, int first_byte)
{
	char name[128], le[48];

	head(f, metric, help, "histogram");
	for (int i = 0; i < n; i++) {
		const struct ns_hist *h = first_byte ? &e[i].first_byte_hist : &e[i].connect_hist;
		uint64_t cum = 0;

		snprintf(name, sizeof(name), "%s_bucket", metric);
		for (uint32_t b = 0; b < NS_HIST_BUCKETS; b++) {
			cum += h->count[b];
			if (b == NS_HIST_BUCKETS - 1)
				snprintf(le, sizeof(le), ",le=\"+Inf\"");
			else
				snprintf(le, sizeof(le), ",le=\"%g\"", (double)ns_hist_bounds_us[b] / 1e6);
			series(f, name, e[i].key, le, "%llu", cum);
		}
		fprintf(f, "%s_sum{", metric);
		ctl_prom_dest_labels(f, e[i].key);
		fprintf(f, "} %.6f\n", (double)h->sum_us / 1e6);
		snprintf(name, sizeof(name), "%s_count", metric);
		series(f, name, e[i].key, NULL, "%llu", cum);
	}
}

/* The state shimctl status shows: closed here but held open by the fleet
 * is fleet_open, closed but cooling down after a Retry-After is cooldown. */
const char *ctl_entry_state(const struct ns_entry *e)
{
	if (e->brk.state == NS_CLOSED && e->fleet_open)
		return "fleet_open";
	if (e->brk.state == NS_CLOSED && e->cooldown_left_ms)
		return "cooldown";
	return ns_state_name(e->brk.state);
}

void ctl_metrics_write(FILE *f, const struct ns_table *t)
{
	static const char *const states[] = { "closed", "open", "half_open", "forced_open", "fleet_open", "cooldown" };
	size_t cap = 64;
	struct ns_entry *e = malloc(cap * sizeof(*e)), *more;
	uint64_t now = ctl_mono_ms();
	int n = 0;

	if (!e) {
		fprintf(f, "# netshim: out of memory\n");
		return;
	}
	struct ns_scan sc;

	/* grown as ready slots are found: memory follows the destinations used */
	for (uint32_t i = ns_scan_begin(t, &sc); i < t->nslots; i = ns_scan_next(t, &sc, i + 1)) {
		if ((size_t)n == cap) {
			if (!(more = realloc(e, cap * 2 * sizeof(*e))))
				break;   /* what fits is printed */
			e = more;
			cap *= 2;
		}
		if (ns_table_read(t, (int)i, now, &e[n]) == 0) {
			if (e[n].inflight)   /* places whose holders died are not connections open */
				e[n].inflight = ns_table_inflight_live(t, (int)i);
			if (e[n].req_inflight)
				e[n].req_inflight = ns_reqq_inflight_live(&t->slots[i].req);
			n++;
		}
	}
	ns_scan_end(&sc);
#define OFFE(m) offsetof(struct ns_entry, m)
	head(f, "netshim_calls_total", "Connect calls by what the shim did with them: allowed to the network, "
	     "rejected by an open breaker (or the fleet, or a cooldown), throttled by max_connections.", "counter");
	for (int i = 0; i < n; i++) {
		series(f, "netshim_calls_total", e[i].key, ",outcome=\"allowed\"", "%llu", e[i].calls);
		series(f, "netshim_calls_total", e[i].key, ",outcome=\"rejected\"", "%llu", e[i].rejected);
		series(f, "netshim_calls_total", e[i].key, ",outcome=\"throttled\"", "%llu", e[i].throttled);
	}
	counter(f, "netshim_successes_total", "Connections whose first byte arrived or that the peer closed cleanly.",
		"counter", e, n, OFFE(successes), 0);
	counter(f, "netshim_failures_total", "Connections refused, unreachable, reset or timed out.", "counter", e, n,
		OFFE(failures), 0);
	counter(f, "netshim_timeouts_total", "Failures that were deadlines expiring.", "counter", e, n, OFFE(timeouts), 0);
	counter(f, "netshim_rejected_total", "Connects refused at once by an open breaker.", "counter", e, n,
		OFFE(rejected), 0);
	counter(f, "netshim_retries_total", "Connect retries made by the policy.", "counter", e, n, OFFE(retries), 0);
	counter(f, "netshim_failures_in_window", "Failures in the sliding window.", "gauge", e, n,
		OFFE(failures_in_window), 1);
	counter(f, "netshim_inflight", "Connections holding a place under max_connections.", "gauge", e, n,
		OFFE(inflight), 1);
	counter(f, "netshim_throttled_total", "Connects turned away by max_connections (never failures).", "counter",
		e, n, OFFE(throttled), 0);
	counter(f, "netshim_requests_inflight", "HTTP requests holding a place under max_requests.", "gauge", e, n,
		OFFE(req_inflight), 1);
	counter(f, "netshim_requests_throttled_total",
		"HTTP requests failed at their start by max_requests after queue_timeout (never failures).", "counter",
		e, n, OFFE(req_throttled), 0);
	head(f, "netshim_limit",
	     "max_connections = auto: the cap in force now, as the destination taught it "
	     "(connections; only destinations that have one).",
	     "gauge");
	for (int i = 0; i < n; i++)
		if (e[i].limit)
			limit_series(f, "netshim_limit", &e[i], e[i].limit);
	head(f, "netshim_requests_limit",
	     "max_requests = auto: the limit in force now, as the destination taught it "
	     "(requests in flight; only destinations that have one).",
	     "gauge");
	for (int i = 0; i < n; i++)
		if (e[i].req_limit)
			limit_series(f, "netshim_requests_limit", &e[i], e[i].req_limit);
	counter(f, "netshim_paced_total", "Connects and requests that waited for a token of rate.", "counter", e, n,
		OFFE(paced), 0);
	head(f, "netshim_fleet_limit",
	     "A fleet limit for every machine together, as this machine's agent leases a share of it (the smallest "
	     "of the machines' policies; fleet_rate: per second).",
	     "gauge");
	fleet_series(f, "netshim_fleet_limit", e, n, 0);
	head(f, "netshim_fleet_share",
	     "This machine's share of a fleet limit its agent leases (fleet_max_requests, fleet_max_connections: "
	     "places; fleet_rate: per second); 0 while the lease has lapsed.",
	     "gauge");
	fleet_series(f, "netshim_fleet_share", e, n, 1);
	head(f, "netshim_breaker_state", "1 for the destination's breaker state, 0 for the others.", "gauge");
	for (int i = 0; i < n; i++) {
		const char *st = ctl_entry_state(&e[i]);

		for (size_t k = 0; k < sizeof(states) / sizeof(states[0]); k++) {
			char extra[40];

			snprintf(extra, sizeof(extra), ",state=\"%s\"", states[k]);
			series(f, "netshim_breaker_state", e[i].key, extra, "%llu", strcmp(st, states[k]) == 0);
		}
	}
	head(f, "netshim_breaker_state_code",
	     "Breaker state as a number: 0 closed, 1 open, 2 half_open, 3 forced_open, 4 fleet_open.", "gauge");
	for (int i = 0; i < n; i++)
		series(f, "netshim_breaker_state_code", e[i].key, NULL, "%llu",
		       e[i].brk.state == NS_CLOSED && e[i].fleet_open ? 4u : e[i].brk.state);
	head(f, "netshim_last_failure_info", "The errno of the destination's last failure, as error_type.", "gauge");
	for (int i = 0; i < n; i++) {
		char extra[48];

		if (!e[i].last_error)
			continue;
		snprintf(extra, sizeof(extra), ",error_type=\"%s\"", ctl_errname(e[i].last_error));
		series(f, "netshim_last_failure_info", e[i].key, extra, "%llu", 1);
	}
	hist(f, "netshim_connect_seconds", "Time from connect() to connected.", e, n, 0);
	hist(f, "netshim_first_byte_seconds", "Time from connect() to the first byte received.", e, n, 1);
	fprintf(f, "# HELP netshim_table_turned_away_total Connects to new destinations not counted: table full.\n"
		"# TYPE netshim_table_turned_away_total counter\nnetshim_table_turned_away_total %llu\n",
		(unsigned long long)__atomic_load_n(&t->hdr->full_count, __ATOMIC_RELAXED));
	free(e);
}

/* ctl_report.c -- shimctl report --html FILE: the history as one page for
 * the morning after an incident. Self-contained (inline SVG and CSS, no
 * script, nothing fetched): a timeline per destination with its breaker's
 * state bands (one per recorded transition), its calls and failures over
 * time, and the p99 of its first-byte times. */
#include <err.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "histread.h"
#include "shimctl.h"

#define BINS 200
#define W 1000.0
#define H    120.0 /* bands 0-12, the bars 20-H, the time axis below */
#define LM   48.0  /* the calls' scale on the left */
#define RM   64.0  /* the p99's scale on the right */

static void html_text(FILE *f, const char *s)
{
	for (; *s; s++) {
		switch (*s) {
		case '<': fputs("&lt;", f); break;
		case '>': fputs("&gt;", f); break;
		case '&': fputs("&amp;", f); break;
		case '"': fputs("&quot;", f); break;
		default:
			if ((unsigned char)*s >= 0x20)
				fputc(*s, f);
		}
	}
}

/* the state a transition leaves the breaker in: a band's class */
static const char *state_after(const char *type)
{
	if (!strcmp(type, "forced_open"))
		return "forced";
	if (!strcmp(type, "opened") || !strcmp(type, "probe_failed"))
		return "open";
	return "closed";
}

static double xpos(int64_t t, int64_t t0, int64_t t1)
{
	return t1 > t0 ? W * (double)(t - t0) / (double)(t1 - t0) : 0;
}

/* The time axis: ticks at a round step giving 4 to 10 of them, labelled in
 * UTC (seconds shown when the step is under a minute, the date when it is
 * a day or more). */
static void time_axis(FILE *f, int64_t t0, int64_t t1)
{
	/* in seconds */
	static const int64_t steps[] = { 1,   2,   5,    10,   15,   30,    60,    120,    300,
					 600, 900, 1800, 3600, 7200, 21600, 86400, 172800, 604800 };
	int64_t step = steps[sizeof(steps) / sizeof(steps[0]) - 1] * 1000;

	for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++)
		if ((t1 - t0) / (steps[i] * 1000) <= 8) {
			step = steps[i] * 1000;
			break;
		}
	fprintf(f, "<line class=\"axis\" x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\"/>\n", LM, H, LM + W, H);
	for (int64_t t = (t0 + step - 1) / step * step; t < t1; t += step) {
		time_t secs = (time_t)(t / 1000);
		struct tm tm;
		char lab[16];
		double x = LM + xpos(t, t0, t1);

		gmtime_r(&secs, &tm);
		strftime(lab, sizeof(lab), step >= 86400000 ? "%m-%d" : step < 60000 ? "%H:%M:%S" : "%H:%M", &tm);
		fprintf(f,
			"<line class=\"tick\" x1=\"%.1f\" y1=\"%.0f\" x2=\"%.1f\" y2=\"%.0f\"/>"
			"<text class=\"tick\" x=\"%.1f\" y=\"%.0f\" text-anchor=\"middle\">%s</text>\n",
			x, H, x, H + 4, x, H + 15, lab);
	}
	fprintf(f, "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"end\">UTC</text>\n", LM + W, H + 28);
}

/* The breaker's transitions of one destination, as shimctl history lists
 * them: time, transition, rule. */
static void transitions_table(FILE *f, const char *key, const struct event *ev, size_t nev)
{
	char ts[40];
	int any = 0;

	for (size_t j = 0; j < nev; j++) {
		if (strcmp(ev[j].dest, key) != 0)
			continue;
		if (!any++)
			fprintf(f,
				"<table class=\"transitions\"><tr><th>time (UTC)</th><th>transition</th><th>rule</th>"
				"</tr>\n");
		ctl_rfc3339((uint64_t)ev[j].wall_ms, ts, sizeof(ts));
		fprintf(f, "<tr class=\"state-%s\"><td>%s</td><td>", state_after(ev[j].type), ts);
		html_text(f, ev[j].type);
		fprintf(f, "</td><td>");
		html_text(f, ev[j].rule[0] ? ev[j].rule : "-");
		fprintf(f, "</td></tr>\n");
	}
	if (any)
		fprintf(f, "</table>\n");
	else
		fprintf(f, "<p>no transition of its breaker in this span</p>\n");
}

struct bin {
	uint32_t ok, fail, rej;
	uint32_t lat[NS_HIST_BUCKETS];
};

static void timeline(FILE *f, const struct hist *h, int d, const struct bin *b, const struct event *ev, size_t nev,
		     int64_t t0, int64_t t1)
{
	const struct dest *ds = &h->dests[d];
	uint32_t top = 1;
	uint64_t p99max = 1;
	size_t nb = 0;

	for (int i = 0; i < BINS; i++) {
		uint32_t n = b[i].ok + b[i].fail + b[i].rej;
		uint64_t tot = 0, acc = 0;

		top = n > top ? n : top;
		for (int k = 0; k < (int)NS_HIST_BUCKETS; k++)
			tot += b[i].lat[k];
		for (int k = 0; k < (int)NS_HIST_BUCKETS - 1 && tot; k++) {
			acc += b[i].lat[k];
			if (acc * 100 >= tot * 99) {
				p99max = ns_hist_bounds_us[k] > p99max ? ns_hist_bounds_us[k] : p99max;
				break;
			}
		}
	}
	fprintf(f, "<section class=\"timeline\" data-dest=\"");
	html_text(f, ds->key);
	fprintf(f, "\">\n<h2>");
	html_text(f, ds->key);
	fprintf(f, "</h2>\n<p>%llu succeeded, %llu failed, %llu timed out, %llu turned away by the breaker, %llu held</p>\n",
		(unsigned long long)ds->n[NS_OC_SUCCESS], (unsigned long long)ds->n[NS_OC_FAILURE],
		(unsigned long long)ds->n[NS_OC_TIMEOUT], (unsigned long long)ds->n[NS_OC_REJECTED],
		(unsigned long long)(ds->n[NS_OC_REJECTED_FLEET] + ds->n[NS_OC_REJECTED_COOLDOWN]));
	fprintf(f, "<svg width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" role=\"img\">\n", LM + W + RM, H + 34,
		LM + W + RM, H + 34);
	fprintf(f, "<g transform=\"translate(%.0f,0)\">\n", LM);
	fprintf(f, "<rect class=\"base\" x=\"0\" y=\"0\" width=\"%.0f\" height=\"12\"/>\n", W);
	for (size_t j = 0; j < nev; j++) {
		size_t k;
		int64_t end = t1 * 1000;

		if (strcmp(ev[j].dest, ds->key) != 0)
			continue;
		for (k = j + 1; k < nev; k++)
			if (!strcmp(ev[k].dest, ds->key)) {
				end = ev[k].wall_ms * 1000;
				break;
			}
		/* every string from the database is the writer's, not ours:
		 * escaped wherever it lands */
		fprintf(f, "<rect class=\"band state-%s\" data-transition=\"", state_after(ev[j].type));
		html_text(f, ev[j].type);
		fprintf(f, "\" x=\"%.1f\" y=\"0\" width=\"%.1f\" height=\"12\"><title>", xpos(ev[j].wall_ms, t0, t1),
			xpos(end / 1000, t0, t1) - xpos(ev[j].wall_ms, t0, t1) + 0.5);
		html_text(f, ev[j].type);
		fputc(' ', f);
		html_text(f, ev[j].rule);
		fprintf(f, "</title></rect>\n");
		nb++;
	}
	for (int i = 0; i < BINS; i++) {
		double x = W * i / BINS, bw = W / BINS - 0.5, y = H, s;

		if (!(b[i].ok | b[i].fail | b[i].rej))
			continue;
		s = (H - 20) / top;
		fprintf(f, "<rect class=\"ok\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\"/>", x, y - b[i].ok * s, bw,
			b[i].ok * s);
		y -= b[i].ok * s;
		fprintf(f, "<rect class=\"fail\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\"/>", x,
			y - b[i].fail * s, bw, b[i].fail * s);
		y -= b[i].fail * s;
		fprintf(f, "<rect class=\"rej\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\"/>\n", x,
			y - b[i].rej * s, bw, b[i].rej * s);
	}
	fprintf(f, "<polyline class=\"p99\" points=\"");
	for (int i = 0; i < BINS; i++) {
		uint64_t tot = 0, acc = 0, p = 0;

		for (int k = 0; k < (int)NS_HIST_BUCKETS; k++)
			tot += b[i].lat[k];
		for (int k = 0; k < (int)NS_HIST_BUCKETS && tot; k++) {
			acc += b[i].lat[k];
			if (acc * 100 >= tot * 99) {
				p = k < (int)NS_HIST_BUCKETS - 1 ? ns_hist_bounds_us[k] : p99max;
				break;
			}
		}
		if (tot)
			fprintf(f, "%.1f,%.1f ", W * (i + 0.5) / BINS, H - (H - 20) * (double)p / (double)p99max);
	}
	fprintf(f, "\"/>\n</g>\n");
	/* the scales: calls a column on the left, the p99 on the right */
	fprintf(f,
		"<text class=\"yscale\" x=\"%.0f\" y=\"24\" text-anchor=\"end\">%u</text>"
		"<text class=\"yscale\" x=\"%.0f\" y=\"%.0f\" text-anchor=\"end\">0</text>"
		"<text x=\"2\" y=\"%.0f\">calls</text>\n",
		LM - 4, top, LM - 4, H, H / 2 + 10);
	fprintf(f,
		"<text class=\"p99scale\" x=\"%.0f\" y=\"24\">%.1f ms</text>"
		"<text class=\"p99scale\" x=\"%.0f\" y=\"%.0f\">0 ms</text>"
		"<text class=\"p99scale\" x=\"%.0f\" y=\"%.0f\">p99</text>\n",
		LM + W + 4, p99max / 1000.0, LM + W + 4, H, LM + W + 4, H / 2 + 10);
	time_axis(f, t0, t1);
	fprintf(f, "</svg>\n");
	fprintf(f, "<p>%zu transitions; the tallest column %u calls; the p99 line's top %.1f ms</p>\n", nb, top,
		p99max / 1000.0);
	transitions_table(f, ds->key, ev, nev);
	fprintf(f, "</section>\n");
}

int ctl_report_html(const char *history, const char *out, uint64_t since_ms)
{
	struct hopt o;
	sqlite3 *db;
	struct hist h;
	struct event *ev;
	struct bin *bins;
	size_t nev;
	int64_t t0, t1;
	char a[40], z[40];
	FILE *f;

	memset(&o, 0, sizeof(o));
	o.file = history;
	o.since_ms = since_ms;
	if (!(db = hr_open(history)))
		return 1;
	if (hr_load(db, &o, &h) < 0) {
		warnx("%s: %s", history, sqlite3_errmsg(db));
		sqlite3_close(db);
		return 1;
	}
	ev = hr_load_events(db, &o, &nev);
	sqlite3_close(db);
	t0 = h.first_wall;
	t1 = h.last_wall;
	for (size_t j = 0; j < nev; j++) {
		t0 = !t0 || ev[j].wall_ms < t0 ? ev[j].wall_ms : t0;
		t1 = ev[j].wall_ms > t1 ? ev[j].wall_ms : t1;
	}
	t1 += 1;
	bins = calloc((size_t)(h.ndests ? h.ndests : 1) * BINS, sizeof(*bins));
	if (!bins)
		errx(1, "out of memory");
	for (size_t i = 0; i < h.nrows; i++) {
		const struct row *r = &h.rows[i];
		struct bin *b = &bins[(size_t)r->dest * BINS + (size_t)((r->wall_ms - t0) * BINS / (t1 - t0))];
		unsigned k = 0;

		if (r->kind == NS_OC_SUCCESS) {
			b->ok++;
			while (k < NS_HIST_BUCKETS - 1 && r->latency_us > ns_hist_bounds_us[k])
				k++;
			b->lat[k]++;
		} else if (r->kind <= NS_OC_TIMEOUT) {
			b->fail++;
		} else {
			b->rej++;
		}
	}
	if (!(f = fopen(out, "w"))) {
		warn("%s", out);
		free(bins);
		free(ev);
		hr_free(&h);
		return 1;
	}
	ctl_rfc3339((uint64_t)t0, a, sizeof(a));
	ctl_rfc3339((uint64_t)t1, z, sizeof(z));
	fprintf(f,
		"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>netshim history</title>\n"
		"<style>body{font:14px sans-serif;margin:1em 2em;color:#222;background:#fff}h2{font-size:15px;margin:1.2em 0 .2em}"
		"p{margin:.2em 0}svg{border:1px solid #ccc;background:#fafafa}.base{fill:#cfe8cf}"
		".state-open{fill:#b52b27}.state-forced{fill:#7b3fa0}.state-closed{fill:#3c9a3c}"
		".ok{fill:#7fb77e}.fail{fill:#f0883e}.rej{fill:#999}"
		".p99{fill:none;stroke:#1f4e9c;stroke-width:1.5}text{font-size:11px;fill:#444}.p99scale{fill:#1f4e9c}"
		".axis,line.tick{stroke:#666}.legend span{padding:0 .6em}"
		"table.transitions{border-collapse:collapse;margin:.3em 0 1em}table.transitions td,table.transitions th"
		"{border:1px solid #ddd;padding:1px 8px;text-align:left;font-size:12px}"
		"tr.state-open td:nth-child(2){color:#b52b27}tr.state-forced td:nth-child(2){color:#7b3fa0}"
		"tr.state-closed td:nth-child(2){color:#3c9a3c}"
		"</style></head><body>\n<h1>netshim history</h1>\n<p>");
	html_text(f, history);
	fprintf(f,
		": %zu outcomes of %d destinations, %s to %s</p>\n<p class=\"legend\">breaker (top band): "
		"<span class=\"key\" data-class=\"base\" style=\"color:#cfe8cf\">&#9632; no transition yet</span>"
		"<span class=\"key\" data-class=\"state-closed\" style=\"color:#3c9a3c\">&#9632; closed, reset</span>"
		"<span class=\"key\" data-class=\"state-open\" style=\"color:#b52b27\">&#9632; open (opened, probe "
		"failed)</span><span class=\"key\" data-class=\"state-forced\" style=\"color:#7b3fa0\">&#9632; forced "
		"open</span><br>calls (columns, scale on the left): <span class=\"key\" data-class=\"ok\" "
		"style=\"color:#7fb77e\">&#9632; succeeded</span><span class=\"key\" data-class=\"fail\" "
		"style=\"color:#f0883e\">&#9632; failed or timed out</span><span class=\"key\" data-class=\"rej\" "
		"style=\"color:#999\">&#9632; turned away or held</span><span class=\"key\" data-class=\"p99\" "
		"style=\"color:#1f4e9c\">&#8212; p99 first byte (scale on the right)</span></p>\n",
		h.nrows, h.ndests, a, z);
	for (int d = 0; d < h.ndests; d++)
		timeline(f, &h, d, &bins[(size_t)d * BINS], ev, nev, t0, t1);
	fprintf(f, "</body></html>\n");
	if (fclose(f) != 0) {
		warn("%s", out);
		return 1;
	}
	free(bins);
	free(ev);
	hr_free(&h);
	return 0;
}

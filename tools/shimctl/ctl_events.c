/* ctl_events.c -- shimctl events, metrics, watch: the commands that follow
 * the breaker table (its ring of events, its figures, its rows as they
 * change). */
#include <err.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include "../../policy/table.h"
#include "shimctl.h"

/**** events ****/

static volatile sig_atomic_t stop_flag;

static void on_stop(int sig)
{
	(void)sig;
	stop_flag = 1;
}

static void print_event(const struct ns_evrec *ev, int json)
{
	char ts[40], esc[NS_KEY_MAX * 4];
	const char *en = ctl_errname(ev->err);

	ctl_rfc3339(ev->wall_ms, ts, sizeof(ts));
	if (json) {
		ctl_event_json(stdout, ev, NULL);
	} else {
		ctl_escape_text(ev->dest[0] ? ev->dest : "-", esc, sizeof(esc));
		printf("%-6llu %s  %-16s %-24s", (unsigned long long)ev->seq, ts, ns_event_name(ev->type), esc);
		if (ev->type == NS_E_OPENED || ev->type == NS_E_REOPENED || ev->type == NS_E_SHADOW_OPENED)
			printf(" rule=%s failures_in_window=%u consecutive=%u", ns_rule_name((int)ev->rule),
			       ev->failures_in_window, ev->consecutive);
		if (en)
			printf(" error=%s", en);
		if (ev->detail[0]) {
			ctl_escape_text(ev->detail, esc, sizeof(esc));
			printf(" %s", esc);
		}
		ctl_escape_text(ev->program, esc, sizeof(esc));
		printf("  [pid %u %s]\n", ev->pid, esc);
		for (uint32_t i = 0; i < ev->nframes; i++) {
			ctl_escape_text(ev->frames[i], esc, sizeof(esc));
			printf("         at %s\n", esc);
		}
	}
}

static void print_gap(uint64_t from, uint64_t to, int json)
{
	if (json)
		printf("{\"gap\": %llu, \"from_seq\": %llu, \"to_seq\": %llu}\n", (unsigned long long)(to - from),
		       (unsigned long long)from, (unsigned long long)(to - 1));
	else
		printf("-- %llu event%s missed (overwritten before they were read): seq %llu to %llu --\n",
		       (unsigned long long)(to - from), to - from == 1 ? "" : "s", (unsigned long long)from,
		       (unsigned long long)(to - 1));
}

/* Print events [from, head); returns the next seq to read. */
static uint64_t print_events(const struct ns_table *t, uint64_t from, const char *key, int json)
{
	uint64_t head = ns_table_event_head(t), gap_from = 0;
	int in_gap = 0;
	struct ns_evrec ev;

	if (head > t->ev_cap && from < head - t->ev_cap) {
		print_gap(from, head - t->ev_cap, json);
		from = head - t->ev_cap;
	}
	for (uint64_t s = from; s < head; s++) {
		if (ns_table_event_read(t, s, &ev) < 0) {
			if (!in_gap)
				gap_from = s;
			in_gap = 1;
			continue;
		}
		if (in_gap)
			print_gap(gap_from, s, json);
		in_gap = 0;
		if (!key || strcmp(key, ev.dest) == 0)
			print_event(&ev, json);
	}
	if (in_gap)
		print_gap(gap_from, head, json);
	fflush(stdout);
	return head;
}

int ctl_cmd_events(const char *name, int json, int follow, const char *dest)
{
	char key[NS_KEY_MAX];
	struct sigaction sa;
	struct ns_table t;
	uint64_t next;

	if (ctl_open_table(name, 0, &t) < 0)
		return 1;
	if (dest)
		ctl_normalise_dest(dest, key, sizeof(key));
	next = print_events(&t, 0, dest ? key : NULL, json);
	if (follow) {
		memset(&sa, 0, sizeof(sa));
		sa.sa_handler = on_stop;
		sigaction(SIGINT, &sa, NULL);
		sigaction(SIGTERM, &sa, NULL);
		while (!stop_flag) {
			struct timespec ts = { 0, 100 * 1000000 };

			nanosleep(&ts, NULL);
			next = print_events(&t, next, dest ? key : NULL, json);
		}
	}
	ctl_close_table(&t);
	return 0;
}

/**** metrics ****/

int ctl_cmd_metrics(const char *name)
{
	struct ns_table t;

	if (ctl_open_table(name, 0, &t) < 0)
		return 1;
	ctl_metrics_write(stdout, &t);
	ctl_close_table(&t);
	return 0;
}

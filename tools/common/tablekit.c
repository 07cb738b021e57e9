/* tablekit.c -- what shimctl and the fleet agent share (see tablekit.h):
 * opening the table by name, writing events into it and out as JSON, the
 * clocks and timestamps, text escaping. */
#include <err.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/futex.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "../../policy/account.h"
#include "../../policy/table.h"
#include "tablekit.h"

uint64_t ctl_mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

void ctl_futex_wake(uint32_t *word)
{
	if (word)
		syscall(SYS_futex, word, FUTEX_WAKE, INT32_MAX, NULL, NULL, 0);
}

uint64_t ctl_wall_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

int ctl_span_parse(const char *s, uint64_t *ms)
{
	size_t n = strlen(s);
	const char *why;
	char hours[32];
	uint64_t v;

	/* the policy's durations, and days: "7d" is "7h" 24 times */
	if (n >= 2 && n < sizeof(hours) && s[n - 1] == 'd' && s[n - 2] >= '0' && s[n - 2] <= '9') {
		memcpy(hours, s, n - 1);
		hours[n - 1] = 'h';
		hours[n] = '\0';
		if (ns_duration_parse(hours, &v, &why) < 0 || v > UINT64_MAX / 24)
			return -1;
		*ms = v * 24;
		return 0;
	}
	return ns_duration_parse(s, ms, &why) < 0 ? -1 : 0;
}

void ctl_rfc3339(uint64_t ms, char *buf, size_t len)
{
	time_t s = (time_t)(ms / 1000);
	struct tm tm;

	/* the time comes from shared memory: a garbage value must not become
	 * an unset struct tm */
	if (!gmtime_r(&s, &tm) || strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
		snprintf(buf, len, "invalid");
}

/* Host names come from programs: never print a control character raw. */
void ctl_escape_text(const char *s, char *out, size_t len)
{
	size_t o = 0;

	for (; *s && o + 5 < len; s++) {
		unsigned char ch = (unsigned char)*s;

		if (ch < 0x20 || ch >= 0x7f || ch == '\\')
			o += (size_t)snprintf(out + o, len - o, "\\x%02x", ch);
		else
			out[o++] = (char)ch;
	}
	out[o] = '\0';
}

void ctl_json_string(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		unsigned char ch = (unsigned char)*s;

		if (ch == '"' || ch == '\\')
			fprintf(f, "\\%c", ch);
		else if (ch < 0x20 || ch >= 0x7f)
			fprintf(f, "\\u%04x", ch);
		else
			fputc(ch, f);
	}
	fputc('"', f);
}

const char *ctl_errname(uint32_t e)
{
	return e ? strerrorname_np((int)e) : NULL;
}

const char *ctl_table_name(const char *opt, char *buf, size_t len)
{
	const char *env = getenv("NETSHIM_TABLE");

	if (opt)
		return opt;
	if (env && *env)
		return env;
	ns_table_default_name(buf, len);
	return buf;
}

/* Unmap; a table that shrank while we read it (see ns_table_broken) was
 * partly read as zeros, so say that what was shown is not to be trusted. */
void ctl_close_table(struct ns_table *t)
{
	int broken = ns_table_broken(t);

	ns_table_close(t);
	if (broken)
		errx(1, "%s: truncated while being read; the output above is incomplete", t->path);
}

int ctl_open_table(const char *name, int create, struct ns_table *t)
{
	char e[NS_ERRBUF];
	int r = ns_table_open(name, create, 0, 0, t, e, sizeof(e));

	if (r != NS_TBL_OK) {
		warnx("%s", e);
		return -1;
	}
	if (t->moved)
		warnx("warning: %s", e);
	return 0;
}

/* A tool's wake of the agent: an operator's command reaches it at once
 * (policy/table.h). */
static void tool_wake(struct ns_table *t)
{
	ns_table_wake_agent(t, NULL);
}

/* What the core (policy/account.h) borrows from a tool that writes events
 * (shimctl, the agent): its clock and its wake of the agent; no lines. */
static const struct ns_engine tool_engine = {
	.wake = tool_wake,
	.wall_ms = ctl_wall_ms,
};

void ctl_note_event(struct ns_table *t, int type, const char *key, const char *detail, const char *program)
{
	ns_event_write(&tool_engine, t, type, -1, key, NULL, 0, detail, (uint32_t)getpid(), program, 0);
}

void ctl_note_action(struct ns_table *t, int type, const char *key, const char *detail)
{
	ctl_note_event(t, type, key, detail, "shimctl");
}


void ctl_event_json(FILE *f, const struct ns_evrec *ev, const char *node)
{
	char ts[40];
	const char *en = ctl_errname(ev->err);

	ctl_rfc3339(ev->wall_ms, ts, sizeof(ts));
	fprintf(f, "{\"seq\": %llu, \"time\": \"%s\", \"event\": \"%s\", \"destination\": ",
		(unsigned long long)ev->seq, ts, ns_event_name(ev->type));
	if (ev->dest[0])
		ctl_json_string(f, ev->dest);
	else
		fprintf(f, "null");
	fprintf(f, ", \"rule\": ");
	if (ev->type == NS_E_OPENED || ev->type == NS_E_REOPENED || ev->type == NS_E_SHADOW_OPENED)
		fprintf(f, "\"%s\"", ns_rule_name((int)ev->rule));
	else
		fprintf(f, "null");
	fprintf(f, ", \"failures_in_window\": %u, \"consecutive_failures\": %u, \"error\": ",
		ev->failures_in_window, ev->consecutive);
	if (en)
		fprintf(f, "\"%s\"", en);
	else
		fprintf(f, "null");
	fprintf(f, ", \"pid\": %u, \"program\": ", ev->pid);
	ctl_json_string(f, ev->program);
	fprintf(f, ", \"detail\": ");
	ctl_json_string(f, ev->detail);
	if (node) {
		fprintf(f, ", \"node\": ");
		ctl_json_string(f, node);
	}
	fprintf(f, ", \"frames\": [");
	for (uint32_t i = 0; i < ev->nframes; i++) {
		fprintf(f, "%s", i ? ", " : "");
		ctl_json_string(f, ev->frames[i]);
	}
	fprintf(f, "]}\n");
}

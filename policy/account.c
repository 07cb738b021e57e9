/* account.c -- what an outcome counts, for both engines (account.h). */
#include "account.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "breaker.h"
#include "policy.h"

/* the engines' levels (shim/base.h NS_LOG_*, shimrun's) */
enum { SAY_WARN = 2, SAY_INFO = 3 };

static uint64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static int says(const struct ns_engine *e, int level)
{
	return e->say && e->log_level && *e->log_level >= level;
}

static void say(const struct ns_engine *e, int level, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static void say(const struct ns_engine *e, int level, const char *fmt, ...)
{
	char line[448];
	va_list ap;

	if (!says(e, level))
		return;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	e->say(level, line);
}

const char *ns_errno_word(int e)
{
	switch (e) {
	case ECONNREFUSED:
		return "ECONNREFUSED";
	case ECONNRESET:
		return "ECONNRESET";
	case ETIMEDOUT:
		return "ETIMEDOUT";
	case EHOSTUNREACH:
		return "EHOSTUNREACH";
	case ENETUNREACH:
		return "ENETUNREACH";
	case ENETDOWN:
		return "ENETDOWN";
	case EHOSTDOWN:
		return "EHOSTDOWN";
	case ECONNABORTED:
		return "ECONNABORTED";
	case EPIPE:
		return "EPIPE";
	default:
		return strerror(e);
	}
}

void ns_table_key_copy(const struct ns_table *t, int idx, char out[NS_KEY_MAX])
{
	const struct ns_slot *s = ns_table_slot_(t, idx);
	size_t i = 0;

	if (s)
		for (; i < NS_KEY_MAX - 1; i++) {
			char ch = __atomic_load_n(&s->key[i], __ATOMIC_RELAXED);

			if (!ch)
				break;
			out[i] = ch;
		}
	out[i] = '\0';
}

void ns_event_write(const struct ns_engine *e, struct ns_table *t, int type, int slot, const char *key,
		    const struct ns_step *st, int err, const char *detail, uint32_t pid, const char *program, int trace)
{
	struct ns_evrec ev;
	struct ns_entry en;
	uint64_t wall = e->wall_ms();
	int saved = errno;

	memset(&ev, 0, sizeof(ev));
	ev.type = (uint32_t)type;
	ev.pid = pid = e->pid_of ? e->pid_of(pid) : pid;
	ev.err = (uint32_t)err;
	snprintf(ev.dest, sizeof(ev.dest), "%s", key ? key : "");
	if (!program && e->program_of)
		program = e->program_of(pid);
	snprintf(ev.program, sizeof(ev.program), "%s", program ? program : "");
	if (detail)
		snprintf(ev.detail, sizeof(ev.detail), "%s", detail);
	if (st) {
		ev.rule = (uint32_t)st->rule;
		ev.consecutive = st->next.consec;
	}
	if (slot >= 0 && ns_table_read(t, slot, mono_ms(), &en) == 0)
		ev.failures_in_window = en.failures_in_window;
	if (trace && e->frames)
		ev.nframes = e->frames(ev.frames, NS_FRAMES);
	ns_table_event(t, &ev, wall);
	if (e->wake && ns_event_wakes_agent(ev.type) && t->hdr && __atomic_load_n(&t->hdr->agent_pid, __ATOMIC_ACQUIRE))
		e->wake(t);
	errno = saved;
}

/* The outcome in the words of the log and of the event: *what the event's
 * detail (scripts read it: its words are kept), last the line's. */
static void words(const struct ns_outcome *o, const char **what, char *last, size_t n)
{
	*what = NULL;
	last[0] = '\0';
	if (o->kind == NS_OUT_SUCCESS)
		return;
	/* the bank-transfer lesson: a connect that failed never reached the
	 * server (safe to retry); a failure after the request went out is an
	 * unknown outcome (never retry it blindly) */
	if (o->ans && (o->ans->status || o->ans->said)) {
		/* the answer said so: not unknown */
		if (o->ans->said)
			snprintf(last, n, "%s", o->ans->said);
		else
			snprintf(last, n, "HTTP %u", o->ans->status);
		*what = last;
		return;
	}
	*what = o->at_connect               ? "connect failed (nothing sent)"
		: !o->sent                  ? NULL
		: o->kind == NS_OUT_TIMEOUT ? "timed out after the request was sent (outcome unknown)"
					    : "failed after the request was sent (outcome unknown)";
	snprintf(last, n, "%s%s",
		 o->kind == NS_OUT_TIMEOUT ? "ETIMEDOUT"
			 : o->err          ? ns_errno_word(o->err)
					   : "closed before the answer",
		 o->at_connect      ? " at connect (nothing sent)"
			 : !o->sent ? ""
				    : " after the request was sent (outcome unknown)");
}

/* A transition of the live breaker: said once at warn, and an event. */
static void step_said(const struct ns_engine *e, struct ns_table *t, int slot, const char *key,
		      const struct ns_step *st, const struct ns_settings *set, const struct ns_outcome *o,
		      const char *what, const char *last, uint64_t now_ms)
{
	char fig[160];

	switch (st->transition) {
	case NS_TR_OPENED:
		if (says(e, SAY_WARN)) {
			ns_rule_figures(t, slot, st, set, now_ms, fig, sizeof(fig));
			say(e, SAY_WARN, "breaker for %s opened by rule %s (%s)%s%s", key, ns_rule_name(st->rule), fig,
			    last[0] ? "; the last: " : "", last);
		}
		ns_event_write(e, t, NS_E_OPENED, slot, key, st, o->err, what, o->pid, o->program, o->trace);
		break;
	case NS_TR_REOPENED:
		say(e, SAY_WARN, "breaker for %s reopened: half-open probe failed%s%s%s", key, last[0] ? " (" : "",
		    last, last[0] ? ")" : "");
		ns_event_write(e, t, NS_E_REOPENED, slot, key, st, o->err, what, o->pid, o->program, o->trace);
		break;
	case NS_TR_CLOSED:
		say(e, SAY_WARN, "breaker for %s closed: probe succeeded", key);
		ns_event_write(e, t, NS_E_CLOSED, slot, key, st, 0, NULL, o->pid, o->program, 0);
		break;
	}
}

/* The history's record of o: times, connection, process (kind, err and
 * the rest are the caller's). */
static void hist_rec(const struct ns_engine *e, int slot, const struct ns_outcome *o, struct ns_ocrec *rec)
{
	memset(rec, 0, sizeof(*rec));
	rec->at_us = o->now_ns / 1000;
	rec->wall_ms = e->wall_ms();
	rec->start_us = o->from_ns / 1000;
	rec->conn_us = o->conn_ns / 1000;
	rec->conn = ((uint32_t)(o->conn >> 6) ^ (o->conn_gen << 20)) | 1u;
	rec->slot = (uint32_t)slot;
	rec->pid = o->pid;
}

/* The history ring while a recorder reads t, for a record of slot; else
 * NULL. */
static struct ns_ocring *hist_on(const struct ns_engine *e, struct ns_table *t, int slot, uint64_t now_ms)
{
	if (slot < 0 || __atomic_load_n(&t->hdr->hist_until_ms, __ATOMIC_RELAXED) <= now_ms || !e->hist_ring)
		return NULL;
	return e->hist_ring();
}

void ns_account_withdrawn(const struct ns_engine *e, struct ns_table *t, int slot, const struct ns_outcome *o)
{
	struct ns_ocring *r = hist_on(e, t, slot, o->now_ms);
	struct ns_ocrec rec;

	if (!r)
		return;
	hist_rec(e, slot, o, &rec);
	rec.kind = NS_OC_WITHDRAWN;
	ns_ocring_put(r, &rec);
}

void ns_account_hist(const struct ns_engine *e, int slot, const struct ns_outcome *o)
{
	struct ns_ocring *r;
	struct ns_ocrec rec;

	if (o->own < 0 || !e->hist_ring || !(r = e->hist_ring()))
		return; /* (an own success taken back before its row: none) */
	hist_rec(e, slot, o, &rec);
	rec.flags = o->own ? NS_OC_F_OWN : 0;
	rec.err = (uint32_t)o->err;
	rec.latency_us = o->latency_us > UINT32_MAX ? UINT32_MAX : (uint32_t)o->latency_us;
	rec.status = (uint16_t)(o->ans && o->ans->status < 1000 ? o->ans->status : 0);
	rec.kind = (uint8_t)(o->kind == NS_OUT_SUCCESS           ? NS_OC_SUCCESS
				     : o->kind == NS_OUT_TIMEOUT ? NS_OC_TIMEOUT
								 : NS_OC_FAILURE);
	ns_ocring_put(r, &rec);
}

/* The shadow's breaker judges what the live one counted: its transitions
 * are events of the live table (never enforced). */
static void shadow_judge(const struct ns_engine *e, struct ns_table *t, const struct ns_outcome *o, const char *key,
			 uint64_t now_ms)
{
	const struct ns_shadow_ref *sh = &o->shadow;
	struct ns_step st;

	if (!sh->t || !sh->set || sh->slot < 0 || ns_table_broken(sh->t))
		return;
	ns_table_outcome_at(sh->t, sh->slot, o->kind, o->err, o->latency_us, now_ms, e->wall_ms(), sh->set, &st);
	if (st.transition == NS_TR_OPENED || st.transition == NS_TR_REOPENED || st.transition == NS_TR_CLOSED)
		ns_event_write(e, t, st.transition == NS_TR_CLOSED ? NS_E_SHADOW_CLOSED : NS_E_SHADOW_OPENED, -1, key,
			       &st, o->err, st.transition == NS_TR_REOPENED ? "half-open probe failed" : NULL, o->pid,
			       o->program, 0);
}

/* The destination's key for a line or an event: the engine's, else the slot's. */
static void key_of(const struct ns_table *t, int slot, const struct ns_outcome *o, char key[NS_KEY_MAX])
{
	if (o->key)
		ns_str_put(key, NS_KEY_MAX, 0, o->key);
	else
		ns_table_key_copy(t, slot, key);
}

/* What an outcome says beyond its count (cold: a keep-alive loop's
 * successes never come here): a failure's line at info (before), the
 * breaker's step or a traced failure's event (after). */
void ns_account_said_before(const struct ns_engine *e, struct ns_table *t, int slot, const struct ns_outcome *o)
{
	char key[NS_KEY_MAX], last[80];
	const char *what;

	words(o, &what, last, sizeof(last));
	key_of(t, slot, o, key);
	say(e, SAY_INFO, "%s: %s%s", key, o->kind == NS_OUT_TIMEOUT ? "deadline expired: " : "", last);
}

void ns_account_said_after(const struct ns_engine *e, struct ns_table *t, int slot, const struct ns_settings *set,
			   const struct ns_outcome *o, const struct ns_step *st, uint64_t now_ms)
{
	char key[NS_KEY_MAX], last[80];
	const char *what;

	words(o, &what, last, sizeof(last));
	key_of(t, slot, o, key);
	if (st->transition != NS_TR_NONE)
		step_said(e, t, slot, key, st, set, o, what, last, now_ms);
	else
		ns_event_write(e, t, NS_E_CONNECT_FAILED, slot, key, st, o->err, what, o->pid, o->program, 1);
}

void ns_account_shadow(const struct ns_engine *e, struct ns_table *t, int slot, const struct ns_outcome *o,
		       uint64_t now_ms)
{
	char key[NS_KEY_MAX];

	key_of(t, slot, o, key);
	shadow_judge(e, t, o, key, now_ms);
}

void ns_account(const struct ns_engine *e, struct ns_table *t, int slot, const struct ns_settings *set,
		const struct ns_outcome *o, struct ns_step *st)
{
	ns_account_at(e, t, slot, set, o, e->wall_ms(), st);
}

void ns_account_attempt(const struct ns_engine *e, struct ns_table *t, int slot, const char *key,
			const struct ns_step *st, uint32_t pid, const char *program)
{
	if (st->transition != NS_TR_HALF_OPENED)
		return;
	say(e, SAY_INFO, "breaker for %s half-open: letting a probe through", key);
	ns_event_write(e, t, NS_E_HALF_OPEN, slot, key, st, 0, NULL, pid, program, 0);
}

int ns_account_cooldown(const struct ns_engine *e, struct ns_table *t, int slot, const struct ns_settings *set,
			const char *key, uint64_t asked_ms, int pushback, uint64_t now_ms, uint32_t pid,
			const char *program)
{
	uint64_t ms = asked_ms;
	char detail[96];

	if (!asked_ms || slot < 0)
		return 0;
	if (set->retry_after_max_ms && ms > set->retry_after_max_ms)
		ms = set->retry_after_max_ms;
	ns_table_cooldown(t, slot, now_ms + ms);
	if (set->adaptive) /* a cooldown is no failure of the breaker's, but the server said it is full */
		ns_table_limit_event(t, slot, set, NS_ADAPT_FAILURE, 0, now_ms);
	if (set->req_adaptive)
		ns_table_req_limit_event(t, slot, set, NS_ADAPT_FAILURE, 0, now_ms);
	if (pushback)
		snprintf(detail, sizeof(detail), "grpc-retry-pushback-ms: %llu ms asked, %llu ms kept",
			 (unsigned long long)asked_ms, (unsigned long long)ms);
	else
		snprintf(detail, sizeof(detail), "Retry-After: %llu s asked, %llu s kept",
			 (unsigned long long)(asked_ms / 1000), (unsigned long long)(ms / 1000));
	say(e, SAY_INFO, "%s: %s", key, detail);
	ns_event_write(e, t, NS_E_COOLDOWN, slot, key, NULL, 0, detail, pid, program, 0);
	return 1;
}

void ns_account_rejected(const struct ns_engine *e, struct ns_table *t, int slot, uint64_t now_us, uint32_t pid)
{
	uint64_t now_ms = now_us / 1000;
	struct ns_ocring *r = hist_on(e, t, slot, now_ms);
	struct ns_ocrec rec;

	if (!r)
		return;
	memset(&rec, 0, sizeof(rec));
	rec.at_us = rec.start_us = rec.conn_us = now_us;
	rec.wall_ms = e->wall_ms();
	rec.slot = (uint32_t)slot;
	rec.pid = e->pid_of ? e->pid_of(pid) : pid;
	rec.kind = (uint8_t)ns_table_reject_kind(t, slot, now_ms);
	ns_ocring_put(r, &rec);
}

int ns_shadow_admit(struct ns_table *stbl, const struct ns_settings *set, const char *key, uint64_t now_ms)
{
	struct ns_step st;
	int slot = ns_table_find(stbl, key, 1, now_ms);

	if (slot < 0)
		return -1;
	return ns_table_attempt(stbl, slot, 1, now_ms, set, &st) == NS_REJECT ? -1 : slot;
}

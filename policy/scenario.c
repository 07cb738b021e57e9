/* scenario.c -- shimrun --scenario: a timeline of injections (scenario.h).
 * shimrun checks the file with this parser and hands its text to the
 * program in NETSHIM_SCENARIO, where the shim parses it again: one grammar,
 * one set of messages. */
#include "scenario.h"

#include "internal.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

/* The next blank-separated word of *p (NUL-terminated in place), or NULL. */
static char *word(char **p)
{
	char *s = *p, *w;

	while (*s == ' ' || *s == '\t')
		s++;
	if (!*s)
		return NULL;
	w = s;
	while (*s && *s != ' ' && *s != '\t')
		s++;
	if (*s)
		*s++ = '\0';
	*p = s;
	return w;
}

/* One line (comments already cut). 1: an injection in *out; 0: blank. */
static int parse_line(struct perr *e, int lineno, char *s, struct ns_scen_line *out)
{
	char *at = word(&s), *dest = word(&s), fwhy[200];
	const char *why, *rest;

	if (!at)
		return 0;
	memset(out, 0, sizeof(*out));
	out->line = lineno;
	if (ns_duration_parse(at, &out->at_ms, &why) < 0) {
		ns_perr_add(e, lineno, "bad time '%.40s': %s (a line is AT DEST FAULTS, such as "
			    "'10s api.example.com:443 refuse')", at, why);
		return -1;
	}
	rest = ns_trim(s);
	if (!dest || !*rest) {
		ns_perr_add(e, lineno, "expected AT DEST FAULTS or AT DEST clear, such as '10s api.example.com:443 refuse'");
		return -1;
	}
	for (char *c = dest; *c; c++)
		*c = (char)tolower((unsigned char)*c);
	if ((why = ns_pattern_parse(dest, &out->pat)) != NULL) {
		ns_perr_add(e, lineno, "bad destination '%.60s': %s", dest, why);
		return -1;
	}
	if (strcmp(rest, "clear") == 0) {
		out->clear = 1;
		return 1;
	}
	if (ns_faults_parse(rest, &out->f, fwhy, sizeof(fwhy)) < 0) {
		ns_perr_add(e, lineno, "bad fault '%.80s': %s", rest, fwhy);
		return -1;
	}
	return 1;
}

int ns_scenario_parse(const char *text, const char *fname, struct ns_scenario *out, char *errs, size_t errlen)
{
	struct perr e = { .buf = errs, .len = errlen, .fname = fname };
	struct ns_scen_line *l = NULL;
	char buf[1024];
	int n = 0, lineno = 0, cap = 1;

	out->n = 0;
	out->l = NULL;
	if (errs && errlen)
		errs[0] = '\0';
	for (const char *p = text; *p && cap < NS_SCENARIO_LINES; p++)
		cap += *p == '\n';
	l = calloc((size_t)cap, sizeof(*l));
	if (!l) {
		ns_perr_add(&e, 0, "out of memory");
		return e.count;
	}
	for (const char *p = text; *p;) {
		const char *nl = strchr(p, '\n');
		size_t len = nl ? (size_t)(nl - p) : strlen(p);
		struct ns_scen_line one;
		char *hash;
		int k;

		lineno++;
		if (len >= sizeof(buf)) {
			ns_perr_add(&e, lineno, "line too long (at most %zu bytes)", sizeof(buf) - 1);
			k = -1;
		} else {
			memcpy(buf, p, len);
			buf[len] = '\0';
			if ((hash = strchr(buf, '#')) != NULL)
				*hash = '\0';
			k = parse_line(&e, lineno, buf, &one);
		}
		if (k > 0 && n >= cap)
			ns_perr_add(&e, lineno, "too many lines (at most %d injections)", NS_SCENARIO_LINES);
		else if (k > 0)
			l[n++] = one;
		p += len + (nl != NULL);
	}
	if (e.count) {
		free(l);
		return e.count;
	}
	/* time order, lines of one AT in file order (insertion sort: stable) */
	for (int i = 1; i < n; i++) {
		struct ns_scen_line x = l[i];
		int j = i;

		for (; j > 0 && l[j - 1].at_ms > x.at_ms; j--)
			l[j] = l[j - 1];
		l[j] = x;
	}
	for (int i = 0; i < n; i++) {
		l[i].dest_id = i;
		for (int j = 0; j < i; j++) {
			if (ns_same_pattern(&l[j].pat, &l[i].pat)) {
				l[i].dest_id = l[j].dest_id;
				break;
			}
		}
	}
	out->n = n;
	out->l = l;
	return 0;
}

void ns_scenario_free(struct ns_scenario *s)
{
	free(s->l);
	s->l = NULL;
	s->n = 0;
}

int ns_scenario_match(const struct ns_scenario *s, uint64_t t_ms, const struct ns_dest *d, struct ns_faults *out)
{
	int best = -1;

	/* a line is in force when it is the last of its DEST that began */
	for (int i = 0; i < s->n && s->l[i].at_ms <= t_ms; i++) {
		const struct ns_scen_line *x = &s->l[i];
		int later = 0;

		for (int j = i + 1; j < s->n && s->l[j].at_ms <= t_ms && !later; j++)
			later = s->l[j].dest_id == x->dest_id;
		if (later || x->clear || !ns_pattern_match(&x->pat, d))
			continue;
		if (best < 0 || x->pat.port >= s->l[best].pat.port)
			best = i;
	}
	if (best < 0)
		return 0;
	*out = s->l[best].f;
	return 1;
}

uint64_t ns_scenario_end(const struct ns_scenario *s)
{
	return s->n ? s->l[s->n - 1].at_ms : 0;
}

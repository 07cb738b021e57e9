/* tablekit.h -- what shimctl and the fleet agent share (tools/common/):
 * table access, time, escaping, the event an operator's action leaves
 * (tablekit.c), and the table in Prometheus text format (promtext.c). */
#ifndef NS_TABLEKIT_H
#define NS_TABLEKIT_H

#include <stdint.h>
#include <stdio.h>

#include "../../policy/table.h"

uint64_t ctl_mono_ms(void);
uint64_t ctl_wall_ms(void);
/* Wake every process blocked on a table's futex word (a place freed). */
void ctl_futex_wake(uint32_t *word);
/* An age or a span: "90s", "30m", "24h", "7d" (a number and its unit)
 * into ms. 0, or -1 when it is not one. */
int ctl_span_parse(const char *s, uint64_t *ms);
/* RFC 3339 UTC with milliseconds. */
void ctl_rfc3339(uint64_t ms, char *buf, size_t len);
/* Control bytes and backslashes escaped, for a terminal. */
void ctl_escape_text(const char *s, char *out, size_t len);
/* A JSON string literal, escaped. */
void ctl_json_string(FILE *f, const char *s);
/* "ETIMEDOUT" for 110; NULL for 0. */
const char *ctl_errname(uint32_t e);
/* The table: --table, else NETSHIM_TABLE, else the default. */
const char *ctl_table_name(const char *opt, char *buf, size_t len);
/* Map it (saying why not, on stderr): 0 or -1. */
int ctl_open_table(const char *name, int create, struct ns_table *t);
/* Unmap; exits 1 when the table shrank while it was read. */
void ctl_close_table(struct ns_table *t);
/* Write an operator's action (reset, forced open, fault set...) to the ring;
 * ctl_note_event for another program than shimctl (the agent). */
void ctl_note_action(struct ns_table *t, int type, const char *key, const char *detail);
void ctl_note_event(struct ns_table *t, int type, const char *key, const char *detail, const char *program);

/* One event as a JSON object on one line (shimctl events --json, the
 * agent's hooks); node: the node's name, NULL to leave the field out. */
void ctl_event_json(FILE *f, const struct ns_evrec *ev, const char *node);

/* promtext.c: the table in Prometheus text format; the state status
 * shows for an entry (fleet_open, cooldown, or the breaker's). */
void ctl_metrics_write(FILE *f, const struct ns_table *t);
/* A destination's labels: destination, server_address, server_port. */
void ctl_prom_dest_labels(FILE *f, const char *key);
const char *ctl_entry_state(const struct ns_entry *e);

#endif

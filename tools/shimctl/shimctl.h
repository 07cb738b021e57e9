/* shimctl.h -- what shimctl's command files share: each command file's
 * entry points; the table kit it shares with the agent is tablekit.h. */
#ifndef NS_SHIMCTL_H
#define NS_SHIMCTL_H

#include <stdint.h>
#include <stdio.h>

#include "../common/tablekit.h"

/* ctl_status.c: status, reset, open, events, metrics, watch. */
/* "localhost:80" and "[::1]:80" as the shim writes the key (else as typed). */
void ctl_normalise_dest(const char *in, char *out, size_t len);
int ctl_cmd_status(const char *name, int json, const char *dest);
int ctl_cmd_reset(const char *name, int all, const char *dest);
int ctl_cmd_open(const char *name, const char *dest);
int ctl_cmd_events(const char *name, int json, int follow, const char *dest);
int ctl_cmd_metrics(const char *name);
int ctl_cmd_watch(const char *name);

/* ctl_limits.c: below status's table, the limits that hold each
 * destination now (auto's limit, the throttle's share, a cooldown's end). */
void ctl_limits_begin(void);
void ctl_limits_line(const struct ns_entry *e);
void ctl_limits_end(void);

/* ctl_faults.c */
int ctl_cmd_inject(const char *name, int argc, char **argv, const char *for_text, int existing, int clear, int all);
int ctl_cmd_faults(const char *name, const char *policy, int json);

/* ctl_policy.c: shimctl check FILE..., shimctl explain DEST. fleet_table:
 * --fleet's table (the fleet limits compared), else NULL. */
int ctl_cmd_check(char **files, int n, int install, const char *fleet_table);
int ctl_cmd_explain(const char *policy, const char *dest);
/* ctl_history.c: shimctl history, backtest, suggest, report (their own
 * options); the default history file for a table. */
int ctl_history_main(int argc, char **argv);
void ctl_history_default(const char *table, char *buf, size_t len);
/* ctl_report.c: one self-contained HTML page of the history. */
int ctl_report_html(const char *history, const char *out, uint64_t since_ms);

/* ctl_shadow.c: the shadow policy's breakers of table (TABLE.shadow), read
 * once; a destination's state name (NULL: none) and connects it would have
 * turned away. */
void ctl_shadow_load(const char *table);
const char *ctl_shadow_find(const char *key, uint64_t *rejected);
void ctl_shadow_free(void);

#endif

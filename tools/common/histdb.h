/* histdb.h -- the history database (netshim-agent --history writes it,
 * shimctl history/backtest/suggest/report read it): its schema, in one
 * place. SQLite in WAL mode; times are the wall clock in ms (wall_ms) and
 * the breakers' own clock, CLOCK_MONOTONIC, in us (the replay's). The
 * schema is documented in netshim-agent(8), HISTORY. */
#ifndef NS_HISTDB_H
#define NS_HISTDB_H

#define HIST_SCHEMA_VERSION "1"

#define HIST_SCHEMA \
	"CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT);\n" \
	"CREATE TABLE IF NOT EXISTS dests(id INTEGER PRIMARY KEY, key TEXT UNIQUE NOT NULL);\n" \
	"CREATE TABLE IF NOT EXISTS kinds(id INTEGER PRIMARY KEY, name TEXT NOT NULL);\n" \
	"CREATE TABLE IF NOT EXISTS outcomes(\n" \
	"  wall_ms INTEGER NOT NULL,      -- when it was counted, wall clock\n" \
	"  at_us INTEGER NOT NULL,        -- the same instant, CLOCK_MONOTONIC us\n" \
	"  dest INTEGER NOT NULL,         -- dests.id\n" \
	"  kind INTEGER NOT NULL,         -- kinds.id: success, failure, timeout, rejected*\n" \
	"  err INTEGER NOT NULL,          -- a failure's errno, 0 = none\n" \
	"  start_us INTEGER NOT NULL,     -- the exchange began (its request, or the connect)\n" \
	"  conn_us INTEGER NOT NULL,      -- its connection's connect was admitted\n" \
	"  conn INTEGER NOT NULL,         -- pid << 32 | the connection's number in it; 0 = turned away\n" \
	"  latency_us INTEGER NOT NULL,   -- a success: first byte after the exchange began\n" \
	"  status INTEGER NOT NULL        -- HTTP status, 0 = none\n" \
	");\n" \
	"CREATE INDEX IF NOT EXISTS outcomes_wall ON outcomes(wall_ms);\n" \
	"CREATE TABLE IF NOT EXISTS events(\n" \
	"  wall_ms INTEGER NOT NULL, at_us INTEGER NOT NULL, dest TEXT NOT NULL, type TEXT NOT NULL,\n" \
	"  rule TEXT NOT NULL, err INTEGER NOT NULL, pid INTEGER NOT NULL, detail TEXT NOT NULL);\n" \
	"CREATE INDEX IF NOT EXISTS events_wall ON events(wall_ms);\n" \
	"CREATE VIEW IF NOT EXISTS outcome_rows AS SELECT o.wall_ms, o.at_us, d.key AS dest, k.name AS kind,\n" \
	"  o.err, o.start_us, o.conn_us, o.conn, o.latency_us, o.status\n" \
	"  FROM outcomes o JOIN dests d ON d.id = o.dest JOIN kinds k ON k.id = o.kind;\n" \
	"INSERT OR IGNORE INTO kinds VALUES (1, 'success'), (2, 'failure'), (3, 'timeout'), (4, 'rejected'),\n" \
	"  (5, 'rejected_fleet'), (6, 'rejected_cooldown');\n" \
	"INSERT OR IGNORE INTO meta VALUES ('schema', '" HIST_SCHEMA_VERSION "');\n"

#endif

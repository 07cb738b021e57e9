/* recorder.c -- netshim-agent --history FILE: every outcome and every event
 * of the table, recorded in SQLite (tools/common/histdb.h).
 *
 * The agent makes the outcome ring beside the table (policy/ocring.h),
 * says in the table's header that it reads it (a lease renewed every pass:
 * an agent killed stops the programs writing within HIST_LEASE_MS), and
 * each pass moves what the ring holds into the database in one
 * transaction. The database is in WAL mode with synchronous=NORMAL: an
 * agent killed mid-write leaves the last committed pass, at most one pass
 * (50 ms) lost. Records the ring overwrote before a pass read them (the
 * agent stopped or starved for longer than the ring holds) are counted as
 * lost in meta and said once a minute. */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../../policy/ocring.h"
#include "../common/histdb.h"
#include "../common/tablekit.h"
#include "agent.h"

#define HIST_LEASE_MS 3000
#define STUCK_MS 1000               /* a record left half-written this long: its writer died */
#define PRUNE_EVERY_MS 60000
#define LOST_LOG_MS 60000

/* A connection's own success row (NS_OC_F_OWN), kept until its first
 * request withdraws it (NS_OC_WITHDRAWN), usually within milliseconds:
 * direct-mapped by connection, an older one overwritten (its withdrawal,
 * if it comes, then finds nothing: counted in meta as own_unmatched). */
#define OWN_WAYS 4096u
struct own_row {
	uint64_t conn; /* pid << 32 | the connection's number; 0 = none */
	uint64_t conn_us;
	int64_t rowid;
};

struct hist {
	sqlite3 *db;
	sqlite3_stmt *ins_out, *ins_ev, *ins_dest, *get_dest, *del_out;
	struct own_row own[OWN_WAYS];
	uint64_t own_unmatched, own_unmatched_said;
	struct ns_table *t;
	struct ns_ocring ring;
	uint64_t keep_ms;
	uint64_t pos;               /* the next ring position to read */
	uint64_t ev_next;           /* the next event to record */
	uint64_t stuck_since;       /* mono ms the record at pos was first found unwritten, 0 = not */
	uint64_t next_prune;
	int64_t *dest_id;           /* by slot: its dests.id, 0 = not looked up yet */
	uint64_t lost, lost_said, lost_log_ms, bad;
	uint64_t err_log_ms, errs;  /* passes that could not write (a full disk): said once a minute */
};

#define ERR_LOG_MS 60000

/* A pass that could not write (a full disk, a read-only file): said at
 * once, then at most once a minute with how many failed meanwhile; what
 * those passes read from the ring is lost (counted in meta when it can be
 * written again). */
static void pass_failed(struct hist *h, uint64_t now, const char *e)
{
	h->errs++;
	if (h->err_log_ms && now < h->err_log_ms + ERR_LOG_MS)
		return;
	if (h->errs > 1)
		ag_log("history: %s (%llu passes could not write since the last word of it; their outcomes are lost)",
		       e, (unsigned long long)h->errs);
	else
		ag_log("history: %s (their outcomes are lost; said again at most once a minute)", e);
	h->err_log_ms = now;
	h->errs = 0;
}

static int exec(sqlite3 *db, const char *sql, char *err, size_t len)
{
	char *m = NULL;

	if (sqlite3_exec(db, sql, NULL, NULL, &m) == SQLITE_OK)
		return 0;
	snprintf(err, len, "%s", m ? m : sqlite3_errmsg(db));
	sqlite3_free(m);
	return -1;
}

static int prep(struct hist *h, const char *sql, sqlite3_stmt **st, char *err, size_t len)
{
	if (sqlite3_prepare_v3(h->db, sql, -1, SQLITE_PREPARE_PERSISTENT, st, NULL) == SQLITE_OK)
		return 0;
	snprintf(err, len, "%s", sqlite3_errmsg(h->db));
	return -1;
}

static void set_meta(struct hist *h, const char *key, const char *val)
{
	sqlite3_stmt *st;

	if (sqlite3_prepare_v2(h->db, "INSERT OR REPLACE INTO meta VALUES (?, ?)", -1, &st, NULL) != SQLITE_OK)
		return;
	sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, val, -1, SQLITE_TRANSIENT);
	sqlite3_step(st);
	sqlite3_finalize(st);
}

void ag_hist_close(struct hist *h)
{
	if (!h)
		return;
	if (h->t->hdr)
		__atomic_store_n(&h->t->hdr->hist_until_ms, 0, __ATOMIC_RELEASE);
	sqlite3_finalize(h->ins_out);
	sqlite3_finalize(h->ins_ev);
	sqlite3_finalize(h->ins_dest);
	sqlite3_finalize(h->get_dest);
	sqlite3_finalize(h->del_out);
	sqlite3_close(h->db);
	ns_ocring_close(&h->ring);
	free(h->dest_id);
	free(h);
}

/* The history is every destination this user's programs reached, with
 * times: a private file (0600, with its WAL and shared-memory files) in a
 * private directory, made so (0700) when missing. A directory others may
 * write (/tmp) is refused: another user could put a file of theirs there
 * first, or replace it. */
static int private_file(const char *file, char *err, size_t len)
{
	char dbuf[320], side[340];
	struct stat st;
	const char *dir;
	int fd;

	snprintf(dbuf, sizeof(dbuf), "%s", file);
	dir = dirname(dbuf);
	if (lstat(dir, &st) < 0 && errno == ENOENT && mkdir(dir, 0700) < 0) {
		snprintf(err, len, "%s: cannot make its directory %s: %s", file, dir, strerror(errno));
		return -1;
	}
	if (stat(dir, &st) < 0 || !S_ISDIR(st.st_mode)) {
		snprintf(err, len, "%s: %s is not a directory", file, dir);
		return -1;
	}
	if ((st.st_uid != geteuid() && st.st_uid != 0) || (st.st_mode & 0022)) {
		snprintf(err, len, "%s: its directory %s is writable by others or not yours (uid %u, mode %03o), refused: "
			 "another user could make or replace the file; use a private directory (for example "
			 "/var/lib/netshim as root, ~/.local/state/netshim)", file, dir, (unsigned)st.st_uid,
			 (unsigned)(st.st_mode & 07777));
		return -1;
	}
	fd = open(file, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0 || fstat(fd, &st) < 0) {
		snprintf(err, len, "%s: cannot open: %s", file, strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	if (st.st_uid != geteuid()) {
		snprintf(err, len, "%s: owned by another user (uid %u), refused: remove it (as its owner or root) or "
			 "name another file", file, (unsigned)st.st_uid);
		close(fd);
		return -1;
	}
	if ((st.st_mode & 077) && fchmod(fd, 0600) == 0)
		ag_log("history %s: was readable by others (mode %03o), now 0600", file, (unsigned)(st.st_mode & 0777));
	close(fd);
	/* SQLite makes these with the database's mode; ones left from before
	 * are made private too */
	for (int i = 0; i < 2; i++) {
		snprintf(side, sizeof(side), "%s%s", file, i ? "-shm" : "-wal");
		if (lstat(side, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid() && (st.st_mode & 077))
			chmod(side, 0600);
	}
	return 0;
}

struct hist *ag_hist_open(const char *file, struct ns_table *t, uint64_t keep_ms, uint32_t ring_cap, char *err,
		       size_t len)
{
	struct hist *h = calloc(1, sizeof(*h));
	char path[320], e2[NS_ERRBUF];

	if (!h || !(h->dest_id = calloc(t->nslots, sizeof(*h->dest_id)))) {
		snprintf(err, len, "out of memory");
		free(h);
		return NULL;
	}
	h->t = t;
	h->keep_ms = keep_ms;
	if (private_file(file, err, len) < 0)
		goto fail;
	if (sqlite3_open_v2(file, &h->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, NULL) !=
	    SQLITE_OK) {
		snprintf(err, len, "%s: %s", file, h->db ? sqlite3_errmsg(h->db) : "cannot open");
		goto fail;
	}
	sqlite3_busy_timeout(h->db, 200);   /* a reader (shimctl) holds it a moment at most */
	if (exec(h->db, "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;", e2, sizeof(e2)) < 0 ||
	    exec(h->db, HIST_SCHEMA, e2, sizeof(e2)) < 0 ||
	    prep(h, "INSERT INTO outcomes VALUES (?,?,?,?,?,?,?,?,?,?)", &h->ins_out, e2, sizeof(e2)) < 0 ||
	    prep(h, "INSERT INTO events VALUES (?,?,?,?,?,?,?,?)", &h->ins_ev, e2, sizeof(e2)) < 0 ||
	    prep(h, "INSERT OR IGNORE INTO dests(key) VALUES (?)", &h->ins_dest, e2, sizeof(e2)) < 0 ||
	    prep(h, "SELECT id FROM dests WHERE key = ?", &h->get_dest, e2, sizeof(e2)) < 0 ||
	    prep(h, "DELETE FROM outcomes WHERE rowid = ?", &h->del_out, e2, sizeof(e2)) < 0) {
		snprintf(err, len, "%s: %s", file, e2);
		goto fail;
	}
	{
		/* the table it records, and what a reader needs to check it */
		char lostbuf[32];

		set_meta(h, "table", t->path);
		snprintf(lostbuf, sizeof(lostbuf), "%u", ring_cap);
		set_meta(h, "ring_records", lostbuf);
	}
	if (ns_ocring_path(t->path, path, sizeof(path)) < 0 || ns_ocring_create(path, ring_cap, e2, sizeof(e2)) < 0 ||
	    ns_ocring_open(path, &h->ring, e2, sizeof(e2)) < 0) {
		snprintf(err, len, "outcome ring: %s", e2);
		goto fail;
	}
	h->ev_next = ns_table_event_head(t);
	/* the programs map the new ring at their next outcome */
	__atomic_fetch_add(&t->hdr->hist_gen, 1, __ATOMIC_ACQ_REL);
	__atomic_store_n(&t->hdr->hist_until_ms, ctl_mono_ms() + HIST_LEASE_MS, __ATOMIC_RELEASE);
	return h;
fail:
	ag_hist_close(h);
	return NULL;
}

/* dests.id of slot's destination: looked up once a slot. */
static int64_t dest_of(struct hist *h, uint32_t slot)
{
	char key[NS_KEY_MAX];
	struct ns_brk b;
	uint64_t fleet;
	int64_t id = 0;

	if (slot >= h->t->nslots)
		return 0;
	if (h->dest_id[slot])
		return h->dest_id[slot];
	if (ns_table_state(h->t, (int)slot, key, sizeof(key), &b, &fleet) < 0 || !key[0])
		return 0;
	sqlite3_bind_text(h->ins_dest, 1, key, -1, SQLITE_STATIC);
	sqlite3_step(h->ins_dest);
	sqlite3_reset(h->ins_dest);
	sqlite3_bind_text(h->get_dest, 1, key, -1, SQLITE_STATIC);
	if (sqlite3_step(h->get_dest) == SQLITE_ROW)
		id = sqlite3_column_int64(h->get_dest, 0);
	sqlite3_reset(h->get_dest);
	h->dest_id[slot] = id;
	return id;
}

static struct own_row *own_way(struct hist *h, uint64_t conn)
{
	return &h->own[(conn ^ conn >> 32) * 0x9e3779b97f4a7c15ULL >> 52 & (OWN_WAYS - 1)];
}

/* A connection's own success taken back by its first request: its row
 * goes, as the table took it back. */
static void withdraw(struct hist *h, const struct ns_ocrec *r)
{
	uint64_t conn = r->conn ? (uint64_t)r->pid << 32 | r->conn : 0;
	struct own_row *w = own_way(h, conn);

	if (!conn || w->conn != conn || w->conn_us != r->conn_us) {
		h->own_unmatched++;
		return;
	}
	sqlite3_bind_int64(h->del_out, 1, w->rowid);
	sqlite3_step(h->del_out);
	sqlite3_reset(h->del_out);
	w->conn = 0;
}

static void put_outcome(struct hist *h, const struct ns_ocrec *r)
{
	int64_t dest = r->kind >= NS_OC_SUCCESS && r->kind <= NS_OC_KIND_MAX ? dest_of(h, r->slot) : 0;
	sqlite3_stmt *s = h->ins_out;

	if (r->kind == NS_OC_WITHDRAWN) {
		withdraw(h, r);
		return;
	}
	if (!dest) {
		h->bad++;   /* (a record mixed by two writers a ring apart, or a slot never written) */
		return;
	}
	sqlite3_bind_int64(s, 1, (sqlite3_int64)r->wall_ms);
	sqlite3_bind_int64(s, 2, (sqlite3_int64)r->at_us);
	sqlite3_bind_int64(s, 3, dest);
	sqlite3_bind_int(s, 4, r->kind);
	sqlite3_bind_int64(s, 5, r->err);
	sqlite3_bind_int64(s, 6, (sqlite3_int64)r->start_us);
	sqlite3_bind_int64(s, 7, (sqlite3_int64)r->conn_us);
	sqlite3_bind_int64(s, 8, r->conn ? (sqlite3_int64)((uint64_t)r->pid << 32 | r->conn) : 0);
	sqlite3_bind_int64(s, 9, r->latency_us);
	sqlite3_bind_int(s, 10, r->status);
	if (sqlite3_step(s) == SQLITE_DONE && (r->flags & NS_OC_F_OWN) && r->conn) {
		struct own_row *w = own_way(h, (uint64_t)r->pid << 32 | r->conn);

		w->conn = (uint64_t)r->pid << 32 | r->conn;
		w->conn_us = r->conn_us;
		w->rowid = sqlite3_last_insert_rowid(h->db);
	}
	sqlite3_reset(s);
}

/* The ring, from where the last pass stopped. */
static void drain_ring(struct hist *h, uint64_t now)
{
	uint64_t head = ns_ocring_head(&h->ring);
	struct ns_ocrec r;

	if (head - h->pos > h->ring.cap) {
		h->lost += head - h->pos - h->ring.cap;
		h->pos = head - h->ring.cap;
	}
	while (h->pos < head) {
		int k = ns_ocring_get(&h->ring, h->pos, &r);

		if (k == 1) {
			/* being written now, or its writer died in the middle */
			if (!h->stuck_since)
				h->stuck_since = now;
			if (now < h->stuck_since + STUCK_MS)
				break;
			k = -1;
		}
		h->stuck_since = 0;
		if (k == 0)
			put_outcome(h, &r);
		else
			h->lost++;
		h->pos++;
	}
}

/* The table's events: the breakers' transitions, resets, faults. */
static void drain_events(struct hist *h, uint64_t now)
{
	uint64_t head = ns_table_event_head(h->t), wall = ctl_wall_ms();
	int64_t off_us = (int64_t)wall * 1000 - (int64_t)now * 1000;   /* wall - mono, this machine */
	struct ns_evrec ev;
	sqlite3_stmt *s = h->ins_ev;

	if (head > h->t->ev_cap && h->ev_next < head - h->t->ev_cap)
		h->ev_next = head - h->t->ev_cap;
	for (; h->ev_next < head; h->ev_next++) {
		if (ns_table_event_read(h->t, h->ev_next, &ev) < 0) {
			if (h->ev_next + 1 == head)
				break;   /* being written: next pass */
			continue;
		}
		ev.dest[sizeof(ev.dest) - 1] = '\0';
		ev.detail[sizeof(ev.detail) - 1] = '\0';
		sqlite3_bind_int64(s, 1, (sqlite3_int64)ev.wall_ms);
		sqlite3_bind_int64(s, 2, (sqlite3_int64)ev.wall_ms * 1000 - off_us);
		sqlite3_bind_text(s, 3, ev.dest, -1, SQLITE_STATIC);
		sqlite3_bind_text(s, 4, ns_event_name(ev.type), -1, SQLITE_STATIC);
		sqlite3_bind_text(s, 5, ev.type == NS_E_OPENED || ev.type == NS_E_REOPENED || ev.type == NS_E_SHADOW_OPENED ?
				  ns_rule_name((int)ev.rule) : "", -1, SQLITE_STATIC);
		sqlite3_bind_int64(s, 6, ev.err);
		sqlite3_bind_int64(s, 7, ev.pid);
		sqlite3_bind_text(s, 8, ev.detail, -1, SQLITE_STATIC);
		sqlite3_step(s);
		sqlite3_reset(s);
	}
}

void ag_hist_pass(struct hist *h, uint64_t now)
{
	char e[256], buf[32];

	__atomic_store_n(&h->t->hdr->hist_until_ms, now + HIST_LEASE_MS, __ATOMIC_RELEASE);
	if (exec(h->db, "BEGIN", e, sizeof(e)) < 0) {
		pass_failed(h, now, e);
		return;
	}
	drain_events(h, now);
	drain_ring(h, now);
	if (now >= h->next_prune) {
		sqlite3_stmt *st;
		int64_t before = (int64_t)ctl_wall_ms() - (int64_t)h->keep_ms;

		h->next_prune = now + PRUNE_EVERY_MS;
		for (int i = 0; i < 2; i++) {
			if (sqlite3_prepare_v2(h->db, i ? "DELETE FROM events WHERE wall_ms < ?" :
					       "DELETE FROM outcomes WHERE wall_ms < ?", -1, &st, NULL) != SQLITE_OK)
				continue;
			sqlite3_bind_int64(st, 1, before);
			sqlite3_step(st);
			sqlite3_finalize(st);
		}
	}
	if (h->lost != h->lost_said) {
		snprintf(buf, sizeof(buf), "%llu", (unsigned long long)h->lost);
		set_meta(h, "lost", buf);
	}
	if (h->own_unmatched != h->own_unmatched_said) {
		snprintf(buf, sizeof(buf), "%llu", (unsigned long long)h->own_unmatched);
		set_meta(h, "own_unmatched", buf);
		h->own_unmatched_said = h->own_unmatched;
	}
	if (exec(h->db, "COMMIT", e, sizeof(e)) < 0) {
		pass_failed(h, now, e);
		exec(h->db, "ROLLBACK", e, sizeof(e));
		return;
	}
	if (h->lost != h->lost_said && now >= h->lost_log_ms + LOST_LOG_MS) {
		ag_log("history: %llu outcomes lost (the ring of %u overran between passes)",
		       (unsigned long long)(h->lost - h->lost_said), h->ring.cap);
		h->lost_said = h->lost;
		h->lost_log_ms = now;
	}
}

/* lease.c -- limits for the fleet: fleet_max_requests, fleet_max_connections
 * and fleet_rate, a limit for every machine together (docs/fleet.md,
 * "Limits for the fleet"; youtube/doorman's leases, max-min fair).
 *
 * Each pass, for each destination of the table that the policy (the one
 * the programs read) gives a fleet limit, the agent reports this machine's
 * demand (places held + waiting; rate: tokens taken, doubled while some
 * waited) and asks one Redis script, atomically per destination and limit,
 * for its share: max-min fair over the live machines' demands (what no one
 * demands is split evenly), but grown only out of capacity the others do
 * not hold, so the shares published never sum above the limit, counting
 * those being handed over (a machine publishes at least what it still has
 * in flight, up to its old share, until it has let it go). The share is
 * written into the table with the lease's end (ag_lease_ms()); both
 * engines keep to it as to a local limit, and no program waits on Redis.
 *
 * Faults: Redis unreachable: each machine keeps min(its last share, the
 * limit over the machines last seen), said once; an agent gone: its entry
 * in Redis lapses with its lease and the others take its share, and its
 * own table's share lapses as soon (nothing starts there without a new
 * lease). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <hiredis/hiredis.h>

#include "../../policy/policy.h"
#include "agentstate.h"

/* KEYS[1] a destination's limit; ARGV: node, the whole (its policy's),
 * its demand, the lease (ms), what it holds now (in flight; rate: the
 * share in force). Each entry: "share demand expiry(Redis ms) whole".
 * Machines whose policies disagree share the smallest whole. Returns {the
 * share to keep to, the share published, the live machines, the whole}. */
static const char SCRIPT[] =
	"local node, whole, demand = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])\n"
	"local lease, inuse = tonumber(ARGV[4]), tonumber(ARGV[5])\n"
	"local mywhole = whole\n"
	"local t = redis.call('TIME')\n"
	"local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
	"local h = redis.call('HGETALL', KEYS[1])\n"
	"local d, others, old = {}, 0, 0\n"
	"for i = 1, #h, 2 do\n"
	"  local s, w, e, l = string.match(h[i + 1], '^(%d+) (%d+) (%d+) (%d+)$')\n"
	"  if not s or tonumber(e) <= now then\n"
	"    redis.call('HDEL', KEYS[1], h[i])\n"
	"  elseif h[i] == node then\n"
	"    old = tonumber(s)\n"
	"  else\n"
	"    others = others + tonumber(s)\n"
	"    d[#d + 1] = tonumber(w)\n"
	"    if tonumber(l) < whole then whole = tonumber(l) end\n"
	"  end\n"
	"end\n"
	"d[#d + 1] = demand\n"
	"local live = #d\n"
	"table.sort(d)\n"
	"local left, level = whole, nil\n"
	"for i = 1, live do\n"
	"  local n = live - i + 1\n"
	"  if d[i] * n > left then level = math.floor(left / n) break end\n"
	"  left = left - d[i]\n"
	"end\n"
	"local target\n"
	"if level then target = math.min(demand, level) else target = demand + math.floor(left / live) end\n"
	"local free = whole - others\n"
	"if free < 0 then free = 0 end\n"
	"local mine = math.min(target, free)\n"
	"local pub = math.max(mine, math.min(inuse, old))\n"
	"redis.call('HSET', KEYS[1], node, string.format('%d %d %d %d', pub, demand, now + lease, mywhole))\n"
	"redis.call('PEXPIRE', KEYS[1], 2 * lease)\n"
	"return {mine, pub, live, whole}\n";

static const char *const KIND[3] = { "fleet_max_requests", "fleet_max_connections", "fleet_rate" };
static const uint32_t BIT[3] = { NS_FLEET_REQ, NS_FLEET_CONN, NS_FLEET_RATE };

struct fdst {
	char key[NS_KEY_MAX];
	int slot;
	uint32_t kinds;                      /* NS_FLEET_* */
	uint64_t whole[3];                   /* the policy's (rate: thousandths per hour) */
	uint64_t local[3];                   /* the share written here last */
	uint64_t held_whole[3];              /* the whole the fleet keeps to (the smallest of the machines' policies) */
	int have[3];                         /* ...one was */
	uint64_t tokens, paced, measured_ms; /* rate's demand: the counts at the last pass */
	uint64_t conn_waits;                 /* max_connections' waits, at the last pass */
	uint64_t denied[3];                  /* asks the share turned down, at the last pass */
	uint32_t live;                       /* the machines Redis last named (1 + others) */
	uint64_t gen;                        /* the policy it was resolved with */
	int seen;
	UT_hash_handle hh;
};

static struct {
	struct ns_policy pol;
	int have; /* pol loaded */
	int any;  /* some section sets a fleet key */
	uint64_t gen;
	char path[256];
	struct stat st; /* the file as loaded (reloaded when it changes) */
	int down_said;
	int was_down;       /* a pass without Redis happened since the agent started */
	uint64_t regrow_ms; /* after Redis came back: no share grows before then */
	struct fdst *d;
} L;

static int same_file(const struct stat *a, const struct stat *b)
{
	return a->st_ino == b->st_ino && a->st_dev == b->st_dev && a->st_size == b->st_size &&
		a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec;
}

/* The policy the programs read, (re)loaded when its file changed. A bad
 * one keeps the last good one (said). */
static void policy_now(void)
{
	const char *path = ns_policy_path();
	struct ns_policy p;
	struct stat st;
	char errs[1024];

	memset(&st, 0, sizeof(st));
	if (path && stat(path, &st) != 0)
		path = NULL;
	if (L.gen && (path ? strcmp(path, L.path) == 0 && same_file(&st, &L.st) : !L.path[0]))
		return;
	if ((path ? ns_policy_load(path, &p, errs, sizeof(errs)) : ns_policy_builtin(&p)) != 0) {
		if (L.gen && !L.have)
			return;
		ag_log("policy %s: not used for the fleet's limits (the last one read stays): %s", path ? path : "",
		       errs);
		snprintf(L.path, sizeof(L.path), "%s", path ? path : "");
		L.st = st;
		L.gen++;
		return;
	}
	if (L.have)
		ns_policy_free(&L.pol);
	L.pol = p;
	L.have = 1;
	L.any = 0;
	for (int i = 0; i < p.nsections; i++)
		if (p.sec[i].set &
		    (NS_KBIT(NS_K_FLEET_MAX_REQUESTS) | NS_KBIT(NS_K_FLEET_MAX_CONNECTIONS) | NS_KBIT(NS_K_FLEET_RATE)))
			L.any = 1;
	snprintf(L.path, sizeof(L.path), "%s", path ? path : "");
	L.st = st;
	L.gen++;
	if (L.any)
		ag_log("policy %s: fleet limits leased through the fleet (a share of each, every %d ms)",
		       path ? path : "(built in)", ag_state.poll_ms);
}

static struct fdst *fdst_for(const char *key, int slot)
{
	struct fdst *f;

	HASH_FIND_STR(L.d, key, f);
	if (!f) {
		if (!(f = calloc(1, sizeof(*f))))
			return NULL;
		snprintf(f->key, sizeof(f->key), "%s", key);
		HASH_ADD_STR(L.d, key, f);
	}
	f->slot = slot;
	if (f->gen != L.gen) {
		struct ns_settings set;
		struct ns_dest d;

		memset(&d, 0, sizeof(d));
		if (ns_dest_parse(key, &d) < 0)
			d.family = AF_INET;
		ns_policy_resolve(&L.pol, &d, &set, NULL);
		f->kinds = set.fleet;
		f->whole[NS_FLEET_K_REQ] = set.fleet_max_requests;
		f->whole[NS_FLEET_K_CONN] = set.fleet_max_connections;
		f->whole[NS_FLEET_K_RATE] = set.fleet_rate_mph;
		f->gen = L.gen;
	}
	return f;
}

/* This machine's demand of f's limit kind now. Requests: those in flight
 * and those waiting (the table's queue counts them all). Connections and
 * rate: in flight (tokens taken over the last pass), and when something
 * was turned down or waited since (a non-blocking connect queued in its
 * process is in no count), twice what it has, at least an even part of the
 * whole: a machine whose share is 0 asks for one. */
static uint64_t demand(struct fdst *f, int k, const struct ns_fleet_demand *dm, uint64_t now)
{
	uint64_t want, even = f->whole[k] / (f->live ? f->live : 1);
	int waited = f->measured_ms && dm->denied[k] != f->denied[k];

	if (k == NS_FLEET_K_REQ)
		return (uint64_t)dm->req_inflight + dm->req_waiting;
	if (k == NS_FLEET_K_CONN) {
		want = (uint64_t)dm->conn_inflight + dm->conn_waiting;
		waited |= f->measured_ms && dm->conn_waits != f->conn_waits;
	} else {
		uint64_t el = f->measured_ms && now > f->measured_ms ? now - f->measured_ms : 0;

		want = el ? (dm->tokens - f->tokens) * 3600000000ULL / el : 0;
		waited |= (f->measured_ms && dm->paced != f->paced) || (f->have[k] && want * 10 >= f->local[k] * 9);
	}
	if (waited) {
		want = 2 * (want > f->local[k] ? want : f->local[k]);
		if (want < even)
			want = even ? even : 1;
	}
	return want < f->whole[k] ? want : f->whole[k];
}

static void write_share(struct fdst *f, int k, uint64_t share, uint64_t expires)
{
	uint32_t *wake[2];

	if (!f->have[k] || share != f->local[k])
		ag_log("%s: %s %llu%s, this machine's share %llu (%u machine%s)", f->key, KIND[k],
		       (unsigned long long)(k == NS_FLEET_K_RATE ? f->whole[k] / 3600 : f->whole[k]),
		       k == NS_FLEET_K_RATE ? " thousandths/s" : "",
		       (unsigned long long)(k == NS_FLEET_K_RATE ? share / 3600 : share), f->live,
		       f->live == 1 ? "" : "s");
	f->local[k] = share;
	f->have[k] = 1;
	if (ns_table_fleet_write(&ag_state.t, f->slot, k, share, expires, f->live, wake) == 0 && wake[0])
		ctl_futex_wake(wake[0]);
}

/* One limit's lease from Redis: 0, or FL_DOWN/FL_REFUSED with err. */
static int lease(struct fdst *f, int k, uint64_t want, uint64_t inuse, uint64_t now, char *err, size_t len)
{
	char key[FL_PREFIX_MAX + NS_KEY_MAX + 16], whole[24], dem[24], ls[24], use[24];
	const char *argv[] = { "EVAL", SCRIPT, "1", key, ag_state.node, whole, dem, ls, use };
	redisReply *r;
	uint64_t share;
	int rc;

	ag_fleet_use(&ag_state.c, f->key);
	snprintf(key, sizeof(key), "%slease:%d:%s", ag_state.c.prefix, k, f->key);
	snprintf(whole, sizeof(whole), "%llu", (unsigned long long)f->whole[k]);
	snprintf(dem, sizeof(dem), "%llu", (unsigned long long)want);
	/* in Redis the entry stands two leases: what a machine whose agent
	 * died began before its own lease lapsed has a lease's time to end
	 * before the others may take its places */
	snprintf(ls, sizeof(ls), "%llu", (unsigned long long)(2 * ag_lease_ms()));
	snprintf(use, sizeof(use), "%llu", (unsigned long long)inuse);
	if ((rc = ag_redis_command(&ag_state.c, ag_state.c.cur, &r, err, len, 9, argv)) != FL_OK)
		return rc;
	if (r->type != REDIS_REPLY_ARRAY || r->elements != 4 || r->element[0]->type != REDIS_REPLY_INTEGER ||
	    r->element[2]->type != REDIS_REPLY_INTEGER || r->element[3]->type != REDIS_REPLY_INTEGER ||
	    r->element[0]->integer < 0 || r->element[2]->integer < 1 || r->element[3]->integer < 0) {
		snprintf(err, len, "the fleet's lease of %s: unexpected reply", f->key);
		freeReplyObject(r);
		return FL_REFUSED;
	}
	f->live = (uint32_t)r->element[2]->integer;
	if ((uint64_t)r->element[3]->integer != f->held_whole[k]) {
		if ((uint64_t)r->element[3]->integer < f->whole[k])
			ag_log("%s: %s is %llu in this machine's policy, %llu in another's: the smallest holds for "
			       "every machine (the policies differ)",
			       f->key, KIND[k], (unsigned long long)f->whole[k],
			       (unsigned long long)r->element[3]->integer);
		else if (f->held_whole[k])
			ag_log("%s: %s: the machines' policies agree again (%llu)", f->key, KIND[k],
			       (unsigned long long)f->whole[k]);
		f->held_whole[k] = (uint64_t)r->element[3]->integer;
	}
	share = (uint64_t)r->element[0]->integer;
	/* a store back from a loss holds none of what the others still have
	 * in flight until each has leased again (within a lease): till then
	 * no share grows past what this machine kept without it */
	if (now < L.regrow_ms && f->have[k] && share > f->local[k])
		share = f->local[k];
	/* (the lease runs from before the script's time: it lapses here first) */
	write_share(f, k, share, now + ag_lease_ms());
	freeReplyObject(r);
	return FL_OK;
}

int ag_lease_pass(uint64_t now, int connected, char *err, size_t len)
{
	char key[NS_KEY_MAX];
	struct ns_scan sc;
	struct fdst *f, *tmp;
	int rc = FL_OK;

	policy_now();
	if (!L.any && !L.d)
		return FL_OK;
	if (connected && L.was_down) {
		L.regrow_ms = now + ag_lease_ms();
		L.was_down = 0;
	}
	if (!connected)
		L.was_down = 1;
	HASH_ITER(hh, L.d, f, tmp) f->seen = 0;
	for (uint32_t i = ns_scan_begin(&ag_state.t, &sc); L.any && i < ag_state.t.nslots;
	     i = ns_scan_next(&ag_state.t, &sc, i + 1)) {
		struct ns_brk b;
		uint64_t until;

		if (ns_table_state(&ag_state.t, (int)i, key, sizeof(key), &b, &until) == 0 &&
		    (f = fdst_for(key, (int)i)) != NULL)
			f->seen = 1;
	}
	ns_scan_end(&sc);
	HASH_ITER(hh, L.d, f, tmp)
	{
		struct ns_fleet_demand dm;

		if (!f->seen || !f->kinds) {
			HASH_DEL(L.d, f);
			free(f);
			continue;
		}
		ns_table_fleet_demand(&ag_state.t, f->slot, &dm);
		for (int k = 0; k < 3; k++) {
			uint64_t want, inuse, live, whole;

			if (!(f->kinds & BIT[k]))
				continue;
			want = demand(f, k, &dm, now);
			inuse = k == NS_FLEET_K_REQ    ? dm.req_inflight
				: k == NS_FLEET_K_CONN ? dm.conn_inflight
						       : f->local[k];
			if (connected && rc == FL_OK) {
				rc = lease(f, k, want, inuse, now, err, len);
				if (rc == FL_OK)
					continue;
			}
			/* no Redis: the last share, at most the limit over the
			 * machines last seen (none yet: that of one of them) */
			live = f->live ? f->live : 1;
			whole = f->held_whole[k] && f->held_whole[k] < f->whole[k] ? f->held_whole[k] : f->whole[k];
			if (!L.down_said) {
				ag_log("redis unreachable: each fleet limit kept at min(this machine's last share, the "
				       "limit / the machines last seen) until it is back");
				L.down_said = 1;
			}
			write_share(f, k, f->have[k] && f->local[k] < whole / live ? f->local[k] : whole / live,
				    now + ag_lease_ms());
		}
		f->tokens = dm.tokens;
		f->paced = dm.paced;
		f->conn_waits = dm.conn_waits;
		memcpy(f->denied, dm.denied, sizeof(f->denied));
		f->measured_ms = now;
	}
	if (connected && rc == FL_OK && L.down_said) {
		ag_log("redis back: fleet limits leased again");
		L.down_said = 0;
	}
	return rc;
}

void ag_lease_stop(void)
{
	struct fdst *f, *tmp;
	char err[160];

	HASH_ITER(hh, L.d, f, tmp)
	{
		for (int k = 0; k < 3; k++) {
			uint32_t *wake[2];

			if (!(f->kinds & BIT[k]))
				continue;
			if (ag_state.connected) {
				char rk[FL_PREFIX_MAX + NS_KEY_MAX + 16];
				const char *argv[] = { "HDEL", rk, ag_state.node };
				redisReply *r;

				ag_fleet_use(&ag_state.c, f->key);
				snprintf(rk, sizeof(rk), "%slease:%d:%s", ag_state.c.prefix, k, f->key);
				if (ag_redis_command(&ag_state.c, ag_state.c.cur, &r, err, sizeof(err), 3, argv) ==
				    FL_OK)
					freeReplyObject(r);
			}
			/* handed back: nothing starts here until an agent leases again */
			ns_table_fleet_write(&ag_state.t, f->slot, k, f->local[k], ctl_mono_ms(), f->live, wake);
		}
		HASH_DEL(L.d, f);
		free(f);
	}
	if (L.have)
		ns_policy_free(&L.pol);
	L.have = 0;
}

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
 * limit over the machines last seen; none known: 0), said once; an agent
 * gone: its entry in Redis lapses with its lease and the others take its
 * share, and its own table's share lapses as soon (nothing starts there
 * without a new lease). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <hiredis/hiredis.h>

#include "../../policy/hash.h" /* (before uthash: its hash function) */
#include "../../policy/policy.h"
#include "agentstate.h"

/* One script a shard, each pass: for each of this machine's destinations
 * and limits (KEYS: its entries H, its sums M, its expiries Z, three a
 * limit; ARGV: node, lease (ms), poll (ms), mend, then whole, demand, in
 * use, three a limit), atomically:
 *   H: node -> "share demand expiry(Redis ms) whole"; Z: node by expiry;
 *   M: sum (the shares published), the machines by demand ("d:DEMAND" ->
 *      how many) and by whole ("w:WHOLE" -> how many), kept as entries
 *      come, change and lapse, with dsum (their sum) and n (the machines);
 *      level, left, live, whole and wmax (the
 *      smallest and the largest of the machines'), at (when level was
 *      counted), new (a machine came since), full (when M was last made
 *      again from every entry: every 5 minutes, and at most once a poll
 *      while ARGV's mend is 1 (an agent back from a loss: what a lost write
 *      of a failover left is mended)).
 * The lapsed are taken out (their shares off the sum); the max-min level
 * is counted again at most once a poll (by whichever machine finds it
 * old) over the demands' counts, not the machines: a pass over at most
 * ~1,025 distinct demands (a demand is rounded up to a 1,024th of the
 * limit when the limit is larger), however many machines; a machine's
 * share is min(the level (or its demand and an even part of what no one
 * asks for: the whole less every demand, as it stands at the call), the
 * whole less the others' shares),
 * and it publishes at least what it holds in flight up to its old share.
 * A machine new to the limit, or one whose demand fell below its share
 * (`fell`: its programs ended), has the level counted at once, or by the
 * first call a quarter poll after the last count (M's `new`): the others
 * shrink (or grow) to it at their next lease, not a poll later. Returns, a limit:
 * {share to keep to, share published, machines, whole, the share it
 * would have were all released, the largest whole}. */
static const char SCRIPT[] =
	"local node, lease, poll, mend = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4] == '1'\n"
	"local t = redis.call('TIME')\n"
	"local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
	"local out = {}\n"
	"local function share_of(v)\n"
	"  if not v then return nil end\n"
	"  local s, w, e, l = string.match(v, '^(%d+) (%d+) (%d+) (%d+)$')\n"
	"  if not s then return nil end\n"
	"  return tonumber(s), tonumber(w), tonumber(e), tonumber(l)\n"
	"end\n"
	"local function hist(M, f, v, by)\n"
	"  if redis.call('HINCRBY', M, f .. v, by) <= 0 then redis.call('HDEL', M, f .. v) end\n"
	"end\n"
	"for i = 0, #KEYS / 3 - 1 do\n"
	"  local H, M, Z = KEYS[3 * i + 1], KEYS[3 * i + 2], KEYS[3 * i + 3]\n"
	"  local whole, demand, inuse = tonumber(ARGV[5 + 3 * i]), tonumber(ARGV[6 + 3 * i]), tonumber(ARGV[7 + 3 * i])\n"
	"  local g = math.ceil(whole / 1024)\n"
	"  if g > 1 then demand = math.min(whole, math.ceil(demand / g) * g) end\n"
	"  local m = redis.call('HMGET', M, 'sum', 'level', 'left', 'live', 'whole', 'at', 'new', 'wmax', 'full', 'dsum', 'n')\n"
	"  local sum, dsum, nl = tonumber(m[1] or '') or 0, tonumber(m[10] or '') or 0, tonumber(m[11] or '') or 0\n"
	"  if not m[9] or now - tonumber(m[9]) >= 300000 or (mend and now - tonumber(m[9]) >= poll) then\n"
	"    local f = redis.call('HKEYS', M)\n"
	"    for j = 1, #f do\n"
	"      if string.match(f[j], '^[dw]:') then redis.call('HDEL', M, f[j]) end\n"
	"    end\n"
	"    local h, c, kv = redis.call('HGETALL', H), {}, {'full', now}\n"
	"    sum, dsum, nl = 0, 0, 0\n"
	"    for j = 1, #h, 2 do\n"
	"      local s, w, e, l = share_of(h[j + 1])\n"
	"      if not s then\n"
	"        redis.call('HDEL', H, h[j])\n"
	"        redis.call('ZREM', Z, h[j])\n"
	"      else\n"
	"        sum, dsum, nl = sum + s, dsum + w, nl + 1\n"
	"        c['d:' .. w] = (c['d:' .. w] or 0) + 1\n"
	"        c['w:' .. l] = (c['w:' .. l] or 0) + 1\n"
	"      end\n"
	"    end\n"
	"    for k, n in pairs(c) do\n"
	"      kv[#kv + 1] = k\n"
	"      kv[#kv + 1] = n\n"
	"      if #kv >= 1000 then\n"
	"        redis.call('HSET', M, unpack(kv))\n"
	"        kv = {'full', now}\n"
	"      end\n"
	"    end\n"
	"    redis.call('HSET', M, unpack(kv))\n"
	"    m[6] = nil\n"
	"  end\n"
	"  for _, n in ipairs(redis.call('ZRANGEBYSCORE', Z, '-inf', now)) do\n"
	"    local s, w, e, l = share_of(redis.call('HGET', H, n))\n"
	"    if s then\n"
	"      sum, dsum, nl = sum - s, dsum - w, nl - 1\n"
	"      hist(M, 'd:', w, -1)\n"
	"      hist(M, 'w:', l, -1)\n"
	"    end\n"
	"    redis.call('HDEL', H, n)\n"
	"    redis.call('ZREM', Z, n)\n"
	"  end\n"
	"  local old, oldw, _, oldl = share_of(redis.call('HGET', H, node))\n"
	"  old = old or 0\n"
	"  local fell = oldw and demand < oldw and demand < old\n"
	"  if oldw ~= demand or oldl ~= whole then\n"
	"    if oldw then\n"
	"      dsum, nl = dsum - oldw, nl - 1\n"
	"      hist(M, 'd:', oldw, -1)\n"
	"      hist(M, 'w:', oldl, -1)\n"
	"    end\n"
	"    dsum, nl = dsum + demand, nl + 1\n"
	"    hist(M, 'd:', demand, 1)\n"
	"    hist(M, 'w:', whole, 1)\n"
	"  end\n"
	"  local level, left, live, fw = tonumber(m[2] or ''), tonumber(m[3] or ''), tonumber(m[4] or ''), tonumber(m[5] or '')\n"
	"  local fx = tonumber(m[8] or '') or whole\n"
	"  if not level or not left or not live or not fw or not m[6] or now - tonumber(m[6]) >= poll or fw > whole\n"
	"     or ((not oldw or fell or m[7]) and now - tonumber(m[6]) >= poll / 4) then\n"
	"    local f, ds = redis.call('HGETALL', M), {}\n"
	"    fw, fx, live = whole, whole, 0\n"
	"    for j = 1, #f, 2 do\n"
	"      local c, x = string.match(f[j], '^([dw]):(%d+)$')\n"
	"      local n = tonumber(f[j + 1])\n"
	"      if c and n and n > 0 then\n"
	"        x = tonumber(x)\n"
	"        if c == 'd' then\n"
	"          ds[#ds + 1] = {x, n}\n"
	"          live = live + n\n"
	"        else\n"
	"          if x < fw then fw = x end\n"
	"          if x > fx then fx = x end\n"
	"        end\n"
	"      end\n"
	"    end\n"
	"    if live < 1 then live = 1 end\n"
	"    table.sort(ds, function(a, b) return a[1] < b[1] end)\n"
	"    left, level = fw, -1\n"
	"    local n = live\n"
	"    for j = 1, #ds do\n"
	"      if ds[j][1] * n > left then level = math.floor(left / n) break end\n"
	"      left = left - ds[j][1] * ds[j][2]\n"
	"      n = n - ds[j][2]\n"
	"    end\n"
	"    if left < 0 then left = 0 end\n"
	"    redis.call('HSET', M, 'level', level, 'left', left, 'live', live, 'whole', fw, 'at', now, 'wmax', fx)\n"
	"    redis.call('HDEL', M, 'new')\n"
	"  else\n"
	"    if not oldw or fell then redis.call('HSET', M, 'new', 1) end\n"
	"    live = math.max(1, nl)\n"
	"    if level < 0 then left = math.max(0, fw - dsum) end\n"
	"  end\n"
	"  local target\n"
	"  if level >= 0 then target = math.min(demand, level) else target = demand + math.floor(left / live) end\n"
	"  local free = fw - (sum - old)\n"
	"  if free < 0 then free = 0 end\n"
	"  local mine = math.min(target, free)\n"
	"  local pub = math.max(mine, math.min(inuse, old))\n"
	"  redis.call('HSET', H, node, string.format('%d %d %d %d', pub, demand, now + lease, whole))\n"
	"  redis.call('ZADD', Z, now + lease, node)\n"
	"  redis.call('HSET', M, 'sum', sum - old + pub, 'dsum', dsum, 'n', nl)\n"
	"  for _, k in ipairs({H, M, Z}) do redis.call('PEXPIRE', k, 2 * lease) end\n"
	"  if whole > fx then fx = whole end\n"
	"  out[#out + 1] = {mine, pub, live, fw, target, fx}\n"
	"end\n"
	"return out\n";

struct fdst {
	char key[NS_KEY_MAX];
	int slot;
	uint32_t kinds;                      /* NS_FLEET_* */
	uint64_t whole[3];                   /* the policy's (rate: thousandths per hour) */
	uint64_t local[3];                   /* the share written here last */
	uint64_t held_whole[3];              /* the whole the fleet keeps to (the smallest of the machines' policies) */
	uint64_t pub[3];                     /* the share Redis holds for this machine (>= local while it lets go) */
	uint64_t want[3];                    /* the demand reported last */
	uint64_t target[3];                  /* the share it would have were all released */
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
	int again_said;     /* a lease met a slot being moved (TRYAGAIN), said */
	int was_down;       /* a pass without Redis happened since the agent started */
	uint64_t regrow_ms; /* after Redis came back: no share grows before then */
	uint64_t last_ms;   /* the last lease Redis answered */
	uint64_t early_ms;  /* the last lease between polls */
	uint32_t live_seen; /* the most machines a lease last named, of any destination */
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
		for (int k = 0; k < 3; k++)
			f->whole[k] = ns_fleet_limit(&set, k);
		f->gen = L.gen;
	}
	return f;
}

/* Requests (k NS_FLEET_K_REQ) or connections in flight and waiting. */
static uint64_t asked(int k, const struct ns_fleet_demand *dm)
{
	return k == NS_FLEET_K_REQ ? (uint64_t)dm->req_inflight + dm->req_waiting
				   : (uint64_t)dm->conn_inflight + dm->conn_waiting;
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
		return asked(k, dm);
	if (k == NS_FLEET_K_CONN) {
		want = asked(k, dm);
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

/* What this machine holds of f's limit kind now: its requests or
 * connections in flight; of a rate, its share (a token is not held). */
static uint64_t in_use(const struct fdst *f, int k, const struct ns_fleet_demand *dm)
{
	return k == NS_FLEET_K_REQ ? dm->req_inflight : k == NS_FLEET_K_CONN ? dm->conn_inflight : f->local[k];
}

/* ...what it may hold by the time its lease is answered: more may start
 * under the share written here until a smaller one is, so a share is let
 * go only at the lease after the smaller one was written and what was in
 * flight beyond it ended (reported as less, a share published below what
 * was in flight let another machine grow into it: 13 in flight under 12,
 * seen once under ASan) */
static uint64_t may_hold(const struct fdst *f, int k, const struct ns_fleet_demand *dm)
{
	uint64_t n = in_use(f, k, dm);

	return f->have[k] && f->local[k] > n ? f->local[k] : n;
}

/* The limit the fleet keeps to: the smallest of the machines' policies,
 * once Redis said it, else this machine's own. */
static uint64_t whole_of(const struct fdst *f, int k)
{
	return f->held_whole[k] && f->held_whole[k] < f->whole[k] ? f->held_whole[k] : f->whole[k];
}

static void write_share(struct fdst *f, int k, uint64_t share, uint64_t expires)
{
	uint32_t *wake;

	if ((!f->have[k] || share != f->local[k]) && k == NS_FLEET_K_RATE) /* (thousandths an hour) */
		ag_log("%s: %s %.3f/s, this machine's share %.3f/s (%u machine%s)", f->key,
		       ns_key_names[NS_FLEET_KEY(k)], (double)f->whole[k] / 3600000.0, (double)share / 3600000.0,
		       f->live, f->live == 1 ? "" : "s");
	else if (!f->have[k] || share != f->local[k])
		ag_log("%s: %s %llu, this machine's share %llu (%u machine%s)", f->key, ns_key_names[NS_FLEET_KEY(k)],
		       (unsigned long long)f->whole[k], (unsigned long long)share, f->live, f->live == 1 ? "" : "s");
	f->local[k] = share;
	f->have[k] = 1;
	if (ns_table_fleet_write(&ag_state.t, f->slot, k, share, whole_of(f, k), expires, f->live, &wake) == 0)
		ctl_futex_wake(wake);
}

/* One limit of one destination this pass: its demand and what it holds. */
struct item {
	struct fdst *f;
	int k;
	uint64_t want, inuse;
};

/* A limit's share as Redis answered (r: {mine, published, live, whole}). */
static int take_reply(const struct item *it, const redisReply *r, uint64_t now)
{
	struct fdst *f = it->f;
	int k = it->k;
	uint64_t share, whole;

	if (r->type != REDIS_REPLY_ARRAY || r->elements != 6)
		return -1;
	for (int j = 0; j < 6; j++)
		if (r->element[j]->type != REDIS_REPLY_INTEGER || r->element[j]->integer < 0)
			return -1;
	if (r->element[2]->integer < 1)
		return -1;
	f->live = (uint32_t)r->element[2]->integer;
	if (f->live > L.live_seen)
		L.live_seen = f->live;
	whole = (uint64_t)r->element[3]->integer;
	if (whole != f->held_whole[k]) {
		if (whole < f->whole[k])
			ag_log("%s: %s is %llu in this machine's policy, %llu in another's: the smallest holds for "
			       "every machine (the policies differ)",
			       f->key, ns_key_names[NS_FLEET_KEY(k)], (unsigned long long)f->whole[k],
			       (unsigned long long)whole);
		else if (f->held_whole[k])
			ag_log("%s: %s: the machines' policies agree again (%llu)", f->key,
			       ns_key_names[NS_FLEET_KEY(k)], (unsigned long long)f->whole[k]);
		f->held_whole[k] = whole;
	}
	share = (uint64_t)r->element[0]->integer;
	f->pub[k] = (uint64_t)r->element[1]->integer;
	f->target[k] = (uint64_t)r->element[4]->integer;
	f->want[k] = it->want;
	ns_table_fleet_largest(&ag_state.t, f->slot, k, (uint64_t)r->element[5]->integer);
	/* a store back from a loss holds none of what the others still have
	 * in flight until each has leased again (within a lease): till then
	 * no share grows past what this machine kept without it */
	if (now < L.regrow_ms && f->have[k] && share > f->local[k])
		share = f->local[k];
	/* (the lease runs from before the script's time: it lapses here first) */
	write_share(f, k, share, now + ag_lease_ms());
	return 0;
}

/* The leases of one shard's items (one command): 0, or FL_DOWN/FL_REFUSED
 * with err (those items not leased). */
static int lease_shard(struct item *it, int n, uint64_t now, char *err, size_t len)
{
	int argc = 7 + 6 * n, rc = FL_OK;
	const char **argv = calloc((size_t)argc, sizeof(*argv));
	char *buf = calloc((size_t)n, 3 * (FL_PREFIX_MAX + NS_KEY_MAX + 16) + 3 * 24), nk[16], ls[24], pl[24];
	redisReply *r = NULL;

	if (!argv || !buf) {
		free(argv);
		free(buf);
		snprintf(err, len, "out of memory");
		return FL_REFUSED;
	}
	snprintf(nk, sizeof(nk), "%d", 3 * n);
	/* in Redis an entry stands two leases: what a machine whose agent
	 * died began before its own lease lapsed has a lease's time to end
	 * before the others may take its places */
	snprintf(ls, sizeof(ls), "%llu", (unsigned long long)(2 * ag_lease_ms()));
	snprintf(pl, sizeof(pl), "%d", ag_state.poll_ms);
	argv[0] = "EVAL";
	argv[1] = SCRIPT;
	argv[2] = nk;
	argv[3 + 3 * n] = ag_state.node;
	argv[4 + 3 * n] = ls;
	argv[5 + 3 * n] = pl;
	/* back from a loss (a failover may have lost writes): the counts are
	 * made again from the entries, at most once a poll */
	argv[6 + 3 * n] = now < L.regrow_ms ? "1" : "0";
	ag_fleet_use(&ag_state.c, it[0].f->key);
	for (int i = 0; i < n; i++) {
		char *b = buf + (size_t)i * (3 * (FL_PREFIX_MAX + NS_KEY_MAX + 16) + 3 * 24);
		size_t kl = FL_PREFIX_MAX + NS_KEY_MAX + 16;
		static const char *const part[3] = { "lease", "leasem", "leasex" };

		for (int j = 0; j < 3; j++) {
			snprintf(b + j * kl, kl, "%s%s:%d:%s", ag_state.c.prefix, part[j], it[i].k, it[i].f->key);
			argv[3 + 3 * i + j] = b + j * kl;
		}
		b += 3 * kl;
		snprintf(b, 24, "%llu", (unsigned long long)it[i].f->whole[it[i].k]);
		snprintf(b + 24, 24, "%llu", (unsigned long long)it[i].want);
		snprintf(b + 48, 24, "%llu", (unsigned long long)it[i].inuse);
		argv[7 + 3 * n + 3 * i] = b;
		argv[8 + 3 * n + 3 * i] = b + 24;
		argv[9 + 3 * n + 3 * i] = b + 48;
	}
	rc = ag_redis_command(&ag_state.c, ag_state.c.cur, &r, err, len, argc, argv);
	if (rc == FL_OK) {
		if (r->type != REDIS_REPLY_ARRAY || r->elements != (size_t)n)
			rc = FL_REFUSED;
		for (int i = 0; rc == FL_OK && i < n; i++)
			if (take_reply(&it[i], r->element[i], now) < 0)
				rc = FL_REFUSED;
		if (rc != FL_OK)
			snprintf(err, len, "the fleet's leases: unexpected reply");
		freeReplyObject(r);
	}
	free(argv);
	free(buf);
	return rc;
}

/* No lease from Redis: the last share, at most the limit over the machines
 * last seen (a destination never leased: the most machines any lease
 * named). None seen (no lease of this agent ever answered): nothing, until
 * one does: the whole, taken by a machine whose first lease timed out,
 * was 43 in flight against a fleet limit of 40 (said once). */
static void hold_share(struct fdst *f, int k, uint64_t now)
{
	uint64_t whole = whole_of(f, k), share;

	if (!f->live)
		f->live = L.live_seen; /* (until a lease names them) */
	if (!f->live && (!f->have[k] || f->local[k]))
		ag_log("%s: %s: no share until a lease answers (no lease has answered this agent yet: the "
		       "machines that share it are not known)",
		       f->key, ns_key_names[NS_FLEET_KEY(k)]);
	share = f->live ? whole / f->live : 0;
	write_share(f, k, f->have[k] && f->local[k] < share ? f->local[k] : share, now + ag_lease_ms());
}

/* ...Redis unreachable, or a cluster's links closed while the slots' masters
 * are sought (Redis answered; the routes are being read again): said once
 * until it is back, the second said too when the first did not end in it.
 * A lease that failed on links thought sound says nothing: which of the two
 * it is, the caller decides after (failed() in agent.c: a cluster's node
 * lost is first a failover), and the next pass, without links, says it. */
static void keep_share(struct fdst *f, int k, uint64_t now, int say)
{
	int why = ag_state.reroute_until ? 2 : 1;

	if (say && L.down_said != why && L.down_said != 1) {
		if (why == 2)
			ag_log("redis cluster: the routes sought again: each fleet limit kept at min(this "
			       "machine's last share, the limit / the machines last seen) until routed again");
		else
			ag_log("redis unreachable: each fleet limit kept at min(this machine's last share, the "
			       "limit / the machines last seen) until it is back");
		L.down_said = why;
	}
	hold_share(f, k, now);
}

int ag_lease_pass(uint64_t now, int connected, char *err, size_t len)
{
	char key[NS_KEY_MAX];
	struct ns_scan sc;
	struct fdst *f, *tmp;
	struct item *it = NULL;
	int rc = FL_OK, n, moving = 0;

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
	n = HASH_COUNT(L.d) * 3;
	if (n && !(it = calloc((size_t)n, sizeof(*it)))) {
		snprintf(err, len, "out of memory");
		return FL_REFUSED;
	}
	n = 0;
	HASH_ITER(hh, L.d, f, tmp)
	{
		struct ns_fleet_demand dm;

		if (!f->seen) { /* (its slot gone) */
			HASH_DEL(L.d, f);
			free(f);
			continue;
		}
		if (!f->kinds)
			continue; /* no fleet limit (kept: resolved once a policy) */
		ns_table_fleet_demand(&ag_state.t, f->slot, &dm);
		for (int k = 0; k < 3; k++)
			if (f->kinds & NS_FLEET_BIT(k))
				it[n++] = (struct item){ f, k, demand(f, k, &dm, now), may_hold(f, k, &dm) };
		f->tokens = dm.tokens;
		f->paced = dm.paced;
		f->conn_waits = dm.conn_waits;
		memcpy(f->denied, dm.denied, sizeof(f->denied));
		f->measured_ms = now;
	}
	/* one command a shard (its items together: their keys share its tag) */
	for (int s = 0; s < ag_state.c.nshards && n; s++) {
		int m = 0;

		for (int i = 0; i < n; i++)
			if (ag_fleet_dest_shard(&ag_state.c, it[i].f->key) == s) {
				struct item x = it[m];

				it[m++] = it[i];
				it[i] = x;
			}
		if (!connected || rc != FL_OK || !m)
			continue;
		rc = lease_shard(it, m, now, err, len);
		if (rc == FL_REFUSED && ag_redis_slot_moving(err)) {
			if (!L.again_said)
				ag_log("redis cluster: a fleet lease met its slot being moved (%s): each share kept at "
				       "min(its last, the limit / the machines last seen), asked again at the next poll",
				       err);
			L.again_said = moving = 1;
			for (int i = 0; i < m; i++)
				hold_share(it[i].f, it[i].k, now);
			rc = FL_OK;
		}
		if (rc == FL_OK) {
			memmove(it, it + m, (size_t)(n - m) * sizeof(*it));
			n -= m;
		}
	}
	for (int i = 0; i < n; i++)
		keep_share(it[i].f, it[i].k, now, !connected);
	free(it);
	if (connected && rc == FL_OK)
		L.last_ms = now;
	if (connected && rc == FL_OK && !moving)
		L.again_said = 0;
	if (connected && rc == FL_OK && L.down_said) {
		ag_log(L.down_said == 2 ? "redis cluster: fleet limits leased again"
					: "redis back: fleet limits leased again");
		L.down_said = 0;
	}
	return rc;
}

/* ...a machine whose demand fell to half its share or less (its programs
 * ended, or most of them): what it no longer asks for is given back now, not
 * at its next poll, and the level is counted again by that lease (the
 * script's `fell`), so the busy machines have it at their next lease. */
static int gone_idle(const struct fdst *f, int k, const struct ns_fleet_demand *dm)
{
	uint64_t d = asked(k, dm);

	return d < f->want[k] && d * 2 <= f->local[k];
}

/* A lease between polls: a shrinking machine has let go of what it held
 * beyond its new share (places or requests; a rate share lets go at its
 * next poll): at once, or a machine kept below its share for want of what
 * the others still held asks again: half a poll after its last lease. At
 * most one of them between two polls, so the agent sends at most two lease
 * commands a shard a poll (besides a new destination's first lease, asked
 * at once); none while the shares stand still. Due: 1, and counted. */
int ag_lease_due(uint64_t now, uint64_t last_poll)
{
	struct fdst *f, *tmp;
	int due = 0;

	if (!L.last_ms || L.early_ms > last_poll)
		return 0;
	HASH_ITER(hh, L.d, f, tmp)
	{
		struct ns_fleet_demand dm;
		int measured = 0;

		for (int k = 0; k < 3 && !due; k++) {
			if (!(f->kinds & NS_FLEET_BIT(k)) || !f->have[k])
				continue;
			if (f->local[k] < f->target[k] && f->local[k] < f->want[k] &&
			    now >= L.last_ms + (uint64_t)ag_state.poll_ms / 2)
				due = 1; /* held below its share */
			/* (nothing to let go, and no demand reported that could fall:
			 * the table is not read) */
			if (due || k == NS_FLEET_K_RATE || (f->pub[k] <= f->local[k] && !f->want[k]))
				continue;
			if (!measured++)
				ns_table_fleet_demand(&ag_state.t, f->slot, &dm);
			if (f->pub[k] > f->local[k])
				due = in_use(f, k, &dm) <= f->local[k]; /* let go */
			else
				due = gone_idle(f, k, &dm);
		}
		if (due)
			break;
	}
	if (due)
		L.early_ms = now;
	return due;
}

void ag_lease_stop(void)
{
	struct fdst *f, *tmp;
	char err[160];

	HASH_ITER(hh, L.d, f, tmp)
	{
		for (int k = 0; k < 3; k++) {
			uint32_t *wake;

			if (!(f->kinds & NS_FLEET_BIT(k)))
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
			ns_table_fleet_write(&ag_state.t, f->slot, k, f->local[k], f->whole[k], ctl_mono_ms(), f->live,
					     &wake);
		}
		HASH_DEL(L.d, f);
		free(f);
	}
	if (L.have)
		ns_policy_free(&L.pol);
	L.have = 0;
}

/* ctl_limits.c -- below status's table, one line for each destination
 * that a limit holds now, in the words the policy uses: the limit
 * max_connections = auto is at, whether throttle = adaptive refuses now and
 * what share (its words over the window, with the policy's throttle_k), and
 * when a Retry-After's cooldown ends. The table holds the counts; the
 * policy in force (NETSHIM_POLICY, else the default path; without one, the
 * built-in defaults) gives throttle_k and the bounds. */
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "../../policy/policy.h"
#include "shimctl.h"

static struct ns_policy pol;
static int have_pol;

void ctl_limits_begin(void)
{
	const char *path = ns_policy_path();
	char errs[1024];

	have_pol = (path ? ns_policy_load(path, &pol, errs, sizeof(errs)) : ns_policy_builtin(&pol)) == 0;
}

void ctl_limits_end(void)
{
	if (have_pol)
		ns_policy_free(&pol);
	have_pol = 0;
}

void ctl_limits_line(const struct ns_entry *e)
{
	struct ns_settings set;
	struct ns_dest d;
	char key[NS_KEY_MAX * 4], line[1024] = "";
	size_t n = 0;

	memset(&set, 0, sizeof(set));
	memset(&d, 0, sizeof(d));
	if (have_pol) {
		if (ns_dest_parse(e->key, &d) < 0)
			d.family = AF_INET;
		ns_policy_resolve(&pol, &d, &set, NULL);
	}
	if (e->limit)
		n += (size_t)snprintf(line + n, sizeof(line) - n,
				      "; max_connections = auto: %u now (%u-%u), %u in flight",
				      e->limit / 1000 ? e->limit / 1000 : 1, set.max_connections_min,
				      set.max_connections_max, e->inflight);
	if (set.req_adaptive && e->req_limit && n < sizeof(line))
		n += (size_t)snprintf(line + n, sizeof(line) - n,
				      "; max_requests = auto: %u now (%u-%u), %u in flight, %u waiting",
				      e->req_limit / 1000 ? e->req_limit / 1000 : 1, set.max_requests_min,
				      set.max_requests_max, e->req_inflight, e->req_queued);
	else if (set.max_requests && (e->req_inflight || e->req_queued) && n < sizeof(line))
		n += (size_t)snprintf(line + n, sizeof(line) - n, "; max_requests = %u: %u in flight, %u waiting",
				      set.max_requests, e->req_inflight, e->req_queued);
	if (set.throttle && e->thr_requests && n < sizeof(line)) {
		unsigned pct = (unsigned)(ns_throttle_ppm(e->thr_requests, e->thr_accepts, set.throttle_k_milli) /
					  10000);

		if (pct)
			n += (size_t)snprintf(
				line + n, sizeof(line) - n,
				"; throttle = adaptive refuses about %u%% of new connects now (%u requests, "
				"%u accepted over the window, throttle_k %u.%03u)",
				pct, e->thr_requests, e->thr_accepts, set.throttle_k_milli / 1000,
				set.throttle_k_milli % 1000);
		else
			n += (size_t)snprintf(line + n, sizeof(line) - n,
					      "; throttle = adaptive refuses nothing now (%u requests, %u accepted)",
					      e->thr_requests, e->thr_accepts);
	}
	for (int k = 0; k < 3 && n < sizeof(line); k++) {
		/* the fleet's limit as the agent leased it (the smallest of the
		 * machines' policies), else as the policy in force here says */
		uint64_t whole = e->fleet_whole[k] ? e->fleet_whole[k] : ns_fleet_limit(&set, k);

		if (e->fleet_share[k] < 0)
			continue;
		/* (the fleet's whole as the policy in force here says, when it does) */
		n += (size_t)snprintf(line + n, sizeof(line) - n, "; %s", ns_key_names[NS_FLEET_KEY(k)]);
		if (whole && n < sizeof(line))
			n += (size_t)(k == NS_FLEET_K_RATE ? snprintf(line + n, sizeof(line) - n, " %.3f/s",
								      (double)whole / 3600000.0)
							   : snprintf(line + n, sizeof(line) - n, " %llu",
								      (unsigned long long)whole));
		if (n < sizeof(line))
			n += (size_t)(k == NS_FLEET_K_RATE
					      ? snprintf(line + n, sizeof(line) - n, ": this machine's share %.3f/s",
							 (double)e->fleet_share[k] / 3600000.0)
					      : snprintf(line + n, sizeof(line) - n, ": this machine's share %lld",
							 (long long)e->fleet_share[k]));
		if (n < sizeof(line))
			n += (size_t)snprintf(line + n, sizeof(line) - n,
					      e->fleet_left_ms ? " (%u machines, lease %.1f s left)"
							       : " (%u machines, lease lapsed: none here now)",
					      e->fleet_live, (double)e->fleet_left_ms / 1000.0);
	}
	if (e->cooldown_left_ms && n < sizeof(line)) {
		char ts[40];

		ctl_rfc3339(ctl_wall_ms() + e->cooldown_left_ms, ts, sizeof(ts));
		snprintf(line + n, sizeof(line) - n, "; cooldown (Retry-After) until %s, %.1f s left", ts,
			 (double)e->cooldown_left_ms / 1000);
	}
	if (!line[0])
		return;
	ctl_escape_text(e->key, key, sizeof(key));
	printf("%s: %s\n", key, line + 2);
}

#!/bin/sh
# make bench-fleet (its second part): the fleet at 10,000 machines, simulated
# against a Redis Cluster started here on loopback (3 masters, 3 replicas,
# redis-cli --cluster create) with the settings the README documents for a
# fleet that size: maxclients 20000 on every node (each machine holds one
# connection to each master serving its shards, and one hint connection to
# a node picked at random). tools/bench/fleetscale.c says what each figure is.
set -eu
BUILD=${1:-build}
NODES=${NODES:-10000}
DESTS=${DESTS:-1000}
SHARDS=${SHARDS:-3}
POLL_MS=${POLL_MS:-500}
TRIALS=${TRIALS:-50}
BURST=${BURST:-100}
MAXCLIENTS=${MAXCLIENTS:-20000}
command -v redis-server >/dev/null || { echo "bench-fleet: redis-server is needed (tools/install-deps.sh)" >&2; exit 1; }
dir=$(mktemp -d)
ports=$(python3 -c '
import socket
ps = []
while len(ps) < 6:
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close()
    if p + 10000 <= 65535 and p not in ps:
        ps.append(p)
print(" ".join(map(str, ps)))')
pids=""
cleanup() {
	for p in $pids; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$dir"
}
trap cleanup EXIT
for p in $ports; do
	mkdir -p "$dir/$p"
	redis-server --port "$p" --bind 127.0.0.1 --cluster-enabled yes --cluster-config-file nodes.conf \
		--cluster-node-timeout 5000 --save '' --appendonly no --maxclients "$MAXCLIENTS" --dir "$dir/$p" \
		>"$dir/$p.log" 2>&1 &
	pids="$pids $!"
done
for p in $ports; do
	for _ in $(seq 50); do redis-cli -p "$p" ping >/dev/null 2>&1 && break; sleep 0.1; done
done
redis-cli --cluster create $(for p in $ports; do printf '127.0.0.1:%s ' "$p"; done) --cluster-replicas 1 \
	--cluster-yes >/dev/null
first=${ports%% *}
for _ in $(seq 100); do
	redis-cli -p "$first" cluster info | grep -q cluster_state:ok && break
	sleep 0.1
done
# every master with its replica (the hint connections spread over all six)
for _ in $(seq 100); do
	[ "$(redis-cli -p "$first" cluster slots | grep -c '^127.0.0.1$')" -ge 6 ] && break
	sleep 0.2
done
echo "## fleet at scale: $NODES simulated machines, $DESTS destinations, a Redis Cluster of 3 masters and 3 replicas"
echo "## (--shards $SHARDS, poll every $POLL_MS ms, maxclients $MAXCLIENTS, $TRIALS trips, a burst of $BURST)"
echo
out=$("$BUILD/fleetscale" --redis "redis://127.0.0.1:$first" --agent "$BUILD/netshim-agent" --nodes "$NODES" \
	--dests "$DESTS" --shards "$SHARDS" --poll-ms "$POLL_MS" --trials "$TRIALS" --burst "$BURST")
echo "$out" | sed 's/^/    /'

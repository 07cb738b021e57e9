#!/bin/sh
# make bench-fleet: netshim-agent's propagation delay and cost for simulated
# fleets of 10, 100 and 1,000 nodes over 1,000 destinations, against a
# redis-server started here on a free loopback port (tools/bench/fleetbench.c
# says what each figure is). Each size runs twice: the agent woken by the
# hint channel, and polling alone (--no-hint: the bound when hints are lost).
set -eu
BUILD=${1:-build}
POLL_MS=${POLL_MS:-500}
TRIALS=${TRIALS:-60}
DESTS=${DESTS:-1000}
command -v redis-server >/dev/null || { echo "bench-fleet: redis-server is needed (tools/install-deps.sh)" >&2; exit 1; }
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
dir=$(mktemp -d)
redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$dir" >/dev/null &
rpid=$!
trap 'kill $rpid 2>/dev/null; wait $rpid 2>/dev/null; rm -rf "$dir"' EXIT
for _ in $(seq 50); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
echo "## fleet: poll every $POLL_MS ms, $DESTS destinations with one vote each, $TRIALS trips per size"
echo
echo "| nodes | agent | trip -> fleet_open p50 / p99 / max | steady: commands/node/s | steady: agent CPU/poll | while changing: commands/node/s (changes/s) | while changing: agent CPU/poll |"
echo "| --- | --- | --- | --- | --- | --- | --- |"
for n in 10 100 1000; do
	for mode in hint --no-hint; do
		flag=""
		[ "$mode" = hint ] || flag=--no-hint
		out=$("$BUILD/fleetbench" --redis "redis://127.0.0.1:$port" --agent "$BUILD/netshim-agent" \
			--nodes "$n" --dests "$DESTS" --poll-ms "$POLL_MS" --trials "$TRIALS" $flag)
		v() { echo "$out" | awk -v k="$1" '$1 == k { print $2 }'; }
		echo "| $n | ${flag:-hint} | $(v propagation_ms_p50) / $(v propagation_ms_p99) / $(v propagation_ms_max) ms | $(v steady_commands_per_node_per_s) | $(v steady_agent_cpu_us_per_poll) us | $(v changing_commands_per_node_per_s) ($(v changes_per_s)) | $(v changing_agent_cpu_us_per_poll) us |"
	done
done
echo
E2E=${E2E_TRIALS:-50}
echo "## end to end: two real agents, a real program's trip on A, a program on B refused ($E2E trials, quorum 1, poll every $POLL_MS ms)"
echo
out=$(python3 "$(dirname "$0")/e2ebench.py" "$BUILD" "$port" "$E2E" "$POLL_MS")
v() { echo "$out" | awk -v k="$1" '$1 == k { print $2 }'; }
echo "| failing call on A -> refused on B | p50 | p99 | max | missed |"
echo "| --- | --- | --- | --- | --- |"
echo "| woken by the trip, hint to B | $(v e2e_ms_p50) ms | $(v e2e_ms_p99) ms | $(v e2e_ms_max) ms | $(v missed) of $E2E |"
echo
echo "## the fleet's limits: the lease script at 10,000 machines (tools/bench/leasebench.py)"
echo
python3 "$(dirname "$0")/leasebench.py"

#!/bin/bash
# The main job, end to end: a Python scraper using requests (no timeout) and
# curl, run under shimrun against a local server that stops answering.
set -u
BUILD=$(cd "${1:-build}" && pwd)
PY=/usr/bin/python3
work=$(mktemp -d)
table=netshim-demo.$$
say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
cleanup() { kill "$srv" 2>/dev/null; wait "$srv" 2>/dev/null; rm -rf "$work" "/dev/shm/$table"; }
trap cleanup EXIT

"$BUILD/faultsrv" --mode silent --count-file "$work/accepts" >"$work/port" &
srv=$!
for _ in $(seq 50); do [ -s "$work/port" ] && break; sleep 0.1; done
port=$(awk '{print $2}' "$work/port")
url="http://127.0.0.1:$port/"

cat >"$work/policy.conf" <<POL
[defaults]
connect_timeout   = 2s
read_timeout      = 2s
failure_threshold = 3
window            = 1m
open_duration     = 5m
POL
cat >"$work/scraper.py" <<'PYEOF'
import sys, time, requests
t0 = time.monotonic()
try:
    r = requests.get(sys.argv[1])          # no timeout: the legacy way
    print(f"scraper: HTTP {r.status_code} after {time.monotonic() - t0:.1f}s: {r.text.strip()}")
except Exception as e:
    print(f"scraper: failed after {time.monotonic() - t0:.1f}s: {type(e).__name__}: {e}")
PYEOF
export NETSHIM_TABLE=$table

say "A server on 127.0.0.1:$port accepts connections and never answers."
say "Without netshim the scraper just hangs (stopped here by timeout(1) after 5s):"
timeout 5 $PY "$work/scraper.py" "$url" || echo "scraper: still waiting after 5s, killed (exit $?)"

say "Under shimrun with read_timeout = 2s, three runs are cut off with ETIMEDOUT:"
cat "$work/policy.conf"
for i in 1 2 3; do
	"$BUILD/shimrun" --policy "$work/policy.conf" -- $PY "$work/scraper.py" "$url"
done

say "shimctl status: the breaker for 127.0.0.1:$port is open after 3 failures"
"$BUILD/shimctl" status

before=$(cat "$work/accepts")
say "While it is open, every connect from any process fails at once with ECONNREFUSED:"
for i in 1 2 3; do
	start=$(date +%s%N)
	"$BUILD/shimrun" --policy "$work/policy.conf" -- curl -sS "$url"
	echo "curl exit $? after $(( ($(date +%s%N) - start) / 1000000 )) ms"
done
echo "connections that reached the server while open: $(( $(cat "$work/accepts") - before ))"

say "The server recovers; an operator confirms with shimctl reset:"
kill -USR1 "$srv"
sleep 0.3
"$BUILD/shimctl" reset "127.0.0.1:$port"
"$BUILD/shimrun" --policy "$work/policy.conf" -- $PY "$work/scraper.py" "$url"
"$BUILD/shimctl" status

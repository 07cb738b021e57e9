#!/bin/bash
# make bench: what the shim costs, measured side by side in one run.
# Prints figures only; nothing here passes or fails.
set -u
BUILD=$(cd "${1:-build}" && pwd)
LIB=$BUILD/libnetshim.so
ROUNDS=${ROUNDS:-7}
TRIPS=${TRIPS:-20000}
table=netshim-bench.$$
trap 'rm -f /dev/shm/$table' EXIT
export NETSHIM_TABLE=$table
unset NETSHIM_POLICY NETSHIM_DISABLE LD_PRELOAD

median() { sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

echo "== 1-byte send/recv round trip on loopback TCP ($TRIPS trips x $ROUNDS rounds, interleaved)"
echo "   under the shim: built-in policy (read_timeout 30s in force on the connection)"
: >/tmp/bench.bare.$$; : >/tmp/bench.shim.$$
for r in $(seq "$ROUNDS"); do
	"$BUILD/bench" rtt "$TRIPS" | awk '{print $2}' >>/tmp/bench.bare.$$
	LD_PRELOAD=$LIB "$BUILD/bench" rtt "$TRIPS" | awk '{print $2}' >>/tmp/bench.shim.$$
done
bare=$(median </tmp/bench.bare.$$); shim=$(median </tmp/bench.shim.$$)
rm -f /tmp/bench.bare.$$ /tmp/bench.shim.$$
echo "   bare:  median $bare ns per round trip"
echo "   shim:  median $shim ns per round trip"
awk -v b="$bare" -v s="$shim" 'BEGIN {printf "   speed under the shim: %.3f of bare (bar: >= 0.97)\n", b / s}'

echo "== fail-fast connect() while the breaker is open"
"$BUILD/shimctl" open 127.0.0.1:9 >/dev/null
LD_PRELOAD=$LIB "$BUILD/bench" failfast 127.0.0.1 9 20000 | sed 's/^/   /'
echo "   the same, by name (resolved once with getaddrinfo; keyed localhost:9):"
"$BUILD/shimctl" open localhost:9 >/dev/null
for r in 1 2 3; do
	a=$(LD_PRELOAD=$LIB "$BUILD/bench" failfast 127.0.0.1 9 20000 | awk '/median/ {print $2}')
	n=$(LD_PRELOAD=$LIB "$BUILD/bench" failfast localhost 9 20000 | awk '/median/ {print $2}')
	echo "   round $r: by address $a ns, by name $n ns, name costs $((n - a)) ns more (bar: <= 1000)"
done
"$BUILD/faultsrv" --mode refuse >/tmp/bench.refuse.$$ &
rsrv=$!
for _ in $(seq 50); do [ -s /tmp/bench.refuse.$$ ] && break; sleep 0.1; done
rport=$(awk '{print $2}' /tmp/bench.refuse.$$); rm -f /tmp/bench.refuse.$$
printf '[defaults]\nfailure_threshold = 0\n' >/tmp/bench.pol.$$
off=$(NETSHIM_POLICY=/tmp/bench.pol.$$ LD_PRELOAD=$LIB "$BUILD/bench" failfast 127.0.0.1 "$rport" 2000 | awk '/median/ {print $2}')
on=$(NETSHIM_POLICY=/tmp/bench.pol.$$ NETSHIM_TRACE=1 LD_PRELOAD=$LIB "$BUILD/bench" failfast 127.0.0.1 "$rport" 2000 | awk '/median/ {print $2}')
echo "== a refused connect (a real failure, counted): median $off ns tracing off, $on ns with NETSHIM_TRACE=1: +$(( (on - off) / 1000 )) us (bar: <= 50 us)"
kill "$rsrv"; wait "$rsrv" 2>/dev/null; rm -f /tmp/bench.pol.$$
if command -v strace >/dev/null; then
	n=$(LD_PRELOAD=$LIB strace -f -e trace=connect "$BUILD/bench" failfast 127.0.0.1 9 100 2>&1 >/dev/null | grep -c 'connect(')
	echo "   connect system calls made by 100 fail-fast connects (strace): $n"
fi

if command -v valgrind >/dev/null; then
	echo "== instructions added per call (callgrind, exact; (shim - bare) over N calls, start-up subtracted)"
	ir() {   # ir MODE N ENV...
		local out mode=$1 n=$2; shift 2; out=$(mktemp)
		env "$@" valgrind --tool=callgrind --callgrind-out-file="$out" "$BUILD/bench" "$mode" "$n" >/dev/null 2>&1
		awk '/^summary:/ {print $2}' "$out"; rm -f "$out"
	}
	added() {   # added MODE N CALLS_PER_ITERATION LABEL
		local b0 b1 s0 s1
		b0=$(ir "$1" 0 X=1); s0=$(ir "$1" 0 LD_PRELOAD=$LIB)
		b1=$(ir "$1" "$2" X=1); s1=$(ir "$1" "$2" LD_PRELOAD=$LIB)
		awk -v b0="$b0" -v b1="$b1" -v s0="$s0" -v s1="$s1" -v n="$2" -v k="$3" -v l="$4" 'BEGIN {
			printf "   %-44s bare %7.1f  shim %7.1f  added %6.1f instructions per call\n", l, (b1 - b0) / n / k, (s1 - s0) / n / k, ((s1 - s0) - (b1 - b0)) / n / k }'
	}
	added rtt 5000 4 "send/recv (2 governed + 2 ungoverned calls)"
	t0=$(ir rtt 5000 LD_PRELOAD=$LIB); t1=$(ir rtt 5000 LD_PRELOAD=$LIB NETSHIM_TRACE=1)
	echo "   send/recv loop with tracing off: $t0 instructions, with NETSHIM_TRACE=1: $t1 (bar: equal within 1 %)"
	added poll 20000 1 "poll() on a governed socket, read deadline armed"
	added epoll 20000 1 "epoll_wait() on a governed socket"
fi

if command -v node >/dev/null || command -v curl >/dev/null; then
	REQS=${REQS:-500}
	"$BUILD/faultsrv" --mode http >/tmp/bench.port.$$ &
	srv=$!
	for _ in $(seq 50); do [ -s /tmp/bench.port.$$ ] && break; sleep 0.1; done
	url="http://127.0.0.1:$(awk '{print $2}' /tmp/bench.port.$$)/"
	rm -f /tmp/bench.port.$$
	cat >/tmp/bench.node.$$.js <<JS
const http = require("http"); let left = $REQS;
const agent = new http.Agent({ keepAlive: false });
(function next() { if (left-- === 0) return;
  http.get("$url", { agent }, (r) => { r.resume(); r.on("end", next); }).on("error", (e) => { console.error(e); process.exit(1); }); })();
JS
	urls=$(for _ in $(seq "$REQS"); do printf '%s ' "$url"; done)
	loop() {   # loop LABEL CMD...: interleaved bare/shim rounds, median seconds
		local label=$1; shift
		: >/tmp/bench.b.$$; : >/tmp/bench.s.$$
		for r in $(seq 5); do
			/usr/bin/time -f %e -o /tmp/bench.t.$$ "$@" >/dev/null 2>&1; cat /tmp/bench.t.$$ >>/tmp/bench.b.$$
			LD_PRELOAD=$LIB /usr/bin/time -f %e -o /tmp/bench.t.$$ "$@" >/dev/null 2>&1; cat /tmp/bench.t.$$ >>/tmp/bench.s.$$
		done
		local b s; b=$(median </tmp/bench.b.$$); s=$(median </tmp/bench.s.$$)
		awk -v b="$b" -v s="$s" -v l="$label" 'BEGIN { printf "   %-28s bare %.2f s  shim %.2f s  speed under the shim %.3f of bare (bar >= 0.95)\n", l, b, s, b / s }'
		rm -f /tmp/bench.b.$$ /tmp/bench.s.$$ /tmp/bench.t.$$
	}
	echo "== $REQS HTTP requests to a local server, one process, new connection each (5 interleaved rounds, median)"
	command -v node >/dev/null && loop "node http.get loop" node /tmp/bench.node.$$.js
	# shellcheck disable=SC2086
	command -v curl >/dev/null && loop "curl, $REQS URLs" curl -s $urls
	kill "$srv"; wait "$srv" 2>/dev/null
	rm -f /tmp/bench.node.$$.js
fi

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
if command -v strace >/dev/null; then
	n=$(LD_PRELOAD=$LIB strace -f -e trace=connect "$BUILD/bench" failfast 127.0.0.1 9 100 2>&1 >/dev/null | grep -c 'connect(')
	echo "   connect system calls made by 100 fail-fast connects (strace): $n"
fi

if command -v valgrind >/dev/null; then
	echo "== instructions added per call (callgrind, exact): send+recv pairs on a governed socket"
	ir() {
		local out; out=$(mktemp)
		env "$@" valgrind --tool=callgrind --callgrind-out-file="$out" "$BUILD/bench" rtt "$N" >/dev/null 2>&1
		awk '/^summary:/ {print $2}' "$out"; rm -f "$out"
	}
	N=0; b0=$(ir X=1); s0=$(ir LD_PRELOAD=$LIB)
	N=5000; b1=$(ir X=1); s1=$(ir LD_PRELOAD=$LIB)
	awk -v b0="$b0" -v b1="$b1" -v s0="$s0" -v s1="$s1" -v n=5000 'BEGIN {
		printf "   bare: %.1f instructions per round trip (both ends, all user space)\n", (b1 - b0) / n;
		printf "   shim: %.1f instructions per round trip\n", (s1 - s0) / n;
		printf "   added: %.1f per round trip = %.1f per wrapped call (4 calls: client send+recv, echo recv+send)\n", ((s1 - s0) - (b1 - b0)) / n, ((s1 - s0) - (b1 - b0)) / n / 4 }'
fi

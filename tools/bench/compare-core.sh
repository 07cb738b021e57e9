#!/bin/bash
# compare-core.sh OLD_BUILD NEW_BUILD: section 1's hot paths (instructions a
# call costs under the shim, callgrind: exact, so a loaded machine does not
# move them) for two builds side by side, and how far apart they are. For a
# change that must not cost anything (issue 48: within 1 %):
#   git worktree add /tmp/old REV && make -C /tmp/old -j2 all
#   tools/bench/compare-core.sh /tmp/old/build build
set -u
OLD=$(cd "$1" && pwd)
NEW=$(cd "$2" && pwd)
TOOLS=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
export NETSHIM_TABLE=netshim-compare.$$
trap 'rm -rf "$work" /dev/shm/$NETSHIM_TABLE /dev/shm/$NETSHIM_TABLE.old /dev/shm/$NETSHIM_TABLE.new' EXIT
unset NETSHIM_POLICY NETSHIM_DISABLE LD_PRELOAD NETSHIM_TRACE
bar() { :; }
. "$TOOLS/irkit.sh"
command -v valgrind >/dev/null || { echo "valgrind is needed (tools/install-deps.sh --all)"; exit 2; }

printf '[defaults]\nmax_connections = 8\n' >"$work/cap.conf"
printf '[defaults]\nmax_connections = auto\n' >"$work/auto.conf"
printf '[defaults]\nthrottle = adaptive\n' >"$work/throttle.conf"
printf '[defaults]\nrate = 1000000/s\nburst = 1000\n' >"$work/rate.conf"
printf "  %-46s %8s %8s %8s\n" "" "before" "after" "apart"
while IFS='|' read -r label n policy args; do
	env=""
	[ -n "$policy" ] && env="NETSHIM_POLICY=$work/$policy"
	# shellcheck disable=SC2086
	# (a table each: two builds of different table versions refuse each
	# other's, and the second would run with none)
	a=$(NETSHIM_TABLE=$NETSHIM_TABLE.old BUILD=$OLD LIB=$OLD/libnetshim.so SHIM_ENV=$env added x "$n" - $args |
		awk '{print $NF}')
	# shellcheck disable=SC2086
	b=$(NETSHIM_TABLE=$NETSHIM_TABLE.new BUILD=$NEW LIB=$NEW/libnetshim.so SHIM_ENV=$env added x "$n" - $args |
		awk '{print $NF}')
	awk -v l="$label" -v a="$a" -v b="$b" \
		'BEGIN { printf "  %-46s %8.1f %8.1f %7.2f %%\n", l, a, b, a ? (b - a) / a * 100 : 0 }'
done <<'EOF'
send, governed socket|20000||calls send
recv, governed socket|20000||calls recv
socket+connect+close, by address|1000||calls connect-client
  the same with max_connections = 8|1000|cap.conf|calls connect-client
  the same with max_connections = auto|1000|auto.conf|calls connect-client
  the same with throttle = adaptive|1000|throttle.conf|calls connect-client
keep-alive HTTP request+answer|5000||keepalive
  the same with rate|5000|rate.conf|keepalive
  the same with max_connections = auto|5000|auto.conf|keepalive
  the same with throttle = adaptive|5000|throttle.conf|keepalive
socket+connect+close, by name (localhost)|1000||calls connect-client-name
poll, governed socket, read deadline armed|20000||poll
epoll_wait, governed socket|20000||epoll
EOF

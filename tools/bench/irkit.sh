# irkit.sh -- sourced by bench.sh and compare-core.sh: instructions a call
# costs under the shim, exactly (callgrind), as "(shim - bare) / N over a
# loop of N calls, start-up subtracted with an N=0 run". Wants BUILD, LIB,
# and bar() from the caller; SHIM_ENV adds to the shim's environment.
ir() {   # ir MODE... -- ENV...
	local args=() out
	while [ "$1" != "--" ]; do args+=("$1"); shift; done; shift
	out=$(mktemp)
	env "$@" valgrind --tool=callgrind --callgrind-out-file="$out" "$BUILD/bench" "${args[@]}" >/dev/null 2>&1
	awk '/^summary:/ {print $2}' "$out"; rm -f "$out"
}
withn() {   # withn N ARGS...: ARGS with @N replaced by N (or N appended)
	local n=$1 a out=() put=0; shift
	for a in "$@"; do if [ "$a" = @N ]; then out+=("$n"); put=1; else out+=("$a"); fi; done
	[ $put = 1 ] || out+=("$n")
	printf '%s\n' "${out[@]}"
}
added() {   # added LABEL N BAR ARGS... (N after ARGS, or where @N stands)
	local label=$1 n=$2 lim=$3; shift 3
	local b0 b1 s0 s1 v a0 a1
	mapfile -t a0 < <(withn 0 "$@"); mapfile -t a1 < <(withn "$n" "$@")
	b0=$(ir "${a0[@]}" -- X=1); s0=$(ir "${a0[@]}" -- LD_PRELOAD="$LIB" ${SHIM_ENV:-})
	b1=$(ir "${a1[@]}" -- X=1); s1=$(ir "${a1[@]}" -- LD_PRELOAD="$LIB" ${SHIM_ENV:-})
	v=$(awk -v b0="$b0" -v b1="$b1" -v s0="$s0" -v s1="$s1" -v n="$n" 'BEGIN { printf "%.1f", ((s1 - s0) - (b1 - b0)) / n }')
	printf "  %-46s %8s" "$label" "$v"
	if [ "$lim" != "-" ]; then printf "   (bar <= %s: %s)" "$lim" "$(bar "$v" "$lim" "<=")"; fi
	echo
}

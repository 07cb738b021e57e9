#!/bin/sh
# make fuzz: run each libFuzzer harness for FUZZ_TIME seconds (default 60)
# from the checked-in seeds (plus a generated table image), keeping what it
# finds under BUILD/corpus. A crash, leak or sanitizer report fails the run
# and leaves the input that caused it in BUILD/.
set -eu
BUILD=${1:-build-fuzz}
TIME=${FUZZ_TIME:-60}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
status=0
mkdir -p "$BUILD/corpus/table"
"$BUILD/seed_table" >"$BUILD/corpus/table/seed.tbl"
for h in policy dest table http scenario hpack h2 h1end; do
	mkdir -p "$BUILD/corpus/$h"
	seeds=""
	[ -d "$ROOT/tests/fuzz/corpus/$h" ] && seeds="$ROOT/tests/fuzz/corpus/$h"
	log="$BUILD/fuzz_$h.log"
	# a table image must be whole to get past the header's checks: the
	# smallest valid one (4 slots, 4 events) is 45,312 bytes
	maxlen=16384
	[ "$h" = table ] && maxlen=65536
	if (cd "$BUILD" && "./fuzz_$h" -max_total_time="$TIME" -timeout=10 -rss_limit_mb=2048 \
		-max_len="$maxlen" -print_final_stats=1 corpus/"$h" $seeds) >"$log" 2>&1; then
		echo "fuzz_$h: $(grep -E '^stat::number_of_executed_units' "$log" | awk '{print $2}') runs in ${TIME}s, nothing found"
	else
		tail -60 "$log"
		echo "fuzz_$h: FAILED (log: $log; the input is in $BUILD/crash-* or leak-*)" >&2
		status=1
	fi
done
exit $status

#!/bin/sh
# Run the stress client on the TSan-built shim (make SANITIZER=thread tsan):
# 8 threads on governed sockets with short deadlines, one closing and
# duplicating their descriptors under them. Any TSan report fails.
set -eu
BUILD=${1:-build-thread}
SECS=${STRESS_SECONDS:-10}
dir=$(mktemp -d)
trap 'rm -rf "$dir"; rm -f /dev/shm/nstsan.$$' EXIT
run() {
	if ! NETSHIM_POLICY="$dir/policy.conf" NETSHIM_TABLE=nstsan.$$ NETSHIM_LOG=error \
		TSAN_OPTIONS="halt_on_error=1 exitcode=66 log_path=$dir/tsan suppressions=$(cd "$(dirname "$0")" && pwd)/tsan.supp" \
		LD_PRELOAD="$(cd "$BUILD" && pwd)/libnetshim.so" "$BUILD/stress" "$SECS"; then
		cat "$dir"/tsan* 2>/dev/null || true
		echo "tsan-stress: FAILED $1 (ThreadSanitizer report above, or the client died)" >&2
		exit 1
	fi
	if ls "$dir"/tsan* >/dev/null 2>&1; then
		cat "$dir"/tsan*
		echo "tsan-stress: FAILED $1 (ThreadSanitizer reports above)" >&2
		exit 1
	fi
	echo "tsan-stress: no ThreadSanitizer report in ${SECS}s $1"
}
printf '[defaults]\nread_timeout = 50ms\nconnect_timeout = 200ms\nfailure_threshold = 0\n' >"$dir/policy.conf"
run "(no faults)"
# the same with injected faults that hold input back on every connection:
# the reading thread's gate and the sending thread's start of the wait
printf 'fault = latency 5ms; bandwidth 1MiB/s\n' >>"$dir/policy.conf"
run "(latency and bandwidth injected)"

#!/bin/sh
# Negative control: run the integration suite with NETSHIM_DISABLE=1, so the
# shim passes every call straight through. Every test marked `shim` must then
# fail; one that passes asserts nothing the shim provides. Then the same for
# the fleet: every test marked `agent` must fail when no agent runs.
set -u
BUILD=${1:-build}
PYTHON=${PYTHON:-/usr/bin/python3}
out=$(mktemp)

# all_fail MARK VARIABLE WITHOUT [PYTEST ARGS...]: run the tests marked MARK
# with VARIABLE=1; every one must fail
all_fail() {
	mark=$1 var=$2 without=$3
	shift 3
	env "$var=1" NETSHIM_BUILD="$(cd "$BUILD" && pwd)" \
		"$PYTHON" -m pytest -q -m "$mark" -p no:cacheprovider -rA "$@" tests/integration >"$out" 2>&1
	passed=$(grep -c '^PASSED ' "$out")
	failed=$(grep -c '^FAILED ' "$out")
	if [ "$passed" -ne 0 ] || [ "$failed" -eq 0 ]; then
		grep -E '^(PASSED|FAILED) ' "$out"
		echo "negative control: $passed $mark tests passed $without (must be 0), $failed failed"
		rm -f "$out"
		exit 1
	fi
	echo "negative control: all $failed $mark tests fail $without, as they must"
}

# Most shim tests, the shim off, wait out a timeout of their own (a hang
# the shim would have cut): four at once (pytest-xdist) where it is
# installed (the shim's part in 9 minutes on this 2-core machine with a
# whole suite running beside it). All that is asked of each is that it
# fails. The agent's tests would start a Redis Cluster per worker: one at
# a time.
par=
if "$PYTHON" -c 'import xdist' 2>/dev/null; then
	par="-n ${NEGATIVE_WORKERS:-4}"
fi
# shellcheck disable=SC2086 # (the workers' flag is two words, or none)
all_fail shim NETSHIM_NEGATIVE_CONTROL "with the shim disabled" $par
all_fail agent NETSHIM_FLEET_NO_AGENT "without netshim-agent"
rm -f "$out"

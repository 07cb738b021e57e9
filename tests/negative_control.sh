#!/bin/sh
# Negative control: run the integration suite with NETSHIM_DISABLE=1, so the
# shim passes every call straight through. Every test marked `shim` must then
# fail; one that passes asserts nothing the shim provides. Then the same for
# the fleet: every test marked `agent` must fail when no agent runs.
set -u
BUILD=${1:-build}
PYTHON=${PYTHON:-/usr/bin/python3}
out=$(mktemp)

# all_fail MARK VARIABLE WITHOUT: run the tests marked MARK with VARIABLE=1;
# every one must fail
all_fail() {
	env "$2=1" NETSHIM_BUILD="$(cd "$BUILD" && pwd)" \
		"$PYTHON" -m pytest -q -m "$1" -p no:cacheprovider -rA tests/integration >"$out" 2>&1
	passed=$(grep -c '^PASSED ' "$out")
	failed=$(grep -c '^FAILED ' "$out")
	if [ "$passed" -ne 0 ] || [ "$failed" -eq 0 ]; then
		grep -E '^(PASSED|FAILED) ' "$out"
		echo "negative control: $passed $1 tests passed $3 (must be 0), $failed failed"
		rm -f "$out"
		exit 1
	fi
	echo "negative control: all $failed $1 tests fail $3, as they must"
}

all_fail shim NETSHIM_NEGATIVE_CONTROL "with the shim disabled"
all_fail agent NETSHIM_FLEET_NO_AGENT "without netshim-agent"
rm -f "$out"

#!/bin/sh
# Negative control: run the integration suite with NETSHIM_DISABLE=1, so the
# shim passes every call straight through. Every test marked `shim` must then
# fail; one that passes asserts nothing the shim provides.
set -u
BUILD=${1:-build}
PYTHON=${PYTHON:-/usr/bin/python3}
out=$(mktemp)
NETSHIM_NEGATIVE_CONTROL=1 NETSHIM_BUILD=$(cd "$BUILD" && pwd) \
	"$PYTHON" -m pytest -q -m shim -p no:cacheprovider -rA tests/integration >"$out" 2>&1
passed=$(grep -c '^PASSED ' "$out")
failed=$(grep -c '^FAILED ' "$out")
if [ "$passed" -ne 0 ] || [ "$failed" -eq 0 ]; then
	grep -E '^(PASSED|FAILED) ' "$out"
	echo "negative control: $passed shim tests passed without the shim (must be 0), $failed failed"
	rm -f "$out"
	exit 1
fi
echo "negative control: all $failed shim tests fail with the shim disabled, as they must"
# The fleet: every test marked `agent` must fail when no agent runs.
NETSHIM_FLEET_NO_AGENT=1 NETSHIM_BUILD=$(cd "$BUILD" && pwd) \
	"$PYTHON" -m pytest -q -m agent -p no:cacheprovider -rA tests/integration >"$out" 2>&1
passed=$(grep -c '^PASSED ' "$out")
failed=$(grep -c '^FAILED ' "$out")
if [ "$passed" -ne 0 ] || [ "$failed" -eq 0 ]; then
	grep -E '^(PASSED|FAILED) ' "$out"
	echo "negative control: $passed agent tests passed without the agent (must be 0), $failed failed"
	rm -f "$out"
	exit 1
fi
echo "negative control: all $failed agent tests fail without netshim-agent, as they must"
rm -f "$out"

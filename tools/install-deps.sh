#!/bin/sh
# Install the Debian packages netshim needs, when missing.
#
#   tools/install-deps.sh         what the build and the demo need (make demo)
#   tools/install-deps.sh --all   everything the test suite runs as well
#                                 (make test: Redis, Scrapy, node, chromium...)
#   COMPAT=1 ...    also the clients of the compatibility matrix (make compat)
#   BENCH_PEERS=1 ...   also the proxies make bench compares against
set -eu
ALL=0
case "${1:-}" in
--all) ALL=1 ;;
"") ;;
*) echo "usage: tools/install-deps.sh [--all]" >&2; exit 2 ;;
esac
# the library, shimctl, shimrun and the demo's server, and the demo's two
# clients (a Python scraper using requests, and curl)
PKGS="gcc make libc6-dev uthash-dev libunwind-dev libsqlite3-dev python3 python3-requests curl"
if [ "$ALL" = 1 ]; then
	PKGS="$PKGS build-essential libunwind-dev libcriterion-dev pkg-config groff-base man-db
python3-pytest python3-pytest-xdist wget strace valgrind procps openssl
php-cli php-curl busybox libhiredis-dev redis-server redis-tools
libssl-dev patchelf debhelper lintian fakeroot python3-aiohttp python3-httpx python3-twisted python3-openssl python3-scrapy
prometheus sqlite3 chromium clang clang-format libclang-rt-14-dev libnghttp2-dev nghttp2-server nghttp2-client
python3-grpcio python3-h2 golang-go debootstrap"
	# every Go Debian 12 offers builds the clients whose HTTP statuses
	# shimrun reads (1.19 is golang-go's; 1.21-1.23 are bookworm-backports')
	GO_BACKPORTS="golang-1.21-go golang-1.22-go golang-1.23-go"
	PKGS="$PKGS $GO_BACKPORTS"
fi
# make compat: the clients of the compatibility matrix and their servers,
# only when asked (COMPAT=1)
if [ "${COMPAT:-0}" = 1 ]; then
	PKGS="$PKGS git ruby libwww-perl postgresql postgresql-client openssh-server
openssh-client aria2 httpie lynx"
	command -v javac >/dev/null 2>&1 || PKGS="$PKGS default-jdk-headless"
fi
# The proxies make bench compares against: only when asked (BENCH_PEERS=1),
# they are not needed to build or test.
[ "${BENCH_PEERS:-0}" = 1 ] && PKGS="$PKGS nginx-light libnginx-mod-stream haproxy"
missing=""
for p in $PKGS; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
done
# node comes with this machine image; Debian's nodejs where it does not
[ "$ALL" = 1 ] && ! command -v node >/dev/null 2>&1 && missing="$missing nodejs"
if [ -z "$missing" ]; then
	echo "install-deps: all packages present"
	exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
	echo "install-deps: missing:$missing (run as root, or: sudo apt-get install$missing)" >&2
	exit 1
fi
echo "install-deps: installing$missing"
export DEBIAN_FRONTEND=noninteractive
# bookworm-backports, in a sources file of its own, when a Go of it is missing
case "$missing" in
*golang-1.2*)
	src=/etc/apt/sources.list.d/netshim-bookworm-backports.sources
	[ -e "$src" ] || printf '%s\n' "Types: deb" "URIs: http://deb.debian.org/debian" \
		"Suites: bookworm-backports" "Components: main" \
		"Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg" >"$src"
	;;
esac
apt-get update -q
# the demo's few packages without their recommendations (a fresh machine
# gets it running in well under two minutes); the rest as Debian means them
[ "$ALL" = 1 ] || NORECS=--no-install-recommends
# shellcheck disable=SC2086
apt-get install -y -q ${NORECS:-} $missing

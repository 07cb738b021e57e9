#!/bin/sh
# Install the Debian packages netshim needs to build and test, when missing.
set -eu
PKGS="build-essential libunwind-dev uthash-dev libcriterion-dev pkg-config groff-base man-db
python3 python3-pytest python3-requests curl wget strace valgrind procps openssl
php-cli php-curl busybox libhiredis-dev redis-server redis-tools
libssl-dev patchelf debhelper lintian fakeroot python3-aiohttp python3-httpx python3-twisted python3-openssl python3-scrapy
prometheus libsqlite3-dev sqlite3 chromium"
# make fuzz: clang with libFuzzer
PKGS="$PKGS clang libclang-rt-14-dev"
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
command -v node >/dev/null 2>&1 || missing="$missing nodejs"
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
apt-get update -q
# shellcheck disable=SC2086
apt-get install -y -q $missing

"""A name with several addresses (issue 38 items 3 and 4, docs/policy.md,
address_choice): address_choice = healthy-first lists an address
whose connects fail after the healthy ones in every process's getaddrinfo,
and puts it back once a probe finds it healed; connect_total_timeout bounds
a program's loop over all of a name's addresses.

The name is multi.test, three addresses in an /etc/hosts of the test's own
(a mount namespace each client runs in: nothing of the machine's changes;
where namespaces are not allowed, the lines are added to the machine's own
/etc/hosts for the test and taken out after it): 127.0.0.2, .3 and .4, one
port for all."""
import json
import os
import subprocess
import time

import pytest

from conftest import NEGATIVE, near, py_script
from rediscluster import spare_port

NAME = "multi.test"
ADDRS = ["127.0.0.2", "127.0.0.3", "127.0.0.4"]

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="a mount namespace for /etc/hosts needs root")


def free_port():
    return spare_port(ADDRS[0])


LINES = "".join(f"{a} {NAME}  # netshim test_addresses\n" for a in ADDRS)


def namespaces_work(tmp_path):
    probe = tmp_path / "probe"
    probe.write_text("")
    return subprocess.run(["unshare", "-m", "sh", "-c", 'mount --bind "$0" /etc/hosts', str(probe)],
                          capture_output=True).returncode == 0


@pytest.fixture
def hosts_file(tmp_path):
    """Our hosts file for in_ns; or, without mount namespaces, None: the
    lines are in the machine's /etc/hosts until the test ends."""
    if os.environ.get("NETSHIM_TEST_NO_NS") != "1" and namespaces_work(tmp_path):   # (the variable: try the other way)
        p = tmp_path / "hosts"
        p.write_text("127.0.0.1 localhost\n" + LINES)
        yield p
        return
    with open("/etc/hosts", "a") as f:
        f.write(LINES)
    try:
        yield None
    finally:
        with open("/etc/hosts") as f:
            kept = [line for line in f if "# netshim test_addresses" not in line]
        with open("/etc/hosts", "w") as f:
            f.writelines(kept)


def in_ns(hosts, cmd):
    """cmd in a mount namespace whose /etc/hosts is ours (hosts None: the machine's has our lines)."""
    if hosts is None:
        return [str(c) for c in cmd]
    return ["unshare", "-m", "sh", "-c", 'mount --bind "$0" /etc/hosts && exec "$@"', str(hosts), *map(str, cmd)]


ORDER = """
import json, socket, sys
print(json.dumps([a[4][0] for a in socket.getaddrinfo(sys.argv[1], int(sys.argv[2]), type=socket.SOCK_STREAM)]))
"""


def order(shim, tmp_path, hosts, port):
    r = shim.run(in_ns(hosts, py_script(tmp_path, ORDER) + [NAME, port]))
    assert r.rc == 0, r.err
    return json.loads(r.out.strip().splitlines()[-1])


def curl(shim, hosts, port):
    """curl -v: the addresses it tried, and where it got its answer."""
    r = shim.run(in_ns(hosts, ["curl", "-sv", "-o", "/dev/null", "-w", "%{num_connects} %{remote_ip}\\n",
                               f"http://{NAME}:{port}/"]))
    tried = [line.split()[2].rsplit(":", 1)[0] for line in r.err.splitlines() if "Trying" in line]
    out = r.out.split()
    return tried, (int(out[0]), out[1]) if len(out) == 2 else None


REQUESTS = """
import json, sys, requests
r = requests.get(sys.argv[1], timeout=10)
print(json.dumps({"status": r.status_code}))
"""


def addresses(shim, port):
    e = shim.entry(f"{NAME}:{port}")
    assert e is not None, shim.status()
    return {a["address"]: a for a in e["addresses"]}


@pytest.mark.shim
@pytest.mark.parametrize("dead", ["refusing", "blackholed"])
def test_healthy_first_lists_a_failing_address_last_everywhere_and_back_in_its_place_once_healed(
        shim, server, tmp_path, dead, hosts_file):
    port = free_port()
    hosts = hosts_file
    bad = server("blackhole", bind=ADDRS[0], port=port) if dead == "blackholed" else None
    healthy = [server("http", bind=a, port=port) for a in ADDRS[1:]]
    shim.policy(f'[host "{NAME}"]\naddress_choice = healthy-first\nconnect_timeout = 1s\n'
                f'failure_threshold = 100\nopen_duration = 6s\n')

    # nothing known yet: as resolved, and curl pays for the dead address once
    assert order(shim, tmp_path, hosts, port) == ADDRS
    tried, got = curl(shim, hosts, port)
    assert tried == ADDRS[:2] and got == (1, ADDRS[1]), (tried, got)

    # from now on every process lists it last, and connects once
    assert order(shim, tmp_path, hosts, port) == ADDRS[1:] + ADDRS[:1]
    t0 = time.monotonic()
    tried, got = curl(shim, hosts, port)
    assert tried == [ADDRS[1]] and got == (1, ADDRS[1]), (tried, got)
    assert time.monotonic() - t0 < 1.0 or dead == "refusing"   # (no connect timeout paid)
    before = healthy[0].accepts()
    r = shim.run(in_ns(hosts, py_script(tmp_path, REQUESTS) + [f"http://{NAME}:{port}/"]))
    assert r.last_json() == {"status": 200}, r.err
    assert healthy[0].accepts() == before + 1
    a = addresses(shim, port)
    assert a[ADDRS[0]]["calls"] == 1 and a[ADDRS[0]]["state"] == "open", a   # requests never tried it
    assert a[ADDRS[0]]["last_error"] == ("ECONNREFUSED" if dead == "refusing" else "ETIMEDOUT"), a
    assert a[ADDRS[1]]["state"] == "healthy" and a[ADDRS[1]]["failures"] == 0, a
    assert ADDRS[2] not in a   # never connected to: nothing known, listed in its place
    text = shim.ctl("status").stdout
    assert f"{NAME}:{port}  {ADDRS[0]}  open" in text and f"{NAME}:{port}  {ADDRS[1]}  healthy" in text, text

    # it heals; after open_duration one lookup takes the probe and lists it
    # in its place; its connect succeeds and everyone lists it there again
    if bad:
        bad.stop()
    server("http", bind=ADDRS[0], port=port)
    wait = a[ADDRS[0]]["probe_in_ms"] / 1000 + 0.2
    time.sleep(max(wait, 0))
    tried, got = curl(shim, hosts, port)
    assert tried == [ADDRS[0]] and got == (1, ADDRS[0]), (tried, got)
    assert addresses(shim, port)[ADDRS[0]]["state"] == "healthy"
    assert order(shim, tmp_path, hosts, port) == ADDRS


CONNECT_ALL = """
import errno, json, socket, sys, time
t0 = time.monotonic()
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])))   # no timeout of its own: each address in turn
    res = {"ok": True}
except OSError as e:
    res = {"ok": False, "errno": errno.errorcode.get(e.errno, str(e.errno))}
res["ms"] = (time.monotonic() - t0) * 1000
print(json.dumps(res))
"""


@pytest.mark.shim
@pytest.mark.parametrize("total", [3000, None])
def test_connect_total_timeout_bounds_the_loop_over_three_blackholed_addresses(shim, server, tmp_path, total,
                                                                              hosts_file):
    port = free_port()
    hosts = hosts_file
    for a in ADDRS:
        server("blackhole", bind=a, port=port)
    shim.policy(f'[host "{NAME}"]\nconnect_timeout = 2s\nfailure_threshold = 100\n' +
                (f"connect_total_timeout = {total}ms\n" if total else ""))
    # python: three blocking connects, the last one's error raised
    r = shim.run(in_ns(hosts, py_script(tmp_path, CONNECT_ALL) + [NAME, port]), timeout=30)
    res = r.last_json()
    assert res["ok"] is False and res["errno"] == "ETIMEDOUT", res
    e = shim.entry(f"{NAME}:{port}")
    if total:
        near(res["ms"], total)
        # two connects timed out (2 s, then the 1 s left); the third was
        # never tried: the budget was spent
        assert (e["calls"], e["timeouts"]) == (2, 2), e
    else:
        near(res["ms"], 3 * 2000)   # (side by side: without it, a connect timeout per address)
        assert (e["calls"], e["timeouts"]) == (3, 3), e
    if total:
        # curl: non-blocking connects, its own loop over the addresses. It
        # pauses a second of its own after a connect that fails at once, so
        # its whole run is the budget and its pauses: what is asserted is
        # that it tried the first two for 3 s and was never let wait on
        # the third (without the budget: 2 s on each)
        t0 = time.monotonic()
        r = shim.run(in_ns(hosts, ["curl", "-sv", "-o", "/dev/null", f"http://{NAME}:{port}/"]), timeout=30)
        ms = (time.monotonic() - t0) * 1000
        assert r.rc in (7, 28), (r.rc, r.err)
        assert f"Immediate connect fail for {ADDRS[2]}: Connection timed out" in r.err, r.err
        assert ms >= total - 5, ms
        e2 = shim.entry(f"{NAME}:{port}")
        assert e2["timeouts"] - e["timeouts"] in (1, 2), e2   # .2's 2 s, then .3's last second if curl came in time


STALE = """
import errno, json, socket, sys, time
a_port, b_port = int(sys.argv[1]), int(sys.argv[2])
try:
    socket.create_connection(("127.0.0.2", a_port))   # the table's one slot; its connect timeout
except OSError as e:
    first = errno.errorcode.get(e.errno)
time.sleep(2)   # past that attempt's budget
t0 = time.monotonic()
try:
    socket.create_connection(("127.0.0.3", b_port), timeout=5)   # no slot left: uncounted (non-blocking)
    second = "ok"
except OSError as e:
    second = errno.errorcode.get(e.errno) or str(e)
print(json.dumps({"first": first, "second": second, "ms": (time.monotonic() - t0) * 1000}))
"""


@pytest.mark.shim
def test_a_connect_with_no_slot_is_not_cut_by_an_earlier_attempts_budget(shim, server, tmp_path):
    """A connect that enters no attempt (the table had no slot for it) must
    not be bounded by the budget of the thread's attempt before: it gets
    its whole connect timeout (it was given none: a deadline long past)."""
    a = server("blackhole", bind=ADDRS[0])
    b = server("blackhole", bind=ADDRS[1])
    shim.policy("[defaults]\nconnect_timeout = 1s\nconnect_total_timeout = 1500ms\nfailure_threshold = 100\n")
    r = shim.run(py_script(tmp_path, STALE) + [a.port, b.port], env={"NETSHIM_TABLE_SLOTS": "1"})
    res = r.last_json()
    assert (res["first"], res["second"]) == ("ETIMEDOUT", "ETIMEDOUT"), res
    near(res["ms"], 1000)
    assert json.loads(shim.ctl("status", "--json").stdout)["turned_away"] >= 1

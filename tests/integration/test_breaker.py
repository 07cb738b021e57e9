"""The breaker across real programs and processes: trips, fails fast with
ECONNREFUSED without touching the network, recovers by hand or by itself."""
import os
import shutil
import subprocess
import time

import pytest

from clients import PY_NONBLOCK, PY_REQUESTS, PY_SOCKET
from conftest import client, py_script

TRIP = """
[defaults]
connect_timeout = 500ms
read_timeout = 500ms
failure_threshold = 3
window = 30s
open_duration = 30s
"""


def trip(shim, srv, tmp_path, n=3):
    """n separate Python processes each time out once on a silent server."""
    for _ in range(n):
        res = shim.run(py_script(tmp_path, PY_SOCKET) + [srv.host, srv.port], timeout=20).last_json()
        assert res["errno"] == "ETIMEDOUT", res


def curl(shim, srv, **kw):
    return shim.run(["curl", "-sS", "-o", "-", "-w", "%{http_code}", srv.url], timeout=30, **kw)


@pytest.mark.shim
def test_trips_across_processes_and_curl_fails_fast_with_exit_7(shim, server, tmp_path):
    srv = server("silent")
    shim.policy(TRIP)
    trip(shim, srv, tmp_path)
    e = shim.entry(srv.dest)
    assert e["state"] == "open" and e["failures"] == 3 and e["failures_in_window"] == 3
    assert e["opened_at"] is not None and e["half_open_at"] is not None
    accepts = srv.accepts()
    assert accepts == 3
    for _ in range(5):
        r = curl(shim, srv)
        assert r.rc == 7, (r.rc, r.err)
        assert r.elapsed < 1.0
    assert srv.accepts() == accepts, "nothing reached the server while open"
    e = shim.entry(srv.dest)
    assert (e["rejected"], e["calls"]) == (5, 3)


@pytest.mark.shim
def test_fail_fast_makes_no_connect_system_call(shim, server, tmp_path):
    if not shutil.which("strace"):
        pytest.fail("strace is needed (tools/install-deps.sh installs it)")
    srv = server("refuse")
    shim.policy(TRIP)
    assert shim.ctl("open", srv.dest).returncode == 0
    log = tmp_path / "strace.log"
    r = shim.run(["strace", "-f", "-e", "trace=connect", "-o", log,
                  client("fclient"), srv.host, srv.port])
    assert r.last_json()["connect"] == "ECONNREFUSED"
    traced = [l for l in log.read_text().splitlines() if f"htons({srv.port})" in l]
    assert traced == [], traced
    assert shim.entry(srv.dest)["rejected"] == 1


@pytest.mark.shim
def test_nonblocking_connect_fails_fast_too(shim, server, tmp_path):
    srv = server("silent")
    shim.policy(TRIP)
    assert shim.ctl("open", srv.dest).returncode == 0
    res = shim.run(py_script(tmp_path, PY_NONBLOCK) + [srv.host, srv.port, "wait"]).last_json()
    # a non-blocking connect learns of a refusal as from the kernel (issue 20, defect 3)
    assert res == {"connect": "EINPROGRESS", "so_error": "ECONNREFUSED"}, res
    assert srv.accepts() == 0
    assert shim.entry(srv.dest)["rejected"] == 1


# The whole sequence a non-blocking program sees of a refused connect, by
# each way of waiting: what connect() says, what the wait reports, SO_ERROR,
# and a connect() again (once with SO_ERROR read first, once without).
NB_SEQUENCE = r'''
import errno, json, select, socket, sys
host, port = sys.argv[1], int(sys.argv[2])
name = lambda e: errno.errorcode.get(e, "OK") if e else "OK"
out = {}
for how in ("poll", "select", "epoll-et"):
    for ask_first in (True, False):
        s = socket.socket(); s.setblocking(False)
        seq = [name(s.connect_ex((host, port)))]
        if how == "poll":
            p = select.poll(); p.register(s, select.POLLIN | select.POLLOUT)
            ev = p.poll(3000)
            seq.append(sorted(n for m, n in ((select.POLLIN, "in"), (select.POLLOUT, "out"),
                                             (select.POLLERR, "err"), (select.POLLHUP, "hup")) if ev and ev[0][1] & m))
        elif how == "select":
            r, w, x = select.select([s], [s], [s], 3)
            seq.append([bool(r), bool(w), bool(x)])
        else:
            ep = select.epoll(); ep.register(s, select.EPOLLIN | select.EPOLLOUT | select.EPOLLET)
            ev = ep.poll(3)
            seq.append(sorted(n for m, n in ((select.EPOLLIN, "in"), (select.EPOLLOUT, "out"),
                                             (select.EPOLLERR, "err"), (select.EPOLLHUP, "hup")) if ev and ev[0][1] & m))
            seq.append(len(ep.poll(0.1)))   # edge-triggered: reported once
        if ask_first:
            seq.append(name(s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)))
        seq.append(name(s.connect_ex((host, port))))
        out[f"{how}/{'so_error' if ask_first else 'connect'}"] = seq
        s.close()
print(json.dumps(out))
'''


@pytest.mark.shim
def test_nonblocking_fail_fast_is_the_kernels_refusal_in_every_wait(shim, server, tmp_path):
    """The same sequence as a real refusal (a bound port nobody listens
    on, without the shim), while nothing reaches the open destination."""
    refusing = server("refuse")
    real = shim.run(py_script(tmp_path, NB_SEQUENCE) + [refusing.host, refusing.port], shim=False).last_json()
    assert real["poll/connect"][0] == "EINPROGRESS", real
    srv = server("silent")
    shim.policy(TRIP)
    assert shim.ctl("open", srv.dest).returncode == 0
    r = shim.run(py_script(tmp_path, NB_SEQUENCE) + [srv.host, srv.port])
    assert r.last_json() == real, (r.last_json(), real)
    assert r.elapsed < 5
    e = shim.entry(srv.dest)
    assert srv.accepts() == 0 and (e["rejected"], e["calls"]) == (6, 0), e


@pytest.mark.shim
def test_reset_lets_traffic_through_again(shim, server, tmp_path):
    srv = server("silent")
    shim.policy(TRIP)
    trip(shim, srv, tmp_path)
    srv.heal()
    assert curl(shim, srv).rc == 7
    p = shim.ctl("reset", srv.dest)
    assert p.returncode == 0, p.stderr
    r = curl(shim, srv)
    assert r.rc == 0 and r.out.endswith("200") and "hello from faultsrv" in r.out
    e = shim.entry(srv.dest)
    assert e["state"] == "closed" and e["successes"] == 1 and e["failures_in_window"] == 0


@pytest.mark.shim
def test_auto_recovery_probes_after_open_duration(shim, server, tmp_path):
    srv = server("silent")
    shim.policy(TRIP.replace("open_duration = 30s", "open_duration = 1s"))
    trip(shim, srv, tmp_path)
    srv.heal()
    assert curl(shim, srv).rc == 7
    time.sleep(1.1)
    r = curl(shim, srv)
    assert r.rc == 0, r.err
    e = shim.entry(srv.dest)
    assert e["state"] == "closed"


@pytest.mark.shim
def test_auto_recovery_probe_failure_reopens(shim, server, tmp_path):
    srv = server("silent")
    shim.policy(TRIP.replace("open_duration = 30s", "open_duration = 1s"))
    trip(shim, srv, tmp_path)
    time.sleep(1.1)
    res = shim.run(py_script(tmp_path, PY_SOCKET) + [srv.host, srv.port], timeout=20).last_json()
    assert res["errno"] == "ETIMEDOUT"   # the probe went through and failed
    assert shim.entry(srv.dest)["state"] == "open"
    assert curl(shim, srv).rc == 7


@pytest.mark.shim
def test_manual_recovery_waits_for_reset(shim, server, tmp_path):
    srv = server("silent")
    shim.policy(TRIP.replace("open_duration = 30s", "open_duration = 1s") + "recovery = manual\n")
    trip(shim, srv, tmp_path)
    srv.heal()
    time.sleep(1.2)
    assert curl(shim, srv).rc == 7
    e = shim.entry(srv.dest)
    assert e["state"] == "open" and e["half_open_at"] is None
    assert shim.ctl("reset", srv.dest).returncode == 0
    assert curl(shim, srv).rc == 0


@pytest.mark.shim
def test_forced_open_blocks_until_reset(shim, server):
    srv = server("http")
    shim.policy(TRIP)
    assert shim.ctl("open", srv.dest).returncode == 0
    assert shim.entry(srv.dest)["state"] == "forced_open"
    assert curl(shim, srv).rc == 7
    assert srv.accepts() == 0
    assert shim.ctl("reset", "--all").returncode == 0
    assert curl(shim, srv).rc == 0


@pytest.mark.shim
def test_requests_sees_connection_refused_when_open(shim, server, tmp_path):
    srv = server("silent")
    shim.policy(TRIP)
    assert shim.ctl("open", srv.dest).returncode == 0
    res = shim.run(py_script(tmp_path, PY_REQUESTS) + [srv.url]).last_json()
    assert res["ok"] is False and res["errno"] == "ECONNREFUSED", res
    assert res["ms"] < 500


@pytest.mark.shim
def test_monitor_mode_counts_but_never_fails_fast(shim, server):
    srv = server("refuse")
    shim.policy(TRIP + "mode = monitor\n")
    errs = [shim.run([client("fclient"), srv.host, srv.port]).last_json()["connect"] for _ in range(5)]
    assert errs == ["ECONNREFUSED"] * 5
    e = shim.entry(srv.dest)
    # every connect reached the network; the state still moved
    assert (e["calls"], e["failures"], e["rejected"], e["state"]) == (5, 5, 0, "open")


@pytest.mark.shim
def test_refused_connects_count_and_open(shim, server):
    srv = server("refuse")
    shim.policy(TRIP)
    errs = [shim.run([client("fclient"), srv.host, srv.port]).last_json()["connect"] for _ in range(5)]
    assert errs == ["ECONNREFUSED"] * 5
    e = shim.entry(srv.dest)
    assert (e["calls"], e["failures"], e["rejected"], e["timeouts"], e["state"]) == (3, 3, 2, 0, "open")
    assert e["last_error"] == "ECONNREFUSED"


@pytest.mark.shim
def test_reset_by_peer_counts_as_failure(shim, server):
    srv = server("reset")
    shim.policy(TRIP)
    res = shim.run([client("fclient"), srv.host, srv.port]).last_json()
    # the reset can race the end of the handshake: the kernel then reports
    # it from connect() itself, with or without the shim
    err = res["connect"] if res["connect"] != "OK" else res["recv"]
    assert err in ("ECONNRESET", "EPIPE"), res
    e = shim.entry(srv.dest)
    assert (e["calls"], e["failures"], e["last_error"]) == (1, 1, err)


@pytest.mark.shim
def test_nonblocking_connect_failure_seen_through_so_error(shim, server, tmp_path):
    srv = server("refuse")
    shim.policy(TRIP)
    res = shim.run(py_script(tmp_path, PY_NONBLOCK) + [srv.host, srv.port, "wait"]).last_json()
    assert res["connect"] in ("EINPROGRESS", "ECONNREFUSED"), res
    e = shim.entry(srv.dest)
    assert (e["calls"], e["failures"], e["last_error"]) == (1, 1, "ECONNREFUSED")


@pytest.mark.shim
def test_first_byte_is_a_success_and_one_outcome_per_connection(shim, server):
    srv = server("http")
    shim.policy(TRIP)
    r = shim.run([client("fclient"), "--chunk", "1", srv.host, srv.port])
    assert r.rc == 0 and "hello from faultsrv" in r.out
    e = shim.entry(srv.dest)
    assert (e["calls"], e["successes"], e["failures"]) == (1, 1, 0)


@pytest.mark.shim
def test_closing_while_connecting_counts_nothing(shim, server, tmp_path):
    srv = server("blackhole")
    shim.policy(TRIP)
    script = py_script(tmp_path, r'''
import json, socket, sys
s = socket.socket(); s.setblocking(False)
try:
    s.connect(("127.0.0.1", int(sys.argv[1])))
except BlockingIOError:
    pass
s.close()
print(json.dumps({"closed": True}))
''')
    assert shim.run(script + [srv.port]).last_json() == {"closed": True}
    e = shim.entry(srv.dest)
    assert (e["calls"], e["successes"], e["failures"]) == (1, 0, 0)

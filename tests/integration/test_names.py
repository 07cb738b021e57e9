"""Host names, trip rules, connect retries and policy reload."""
import os
import signal
import socket
import time

import pytest

from clients import NODE_GET, PY_REQUESTS, PY_SOCKET
from conftest import LATE_MS, client, near, py_script

BY_NAME = """
[defaults]
read_timeout = 10s
failure_threshold = 3
[host "localhost"]
read_timeout = 1s
"""



@pytest.mark.shim
def test_per_host_deadline_by_name_and_key_is_the_name(shim, server, tmp_path):
    srv = server("silent")
    shim.policy(BY_NAME)
    res = shim.run(py_script(tmp_path, PY_REQUESTS) + [f"http://localhost:{srv.port}/"], timeout=20).last_json()
    assert res["ok"] is False and res["errno"] == "ETIMEDOUT", res
    near(res["ms"], 1000)
    st = shim.status()
    assert list(st) == [f"localhost:{srv.port}"], st


def own_name():
    """This machine's host name, which resolves to 127.0.0.1 here. (curl
    answers "localhost" itself without asking the resolver, so it needs a
    name that goes through getaddrinfo.)"""
    name = socket.gethostname()
    assert socket.gethostbyname(name).startswith("127."), f"{name} must resolve to loopback"
    return name.lower()


@pytest.mark.shim
def test_processes_share_one_breaker_by_name(shim, server, tmp_path):
    srv = server("silent")
    name = own_name()
    shim.policy(BY_NAME.replace('"localhost"', f'"{name}"'))
    url = f"http://{name}:{srv.port}/"
    node = tmp_path / "get.js"
    node.write_text(NODE_GET)
    shim.run(py_script(tmp_path, PY_REQUESTS) + [url], timeout=20)
    shim.run(["node", node, url], timeout=20)
    shim.run([client("fclient"), name, srv.port], timeout=20)
    e = shim.entry(f"{name}:{srv.port}")
    assert (e["failures"], e["state"]) == (3, "open"), e
    accepts = srv.accepts()
    r = shim.run(["curl", "-sS", url])
    assert r.rc == 7
    r = shim.run([client("fclient"), "--gethostbyname", name, srv.port])
    assert r.last_json()["connect"] == "ECONNREFUSED"
    assert srv.accepts() == accepts
    assert shim.entry(f"{name}:{srv.port}")["rejected"] == 2


NAME_AFTER_ADDRESS = r'''
import json, socket, sys
port = int(sys.argv[1])
def hit():
    s = socket.socket()
    s.connect(("127.0.0.1", port))
    s.close()
hit(); hit(); hit()                           # remembered by address (the thread's last destination)
socket.getaddrinfo("localhost", port)         # the same address now comes from a name
hit(); hit()
print(json.dumps({"ok": True}))
'''


@pytest.mark.shim
def test_a_name_resolved_later_rekeys_the_thread_s_last_destination(shim, server, tmp_path):
    """The per-thread memo of the last destination must miss once a name is
    remembered for its address (it would count under the literal key)."""
    srv = server("http")
    shim.policy(BY_NAME)
    assert shim.run(py_script(tmp_path, NAME_AFTER_ADDRESS) + [srv.port]).last_json()["ok"]
    st = shim.status()
    assert st[f"127.0.0.1:{srv.port}"]["calls"] == 3, st
    assert st[f"localhost:{srv.port}"]["calls"] == 2, st


def test_a_literal_address_keeps_its_literal_key(shim, server):
    srv = server("http")
    shim.policy(BY_NAME)
    assert shim.run([client("fclient"), "127.0.0.1", srv.port]).rc == 0
    assert list(shim.status()) == [f"127.0.0.1:{srv.port}"]


@pytest.mark.shim
def test_consecutive_rule(shim, server):
    srv = server("refuse")
    shim.policy("[defaults]\nfailure_threshold = 0\nconsecutive_failures = 3\n")
    runs = [shim.run([client("fclient"), srv.host, srv.port]) for _ in range(3)]
    assert [r.last_json()["connect"] for r in runs] == ["ECONNREFUSED"] * 3
    e = shim.entry(srv.dest)
    assert (e["state"], e["consecutive_failures"], e["calls"]) == ("open", 3, 3)
    # the log line says which rule fired
    assert f"breaker for {srv.dest} opened by rule consecutive_failures" in runs[2].err


@pytest.mark.shim
def test_consecutive_rule_is_reset_by_a_success(shim, server):
    srv = server("silent")
    shim.policy("[defaults]\nfailure_threshold = 0\nconsecutive_failures = 3\nread_timeout = 200ms\n")
    for _ in range(2):
        shim.run([client("fclient"), srv.host, srv.port])
    srv.heal()
    assert shim.run([client("fclient"), srv.host, srv.port]).rc == 0
    srv.proc.send_signal(signal.SIGUSR2)   # silent again
    time.sleep(0.2)
    for _ in range(2):
        shim.run([client("fclient"), srv.host, srv.port])
    e = shim.entry(srv.dest)
    assert (e["state"], e["consecutive_failures"], e["failures"]) == ("closed", 2, 4)


@pytest.mark.shim
def test_rate_rule_closed_at_4_of_10_open_at_6_of_12(shim, server):
    srv = server("http")
    shim.policy("[defaults]\nfailure_threshold = 0\nfailure_rate = 50%\nmin_calls = 10\nread_timeout = 200ms\n")
    for _ in range(6):
        assert shim.run([client("fclient"), srv.host, srv.port]).rc == 0
    srv.proc.send_signal(signal.SIGUSR2)
    time.sleep(0.2)
    for _ in range(4):
        assert shim.run([client("fclient"), srv.host, srv.port]).last_json()["recv"] == "ETIMEDOUT"
    e = shim.entry(srv.dest)
    assert (e["state"], e["successes"], e["failures"]) == ("closed", 6, 4), e
    for _ in range(2):
        shim.run([client("fclient"), srv.host, srv.port])
    e = shim.entry(srv.dest)
    assert (e["state"], e["successes"], e["failures"]) == ("open", 6, 6), e


@pytest.mark.shim
def test_connect_retries_with_backoff_are_counted(shim, server):
    srv = server("refuse")
    shim.policy("[defaults]\nfailure_threshold = 0\nconnect_retries = 2\nretry_backoff = 200ms\n")
    res = shim.run([client("fclient"), srv.host, srv.port]).last_json()
    assert res["connect"] == "ECONNREFUSED"
    # 200 ms * 2^0 and 200 ms * 2^1, each times uniform(0.5, 1.5)
    assert 300 - 5 <= res["connect_ms"] <= 900 + 100, res
    e = shim.entry(srv.dest)
    assert (e["calls"], e["retries"], e["failures"]) == (3, 2, 3), e


@pytest.mark.shim
def test_retries_stop_when_the_breaker_opens(shim, server):
    srv = server("refuse")
    shim.policy("[defaults]\nfailure_threshold = 2\nconnect_retries = 5\nretry_backoff = 50ms\n")
    res = shim.run([client("fclient"), srv.host, srv.port]).last_json()
    assert res["connect"] == "ECONNREFUSED"
    e = shim.entry(srv.dest)
    assert (e["state"], e["calls"], e["retries"], e["rejected"]) == ("open", 2, 1, 1), e


@pytest.mark.shim
def test_a_read_timeout_is_never_retried(shim, server):
    srv = server("silent")
    shim.policy("[defaults]\nconnect_retries = 3\nretry_backoff = 50ms\nread_timeout = 500ms\n")
    res = shim.run([client("fclient"), srv.host, srv.port]).last_json()
    assert res["recv"] == "ETIMEDOUT"
    assert srv.accepts() == 1
    assert shim.entry(srv.dest)["retries"] == 0


@pytest.mark.shim
def test_connect_retries_off_by_default(shim, server):
    srv = server("refuse")
    shim.policy("[defaults]\nfailure_threshold = 0\n")
    shim.run([client("fclient"), srv.host, srv.port])
    e = shim.entry(srv.dest)
    assert (e["calls"], e["retries"]) == (1, 0)


@pytest.mark.shim
def test_policy_reload_in_a_running_process(shim, server, tmp_path):
    srv = server("silent")
    pol = shim.policy('[defaults]\nread_timeout = 5s\n[host "127.0.0.0/8"]\nmode = bypass\n')
    flag = tmp_path / "go"
    script = py_script(tmp_path, r'''
import errno, json, os, socket, sys, time
port, flag = int(sys.argv[1]), sys.argv[2]
def attempt(own_timeout=None):
    s = socket.create_connection(("127.0.0.1", port))
    s.settimeout(own_timeout)
    t0 = time.monotonic()
    try:
        s.recv(1)
        r = "OK"
    except socket.timeout as e:
        r = "own_timeout" if own_timeout else errno.errorcode.get(e.errno, "timeout")
    except OSError as e:
        r = errno.errorcode[e.errno]
    s.close()
    return r, round((time.monotonic() - t0) * 1000)
out = {"first": attempt(0.3)}
print("ready", flush=True)
while not os.path.exists(flag):
    time.sleep(0.05)
time.sleep(1.2)
out["second"] = attempt()
while not os.path.exists(flag + "2"):
    time.sleep(0.05)
time.sleep(1.2)
out["third"] = attempt()
print(json.dumps(out))
''')
    import subprocess
    from conftest import BUILD, base_env
    p = subprocess.Popen([str(BUILD / "shimrun"), "--policy", str(pol), "--"] + script + [str(srv.port), str(flag)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=base_env(shim.table))
    assert p.stdout.readline().strip() == "ready"
    pol.write_text("[defaults]\nread_timeout = 500ms\n")
    flag.write_text("")
    time.sleep(2.5)
    pol.write_text("[defaults]\nread_timeout = nonsense\n")
    (tmp_path / "go2").write_text("")
    out, err = p.communicate(timeout=30)
    import json
    res = json.loads(out.strip().splitlines()[-1])
    assert res["first"][0] == "own_timeout"          # bypassed: only its own timeout
    assert res["second"][0] == "ETIMEDOUT" and 495 <= res["second"][1] <= 800, res
    assert res["third"][0] == "ETIMEDOUT" and 495 <= res["third"][1] <= 800, res   # bad file: kept
    rejected = [l for l in err.splitlines() if "changed policy rejected" in l]
    assert len(rejected) == 1 and "read_timeout" in rejected[0], err

"""shimctl inject --existing (issue 26 item 9): a runtime fault reaches a
keep-alive connection that was open before it was set, on its next request
on that same connection; without --existing only new connections get it."""
import json
import subprocess
import time

import pytest

from conftest import BUILD, base_env, py_script

SESSION = r'''
import json, socket, sys, time
import requests
connects = [0]
real_connect = socket.socket.connect
def counting(self, addr):
    connects[0] += 1
    return real_connect(self, addr)
socket.socket.connect = counting
url = sys.argv[1]
s = requests.Session()
first = s.get(url, timeout=10).status_code
print("READY", flush=True)
sys.stdin.readline()                 # the test injects meanwhile
t0 = time.monotonic()
try:
    second = s.get(url, timeout=10).status_code
except requests.exceptions.ConnectionError as e:
    second = "ConnectionError: " + type(e.args[0]).__name__ if e.args else "ConnectionError"
print(json.dumps({"first": first, "second": second, "ms": (time.monotonic() - t0) * 1000,
                  "connects": connects[0]}))
'''


def session_run(shim, tmp_path, port, inject_args):
    """A requests.Session makes one request, the test injects, the session
    makes its next: the second's result."""
    shim.policy("[defaults]\nfailure_threshold = 0\n")
    cmd = [str(BUILD / "shimrun"), "--policy", str(shim.policy_path), "--"] + py_script(tmp_path, SESSION) + \
        [f"http://127.0.0.1:{port}/"]
    p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=base_env(shim.table, shim.policy_path))
    try:
        assert p.stdout.readline().strip() == "READY", p.stderr.read()
        r = shim.ctl("inject", f"127.0.0.1:{port}", *inject_args)
        assert r.returncode == 0, r.stderr
        p.stdin.write("go\n")
        p.stdin.flush()
        out, err = p.communicate(timeout=30)
    finally:
        p.kill()
    return json.loads(out.strip().splitlines()[-1])


@pytest.mark.shim
@pytest.mark.parametrize("fault,want", [
    ("status 503", 503),
    ("latency 400ms", 200),
    ("refuse", "ConnectionError: ProtocolError"),   # an open connection to a refusing host: a reset
])
def test_an_open_keepalive_connection_gets_the_fault_on_its_next_request(shim, http_server, tmp_path, fault, want):
    port = http_server("200")
    res = session_run(shim, tmp_path, port, [fault, "--existing"])
    assert res["first"] == 200 and res["second"] == want, res
    assert res["connects"] == 1, f"the second request was not on the same connection: {res}"
    if fault.startswith("latency"):
        assert 395 <= res["ms"] <= 1500, res
    e = shim.entry(f"127.0.0.1:{port}")
    assert e["injected"] == 1, e
    faults = json.loads(shim.ctl("faults", "--json").stdout)["faults"]
    assert [(f["existing"], f["applied"]) for f in faults] == [(True, 1)], faults


def test_without_existing_an_open_connection_is_left_alone(shim, http_server, tmp_path):
    port = http_server("200")
    res = session_run(shim, tmp_path, port, ["status 503"])
    assert (res["first"], res["second"], res["connects"]) == (200, 200, 1), res


@pytest.mark.shim
def test_a_new_connection_after_an_existing_injection_gets_it_once(shim, http_server, tmp_path):
    port = http_server("200")
    res = session_run(shim, tmp_path, port, ["status 503", "--existing"])
    assert res["second"] == 503, res
    # a fresh process: its connection is new, and gets the fault at connect
    r = shim.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", f"http://127.0.0.1:{port}/"])
    assert r.out == "503", (r.out, r.err)
    # once each: the session's connection by --existing, curl's at its connect
    assert shim.entry(f"127.0.0.1:{port}")["injected"] == 2, shim.entry(f"127.0.0.1:{port}")

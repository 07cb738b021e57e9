"""The shadow policy (issue 25 item 1): a second policy judged live on the
same outcomes, never enforced. Live failure_threshold = 10, shadow 3: after
three failures the shadow is open (shadow_opened names the rule), every
connect still goes out, and shadow_would_reject counts the ones the shadow
would have turned away. A shadow policy with errors is said once and
ignored; the live policy never depends on it."""
import json

import pytest

from conftest import PY, py_script

LIVE = "[defaults]\nfailure_threshold = 10\nwindow = 30s\n"
SHADOW = "[defaults]\nfailure_threshold = 3\nwindow = 30s\nopen_duration = 30s\n"

LOOP = r"""
import json, socket, sys
host, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
errs = []
for _ in range(n):
    try:
        s = socket.create_connection((host, port), timeout=5)
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        errs.append(len(s.recv(100)))
        s.close()
    except OSError as e:
        errs.append(e.errno)
print(json.dumps({"results": errs}))
"""


def events(shim):
    return [json.loads(l) for l in shim.ctl("events", "--json").stdout.splitlines() if l.strip()]


@pytest.mark.shim
def test_the_shadow_opens_after_its_threshold_and_the_program_is_not_touched(shim, server):
    (shim.tmp / "shadow.conf").write_text(SHADOW)
    shim.policy(LIVE + "shadow_policy = shadow.conf\n")   # beside the policy file
    srv = server("reset")
    for _ in range(6):
        shim.run(["curl", "-s", "-o", "/dev/null", "--max-time", "5", srv.url])
    assert srv.accepts() == 6                       # every connect went out
    e = shim.entry(srv.dest)
    assert e["state"] == "closed" and e["failures"] == 6 and e["rejected"] == 0, e
    assert e["shadow_state"] == "open" and e["shadow_would_reject"] == 3, e
    opened = [v for v in events(shim) if v["event"] == "shadow_opened"]
    assert len(opened) == 1 and opened[0]["rule"] == "failure_threshold" and opened[0]["destination"] == srv.dest
    assert not [v for v in events(shim) if v["event"] == "opened"]
    text = shim.ctl("status").stdout
    assert f"shadow policy: {srv.dest} open, would have turned away 3" in text, text


@pytest.mark.shim
def test_netshim_shadow_policy_names_it_for_one_run(shim, server):
    sp = shim.tmp / "s.conf"
    sp.write_text(SHADOW.replace("failure_threshold = 3", "consecutive_failures = 2"))
    shim.policy(LIVE)
    srv = server("reset")
    r = shim.run(py_script(shim.tmp, LOOP) + [srv.host, srv.port, 5], env={"NETSHIM_SHADOW_POLICY": str(sp)})
    assert srv.accepts() == 5, r.err
    e = shim.entry(srv.dest)
    assert e["shadow_state"] == "open" and e["shadow_would_reject"] == 3, e
    assert e["state"] == "closed"


@pytest.mark.shim
def test_a_shadow_policy_with_errors_is_said_once_and_the_live_one_governs(shim, server):
    bad = shim.tmp / "bad.conf"
    bad.write_text("[defaults]\nfailure_threshold = three\n")
    shim.policy("[defaults]\nconsecutive_failures = 2\nopen_duration = 30s\n")
    srv = server("reset")
    r = shim.run(py_script(shim.tmp, LOOP) + [srv.host, srv.port, 4], env={"NETSHIM_SHADOW_POLICY": str(bad)})
    lines = [l for l in r.err.splitlines() if "shadow policy ignored" in l]
    assert len(lines) == 1 and f"{bad}:2" in lines[0], r.err
    assert srv.accepts() == 2                       # the live breaker opened after 2 and refused the rest
    e = shim.entry(srv.dest)
    assert e["state"] == "open" and e["rejected"] == 2 and e["shadow_state"] is None, e


def test_shadow_policy_belongs_in_defaults(shim, tmp_path):
    p = tmp_path / "p.conf"
    p.write_text('[defaults]\nread_timeout = 1s\n[host "example.com"]\nshadow_policy = x.conf\n')
    r = shim.ctl("check", p)
    assert r.returncode == 2 and f"{p}:4" in r.stderr and "only in [defaults]" in r.stderr, r.stderr


@pytest.mark.parametrize("shadow, msg", [
    (None, "cannot open: No such file or directory"),
    ("[defaults]\nread_timeout = 3\n", "shadow.conf:2: read_timeout: bad duration '3'"),
])
def test_check_loads_the_shadow_policy_too(shim, tmp_path, shadow, msg):
    """A shadow_policy that is missing or broken fails shimctl check (else it
    shows only in the stderr of every governed program)."""
    if shadow is not None:
        (tmp_path / "shadow.conf").write_text(shadow)
    pol = shim.policy("[defaults]\nshadow_policy = shadow.conf\n")
    p = shim.ctl("check", pol)
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert f"{pol}: shadow_policy {tmp_path / 'shadow.conf'} does not load" in p.stderr, p.stderr
    assert msg in p.stderr, p.stderr
    (tmp_path / "shadow.conf").write_text("[defaults]\nread_timeout = 3s\n")
    p = shim.ctl("check", pol)
    assert p.returncode == 0 and "shadow policy" in p.stdout, (p.stdout, p.stderr)


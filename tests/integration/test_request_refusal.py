"""An open breaker reaches connections already open: a request about to
start on a keep-alive connection (HTTP/1, clear text) fails at its start
with ECONNREFUSED, before a byte of it leaves, counted rejected, as a
connect to the destination would. Before, a requests.Session kept sending
to an open destination over the connection it already had."""
import json
import time

import pytest

from conftest import py_script
from test_pacing import RecordingServer

SESSION = r"""
import json, os, sys, time, requests
base, flag = sys.argv[1], sys.argv[2]
s = requests.Session()
out = {"first": s.get(base + "p/1", timeout=10).status_code}
open(flag, "w").close()
while os.path.exists(flag):          # the test opens the breaker meanwhile
    time.sleep(0.02)
try:
    out["second"] = s.get(base + "p/2", timeout=10).status_code
except requests.exceptions.ConnectionError as e:
    out["second"] = "refused" if "Connection refused" in str(e) else str(e)[:200]
print(json.dumps(out))
"""


@pytest.fixture
def site():
    s = RecordingServer(keepalive=True, pages=10)
    yield s
    s.stop()


@pytest.mark.shim
def test_an_open_breaker_refuses_the_next_request_on_an_open_connection(shim, site, tmp_path):
    shim.policy("[defaults]\nconnect_timeout = 2s\nread_timeout = 5s\n")
    flag = tmp_path / "first-done"
    import subprocess
    from conftest import BUILD, base_env
    cmd = [str(BUILD / "shimrun"), "--policy", str(shim.policy_path), "--"] + \
        [str(a) for a in py_script(tmp_path, SESSION)] + [site.url, str(flag)]
    p = subprocess.Popen(cmd, env=base_env(shim.table, shim.policy_path), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    end = time.monotonic() + 20
    while not flag.exists() and time.monotonic() < end:
        time.sleep(0.02)
    assert shim.ctl("open", site.dest).returncode == 0
    flag.unlink()
    out, err = p.communicate(timeout=30)
    assert json.loads(out.strip().splitlines()[-1]) == {"first": 200, "second": "refused"}, (out, err)
    assert site.paths == ["/p/1"], site.paths   # the second never left
    assert len(site.accepts) == 1               # and no new connection either
    e = shim.entry(site.dest)
    assert e["rejected"] >= 1, e

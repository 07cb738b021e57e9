"""shimrun out of descriptors (seccomp engine): it holds a copy of each
socket whose connect is in progress, so a program with many connects in
flight can take all of shimrun's descriptors. shimrun raises its own soft
limit to the hard one at start; when it still runs out, a connect it
cannot take a copy of is refused (ENOBUFS) and shimrun says so once,
instead of letting it through with no deadline, no count and no word.

Here shimrun's limit is lowered to 48 after it started (prlimit), and the
program opens 120 non-blocking connects to a listener that drops SYNs:
each must end within its connect_timeout (ETIMEDOUT) or be refused
(ENOBUFS); before, about 80 stayed pending for as long as the kernel
retried."""
import json
import resource
import socket
import subprocess
import time

import pytest

from conftest import BUILD, base_env, py_script

MANY = r"""
import errno, json, select, socket, sys, time
port, n = int(sys.argv[1]), int(sys.argv[2])
time.sleep(1.0)   # (the test lowers shimrun's limit meanwhile)
out, socks = {}, []
for _ in range(n):
    s = socket.socket()
    s.setblocking(False)
    e = s.connect_ex(("127.0.0.1", port))
    if e == errno.EINPROGRESS:
        socks.append(s)
    else:
        k = errno.errorcode.get(e, str(e))
        out[k] = out.get(k, 0) + 1
        s.close()
time.sleep(3.5)   # connect_timeout is 1 s
for s in socks:
    _, w, _ = select.select([], [s], [], 0)
    e = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) if w else 0
    k = "pending" if not w else errno.errorcode.get(e, str(e)) if e else "connected"
    out[k] = out.get(k, 0) + 1
print(json.dumps(out))
"""


@pytest.fixture
def blackhole():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(0)
    port = s.getsockname()[1]
    fill = []
    for _ in range(4):   # the accept queue full: later SYNs are dropped
        c = socket.socket()
        c.setblocking(False)
        c.connect_ex(("127.0.0.1", port))
        fill.append(c)
    time.sleep(0.3)
    yield port
    for c in fill:
        c.close()
    s.close()


@pytest.mark.shim
def test_connects_shimrun_cannot_copy_are_refused_and_said(shim, blackhole, tmp_path):
    shim.policy("[defaults]\nconnect_timeout = 1s\nfailure_threshold = 60000\n")
    cmd = [str(BUILD / "shimrun"), "--policy", str(shim.policy_path), "--engine", "seccomp", "--"] + \
        [str(a) for a in py_script(tmp_path, MANY)] + [str(blackhole), "120"]
    p = subprocess.Popen(cmd, env=base_env(shim.table, shim.policy_path), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    time.sleep(0.3)
    resource.prlimit(p.pid, resource.RLIMIT_NOFILE, (48, 48))
    out, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    got = json.loads(out.strip().splitlines()[-1])
    assert got.get("pending", 0) == 0, got                  # none let through ungoverned
    assert got.get("ETIMEDOUT", 0) + got.get("ENOBUFS", 0) == 120, got
    assert got.get("ENOBUFS", 0) > 0, got                   # the limit was reached
    assert err.count("shimrun: out of descriptors") == 1, err

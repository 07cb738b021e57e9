"""Connections that are not connect(): TCP Fast Open (sendto, sendmsg or
sendmmsg with MSG_FASTOPEN and an address), io_uring (IORING_OP_CONNECT is no system
call), and a connect whose address a second thread rewrites after the
seccomp engine read it (AF_UNIX when read, AF_INET when the kernel reads
it again). With the destination's breaker open, none may reach it.

The preload engine makes a Fast Open send a governed connect and a send
(what a kernel without a Fast Open cookie does); the seccomp engine answers
MSG_FASTOPEN with EOPNOTSUPP (as a kernel without Fast Open) and
io_uring_setup with ENOSYS (as Docker's default profile), and connects an
inet socket itself with the address it read, never letting the kernel
read it again. Before: tfo, tfomsg, io_uring and the rewritten address all
reached the server through an open breaker."""
import json

import pytest

from conftest import BUILD


def run(shim, engine, mode, port):
    if engine == "seccomp":
        r = shim.run(["--engine", "seccomp", "--", BUILD / "escapes-static", mode, port], shimrun_args=True,
                     timeout=30)
        assert "governed by the seccomp engine" in r.err, r.err
    else:
        r = shim.run([BUILD / "escapes", mode, port], timeout=30)
    assert r.rc == 0, r.err
    return json.loads(r.out.strip().splitlines()[-1])


@pytest.fixture
def opened(shim, server):
    """A server whose breaker is forced open, after one connect (the control)."""
    srv = server("http")
    shim.policy("[defaults]\nconnect_timeout = 2s\nread_timeout = 5s\n")
    assert run(shim, "preload", "connect", srv.port)["result"] == "connected"
    assert shim.ctl("open", srv.dest).returncode == 0
    return srv


@pytest.mark.shim
@pytest.mark.parametrize("engine,mode,refusal", [
    ("preload", "connect", "ECONNREFUSED"),
    ("preload", "tfo", "ECONNREFUSED"),
    ("preload", "tfomsg", "ECONNREFUSED"),
    ("preload", "tfommsg", "ECONNREFUSED"),
    ("seccomp", "connect", "ECONNREFUSED"),
    ("seccomp", "tfo", "EOPNOTSUPP"),
    ("seccomp", "tfomsg", "EOPNOTSUPP"),
    ("seccomp", "tfommsg", "EOPNOTSUPP"),
    ("seccomp", "uringsetup", "ENOSYS"),
    ("seccomp", "toctou", ("EAFNOSUPPORT", "ECONNREFUSED")),   # (as each try's read saw the address)
])
def test_no_way_around_an_open_breaker(shim, opened, engine, mode, refusal):
    rep = run(shim, engine, mode, opened.port)
    assert rep["result"] in ((refusal,) if isinstance(refusal, str) else refusal), rep
    assert opened.accepts() == 1   # the control's, and no other


@pytest.mark.shim
@pytest.mark.parametrize("mode", ["tfo", "tfomsg", "tfommsg"])
def test_a_fast_open_send_is_a_governed_connect_and_its_request(shim, server, mode):
    srv = server("http")
    shim.policy("[defaults]\nconnect_timeout = 2s\nread_timeout = 5s\n")
    rep = run(shim, "preload", mode, srv.port)
    assert rep["result"] == "connected" and rep["answer"] > 0, rep   # the request went, the answer came
    e = shim.entry(srv.dest)
    assert e is not None and e["calls"] == 1 and e["successes"] == 1, e


# ---- what the seccomp engine cannot act on is said plainly (issue 47 item 6)

def as_nobody(cmd, table):
    import subprocess
    from conftest import base_env
    env = base_env(table)
    return subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] + [str(c) for c in cmd],
                          capture_output=True, text=True, timeout=30, env=env)


@pytest.mark.shim
def test_an_unprivileged_shimrun_says_when_it_cannot_act_on_its_program(shim, server, tmp_path):
    import os
    import shutil
    import uuid
    if not shutil.which("setpriv"):
        pytest.skip("setpriv (util-linux) is not installed")
    srv = server("http")
    table = f"netshim.nobody.{uuid.uuid4().hex[:8]}"
    # a program that made itself non-dumpable: shimrun (uid 65534, no
    # CAP_SYS_PTRACE) can neither read its connect's address nor copy its
    # socket, and says so instead of claiming to govern it
    try:
        r = as_nobody([BUILD / "shimrun", "--engine", "seccomp", "--", BUILD / "escapes-static", "nodump",
                       srv.port], table)
        assert "governed by the seccomp engine" in r.stderr, r.stderr
        assert r.stderr.count("shimrun: cannot act on pid") == 1, r.stderr
        # ...and status says it too, in --json and in text
        st = as_nobody([BUILD / "shimctl", "--table", table, "status", "--json"], table)   # (its owner)
        assert st.returncode == 0 and json.loads(st.stdout)["ungoverned_connects"] >= 1, (st.stdout, st.stderr)
        st = as_nobody([BUILD / "shimctl", "--table", table, "status"], table)
        assert "connects the seccomp engine could not act on" in st.stdout, st.stdout
        # an execute-only program: shimrun cannot even tell what it is
        xonly = tmp_path / "xonly"
        shutil.copy(BUILD / "escapes-static", xonly)
        os.chmod(xonly, 0o711)
        os.chmod(tmp_path, 0o755)
        for d in list(tmp_path.parents)[:3]:
            os.chmod(d, os.stat(d).st_mode | 0o011)
        r = as_nobody([BUILD / "shimrun", "--", xonly, "connect", srv.port], table)
        assert "cannot be read by shimrun (execute-only?)" in r.stderr, r.stderr
    finally:
        for f in (f"/dev/shm/{table}",):
            if os.path.exists(f):
                os.unlink(f)

"""A blocking connect is bounded through SO_SNDTIMEO, and the shim puts
the program's own value back right after the connect (three system calls
a blocking connection). Left there, the limit cut blocking sends short
(a sendmmsg lost the rest of a cut message), turned a write restarted by
SA_RESTART into EINTR, and went with the socket to programs without the
shim (SCM_RIGHTS, an exec the shim does not see). The program sees its own
semantics: every byte sent by its one call, SO_SNDTIMEO 0 when it asks, a
restarted call restarted, and any program it hands the socket to never
meets the limit."""
import shutil
import socket
import subprocess
import threading
import time

import pytest

from conftest import BUILD, NEGATIVE, base_env, client, each_stopped, py_script, stop_listener

MIB8 = 8 * 1024 * 1024
POLICY = "[defaults]\nconnect_timeout = 1s\nread_timeout = 30s\n"


class SlowDrain:
    """Accepts one connection at a time; reads nothing for `wait` seconds
    (the client's send stalls past its 1 s connect timeout), then drains
    slowly, 64 KiB every 20 ms, counting the bytes until the end of stream."""

    def __init__(self, wait=1.6):
        self.wait = wait
        self.got = []
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._drain, args=(c,), daemon=True).start()

    def _drain(self, c):
        c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
        time.sleep(self.wait)
        n = 0
        try:
            while True:
                d = c.recv(65536)
                if not d:
                    break
                n += len(d)
                time.sleep(0.02)
        except OSError as e:   # (said, not lost: a loaded run once saw no end here)
            n = f"{n} bytes, then {e!r}"
        c.close()
        self.got.append(n)

    def total(self, timeout=60):
        end = time.monotonic() + timeout
        while not self.got and time.monotonic() < end:
            time.sleep(0.05)
        return self.got[0] if self.got else f"no end of stream in {timeout} s"

    def stop(self):
        stop_listener(self.sock)


@pytest.fixture
def drain():
    yield from each_stopped(SlowDrain)


@pytest.mark.shim
@pytest.mark.parametrize("call,restart", [("send", False), ("write", False), ("writev", False), ("sendmsg", False),
                                          ("sendmmsg", False), ("send", True), ("write", True)])
def test_one_blocking_call_of_8_mib_to_a_slow_peer_sends_it_all(shim, drain, call, restart):
    # sendmmsg: two messages of 4 MiB, the first cut inside by a limit left
    # in the kernel lost its rest; restart: a SIGALRM every 20 ms with
    # SA_RESTART while the program writes on after short counts, where a
    # finite SO_SNDTIMEO makes the kernel answer EINTR (bare restarts)
    srv = drain()
    shim.policy(POLICY)
    r = shim.run([client("fclient"), "--send-bytes", MIB8, "--send-with", call] + (["--sa-restart"] if restart else []) +
                 ["127.0.0.1", srv.port], timeout=120)
    rep = r.last_json()
    # one call, every byte: not EAGAIN or a short count at the 1 s limit
    assert rep["sent"] == MIB8 and rep["send_errno"] == "OK", rep
    assert rep["send_ms"] >= 1000, rep          # it did stall past the connect timeout
    assert rep["sndtimeo_us"] == 0, rep         # the program set none, and is told so
    if restart:
        assert rep["alarms"] >= 20, rep         # the signals did come during the call
    assert srv.total() == MIB8
    assert r.rc == 0, r.err
    e = shim.entry(f"127.0.0.1:{srv.port}")
    assert e["failures"] == 0, e


SENDALL = r"""
import json, socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))   # blocking, no timeout
try:
    s.sendall(b"x" * int(sys.argv[2]))
    err = 0
except OSError as e:
    err = e.errno
tv = s.getsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, 16)
s.close()
print(json.dumps({"err": err, "sndtimeo": tv.hex()}))
"""


@pytest.mark.shim
def test_python_sendall_to_a_slow_peer_is_not_cut_by_the_connect_timeout(shim, drain, tmp_path):
    # sendall goes on after a short count by itself; a send that moves
    # nothing for the whole limit (its second, the peer still not reading)
    # would be EAGAIN, which it raises
    srv = drain(wait=2.6)
    shim.policy(POLICY)
    r = shim.run(py_script(tmp_path, SENDALL) + [srv.port, MIB8], timeout=120)
    assert r.rc == 0, r.err
    assert r.last_json() == {"err": 0, "sndtimeo": "00" * 16}, r.out
    assert srv.total() == MIB8
    e = shim.entry(f"127.0.0.1:{srv.port}")   # (governed: under its connect timeout)
    assert e["calls"] == 1 and e["failures"] == 0, e


# The program connects, keeps the socket as fd 9 for a child (not
# close-on-exec) and starts a shell whose cat writes 8 MiB into it: by exec,
# by system() and by posix_spawn (glibc's own exec, which the shim never
# sees). cat is another program: it never set a send timeout and must not
# meet one.
CHILD = r"""
import ctypes, os, socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
os.dup2(s.fileno(), 9)            # fd 9: inheritable (the socket itself is close-on-exec)
sh = "head -c %s /dev/zero | cat >&9; echo cat=$? >&2" % sys.argv[2]
how = sys.argv[3]
if how == "exec":
    os.execv("/bin/sh", ["sh", "-c", sh])
elif how == "raw_execve":         # the kernel's execve, not libc's: no wrapper sees it
    env = [k.encode() + b"=" + v.encode() for k, v in os.environ.items() if k != "LD_PRELOAD"]
    argv = [b"/bin/sh", b"-c", sh.encode()]
    cargv = (ctypes.c_char_p * (len(argv) + 1))(*argv, None)
    cenv = (ctypes.c_char_p * (len(env) + 1))(*env, None)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall(59, b"/bin/sh", cargv, cenv)
    sys.exit("execve: %d" % ctypes.get_errno())
elif how == "scm_rights":         # handed to a program without the shim
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    kid = (
        "import socket, sys, os\n"
        "b = socket.socket(fileno=%d)\n"
        "_, fds, _, _ = socket.recv_fds(b, 1, 1)\n"
        "c = socket.socket(fileno=fds[0])\n"
        "try:\n"
        "    c.sendall(b'x' * %s); print('cat=0', file=sys.stderr)\n"
        "except OSError as e:\n"
        "    print('cat=%%d' %% e.errno, file=sys.stderr)\n" % (b.fileno(), sys.argv[2]))
    p = __import__("subprocess").Popen([sys.executable, "-c", kid], pass_fds=(b.fileno(),), env=env)
    socket.send_fds(a, [b"!"], [s.fileno()])
    s.close(); os.close(9)
    p.wait()
elif how == "system":
    os.system(sh)
else:
    os.waitpid(os.posix_spawn("/bin/sh", ["sh", "-c", sh], os.environ), 0)
"""


@pytest.mark.shim
@pytest.mark.parametrize("how", ["exec", "system", "posix_spawn", "raw_execve", "scm_rights"])
def test_a_program_started_with_the_socket_never_meets_the_shims_limit(shim, drain, tmp_path, how):
    srv = drain(wait=2.6)   # (cat goes on after a short write; a write stalled for 1 s would be EAGAIN)
    shim.policy(POLICY)
    r = shim.run(py_script(tmp_path, CHILD) + [srv.port, MIB8, how], timeout=120)
    assert "cat=0" in r.err, r.err
    assert srv.total() == MIB8
    e = shim.entry(f"127.0.0.1:{srv.port}")
    assert e["calls"] == 1 and e["failures"] == 0, e


# Twenty blocking connects, each with its request and answer: the system
# calls the shim adds to each, as strace counts them.
CONNECTS = r"""
import socket, sys
for _ in range(20):
    s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
    s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    while s.recv(4096):
        pass
    s.close()
"""


@pytest.mark.shim
def test_a_blocking_connect_costs_three_system_calls_of_the_shims(shim, server, tmp_path):
    if not shutil.which("strace"):
        pytest.skip("strace is not installed (.ci/run installs it)")
    if NEGATIVE:
        pytest.skip("counts the shim's own calls: nothing to count without it")
    srv = server("http")
    shim.policy(POLICY)
    out = tmp_path / "trace"
    env = base_env(shim.table, shim.policy_path)
    env["LD_PRELOAD"] = str((BUILD / "libnetshim.so").resolve())
    subprocess.run(["strace", "-f", "-qq", "-e", "trace=setsockopt,getsockopt", "-o", str(out)] +
                   py_script(tmp_path, CONNECTS) + [str(srv.port)], env=env, check=True, timeout=120,
                   capture_output=True)
    calls = [l for l in out.read_text().splitlines() if "SOL_SOCKET" in l]
    snd = [l for l in calls if "SO_SNDTIMEO" in l]
    rcv = [l for l in calls if "SO_RCVTIMEO" in l]
    # the connect's limit before it and the program's value put back after
    # it, the read timeout: three a connection
    assert len(snd) == 40 and len(rcv) == 20 and len(calls) == 60, calls[:6]


# A signal that ends a blocking send part-way is the program's: the kernel
# returns the bytes sent so far, the same short count the limit leaves, and
# the shim must not carry that call on (a program that ends a stuck send
# with alarm() would hang on a peer that never reads).
SIGNALLED = r"""
import json, signal, socket, sys, time
signal.signal(signal.SIGALRM, lambda *a: None)
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
signal.setitimer(signal.ITIMER_REAL, 0.4)
t0 = time.monotonic()
try:
    n = s.send(b"x" * int(sys.argv[2]))
except OSError as e:
    n = -e.errno
print(json.dumps({"sent": n, "ms": (time.monotonic() - t0) * 1000}))
"""


@pytest.mark.shim
def test_a_send_a_signal_ends_part_way_returns_what_it_sent(shim, drain, tmp_path):
    srv = drain(wait=30)   # never reads while the test lasts
    shim.policy(POLICY)
    r = shim.run(py_script(tmp_path, SIGNALLED) + [srv.port, MIB8], timeout=60)
    assert r.rc == 0, r.err
    rep = r.last_json()
    # what the kernel sent before the signal, at once: not carried on
    assert 0 < rep["sent"] < MIB8, rep
    e = shim.entry(f"127.0.0.1:{srv.port}")
    assert e["calls"] == 1, e

"""Fixtures for the integration tests: real programs under the shim against
the fault server on loopback.

NETSHIM_NEGATIVE_CONTROL=1 runs every program with NETSHIM_DISABLE=1, so the
shim passes everything through: each test marked `shim` must then fail
(tests/negative_control.sh checks that)."""
import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(os.environ.get("NETSHIM_BUILD", ROOT / "build"))
PY = sys.executable
NEGATIVE = os.environ.get("NETSHIM_NEGATIVE_CONTROL") == "1"


def pytest_configure(config):
    config.addinivalue_line("markers", "shim: exercises behaviour the preload library provides")
    config.addinivalue_line("markers", "agent: exercises behaviour netshim-agent provides (test_fleet.py)")


# A deadline fires within this much after it (the bar is 150 ms; the rest is
# room for a loaded CI machine), and never before it.
LATE_MS = 300


def near(ms, deadline_ms, late=LATE_MS):
    assert deadline_ms - 5 <= ms <= deadline_ms + late, f"{ms:.0f} ms for a {deadline_ms} ms deadline"


def base_env(table, policy=None, extra=None):
    env = dict(os.environ)
    for k in ("LD_PRELOAD", "NETSHIM_POLICY", "NETSHIM_DISABLE", "NETSHIM_LOG"):
        env.pop(k, None)
    env["NETSHIM_TABLE"] = table
    if policy:
        env["NETSHIM_POLICY"] = str(policy)
    if NEGATIVE:
        env["NETSHIM_DISABLE"] = "1"
    if extra:
        env.update(extra)
    return env


class Result:
    def __init__(self, proc, elapsed):
        self.rc = proc.returncode
        self.out = proc.stdout
        self.err = proc.stderr
        self.elapsed = elapsed

    def last_json(self):
        """The client's own report: the last JSON line on stderr or stdout."""
        for stream in (self.err, self.out):
            for line in reversed(stream.splitlines()):
                line = line.strip()
                if line.startswith("{"):
                    return json.loads(line)
        raise AssertionError(f"no JSON report in output:\nstdout={self.out}\nstderr={self.err}")


class Shim:
    """One test's table, policy and helpers."""

    def __init__(self, tmp_path):
        self.tmp = tmp_path
        self.table = f"nstest.{os.getpid()}.{uuid.uuid4().hex[:8]}"
        self.policy_path = None

    def policy(self, text):
        self.policy_path = self.tmp / "policy.conf"
        self.policy_path.write_text(text)
        return self.policy_path

    def run(self, args, shim=True, timeout=60, env=None, policy=True, shimrun_args=False):
        """args: the program and its arguments; with shimrun_args, shimrun's
        own options first, then "--" and the program."""
        cmd = [str(BUILD / "shimrun")]
        if policy and self.policy_path:
            cmd += ["--policy", str(self.policy_path)]
        cmd += ([] if shimrun_args else ["--"]) + [str(a) for a in args]
        if not shim:
            cmd = [str(a) for a in args]
        if NEGATIVE:
            timeout = min(timeout, 3)   # without the shim the silent servers would hold each run
        t0 = time.monotonic()
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                           env=base_env(self.table, self.policy_path if policy else None, env))
        return Result(p, time.monotonic() - t0)

    def ctl(self, *args, env=None):
        p = subprocess.run([str(BUILD / "shimctl"), "--table", self.table, *map(str, args)],
                           capture_output=True, text=True, timeout=30, env=base_env(self.table, None, env))
        return p

    def status(self):
        p = self.ctl("status", "--json")
        assert p.returncode == 0, p.stderr
        return {e["destination"]: e for e in json.loads(p.stdout)["entries"]}

    def entry(self, dest):
        return self.status().get(dest)

    def cleanup(self):
        # the table, and what lives beside it: the shadow policy's table and
        # the history's outcome ring
        for name in (self.table, self.table + ".shadow", self.table + ".outcomes"):
            try:
                os.unlink(f"/dev/shm/{name}")
            except FileNotFoundError:
                pass


@pytest.fixture
def shim(tmp_path):
    s = Shim(tmp_path)
    yield s
    s.cleanup()


class Server:
    def __init__(self, mode, tmp, bind="127.0.0.1", **opts):
        self.count_file = tmp / f"accepts.{uuid.uuid4().hex[:6]}"
        cmd = [str(BUILD / "faultsrv"), "--mode", mode, "--bind", bind, "--count-file", str(self.count_file)]
        for k, v in opts.items():
            cmd += ["--" + k.replace("_", "-")] + ([] if v is True else [str(v)])   # True: a flag
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env={"PATH": os.environ["PATH"]})
        line = self.proc.stdout.readline()
        assert line.startswith("PORT "), f"faultsrv did not start: {line!r}"
        self.port = int(line.split()[1])
        self.host = bind
        self.dest = f"[{bind}]:{self.port}" if ":" in bind else f"{bind}:{self.port}"
        self.url = f"http://{'[' + bind + ']' if ':' in bind else bind}:{self.port}/"

    def accepts(self):
        return int(self.count_file.read_text())

    def heal(self):
        """Turn into a healthy HTTP server."""
        self.proc.send_signal(signal.SIGUSR1)
        time.sleep(0.2)

    def stop(self):
        self.proc.kill()
        self.proc.wait()


@pytest.fixture
def server(tmp_path):
    started = []

    def start(mode, **opts):
        s = Server(mode, tmp_path, **opts)
        started.append(s)
        return s

    yield start
    for s in started:
        s.stop()


def client(name):
    return BUILD / name


def open_breaker_by_failing(shim, srv):
    """srv (a test server with a `failing` switch) closes one connection
    unanswered: curl's failure opens the breaker (a policy with
    consecutive_failures = 1); then srv answers again."""
    srv.failing = True
    shim.run(["curl", "-s", "-o", "/dev/null", srv.url])
    assert shim.entry(srv.dest)["state"] == "open", shim.entry(srv.dest)
    srv.failing = False


def py_script(tmp_path, body):
    """Write a Python client script; it prints one JSON line as its report."""
    p = tmp_path / f"client_{uuid.uuid4().hex[:6]}.py"
    p.write_text(body)
    return [PY, str(p)]


# The keep-alive HTTP/1.1 (and HTTPS) server: tools/testsrv/kaserver.py.
KASERVER = ROOT / "tools" / "testsrv" / "kaserver.py"


def self_signed(d):
    """A self-signed certificate for localhost made in d: (cert, key)."""
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=localhost",
                    "-keyout", d / "key.pem", "-out", d / "cert.pem", "-days", "2"], check=True, capture_output=True)
    return d / "cert.pem", d / "key.pem"


@pytest.fixture
def http_server(tmp_path):
    procs = []

    def start(script, tls=False):
        extra = [str(f) for f in self_signed(tmp_path)] if tls else []
        proc = subprocess.Popen([sys.executable, str(KASERVER), script] + extra, stdout=subprocess.PIPE, text=True)
        procs.append(proc)
        port = int(proc.stdout.readline().split()[1])
        return port
    yield start
    for p in procs:
        p.kill()
        p.wait()


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory):
    """A Redis Cluster (3 masters, 3 replicas) for the session's fleet tests."""
    from rediscluster import Cluster
    c = Cluster(str(tmp_path_factory.mktemp("cluster")))
    yield c
    c.close()


def serve_on_loopback(serve, backlog=1024):
    """A listener on 127.0.0.1 (a free port) whose connections serve(conn)
    takes, each in a thread of its own: (the socket, its port)."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(backlog)
    accept_forever(sock, serve)
    return sock, sock.getsockname()[1]


def shimrun_spawn(shim, args, env=None):
    """args started by shimrun under the test's policy and table, its
    output piped (wait_all collects it)."""
    cmd = [str(BUILD / "shimrun"), "--policy", str(shim.policy_path), "--"] + [str(a) for a in args]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=base_env(shim.table, shim.policy_path, env))


def wait_all(procs, timeout=120):
    """Each process's (exit status, stdout, stderr), in order."""
    out = []
    for p in procs:
        o, e = p.communicate(timeout=timeout)
        out.append((p.returncode, o, e))
    return out


def accept_forever(sock, serve):
    """Each connection the listening sock accepts, served by serve(conn) in
    a thread of its own, until sock is stopped (stop_listener)."""
    def loop():
        while True:
            try:
                c, _ = sock.accept()
            except OSError:
                return
            threading.Thread(target=serve, args=(c,), daemon=True).start()
    threading.Thread(target=loop, daemon=True).start()


_shut_listeners = []


def read_head(c, buf=b""):
    """Read from c (after buf, what came before) until a request's head is
    whole: (the head, the bytes after it), or (None, what came) when the
    peer ended first."""
    while b"\r\n\r\n" not in buf:
        d = c.recv(65536)
        if not d:
            return None, buf
        buf += d
    head, rest = buf.split(b"\r\n\r\n", 1)
    return head, rest


def stop_listener(sock):
    """Stop a listening socket that a thread of this process accepts on:
    shut down (its accept() fails at once, a connect to it is refused) and
    closed only when the run ends. Closed at once, its number went to the
    next test's listener while the old accept thread was about to call
    accept() on that number: the old server then took some of the new one's
    connections (a loaded run saw 20-30 requests answered, correctly, by
    the previous test's server, and missing from the new one's record)."""
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    _shut_listeners.append(sock)


def each_stopped(make):
    """A fixture's body: it yields start(**kw), which makes one with
    make(**kw); each made is stopped after the test."""
    made = []

    def start(**kw):
        s = make(**kw)
        made.append(s)
        return s
    yield start
    for s in made:
        s.stop()

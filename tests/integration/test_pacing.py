"""Shaping traffic machine-wide: rate, burst and rate_jitter (pacing).

The server records when each request arrived by the kernel's clock
(SO_TIMESTAMPNS on the listening socket, inherited by every connection), so
that its own threads' scheduling never shows as a gap. Real programs (python
requests, asyncio, hand-written poll, select and epoll loops, curl, Scrapy
and wget --recursive) run under the shim, several processes at once."""
import json
import re
import socket
import struct
import subprocess
import threading
import time

import pytest

from conftest import BUILD, NEGATIVE, PY, base_env, each_stopped, open_breaker_by_failing, py_script, stop_listener

SO_TIMESTAMPNS = 35


class RecordingServer:
    """HTTP/1.1 on loopback, one thread per connection. keepalive: answers
    keep the connection open; else each answer closes it (as an HTTP/1.0
    site does). Pages /p/N link to /p/2N+1 and /p/2N+2 below `pages`."""

    def __init__(self, keepalive=True, delay=0.0, pages=0):
        self.keepalive, self.delay, self.pages = keepalive, delay, pages
        self.failing = False       # close every connection at once, unanswered
        self.lock = threading.Lock()
        self.times = []            # kernel arrival time of each request (CLOCK_REALTIME)
        self.accepts = []          # time.time() at each accept
        self.paths = []
        self.cur = self.peak = 0   # connections open at once
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(1024)
        self.port = self.sock.getsockname()[1]
        self.dest = f"127.0.0.1:{self.port}"
        self.url = f"http://127.0.0.1:{self.port}/"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            with self.lock:
                self.accepts.append(time.time())
                self.cur += 1
                self.peak = max(self.peak, self.cur)
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _page(self, path):
        if not self.pages:
            return b"ok"
        try:
            n = int(path.rsplit("/", 1)[1])
        except ValueError:
            return b""
        kids = [k for k in (2 * n + 1, 2 * n + 2) if k < self.pages]
        return ("<html><body>" + "".join(f'<a href="/p/{k}">{k}</a> ' for k in kids) + "</body></html>").encode()

    def _serve(self, c):
        buf, first = b"", None
        if self.failing:
            with self.lock:
                self.cur -= 1
            c.close()
            return
        try:
            c.settimeout(30)
            while True:
                d, anc, _, _ = c.recvmsg(65536, 64)
                if not d:
                    break
                for _, typ, data in anc:
                    if typ == SO_TIMESTAMPNS and first is None:
                        sec, ns = struct.unpack("qq", data[:16])
                        first = sec + ns / 1e9
                buf += d
                while b"\r\n\r\n" in buf:
                    head, buf = buf.split(b"\r\n\r\n", 1)
                    path = head.split(b" ", 2)[1].decode() if head.count(b" ") >= 2 else "/"
                    with self.lock:
                        self.times.append(first if first is not None else time.time())
                        self.paths.append(path)
                    first = None
                    if self.delay:
                        time.sleep(self.delay)
                    body = self._page(path)
                    status = b"200 OK" if body else b"404 Not Found"
                    conn = b"keep-alive" if self.keepalive else b"close"
                    # X-Path: the request this answers (a client can tell an answer that is not its own)
                    c.sendall(b"HTTP/1.1 " + status + b"\r\nContent-Type: text/html\r\nContent-Length: " +
                              str(len(body)).encode() + b"\r\nX-Path: " + path.encode() + b"\r\nConnection: " +
                              conn + b"\r\n\r\n" + body)
                    if not self.keepalive:
                        return
        except OSError:
            pass
        finally:
            with self.lock:
                self.cur -= 1
            c.close()

    def arrivals(self, start=None, end=None):
        with self.lock:
            t = sorted(self.times)
        return [x for x in t if (start is None or x >= start) and (end is None or x < end)]

    def stop(self):
        stop_listener(self.sock)


@pytest.fixture
def recording():
    yield from each_stopped(RecordingServer)


def gaps(t):
    return [b - a for a, b in zip(t, t[1:])]


def spawn(shim, args):
    cmd = [str(BUILD / "shimrun"), "--policy", str(shim.policy_path), "--"] + [str(a) for a in args]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=base_env(shim.table, shim.policy_path))


# Requests as fast as it can on one keep-alive session, from argv[2] to argv[3] (wall clock).
HAMMER = """
import json, sys, time, requests
start, end = float(sys.argv[2]), float(sys.argv[3])
time.sleep(max(0.0, start - time.time()))
s, n = requests.Session(), 0
while time.time() < end:
    n += s.get(sys.argv[1], timeout=60).status_code == 200
print(json.dumps({"ok": n}))
"""


def hammer(shim, tmp_path, srv, seconds, procs=3):
    start = time.time() + 1.5   # every process imported requests by then
    end = start + seconds
    ps = [spawn(shim, py_script(tmp_path, HAMMER) + [srv.url, start, end]) for _ in range(procs)]
    outs = [p.communicate(timeout=seconds + 60) for p in ps]
    for p, (o, e) in zip(ps, outs):
        assert p.returncode == 0, (o, e)
    return start, end


@pytest.mark.shim
def test_three_processes_on_keepalive_connections_get_five_requests_a_second(shim, recording, tmp_path):
    srv = recording()
    shim.policy("[defaults]\nrate = 5/s\nburst = 1\n")
    start, end = hammer(shim, tmp_path, srv, 10)
    seen = srv.arrivals(start, end)
    # 10 s at 5/s from a full bucket of one: 50 (51 with both ends)
    assert 47 <= len(seen) <= 53, len(seen)
    assert min(gaps(seen)) >= 0.190, sorted(gaps(seen))[:5]
    e = shim.entry(srv.dest)
    assert e["paced"] >= 40 and e["failures"] == 0, e
    assert e["waited_ms_p99"] is not None and e["waited_ms_p99"] >= 128, e


@pytest.mark.shim
def test_rate_jitter_spreads_the_gaps_around_the_interval(shim, recording, tmp_path):
    srv = recording()
    shim.policy("[defaults]\nrate = 5/s\nrate_jitter = 50%\n")
    start, end = hammer(shim, tmp_path, srv, 20)
    g = gaps(srv.arrivals(start, end))
    assert len(g) >= 85, len(g)
    mean = sum(g) / len(g)
    # each gap is the interval times a uniform draw from [0.5, 1.5]: ~100 of
    # them average 200 ms with a standard error of 6 ms
    assert 0.180 <= mean <= 0.220, mean
    assert min(g) >= 0.095 and max(g) <= 0.330, (min(g), max(g))
    assert sum(x < 0.150 for x in g) >= 5 and sum(x > 0.250 for x in g) >= 5, sorted(g)


@pytest.mark.shim
def test_burst_lets_that_many_go_at_once(shim, recording, tmp_path):
    srv = recording()
    shim.policy("[defaults]\nrate = 2/s\nburst = 4\n")
    start, end = hammer(shim, tmp_path, srv, 3, procs=1)
    seen = srv.arrivals(start, end)
    # four at once from the full bucket, then one every 500 ms
    assert seen[3] - seen[0] < 0.1, gaps(seen)
    assert min(gaps(seen[4:])) >= 0.45, gaps(seen)
    assert 8 <= len(seen) <= 11, len(seen)


# One connection, requests one after another from an event loop (asyncio):
# each answer comes 100 ms after its request, inside read_timeout (300 ms),
# but each request waits up to 500 ms for its token first.
ASYNC_SEQ = """
import asyncio, json, sys, time
async def main(port, n):
    r, w = await asyncio.open_connection("127.0.0.1", port)
    ok, t0 = 0, time.monotonic()
    for _ in range(n):
        w.write(b"GET / HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n")
        try:
            await r.readuntil(b"\\r\\n\\r\\n")
            ok += (await r.readexactly(2)) == b"ok"
        except OSError as e:
            print(json.dumps({"ok": ok, "error": e.errno}))
            return
    print(json.dumps({"ok": ok, "elapsed": time.monotonic() - t0}))
asyncio.run(main(int(sys.argv[1]), int(sys.argv[2])))
"""

REQ_SEQ = """
import json, sys, time, requests
s, ok, t0 = requests.Session(), 0, time.monotonic()
for _ in range(int(sys.argv[2])):
    ok += s.get(sys.argv[1], timeout=60).status_code == 200
print(json.dumps({"ok": ok, "elapsed": time.monotonic() - t0}))
"""


@pytest.mark.shim
@pytest.mark.parametrize("prog", ["asyncio", "requests"])
def test_a_held_request_does_not_start_its_read_deadline_before_it_is_sent(shim, recording, tmp_path, prog):
    srv = recording(delay=0.1)
    shim.policy("[defaults]\nrate = 2/s\nread_timeout = 300ms\n")
    script = ASYNC_SEQ if prog == "asyncio" else REQ_SEQ
    r = shim.run(py_script(tmp_path, script) + [srv.port if prog == "asyncio" else srv.url, 4], timeout=60)
    assert r.rc == 0, (r.out, r.err)
    rep = r.last_json()
    assert rep["ok"] == 4, rep
    # three of the four waited ~400 ms each for their token
    assert 1.2 <= rep["elapsed"] <= 3.0, rep
    e = shim.entry(srv.dest)
    assert e["timeouts"] == 0 and e["paced"] == 3, e


# A connection made, its request sent 150 ms later; a second connection at
# once: its token is due an interval after the first request went out, not
# after the first connect took its token.
LATE_FIRST = """
import json, socket, sys, time
port = int(sys.argv[1])
a = socket.create_connection(("127.0.0.1", port))
time.sleep(0.15)
a.sendall(b"GET / HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n")
b = socket.create_connection(("127.0.0.1", port))
b.sendall(b"GET / HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n")
print(json.dumps({"a": a.recv(4096).endswith(b"ok"), "b": b.recv(4096).endswith(b"ok")}))
"""


@pytest.mark.shim
def test_a_connects_token_counts_from_its_first_request(shim, recording, tmp_path):
    srv = recording()
    shim.policy("[defaults]\nrate = 4/s\n")
    r = shim.run(py_script(tmp_path, LATE_FIRST) + [srv.port], timeout=30)
    assert r.rc == 0, (r.out, r.err)
    assert r.last_json() == {"a": True, "b": True}
    t = srv.arrivals()
    assert len(t) == 2 and t[1] - t[0] >= 0.245, t


# A non-blocking socket's second request on one connection: send() says
# EAGAIN, and the wait (poll, select, epoll, epoll edge-triggered) reports
# the socket writable only when the token is due.
NB_WAIT = """
import json, select, socket, sys, time
port, kind = int(sys.argv[1]), sys.argv[2]
s = socket.create_connection(("127.0.0.1", port))
s.setblocking(False)
req = b"GET / HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n"
ep = None
if kind.startswith("epoll"):
    ep = select.epoll()
    ep.register(s, select.EPOLLOUT | (select.EPOLLET if kind == "epollet" else 0))
    ep.poll(0)   # (edge-triggered: the first edge, taken)
def answer():
    buf = b""
    while not buf.endswith(b"ok"):
        select.select([s], [], [], 5)
        buf += s.recv(4096)
def wait_writable(limit):
    if kind == "poll":
        p = select.poll(); p.register(s, select.POLLOUT)
        return bool(p.poll(limit * 1000))
    if kind == "select":
        return bool(select.select([], [s], [], limit)[1])
    return any(ev & select.EPOLLOUT for _, ev in ep.poll(limit))
s.send(req); answer()   # the first rides on the connect's token
try:
    s.send(req)
    print(json.dumps({"eagain": False})); sys.exit(0)
except BlockingIOError:
    pass
t0 = time.monotonic()
early = wait_writable(0.1)      # not writable 100 ms in
ok = wait_writable(5)
dt = time.monotonic() - t0
s.send(req); answer()
print(json.dumps({"eagain": True, "early": early, "writable": ok, "waited": dt}))
"""


@pytest.mark.shim
@pytest.mark.parametrize("kind", ["poll", "select", "epoll", "epollet"])
def test_a_nonblocking_request_waits_its_token_without_blocking(shim, recording, tmp_path, kind):
    srv = recording()
    shim.policy("[defaults]\nrate = 4/s\n")
    r = shim.run(py_script(tmp_path, NB_WAIT) + [srv.port, kind], timeout=30)
    assert r.rc == 0, (r.out, r.err)
    rep = r.last_json()
    assert rep["eagain"] is True, rep
    assert rep["early"] is False and rep["writable"] is True, rep
    assert 0.20 <= rep["waited"] <= 0.50, rep
    t = srv.arrivals()
    assert len(t) == 2 and t[1] - t[0] >= 0.245, t


# Ten connections opened at once by an event loop: each connect waits for a
# token (EINPROGRESS, writable at its turn).
ASYNC_CONNS = """
import asyncio, json, sys
async def one(port):
    r, w = await asyncio.open_connection("127.0.0.1", port)
    w.write(b"GET / HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n")
    await r.readuntil(b"\\r\\n\\r\\n")
    ok = (await r.readexactly(2)) == b"ok"
    w.close()
    return ok
async def main(port):
    res = await asyncio.gather(*(one(port) for _ in range(10)))
    print(json.dumps({"ok": sum(res)}))
asyncio.run(main(int(sys.argv[1])))
"""

CURL_LOOP = """
import json, subprocess, sys
ok = 0
for _ in range(int(sys.argv[2])):
    ok += subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", sys.argv[1]],
                         capture_output=True, text=True).stdout == "200"
print(json.dumps({"ok": ok}))
"""


@pytest.mark.shim
@pytest.mark.parametrize("prog", ["asyncio", "curl"])
def test_each_new_connection_takes_a_token(shim, recording, tmp_path, prog):
    srv = recording(keepalive=False)
    shim.policy("[defaults]\nrate = 10/s\n")
    if prog == "asyncio":
        r = shim.run(py_script(tmp_path, ASYNC_CONNS) + [srv.port], timeout=60)
    else:
        r = shim.run(py_script(tmp_path, CURL_LOOP) + [srv.url, 10], timeout=60)
    assert r.rc == 0, (r.out, r.err)
    assert r.last_json() == {"ok": 10}
    t = srv.arrivals()
    assert len(t) == 10 and min(gaps(t)) >= 0.095, gaps(t)
    assert t[-1] - t[0] >= 0.85, t


# Requests one after another on a keep-alive session; a refused or broken
# one is tried again 50 ms later.
STEADY = """
import sys, time, requests
end = time.monotonic() + float(sys.argv[2])
s = requests.Session()
while time.monotonic() < end:
    try:
        s.get(sys.argv[1], timeout=30)
    except requests.exceptions.RequestException:
        s = requests.Session()
        time.sleep(0.05)
print("{}")
"""


@pytest.mark.shim
def test_after_the_breaker_closes_the_rate_ramps_over_slow_start(shim, recording, tmp_path):
    srv = recording()
    shim.policy("[defaults]\nconsecutive_failures = 1\nfailure_threshold = 0\nopen_duration = 1s\n"
                "rate = 10/s\nslow_start = 4s\n")
    open_breaker_by_failing(shim, srv)
    r = shim.run(py_script(tmp_path, STEADY) + [srv.url, 7.5], timeout=60)
    assert r.rc == 0, r.err
    t = srv.arrivals()
    t0 = t[0]   # the probe's answer: the breaker closed then
    per = lambda a, b: sum(t0 + a <= x < t0 + b for x in t)
    # the rate over time: 10/s x (10 % + 90 % of the time gone)
    assert per(0, 1) <= 3, gaps(t)
    assert 4 <= per(1.5, 2.5) <= 8, gaps(t)
    assert per(4.5, 5.5) >= 9, gaps(t)


# A record that carried an injected latency, reused for a connect queued
# under max_connections: the queued connection must not inherit the fault.
REUSED = """
import json, select, socket, sys, time
pa, pb = int(sys.argv[1]), int(sys.argv[2])
req = b"GET / HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n"
def nb_connect(port):
    s = socket.socket(); s.setblocking(False)
    try:
        s.connect(("127.0.0.1", port))
    except BlockingIOError:
        pass
    return s
s1 = nb_connect(pb)                       # takes B's one place
select.select([], [s1], [], 5)
a = socket.create_connection(("127.0.0.1", pa))   # A: latency 1s injected
ta = time.monotonic(); a.sendall(req); a.recv(4096); a_ms = (time.monotonic() - ta) * 1000
a.close()                                 # its record back to the pool
s2 = nb_connect(pb)                       # queued: B's place is held (the record A left)
time.sleep(0.1)
s1.close()                                # its turn
select.select([], [s2], [], 5)
s2.setblocking(True)
t0 = time.monotonic(); s2.sendall(req); got = s2.recv(4096)
print(json.dumps({"ok": got.endswith(b"ok"), "ms": (time.monotonic() - t0) * 1000, "a_ms": a_ms}))
"""


@pytest.mark.shim
def test_a_queued_connect_on_a_reused_record_inherits_no_fault(shim, recording, tmp_path):
    a, b = recording(keepalive=False), recording(keepalive=False)
    shim.policy(f"[defaults]\nfailure_threshold = 0\n[host \"{a.dest}\"]\nfault = latency 1s\n"
                f"[host \"{b.dest}\"]\nmax_connections = 1\nqueue_timeout = 10s\n")
    r = shim.run(py_script(tmp_path, REUSED) + [a.port, b.port], timeout=30)
    assert r.rc == 0, (r.out, r.err)
    rep = r.last_json()
    assert rep["a_ms"] >= 950, rep          # the fault acted on A
    assert rep["ok"] and rep["ms"] < 500, rep   # and not on B's queued connection
    e = shim.entry(b.dest)
    assert e["injected"] == 0 and e["waited_ms_p99"] is not None, e   # which was queued


# Four requests on one TLS connection: paced where their plaintext is
# written (SSL_write: curl on OpenSSL, python's ssl; gnutls_record_send: wget).
TLS_SEQ = """
import json, ssl, sys, time, urllib.request
ctx = ssl.create_default_context(); ctx.check_hostname = False; ctx.verify_mode = ssl.CERT_NONE
import http.client
c = http.client.HTTPSConnection("127.0.0.1", int(sys.argv[1]), context=ctx)
t0, ok = time.monotonic(), 0
for _ in range(4):
    c.request("GET", "/"); r = c.getresponse(); r.read(); ok += r.status == 200
print(json.dumps({"ok": ok, "elapsed": time.monotonic() - t0}))
"""


@pytest.mark.shim
@pytest.mark.parametrize("prog", ["python", "curl", "wget"])
def test_requests_inside_tls_are_paced(shim, http_server, tmp_path, prog):
    port = http_server("200", tls=True)
    shim.policy("[defaults]\nrate = 4/s\n")
    url = f"https://127.0.0.1:{port}/"
    if prog == "python":
        r = shim.run(py_script(tmp_path, TLS_SEQ) + [port], timeout=60)
        assert r.rc == 0, (r.out, r.err)
        assert r.last_json()["ok"] == 4
    elif prog == "curl":
        r = shim.run(["curl", "-sk", "-o", "/dev/null", "-o", "/dev/null", "-o", "/dev/null", "-o", "/dev/null",
                      url, url, url, url], timeout=60)
        assert r.rc == 0, r.err
    else:
        r = shim.run(["wget", "-q", "--no-check-certificate", "-t", "1", "-O", "/dev/null", url, url, url, url],
                     timeout=60)
        assert r.rc == 0, r.err
    e = shim.entry(f"127.0.0.1:{port}")
    # one connection (its token), three more requests on it: three waits of ~250 ms
    assert e["paced"] == 3 and e["exchanges"] == 4, e
    assert r.elapsed >= 0.7, r.elapsed


SPIDER = """
import json, sys
import scrapy
from scrapy.crawler import CrawlerProcess

class Site(scrapy.Spider):
    name = "site"
    custom_settings = {
        "CONCURRENT_REQUESTS": 32, "CONCURRENT_REQUESTS_PER_DOMAIN": 32, "ROBOTSTXT_OBEY": False,
        "LOG_LEVEL": "ERROR", "TELNETCONSOLE_ENABLED": False, "RETRY_ENABLED": False, "DOWNLOAD_TIMEOUT": 60,
    }
    pages = 0

    def start_requests(self):
        yield scrapy.Request(sys.argv[1] + "p/0")

    def parse(self, response):
        Site.pages += response.status == 200
        for href in response.css("a::attr(href)").getall():
            yield response.follow(href, self.parse)

proc = CrawlerProcess()
proc.crawl(Site)
proc.start()
print(json.dumps({"pages": Site.pages}))
"""


def scrapy_missing():
    return subprocess.run(["/usr/bin/python3", "-c", "import scrapy"], capture_output=True).returncode != 0


@pytest.mark.shim
@pytest.mark.parametrize("prog", ["scrapy", "wget"])
def test_a_real_crawler_keeps_to_two_connections_and_twenty_pages_a_second(shim, recording, tmp_path, prog):
    if prog == "scrapy" and scrapy_missing():
        pytest.skip("python3-scrapy is not installed (.ci/run installs it)")
    srv = recording(keepalive=False, pages=200)
    shim.policy("[defaults]\nmax_connections = 2\nqueue_timeout = 60s\nrate = 20/s\n")
    if prog == "scrapy":
        p = tmp_path / "spider.py"
        p.write_text(SPIDER)
        args = ["/usr/bin/python3", p, srv.url]
    else:
        args = ["wget", "--recursive", "--level=inf", "--no-parent", "-e", "robots=off", "--delete-after", "-q",
                "-P", tmp_path / "site", srv.url + "p/0"]
    r = shim.run(args, timeout=120)
    assert r.rc == 0, (r.out, r.err[-2000:])
    if prog == "scrapy":
        assert json.loads(r.out.strip().splitlines()[-1]) == {"pages": 200}, r.out
    with srv.lock:
        pages = set(srv.paths)
    assert pages == {f"/p/{n}" for n in range(200)}, len(pages)
    assert srv.peak <= 2, srv.peak
    t = srv.arrivals()
    # 200 connections, a token each, 20 a second from a full bucket of one:
    # by the server's own stamps no faster than that (a starved machine only
    # adds time: the upper bound is a hang's, not the rate's)
    assert 8.5 <= t[-1] - t[0] <= 60, t[-1] - t[0]
    e = shim.entry(srv.dest)
    assert e["throttled"] == 0 and e["failures"] == 0, e


@pytest.mark.parametrize("text, msg", [
    ("rate = 0/s\n", "rate: 0/s lets nothing through"),
    ("rate = 0\n", "rate: 0 lets nothing through"),
    ("rate = fast\n", "rate: bad rate 'fast'"),
    ("rate = 2000000/s\n", "rate: 2000000/s is out of range"),
    ("burst = 3\n", "burst: shapes rate, which this section (or [defaults]) does not set"),
    ("rate_jitter = 50%\n", "rate_jitter: shapes rate"),
    ("slow_start = 5s\n", "slow_start: ramps max_connections and rate, neither of which"),
    ("rate = 5/s\nrate_jitter = 150%\n", "rate_jitter: 150% is over 100%"),
])
def test_check_rejects_nonsense_pacing(shim, tmp_path, text, msg):
    pol = shim.policy("[defaults]\n" + text)
    p = shim.ctl("check", pol)
    assert p.returncode == 2, (p.stdout, p.stderr)
    line = 1 + text.count("\n")   # the last key's line, after [defaults]
    assert f"{pol}:{line}: {msg}" in p.stderr, p.stderr


def test_explain_shows_the_pacing_keys(shim, tmp_path):
    pol = shim.policy("[defaults]\nrate = 30/m\nburst = 3\nrate_jitter = 20%\n[host \"127.0.0.1:80\"]\nrate = off\n")
    p = shim.ctl("explain", "--policy", pol, "127.0.0.1:81")
    assert p.returncode == 0, p.stderr
    for want in (r"^rate +=  30/m ", r"^burst += 3 ", r"^rate_jitter += 20% "):
        assert re.search(want.replace("=  ", "= "), p.stdout, re.M), p.stdout
    p = shim.ctl("explain", "--policy", pol, "127.0.0.1:80")
    assert re.search(r"^rate += off +# \[host", p.stdout, re.M), p.stdout

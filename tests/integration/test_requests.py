"""max_requests: requests in flight machine-wide, held at their start on any
connection, new or open (issue 49).

The server here keeps connections alive and counts the requests it has in
flight: from a request's head read until just before its answer's last
byte goes out, so before the client can read the answer's end and give
its place back; a request let in over the cap overlaps the others' and is
counted. Real programs (python requests with sessions, over HTTP and
HTTPS; aiohttp; node) run under the shim in several processes at once."""
import json
import os
import signal
import ssl
import subprocess
import threading
import time

import pytest

from conftest import (BUILD, base_env, each_stopped, py_script, read_head, serve_on_loopback,
                      shimrun_spawn as spawn, stop_listener, wait_all)

BODY = bytes(range(256)) * 64   # 16 KiB, sent in pieces


def site_page(path):
    """A 221-page site: /site/ links 20 sections, each links 10 pages."""
    if path == "/site/":
        links = "".join(f'<a href="/site/s{i}.html">s</a>\n' for i in range(20))
    elif path.startswith("/site/s") and path.endswith(".html"):
        i = int(path[7:-5])
        links = "".join(f'<a href="/site/p{i}_{j}.html">p</a>\n' for j in range(10))
    elif path.startswith("/site/p"):
        links = f"leaf {path}\n"
    else:
        return None
    return f"<html><body>{links}</body></html>\n".encode()


class InflightServer:
    """HTTP/1.1 keep-alive on loopback: each request is answered after
    `hold` seconds (a path /hold/MS holds MS ms) with a 16 KiB body sent in
    four pieces; /tag/NAME is noted in `order` when its head arrives."""

    def __init__(self, hold=0.05, tls=None):
        self.hold = hold
        self.tls = tls
        self.lock = threading.Lock()
        self.cur = self.peak = self.total = 0
        self.order = []
        self.log = []              # (when, path) of each request's head
        self.sock, self.port = serve_on_loopback(self._serve)
        self.dest = f"127.0.0.1:{self.port}"
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{self.port}/"

    def _serve(self, c):
        try:
            if self.tls:
                c = self.tls.wrap_socket(c, server_side=True)
            c.settimeout(60)
            rest = b""
            while True:
                head, rest = read_head(c, rest)
                if head is None:
                    return
                path = head.split(b" ")[1].decode()
                page = site_page(path)
                with self.lock:
                    self.cur += 1
                    self.total += 1
                    self.peak = max(self.peak, self.cur)
                    if path.startswith("/tag/"):
                        self.order.append(path[5:])
                    self.log.append((time.monotonic(), path))
                counted = True
                try:
                    hold = int(path.split("/")[2]) / 1000 if path.startswith("/hold/") else self.hold
                    time.sleep(hold)
                    body = BODY if page is None else page
                    c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: %d\r\n\r\n" % len(body))
                    q = len(body) // 4
                    for i in range(3):
                        c.sendall(body[i * q:(i + 1) * q])
                        time.sleep(0.002)
                    with self.lock:
                        self.cur -= 1
                    counted = False
                    c.sendall(body[3 * q:])
                finally:
                    if counted:
                        with self.lock:
                            self.cur -= 1
        except (OSError, ValueError, IndexError):
            pass
        finally:
            c.close()

    def stop(self):
        stop_listener(self.sock)


@pytest.fixture
def inflight():
    yield from each_stopped(InflightServer)


@pytest.fixture(scope="module")
def tls_pair(tmp_path_factory):
    d = tmp_path_factory.mktemp("reqtls")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1",
                    "-days", "2", "-keyout", d / "k.pem", "-out", d / "c.pem"], check=True, capture_output=True)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(d / "c.pem", d / "k.pem")
    return ctx


def last_json(out):
    return json.loads(out.strip().splitlines()[-1])


SESSIONS = """
import hashlib, json, sys, threading, requests, urllib3
urllib3.disable_warnings()
want = hashlib.sha256(bytes(range(256)) * 64).hexdigest()
ok, bad = [0], []
def worker():
    s = requests.Session()
    for _ in range(int(sys.argv[2])):
        r = s.get(sys.argv[1], timeout=120, verify=False)
        if r.status_code == 200 and hashlib.sha256(r.content).hexdigest() == want:
            ok[0] += 1
        else:
            bad.append((r.status_code, len(r.content)))
ts = [threading.Thread(target=worker) for _ in range(int(sys.argv[3]))]
[t.start() for t in ts]
[t.join() for t in ts]
print(json.dumps({"ok": ok[0], "bad": bad}))
"""


@pytest.mark.shim
@pytest.mark.parametrize("proto", ["http", "https"])
def test_sessions_in_four_processes_never_have_more_than_max_requests_in_flight(shim, inflight, tls_pair, tmp_path,
                                                                               proto):
    # 4 processes x 3 threads, each a requests.Session (keep-alive: 12
    # connections open at once, never capped): the server never has more
    # than 2 requests in flight, every answer whole (hash at both ends)
    srv = inflight(hold=0.03, tls=tls_pair if proto == "https" else None)
    shim.policy("[defaults]\nmax_requests = 2\nqueue_timeout = 60s\n")
    py = py_script(tmp_path, SESSIONS)
    procs = [spawn(shim, py + [srv.url, 8, 3]) for _ in range(4)]
    results = wait_all(procs)
    for rc, o, e in results:
        assert rc == 0, e
        assert last_json(o) == {"ok": 24, "bad": []}, (o, e)
    assert srv.total == 96
    assert srv.peak == 2, srv.peak   # at the cap: 2 reached, never 3
    e = shim.entry(srv.dest)
    assert (e["requests_inflight"], e["requests_queued"], e["requests_throttled"]) == (0, 0, 0), e
    assert e["requests_held"] > 0 and e["failures"] == 0, e


ONE = """
import errno, json, socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
t0 = time.monotonic()
try:
    s.sendall(b"GET /hold/10 HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n")
    got = s.recv(100)
    print(json.dumps({"sent": True, "got": got[:12].decode()}))
except OSError as e:
    print(json.dumps({"sent": False, "errno": errno.errorcode[e.errno], "s": time.monotonic() - t0}))
"""


@pytest.mark.shim
def test_a_request_past_queue_timeout_fails_at_its_start_with_econnrefused(shim, inflight, tmp_path):
    # one request holds the only place for 4 s; another, from another
    # process, waits queue_timeout (1 s) and its send fails ECONNREFUSED,
    # before a byte left (the server never sees it), counted throttled
    srv = inflight()
    shim.policy("[defaults]\nmax_requests = 1\nqueue_timeout = 1s\n")
    holder = spawn(shim, py_script(tmp_path, SESSIONS.replace("sys.argv[1]", "sys.argv[1] + 'hold/4000'"))
                   + [srv.url, 1, 1])
    deadline = time.monotonic() + 30
    while srv.total < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    r = shim.run(py_script(tmp_path, ONE) + [srv.port])
    got = r.last_json()
    assert got["sent"] is False and got["errno"] == "ECONNREFUSED", got
    assert 0.9 <= got["s"], got
    assert srv.total == 1   # the refused request never reached the server
    rc, o, e = wait_all([holder])[0]
    assert rc == 0 and last_json(o)["ok"] == 1, e
    e = shim.entry(srv.dest)
    assert (e["requests_throttled"], e["failures"], e["requests_inflight"]) == (1, 0, 0), e
    assert "max_requests (1) reached" in r.err, r.err


KILLED = """
import socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.sendall(b"GET /hold/60000 HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n")
print("sent", flush=True)
time.sleep(120)
"""


@pytest.mark.shim
def test_a_place_held_by_a_killed_process_is_given_back(shim, inflight, tmp_path):
    # a process SIGKILLed with its request in flight (the server holds it a
    # minute): the next request, from another process, finds the place
    # freed and is served (within queue_timeout, 30 s: only a freed place
    # lets it go)
    srv = inflight()
    shim.policy("[defaults]\nmax_requests = 1\nqueue_timeout = 30s\n")
    p = spawn(shim, py_script(tmp_path, KILLED) + [srv.port])
    assert p.stdout.readline().strip() == "sent"
    deadline = time.monotonic() + 30
    while srv.total < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert shim.entry(srv.dest)["requests_inflight"] == 1
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    r = shim.run(py_script(tmp_path, SESSIONS) + [srv.url, 2, 1])
    assert r.rc == 0 and r.last_json()["ok"] == 2, r.err
    e = shim.entry(srv.dest)
    assert (e["requests_inflight"], e["requests_throttled"]) == (0, 0), e


TAGGED = """
import json, sys, requests
s = requests.Session()
r = s.get(sys.argv[1] + "tag/" + sys.argv[2], timeout=120)
print(json.dumps({"ok": r.status_code == 200 and len(r.content) == 16384}))
"""


@pytest.mark.shim
def test_the_place_that_frees_goes_to_the_request_that_waited_longest(shim, inflight, tmp_path):
    # one place, held 3 s; six processes start their requests one after
    # the other while it is held, each on its own connection (the next is
    # started once the one before is in the queue, or served: a started
    # process's request, on a loaded machine, may begin to wait after a
    # later one's, which CI saw once with 0.15 s between starts): they are
    # served in the order they began to wait (each then holds the place
    # 0.2 s, in which every other waiter is woken and must let the oldest go)
    srv = inflight(hold=0.2)
    shim.policy("[defaults]\nmax_requests = 1\nqueue_timeout = 60s\n")
    holder = spawn(shim, py_script(tmp_path, TAGGED.replace('"tag/" + sys.argv[2]', '"hold/3000"')) + [srv.url, "h"])
    deadline = time.monotonic() + 30
    while srv.total < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    procs = []
    for i in range(6):
        procs.append(spawn(shim, py_script(tmp_path, TAGGED) + [srv.url, str(i)]))
        deadline = time.monotonic() + 60
        while shim.entry(srv.dest)["requests_queued"] + len(srv.order) < i + 1 and time.monotonic() < deadline:
            time.sleep(0.01)
    for rc, o, e in wait_all([holder] + procs):
        assert rc == 0 and last_json(o)["ok"], e
    assert srv.order == [str(i) for i in range(6)], srv.order
    assert srv.peak == 1


AIO = """
import asyncio, json, sys, aiohttp
async def main():
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=20)) as s:
        async def one():
            async with s.get(sys.argv[1]) as r:
                return r.status == 200 and len(await r.read()) == 16384
        got = await asyncio.gather(*[one() for _ in range(int(sys.argv[2]))])
    print(json.dumps({"ok": sum(got)}))
asyncio.run(main())
"""

HX = """
import asyncio, json, sys, httpx
async def main():
    async with httpx.AsyncClient(verify=False, timeout=120, limits=httpx.Limits(max_connections=20)) as s:
        async def one():
            r = await s.get(sys.argv[1])
            return r.status_code == 200 and len(r.content) == 16384
        got = await asyncio.gather(*[one() for _ in range(int(sys.argv[2]))])
    print(json.dumps({"ok": sum(got)}))
asyncio.run(main())
"""

# asyncio over TLS: aiohttp on asyncio's SSL protocol, httpx on anyio's TLS
# stream (which lets other tasks run between a write and its send)
ASYNC_TLS = {"aiohttp-tls": AIO.replace("s.get(sys.argv[1])", "s.get(sys.argv[1], ssl=False)"), "httpx-tls": HX}

NODE = """
const http = require('http');
const agent = new http.Agent({keepAlive: true, maxSockets: 20});
const n = parseInt(process.argv[3]);
let ok = 0, done = 0;
for (let i = 0; i < n; i++) {
  http.get(process.argv[2], {agent}, (res) => {
    let len = 0;
    res.on('data', (d) => { len += d.length; });
    res.on('end', () => {
      ok += res.statusCode === 200 && len === 16384;
      if (++done === n) { console.log(JSON.stringify({ok})); agent.destroy(); }
    });
  }).on('error', (e) => { console.error(e.message); if (++done === n) { console.log(JSON.stringify({ok})); agent.destroy(); } });
}
"""


@pytest.mark.shim
@pytest.mark.parametrize("prog", ["aiohttp", "aiohttp-tls", "httpx-tls", "node"])
def test_event_loops_are_held_without_blocking_and_all_served(shim, inflight, tls_pair, tmp_path, prog):
    # two processes, each an event loop with 30 requests at once over up to
    # 20 keep-alive connections: non-blocking sends held (EAGAIN, not
    # writable) until a place frees; the server never has more than 3.
    # Over TLS asyncio drives OpenSSL through memory BIOs and sends the
    # records itself: each connection's first request asks for its place
    # as its first record goes (37 in flight before), the later ones when
    # their records go, and each answer read gives its place back (with 20
    # sessions, pairs lost to one another left answers unseen: a stall of
    # 15 s, aiohttp's keep-alive timeout, until an idle connection closed;
    # httpx, paired by the size of the next send, had sessions paired with
    # one another's sockets, and stalled until queue_timeout)
    srv = inflight(hold=0.02, tls=tls_pair if prog.endswith("-tls") else None)
    shim.policy("[defaults]\nmax_requests = 3\nqueue_timeout = 60s\n")
    if prog in ASYNC_TLS:
        cmd = py_script(tmp_path, ASYNC_TLS[prog]) + [srv.url, 30]
    elif prog == "aiohttp":
        cmd = py_script(tmp_path, AIO) + [srv.url, 30]
    else:
        (tmp_path / "get.js").write_text(NODE)
        cmd = ["node", str(tmp_path / "get.js"), srv.url, 30]
    results = wait_all([spawn(shim, cmd) for _ in range(2)])
    for rc, o, e in results:
        assert rc == 0 and last_json(o) == {"ok": 30}, (o, e)
    assert srv.total == 60
    assert srv.peak == 3, srv.peak
    e = shim.entry(srv.dest)
    assert (e["requests_inflight"], e["requests_throttled"]) == (0, 0), e
    # every answer seen (its place given back at its end, not when aiohttp
    # closes the idle connection 15 s later)
    assert e["exchanges"] == 60, e


@pytest.mark.shim
def test_without_max_requests_nothing_is_counted(shim, inflight, tmp_path):
    # the same sessions with no key: no place taken, none held; the server
    # sees them all at once (the control for the cap above)
    srv = inflight(hold=0.2)
    shim.policy("[defaults]\nread_timeout = 30s\n")
    py = py_script(tmp_path, SESSIONS)
    results = wait_all([spawn(shim, py + [srv.url, 2, 3]) for _ in range(2)])
    for rc, o, e in results:
        assert rc == 0 and last_json(o) == {"ok": 6, "bad": []}, (o, e)
    assert srv.peak >= 4, srv.peak
    e = shim.entry(srv.dest)
    assert (e["requests_inflight"], e["requests_held"]) == (0, 0), e


@pytest.mark.shim
@pytest.mark.parametrize("prog", sorted(ASYNC_TLS))
def test_every_answer_of_an_asyncio_tls_pool_is_seen(shim, inflight, tls_pair, tmp_path, prog):
    # no shaping key: 30 requests at once over 20 TLS connections (memory-BIO
    # sessions, each matched with its socket by the shim). Each answer read
    # is an exchange of the destination's. Before: a session whose pair
    # another had pushed out (one entry per hash of its address) had its
    # answers unseen, and one still open at the close was a failure
    # (aiohttp: 50 of 60, 1 failure); httpx's writes, matched with the next
    # send of a plausible size, were mostly unmatched (14-23 of 60)
    srv = inflight(hold=0.02, tls=tls_pair)
    shim.policy("[defaults]\nread_timeout = 30s\n")
    results = wait_all([spawn(shim, py_script(tmp_path, ASYNC_TLS[prog]) + [srv.url, 30]) for _ in range(2)])
    for rc, o, e in results:
        assert rc == 0 and last_json(o) == {"ok": 30}, (o, e)
    e = shim.entry(srv.dest)
    assert (e["exchanges"], e["successes"], e["failures"], e["state"]) == (60, 60, 0, "closed"), e


EXECS = """
import os, socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))   # close-on-exec, as Python makes them
s.sendall(b"GET /hold/60000 HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n")
print("sent", flush=True)
sys.stdin.readline()
os.execvp("sleep", ["sleep", "60"])
"""


@pytest.mark.shim
def test_a_request_on_a_close_on_exec_socket_gives_its_place_back_at_exec(shim, inflight, tmp_path):
    # the kernel closes the socket unseen at exec, and the new program has
    # the same pid: the place is given back before, or it would be held
    # while sleep runs (another process's request then refused after
    # queue_timeout)
    srv = inflight()
    shim.policy("[defaults]\nmax_requests = 1\nqueue_timeout = 3s\n")
    p = subprocess.Popen([str(BUILD / "shimrun"), "--policy", str(shim.policy_path), "--"]
                         + py_script(tmp_path, EXECS) + [str(srv.port)], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=base_env(shim.table, shim.policy_path))
    try:
        assert p.stdout.readline().strip() == "sent"
        deadline = time.monotonic() + 30
        while srv.total < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert shim.entry(srv.dest)["requests_inflight"] == 1
        p.stdin.write("go\n")
        p.stdin.flush()
        deadline = time.monotonic() + 30
        while shim.entry(srv.dest)["requests_inflight"] and time.monotonic() < deadline:
            time.sleep(0.05)
        r = shim.run(py_script(tmp_path, SESSIONS) + [srv.url, 1, 1])
        assert r.rc == 0 and r.last_json()["ok"] == 1, r.err
        assert p.poll() is None   # sleep runs on, in the same process
    finally:
        p.kill()
        p.wait()


SCRAPY = """
import json, sys, scrapy
from scrapy.crawler import CrawlerProcess
from scrapy.linkextractors import LinkExtractor
base, i, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
res = {"ok": 0, "bad": 0, "err": 0}
class S(scrapy.Spider):
    name = "part"
    start_urls = ["%s/site/s%d.html" % (base, k) for k in range(i * n, i * n + n)]
    def parse(self, r):
        res["ok" if r.status == 200 else "bad"] += 1
        for l in LinkExtractor(allow=r"/site/p\\d+_\\d+").extract_links(r):
            yield scrapy.Request(l.url, callback=self.parse, errback=self.err)
    def err(self, f):
        res["err"] += 1
p = CrawlerProcess(settings={"LOG_LEVEL": "ERROR", "TELNETCONSOLE_ENABLED": False, "ROBOTSTXT_OBEY": False,
                             "REQUEST_FINGERPRINTER_IMPLEMENTATION": "2.7"})
p.crawl(S)
p.start()
print(json.dumps(res))
"""


@pytest.mark.shim
def test_four_scrapy_crawls_share_two_places_and_ten_a_second_fairly(shim, inflight, tmp_path):
    # 4 Scrapy processes x 55 pages (8 connections each, kept alive),
    # max_requests = 2, rate = 10/s, the default queue: every page of every
    # process, none asked twice, never more than 2 in flight at the server;
    # under max_requests the requests take rate's tokens, not the connects
    # (before, 32 connects spent 3.2 s of tokens and 26 requests came in one
    # second). A token is taken before its request is sent: a request that
    # arrives late (a starved sender) can bring the next one closer, so the
    # server's count in a second may be one over.
    srv = inflight(hold=0)
    shim.policy("[defaults]\nmax_requests = 2\nrate = 10/s\n")
    py = py_script(tmp_path, SCRAPY)
    t0 = time.monotonic()
    results = wait_all([spawn(shim, py + [f"http://127.0.0.1:{srv.port}", i, 5]) for i in range(4)], timeout=300)
    took = time.monotonic() - t0
    for rc, o, e in results:
        assert rc == 0 and last_json(o) == {"ok": 55, "bad": 0, "err": 0}, (o, e)
    paths = [p for _, p in srv.log]
    assert len(paths) == 220 and len(set(paths)) == 220, len(paths)
    assert srv.peak <= 2, srv.peak
    times = sorted(t for t, _ in srv.log)
    most = max(sum(1 for u in times if t <= u < t + 1.0) for t in times)
    assert most <= 11, most
    span = times[-1] - times[0]
    assert span >= 21.9 * 0.99, span   # 219 tokens after the first: never faster than the rate
    print(f"4 x Scrapy: 220 pages, {span:.1f} s at the server, {took:.1f} s in all, at most {most} in a second")


def test_check_notes_that_max_connections_auto_suits_programs_that_close_per_request(tmp_path):
    # (issue 49: with sessions the connections' limit fell to 1 and starved
    # processes) a note at the key's line, the policy still ok
    pol = tmp_path / "p.conf"
    pol.write_text("[defaults]\nread_timeout = 5s\n[host \"a.example\"]\nmax_connections = auto\n"
                   "[host \"b.example\"]\nmax_requests = 4\n")
    r = subprocess.run([str(BUILD / "shimctl"), "check", str(pol)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    notes = [l for l in r.stdout.splitlines() if "note:" in l]
    assert len(notes) == 1 and notes[0].startswith(f"{pol}:4: note: max_connections = auto adapts connections"), r.stdout
    assert "max_requests caps the requests in flight" in notes[0]


class CapServer:
    """HTTP/1.1 keep-alive: serves `cap` requests at once (each takes 0.1 s)
    and answers 429 at once beyond that; heal() doubles the capacity."""

    def __init__(self, cap=4):
        self.cap = cap
        self.lock = threading.Lock()
        self.cur = 0
        self.codes = {200: 0, 429: 0}
        self.sock, self.port = serve_on_loopback(self._serve)
        self.dest = f"127.0.0.1:{self.port}"

    def heal(self):
        with self.lock:
            self.cap *= 2

    def _serve(self, c):
        try:
            c.settimeout(60)
            rest = b""
            while True:
                head, rest = read_head(c, rest)
                if head is None:
                    return
                with self.lock:
                    over = self.cur >= self.cap
                    if not over:
                        self.cur += 1
                code = 429 if over else 200
                if not over:
                    time.sleep(0.1)
                    with self.lock:
                        self.cur -= 1
                with self.lock:
                    self.codes[code] += 1
                c.sendall(b"HTTP/1.1 %d X\r\nContent-Length: 3\r\n\r\n%d" % (code, code))
        except OSError:
            pass
        finally:
            c.close()

    def stop(self):
        stop_listener(self.sock)


LOOP = """
import collections, json, sys, time, requests
s, c, t0 = requests.Session(), collections.Counter(), time.monotonic()
while time.monotonic() - t0 < float(sys.argv[2]):
    try:
        c[str(s.get(sys.argv[1], timeout=60).status_code)] += 1
    except requests.exceptions.ConnectionError:
        c["refused"] += 1
print(json.dumps(c))
"""


@pytest.mark.shim
def test_max_requests_auto_finds_the_servers_capacity_and_follows_it_up(shim, tmp_path):
    # 8 processes, each a requests.Session in a loop, against a server that
    # serves 4 at once and answers 429 beyond (8 from the 8th second): the
    # limit settles at 4 (3 for a second after a 429), grows once the
    # server doubles, few 429s reach it, and every process is served (the
    # same scenario under max_connections = auto: the limit fell to 1,
    # 3 of 8 processes starved, 51-58 429s)
    srv = CapServer(4)
    try:
        shim.policy("[defaults]\nmax_requests = auto\nmax_requests_max = 16\nfailure_threshold = 0\n"
                    "queue_timeout = 30s\n")
        py = py_script(tmp_path, LOOP)
        t0 = time.monotonic()
        procs = [spawn(shim, py + [f"http://127.0.0.1:{srv.port}/", 16]) for _ in range(8)]
        time.sleep(max(0, t0 + 7.5 - time.monotonic()))
        before = shim.entry(srv.dest)
        srv.heal()
        results = wait_all(procs)
        after = shim.entry(srv.dest)
    finally:
        srv.stop()
    served = []
    for rc, o, e in results:
        assert rc == 0, e
        got = last_json(o)
        assert "refused" not in got, (got, e)
        served.append(got.get("200", 0))
    assert 3 <= before["requests_limit"] < 5, before
    assert after["requests_limit"] >= 7, after
    total = srv.codes[200] + srv.codes[429]
    assert srv.codes[429] < 0.02 * total, srv.codes
    jain = sum(served) ** 2 / (len(served) * sum(x * x for x in served))
    assert jain >= 0.9, served
    print(f"auto: limit {before['requests_limit']} before the doubling, {after['requests_limit']} after; "
          f"{srv.codes}; served per process {served}, Jain {jain:.3f}")


PARALLEL = """
import json, sys, threading, requests
ok, lock = [0], threading.Lock()
def one():
    s = requests.Session()
    for _ in range(int(sys.argv[2])):
        good = s.get(sys.argv[1], timeout=120).status_code == 200
        with lock:
            ok[0] += good
ts = [threading.Thread(target=one) for _ in range(int(sys.argv[3]))]
[t.start() for t in ts]
[t.join() for t in ts]
print(json.dumps({"ok": ok[0]}))
"""


@pytest.mark.shim
def test_sixteen_processes_killed_one_every_100ms_leave_no_place_and_no_waiter(shim, inflight, tmp_path):
    # 16 processes of 3 sessions each, over max_requests = 4, SIGKILLed one
    # every 100 ms, some holding places, some waiting in the queue: then one
    # process asks 4 at once 3 times and is served (only if every dead
    # holder's place was freed), and nothing is left held or queued
    srv = inflight(hold=0.05)
    shim.policy("[defaults]\nmax_requests = 4\nqueue_timeout = 60s\n")
    py = py_script(tmp_path, PARALLEL)
    procs = [spawn(shim, py + [srv.url, 1000, 3]) for _ in range(16)]
    deadline = time.monotonic() + 30
    while srv.total < 40 and time.monotonic() < deadline:
        time.sleep(0.01)
    before = shim.entry(srv.dest)
    assert before["requests_queued"] > 0, before   # some were waiting when the killing began
    for p in procs:
        os.kill(p.pid, signal.SIGKILL)
        time.sleep(0.1)
    for p in procs:
        p.wait()
    r = shim.run(py + [srv.url, 3, 4])
    assert r.rc == 0 and r.last_json() == {"ok": 12}, (r.out, r.err)
    e = shim.entry(srv.dest)
    assert (e["requests_inflight"], e["requests_queued"], e["requests_throttled"]) == (0, 0, 0), e
    assert srv.peak == 4, srv.peak

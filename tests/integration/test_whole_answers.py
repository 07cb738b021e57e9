"""A connection is given up for a waiter (max_connections, a process that
waits on its own keep-alive connections) only when its last answer was
read to the end HTTP frames it. An answer still arriving is never cut:
every body byte-exact at the client (its hash against the server's), each
request seen once by the server, and the cap held all along.

Before: a threaded requests.Session got a 200 with 40,960 of 409,600 bytes
and no error, and aiohttp "Response payload is not completed", since a
connection whose answer had begun and gone quiet for 100 ms was taken for
idle."""
import hashlib
import json
import socket
import threading
import time

import pytest

from conftest import py_script, read_head, stop_listener

BODY = bytes((i * 2654435761 >> 13) & 0xFF for i in range(409600))
SMALL = b"small\n"
GAP = 0.25   # between the parts of a slow body: past the 100 ms an idle connection must be quiet


class SlowBodies:
    """HTTP/1.1 keep-alive, one thread per connection. /big: 400 KB with a
    Content-Length in 8 parts GAP apart; /chunked: the same as 8 chunks;
    /smallN: 6 bytes in two writes 50 ms apart. Records each request's
    path and the most connections open at once."""

    def __init__(self):
        self.lock = threading.Lock()
        self.paths = []
        self.cur = self.peak = 0
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            with self.lock:
                self.cur += 1
                self.peak = max(self.peak, self.cur)
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _answer(self, c, path):
        part = len(BODY) // 8
        if path == "/big":
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(BODY))
            for i in range(8):
                time.sleep(GAP)
                c.sendall(BODY[i * part:(i + 1) * part])
        elif path == "/chunked":
            c.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
            for i in range(8):
                time.sleep(GAP)
                c.sendall(b"%x\r\n" % part + BODY[i * part:(i + 1) * part] + b"\r\n")
            c.sendall(b"0\r\n\r\n")
        else:
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nsma")
            time.sleep(0.05)
            c.sendall(b"ll\n")

    def _serve(self, c):
        buf = b""
        try:
            c.settimeout(60)
            while True:
                head, buf = read_head(c, buf)
                if head is None:
                    return
                path = head.split(b" ")[1].decode()
                with self.lock:
                    self.paths.append(path)
                self._answer(c, path)
        except OSError:
            pass
        finally:
            with self.lock:
                self.cur -= 1
            c.close()

    def stop(self):
        stop_listener(self.sock)


@pytest.fixture
def slow_bodies():
    s = SlowBodies()
    yield s
    s.stop()


THREADS = r"""
import hashlib, json, sys, time, requests
from concurrent.futures import ThreadPoolExecutor
base = sys.argv[1]
s = requests.Session()
s.mount("http://", requests.adapters.HTTPAdapter(pool_connections=4, pool_maxsize=4))
def get(p):
    try:
        r = s.get(base + p, timeout=60)
        return p, [r.status_code, len(r.content), hashlib.sha256(r.content).hexdigest()]
    except Exception as e:
        return p, ["error", str(e)[:200]]
def big():
    return [get("/big"), get("/chunked")]
with ThreadPoolExecutor(4) as ex:
    first = ex.submit(big)
    time.sleep(0.5)
    small = [ex.submit(get, "/small%d" % i) for i in range(6)]
    out = dict(first.result() + [f.result() for f in small])
print(json.dumps(out))
"""

AIOHTTP = r"""
import asyncio, hashlib, json, sys, aiohttp
async def main(base):
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit_per_host=4)) as s:
        async def get(p):
            try:
                async with s.get(base + p) as r:
                    b = await r.read()
                    return p, [r.status, len(b), hashlib.sha256(b).hexdigest()]
            except Exception as e:
                return p, ["error", "%s: %s" % (type(e).__name__, e)]
        async def big():
            return [await get("/big"), await get("/chunked")]
        first = asyncio.create_task(big())
        await asyncio.sleep(0.1)
        small = await asyncio.gather(*[get("/small%d" % i) for i in range(6)])
        print(json.dumps(dict(await first + list(small))))
asyncio.run(main(sys.argv[1]))
"""


def check(shim, srv, r, cap):
    assert r.rc == 0, r.err[-2000:]
    got = json.loads(r.out.strip().splitlines()[-1])
    want = {"/big": [200, len(BODY), hashlib.sha256(BODY).hexdigest()],
            "/chunked": [200, len(BODY), hashlib.sha256(BODY).hexdigest()]}
    want.update({f"/small{i}": [200, 6, hashlib.sha256(SMALL).hexdigest()] for i in range(6)})
    assert got == want, got
    # each request once: none cut and asked again
    assert sorted(srv.paths) == sorted(want), srv.paths
    # and the cap held (bare, the pool opens 4): the server may count one
    # more for a moment, an idle connection given up that it has not yet
    # seen closed when the new one arrives
    assert srv.peak <= cap + 1, srv.peak
    e = shim.entry(f"127.0.0.1:{srv.port}")
    assert e is not None and e["failures"] == 0, e


@pytest.mark.shim
def test_a_threaded_session_gets_every_slow_body_whole_under_a_cap(shim, slow_bodies, tmp_path):
    srv = slow_bodies
    shim.policy(f'[host "127.0.0.1:{srv.port}"]\nmax_connections = 2\nqueue_timeout = 30s\n')
    r = shim.run(py_script(tmp_path, THREADS) + [srv.url], timeout=120)
    check(shim, srv, r, 2)


@pytest.mark.shim
def test_aiohttp_gets_every_slow_body_whole_under_a_cap_of_one(shim, slow_bodies, tmp_path):
    pytest.importorskip("aiohttp")
    srv = slow_bodies
    shim.policy(f'[host "127.0.0.1:{srv.port}"]\nmax_connections = 1\nqueue_timeout = 30s\n')
    r = shim.run(py_script(tmp_path, AIOHTTP) + [srv.url], timeout=120)
    check(shim, srv, r, 1)

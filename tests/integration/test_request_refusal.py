"""An open breaker reaches connections already open: a request about to
start on a keep-alive connection fails at its start with ECONNREFUSED,
before a byte of it leaves, counted rejected, as a connect to the
destination would. HTTP/1 in clear text and inside TLS (the plaintext the
shim reads at OpenSSL's record calls); HTTP/2 (a write that opens a new
stream on an open connection fails whole: its client's HTTP/2 layer then
fails the connection). Before, a requests.Session, an httpx h2 client kept
sending to an open destination over the connection it already had."""
import json
import socket
import ssl
import subprocess
import time

import pytest

from conftest import accept_forever, py_script, read_head, stop_listener
from test_h2 import H2Server, cert  # noqa: F401 (cert: the fixture, shared)
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


def run_until_flag(shim, tmp_path, script, *args):
    """script under shimrun: it does its first request, makes the flag, and
    waits for it to go; the test opens the breaker meanwhile."""
    from conftest import BUILD, base_env
    flag = tmp_path / "first-done"
    cmd = [str(BUILD / "shimrun"), "--policy", str(shim.policy_path), "--"] + \
        [str(a) for a in py_script(tmp_path, script)] + [*map(str, args), str(flag)]
    p = subprocess.Popen(cmd, env=base_env(shim.table, shim.policy_path), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    end = time.monotonic() + 20
    while not flag.exists() and time.monotonic() < end and p.poll() is None:
        time.sleep(0.02)
    assert flag.exists(), p.communicate(timeout=30)
    return p, flag


class TlsSite:
    """A keep-alive HTTPS/1.1 server that records the paths it was asked."""

    def __init__(self, cert):
        self.paths, self.accepts = [], 0
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(cert / "cert.pem", cert / "key.pem")
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.dest = f"127.0.0.1:{self.port}"
        self.url = f"https://127.0.0.1:{self.port}/"

        def serve(c):
            self.accepts += 1
            try:
                c = ctx.wrap_socket(c, server_side=True)
                buf = b""
                while True:
                    head, buf = read_head(c, buf)
                    if head is None:
                        return
                    self.paths.append(head.split()[1].decode())
                    c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            except OSError:
                pass
            finally:
                c.close()

        accept_forever(self.sock, serve)

    def stop(self):
        stop_listener(self.sock)


TLS_SESSION = SESSION.replace("timeout=10)", "timeout=10, verify=False)")


@pytest.mark.shim
def test_inside_tls_the_next_request_on_an_open_connection_is_refused(shim, cert, tmp_path):
    # requests over HTTPS (Python's ssl: OpenSSL's SSL_write_ex): the
    # refusal is at the plaintext, before OpenSSL has a byte of it
    site = TlsSite(cert)
    try:
        shim.policy("[defaults]\nconnect_timeout = 2s\nread_timeout = 5s\n")
        p, flag = run_until_flag(shim, tmp_path, TLS_SESSION, site.url)
        assert shim.ctl("open", site.dest).returncode == 0
        flag.unlink()
        out, err = p.communicate(timeout=30)
        # Python 3.11 reads no errno from a failed SSL_write_ex: the
        # system error the shim puts on OpenSSL's queue (ECONNREFUSED, what
        # a C program gets from SSL_get_error's SSL_ERROR_SYSCALL and
        # errno) reaches it as "[SYS] unknown error"
        got = json.loads(out.strip().splitlines()[-1])
        assert got["first"] == 200 and "[SYS] unknown error" in got["second"], (out, err)
        assert site.paths == ["/p/1"], site.paths
        assert site.accepts == 1
        assert shim.entry(site.dest)["rejected"] >= 1
    finally:
        site.stop()


H2_SESSION = r"""
import json, os, sys, time, httpx
base, flag = sys.argv[1], sys.argv[2]
with httpx.Client(http2=True, http1=base.startswith("https"), verify=False, timeout=10) as c:
    r = c.get(base + "/ok")
    out = {"first": [r.http_version, r.status_code]}
    open(flag, "w").close()
    while os.path.exists(flag):
        time.sleep(0.02)
    try:
        out["second"] = c.get(base + "/ok").status_code
    except httpx.HTTPError as e:
        out["second"] = repr(e)[:300]
print(json.dumps(out))
"""


@pytest.mark.shim
@pytest.mark.parametrize("tls", [False, True], ids=["h2c", "tls"])
def test_over_http2_a_new_stream_on_an_open_connection_is_refused(shim, cert, tmp_path, tls):
    # httpx with h2, one connection: its second stream's write fails
    # ECONNREFUSED before a byte leaves (the server never sees it), and the
    # client's HTTP/2 layer fails the connection
    srv = H2Server(cert, tls)
    try:
        shim.policy("[defaults]\nconnect_timeout = 2s\nread_timeout = 5s\n")
        p, flag = run_until_flag(shim, tmp_path, H2_SESSION, srv.base)
        assert shim.ctl("open", srv.dest).returncode == 0
        flag.unlink()
        out, err = p.communicate(timeout=30)
        got = json.loads(out.strip().splitlines()[-1])
        assert got["first"] == ["HTTP/2", 200], (out, err)
        # in clear text the socket's write says ECONNREFUSED; inside TLS
        # Python 3.11 shows the system error as "[SYS] unknown error" (above)
        assert ("[SYS] unknown error" if tls else "Connection refused") in got["second"], (out, err)
        assert srv.got("ok") == 1
        assert shim.entry(srv.dest)["rejected"] >= 1
    finally:
        srv.stop()


@pytest.mark.shim
def test_curl_inside_tls_gets_econnrefused_from_ssl_write(shim, cert, tmp_path):
    # a C client: curl's two transfers on one HTTPS/1.1 connection, 2 s
    # apart (--rate); the breaker opens between them. OpenSSL's
    # SSL_get_error says SSL_ERROR_SYSCALL and errno ECONNREFUSED; curl
    # then tries a new connection (a reused one failed before any answer),
    # which is refused at connect: the server sees neither
    site = TlsSite(cert)
    try:
        shim.policy("[defaults]\nconnect_timeout = 2s\nread_timeout = 5s\n")
        from conftest import BUILD, base_env
        cmd = [str(BUILD / "shimrun"), "--policy", str(shim.policy_path), "--", "curl", "-sSk", "--http1.1",
               "--rate", "30/m", "-v", site.url + "p/1", site.url + "p/2", "-o", "/dev/null", "-o", "/dev/null"]
        p = subprocess.Popen(cmd, env=base_env(shim.table, shim.policy_path), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        end = time.monotonic() + 20
        while site.paths != ["/p/1"] and time.monotonic() < end:
            time.sleep(0.01)
        assert shim.ctl("open", site.dest).returncode == 0
        out, err = p.communicate(timeout=30)
        assert "system library::Connection refused, errno 111" in err, err
        assert p.returncode == 7, (p.returncode, err)
        assert site.paths == ["/p/1"] and site.accepts == 1, site.paths
        assert shim.entry(site.dest)["rejected"] >= 2   # the request, then curl's new connect
    finally:
        site.stop()

"""HTTP/2 connections, as far as issue 36 has come: an h2 connection (its
preface seen in TLS plaintext or in clear) is never read as HTTP/1 turns, so
curl's default HTTPS no longer counts a false success per request. Its
streams are not read yet (policy/h2.c is built and tested on its own, not
wired in): an h2 connection yields its connect outcome only (over TLS, the
handshake; in clear, the connect and the first answer), as DESIGN part 4
asks of a connection the reader cannot follow (h2_blind).

The servers are nghttpd (Debian's nghttp2-server), over TLS (ALPN h2) and in
clear text (h2c, prior knowledge); the clients curl (h2 by ALPN, its
default for HTTPS) and nghttp (nghttp2-client), both on the system's
OpenSSL, whose record calls the shim reads."""
import shutil
import socket
import subprocess
import time

import pytest

from rediscluster import free_ports


@pytest.fixture(scope="module")
def nghttpd(tmp_path_factory):
    if not shutil.which("nghttpd") or not shutil.which("nghttp"):
        pytest.fail("nghttpd and nghttp are needed (tools/install-deps.sh --all installs nghttp2-server and -client)")
    d = tmp_path_factory.mktemp("h2")
    www = d / "www"
    www.mkdir()
    for i in range(1, 6):
        (www / f"p{i}").write_text(f"page {i}\n")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", d / "key.pem",
                    "-out", d / "cert.pem", "-days", "2", "-subj", "/CN=localhost"], check=True, capture_output=True)
    tls, clear = free_ports(2)
    procs = [subprocess.Popen(["nghttpd", "-d", www, str(tls), d / "key.pem", d / "cert.pem"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
             subprocess.Popen(["nghttpd", "--no-tls", "-d", www, str(clear)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    for port in (tls, clear):
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.05)
    yield {"tls": tls, "clear": clear}
    for p in procs:
        p.kill()
        p.wait()


def counts(shim, dest):
    e = shim.entry(dest)
    assert e is not None, f"no entry for {dest}: {shim.status()}"
    return {k: e[k] for k in ("calls", "successes", "failures", "exchanges", "http_failures")}


@pytest.mark.shim
def test_curls_default_https_is_not_read_as_http1_turns(shim, nghttpd):
    # before: 5 requests on one h2 connection counted 6 exchanges and 7
    # successes (each HEADERS frame a "request", each answer's first frame a
    # "success"); the handshake is its one outcome now
    shim.policy("[defaults]\nfailure_threshold = 3\n")
    port = nghttpd["tls"]
    urls = [f"https://127.0.0.1:{port}/p{i}" for i in range(1, 6)]
    r = shim.run(["curl", "-sk", *urls, *(["-o", "/dev/null"] * 5), "-w", "%{http_version}:%{http_code} "])
    assert r.rc == 0 and r.out.split() == ["2:200"] * 5, (r.rc, r.out, r.err)
    assert counts(shim, f"127.0.0.1:{port}") == {"calls": 1, "successes": 1, "failures": 0, "exchanges": 0,
                                                 "http_failures": 0}


@pytest.mark.shim
def test_h2_in_clear_text_counts_its_connection_once(shim, nghttpd):
    # nghttp, prior knowledge (h2c): three streams on one connection; the
    # connect and its first answer are the one outcome, the streams after it
    # are not turns
    shim.policy("[defaults]\nfailure_threshold = 3\n")
    port = nghttpd["clear"]
    r = shim.run(["nghttp", "-n", *[f"http://127.0.0.1:{port}/p{i}" for i in range(1, 4)]])
    assert r.rc == 0, (r.out, r.err)
    assert counts(shim, f"127.0.0.1:{port}") == {"calls": 1, "successes": 1, "failures": 0, "exchanges": 1,
                                                 "http_failures": 0}

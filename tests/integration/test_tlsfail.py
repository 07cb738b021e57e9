"""tlsfail (issue 26 item 7): the TLS handshake fails as against a server
whose certificate the program rejects. Each client is run against a real
`openssl s_server` presenting a self-signed certificate (the real fault)
and, with tlsfail, against one presenting a certificate its CA signed: the
exit code, the message and the shim's counts must be the same."""
import re
import subprocess

import pytest

from conftest import py_script


def _openssl(*args):
    subprocess.run(["openssl", *map(str, args)], check=True, capture_output=True)


@pytest.fixture
def tls_servers(tmp_path):
    """(good port, bad port, CA file): s_server with a CA-signed certificate
    and one with a self-signed certificate, both for 127.0.0.1."""
    d = tmp_path
    san = "subjectAltName=IP:127.0.0.1,DNS:localhost"
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=netshim test CA", "-days", "2",
             "-keyout", d / "ca.key", "-out", d / "ca.pem", "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign")
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1", "-keyout", d / "good.key",
             "-out", d / "good.csr")
    (d / "ext.cnf").write_text(san + "\n")
    _openssl("x509", "-req", "-in", d / "good.csr", "-CA", d / "ca.pem", "-CAkey", d / "ca.key", "-CAcreateserial",
             "-out", d / "good.pem", "-days", "2", "-extfile", d / "ext.cnf")
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1", "-days", "2",
             "-keyout", d / "bad.key", "-out", d / "bad.pem", "-addext", san)
    procs, ports = [], []
    for name in ("good", "bad"):
        p = subprocess.Popen(["openssl", "s_server", "-accept", "127.0.0.1:0", "-cert", d / f"{name}.pem",
                              "-key", d / f"{name}.key", "-www"], stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, text=True)
        procs.append(p)
        for line in p.stdout:
            if line.startswith("ACCEPT"):
                ports.append(int(line.rsplit(":", 1)[1]))
                break
    yield ports[0], ports[1], d / "ca.pem"
    for p in procs:
        p.kill()
        p.wait()


PY_TLS = r'''
import ssl, sys, urllib.request
ctx = ssl.create_default_context(cafile=sys.argv[2])
try:
    print(urllib.request.urlopen(sys.argv[1], context=ctx, timeout=10).status)
except Exception as e:
    print(repr(e))
    sys.exit(1)
'''


def command(prog, port, ca, tmp_path):
    url = f"https://127.0.0.1:{port}/"
    if prog == "curl":
        return ["curl", "-sS", "--cacert", ca, "-o", "/dev/null", url]
    if prog == "wget":
        return ["wget", "-nv", "--tries=1", f"--ca-certificate={ca}", "-O", "/dev/null", url]
    return py_script(tmp_path, PY_TLS) + [url, ca]


def said(r, port):
    return re.sub(rf"\b{port}\b", "PORT", r.out + r.err)


@pytest.mark.shim
@pytest.mark.parametrize("prog,rc,words", [
    ("curl", 60, "SSL certificate problem: self-signed certificate"),
    ("wget", 5, "is not trusted"),
    ("python", 1, "CERTIFICATE_VERIFY_FAILED] certificate verify failed: self-signed certificate"),
])
def test_tlsfail_fails_the_handshake_as_a_self_signed_server_does(shim, tls_servers, tmp_path, prog, rc, words):
    good, bad, ca = tls_servers
    shim.policy(f'[defaults]\nfailure_threshold = 0\n[host "127.0.0.1:{good}"]\nfault = tlsfail\n')
    real = shim.run(command(prog, bad, ca, tmp_path), timeout=30)
    injected = shim.run(command(prog, good, ca, tmp_path), timeout=30)
    assert (real.rc, injected.rc) == (rc, rc), (real.rc, real.err, injected.rc, injected.err)
    assert words in said(real, bad), said(real, bad)
    assert said(injected, good) == said(real, bad)
    r, i = shim.entry(f"127.0.0.1:{bad}"), shim.entry(f"127.0.0.1:{good}")
    assert (i["calls"], i["failures"], i["injected"]) == (r["calls"], r["failures"], 1), (r, i)
    # the same program, the same server, without the fault: through; and with
    # a fault possible elsewhere (the hook in place), still verified as usual
    shim.policy("[defaults]\nfailure_threshold = 0\n")
    assert shim.run(command(prog, good, ca, tmp_path), timeout=30).rc == 0
    shim.policy(f'[defaults]\nfailure_threshold = 0\n[host "127.0.0.1:{bad}"]\nfault = tlsfail\n')
    assert shim.run(command(prog, good, ca, tmp_path), timeout=30).rc == 0
    again = shim.run(command(prog, bad, ca, tmp_path), timeout=30)
    assert again.rc == rc and said(again, bad) == said(real, bad)


def test_a_program_that_does_not_verify_is_not_failed_by_tlsfail_as_by_a_bad_certificate(shim, tls_servers):
    good, bad, _ = tls_servers
    shim.policy(f'[defaults]\nfailure_threshold = 0\n[host "127.0.0.1:{good}"]\nfault = tlsfail\n')
    for port in (bad, good):
        r = shim.run(["curl", "-sSk", "-o", "/dev/null", "-w", "%{http_code}", f"https://127.0.0.1:{port}/"])
        assert (r.rc, r.out) == (0, "200"), (port, r.rc, r.err)

"""Invisible when healthy, and real errors pass through unchanged."""
import os
import stat
import subprocess

import pytest

from clients import PY_NONBLOCK, PY_REQUESTS, PY_SOCKET
from conftest import PY, BUILD, client, py_script

GENEROUS = """
[defaults]
connect_timeout = 10s
read_timeout = 10s
total_timeout = 20s
"""


def test_healthy_programs_return_the_same_bytes(shim, server, tmp_path):
    srv = server("http")
    shim.policy(GENEROUS)
    progs = [
        ["curl", "-sS", "-i", srv.url],
        ["wget", "-q", "-O", "-", "--tries=1", srv.url],
        py_script(tmp_path, PY_SOCKET) + [srv.host, srv.port],
        py_script(tmp_path, PY_REQUESTS) + [srv.url],
        [client("fclient"), "--chunk", "7", srv.host, srv.port],
        [client("fclient"), "--use", "read", srv.host, srv.port],
    ]
    for prog in progs:
        bare = shim.run(prog, shim=False)
        under = shim.run(prog)
        assert bare.rc == under.rc == 0, (prog, bare.err, under.err)
        strip = lambda s: "\n".join(l for l in s.splitlines() if '"ms"' not in l and "Date:" not in l)
        if prog[0] == str(client("fclient")):
            assert bare.out == under.out
        else:
            assert strip(bare.out) == strip(under.out), prog
        assert "netshim:" not in under.err, under.err


def test_real_econnrefused_passes_through(shim, server):
    srv = server("refuse")
    shim.policy(GENEROUS)
    bare = shim.run([client("fclient"), srv.host, srv.port], shim=False).last_json()
    under = shim.run([client("fclient"), srv.host, srv.port]).last_json()
    assert bare["connect"] == under["connect"] == "ECONNREFUSED"


def test_einprogress_and_eagain_pass_through(shim, server, tmp_path):
    srv = server("silent")
    shim.policy(GENEROUS)
    args = py_script(tmp_path, PY_NONBLOCK) + [srv.host, srv.port, "recv"]
    bare = shim.run(args, shim=False).last_json()
    under = shim.run(args).last_json()
    assert bare == under == {"connect": "EINPROGRESS", "so_error": "OK", "recv": "EAGAIN"}


def test_python_own_timeout_unchanged(shim, server, tmp_path):
    # requests' own 0.4 s timeout fires first under a 5 s policy, as before
    srv = server("silent")
    shim.policy("[defaults]\nread_timeout = 5s\n")
    res = shim.run(py_script(tmp_path, PY_REQUESTS) + [srv.url, "0.4"]).last_json()
    assert res["ok"] is False and res["exc"] == "ReadTimeout", res
    assert 390 <= res["ms"] <= 800


def test_bypass_mode_leaves_no_entry_and_no_deadline(shim, server):
    srv = server("silent")
    shim.policy("[defaults]\nread_timeout = 300ms\n[host \"127.0.0.0/8\"]\nmode = bypass\n")
    res = shim.run([client("fclient"), "--rcvtimeo", "1200", srv.host, srv.port]).last_json()
    assert res["recv"] == "EAGAIN" and res["recv_ms"] >= 1150, res
    p = shim.ctl("status", "--json")
    assert p.returncode == 1 or srv.dest not in p.stdout


def test_disable_passes_everything_through(shim, server):
    srv = server("silent")
    shim.policy("[defaults]\nread_timeout = 300ms\n")
    res = shim.run([client("fclient"), "--rcvtimeo", "1000", srv.host, srv.port],
                   env={"NETSHIM_DISABLE": "1"}).last_json()
    assert res["recv"] == "EAGAIN" and res["recv_ms"] >= 950


def test_fortified_client_imports_the_chk_symbols():
    out = subprocess.run(["nm", "-D", str(client("fclient"))], capture_output=True, text=True).stdout
    assert "__recv_chk" in out and "__read_chk" in out


def test_the_library_links_no_tls_library():
    out = subprocess.run(["ldd", str(BUILD / "libnetshim.so")], capture_output=True, text=True).stdout
    assert "ssl" not in out and "gnutls" not in out, out


def test_a_program_without_tls_does_not_load_it_under_the_shim(shim, server):
    srv = server("http")
    r = shim.run([PY, "-c", "import socket, json\n"
                  f"s = socket.create_connection(('127.0.0.1', {srv.port})); s.sendall(b'GET / HTTP/1.0\\r\\n\\r\\n')\n"
                  "s.recv(100)\n"
                  "print(json.dumps([l.split()[-1] for l in open('/proc/self/maps') if 'ssl' in l or 'gnutls' in l]))"])
    assert r.rc == 0 and r.out.strip() == "[]", (r.out, r.err)


def exported_list():
    """The list of exports (shim/exports.h) as the build made it into the
    version script."""
    text = (BUILD / "netshim.map").read_text()
    return sorted(w.rstrip(";") for w in text.split()
                  if w.endswith(";") and w not in ("*;", "};") and not w.endswith(":"))


def test_library_exports_only_the_wrapped_symbols():
    out = subprocess.run(["nm", "-D", "--defined-only", str(BUILD / "libnetshim.so")],
                         capture_output=True, text=True).stdout
    names = sorted(l.split()[-1] for l in out.splitlines() if l.strip())
    listed = exported_list()
    # the list holds every family the shim wraps
    assert len(listed) > 70 and {"connect", "recv", "__recv_chk", "epoll_pwait2", "SSL_read", "fgets",
                                 "vfork", "dlopen", "syscall", "sendfile64"} <= set(listed), listed
    assert names == listed

"""Programs that used to escape the shim (issue 12): libraries loaded with
RTLD_DEEPBIND (PHP's extensions), event loops on io_uring (node with
UV_USE_IO_URING=1), and sockets read through stdio (busybox wget)."""
import shutil
import subprocess

import pytest

from conftest import BUILD, PY, ROOT, client, near

POLICY = "[defaults]\nread_timeout = 1s\nconnect_timeout = 1s\n"
LIB = BUILD / "libnetshim.so"
SLOT_TYPES = ("R_X86_64_JUMP_SLOT", "R_X86_64_GLOB_DAT", "R_X86_64_64")


def exported():
    out = subprocess.run(["nm", "-D", "--defined-only", str(LIB)], capture_output=True, text=True, check=True).stdout
    return {line.split()[-1] for line in out.splitlines() if line.split()[1] in ("T", "t", "W")}


def slots(lib):
    """The library's relocations against named symbols, read by readelf
    (not by the shim's own code): [(name, offset)]."""
    out = subprocess.run(["readelf", "-rW", str(lib)], capture_output=True, text=True, check=True).stdout
    res = []
    for line in out.splitlines():
        f = line.split()
        if len(f) >= 5 and f[2] in SLOT_TYPES:
            res.append((f[4].split("@")[0], f[0]))
    return res


# ---- RTLD_DEEPBIND

@pytest.mark.shim
@pytest.mark.parametrize("lib,mode", [("libdeeplib.so", "lazy"), ("libdeeplib-now.so", "now"),
                                      ("libdeeplib-addr.so", "now")])
def test_a_deepbind_library_sees_every_wrapped_call(shim, lib, mode):
    """Every call slot (PLT, GOT, data) the library holds for a name the shim
    exports points into the shim after a RTLD_DEEPBIND load; lazy and -z now
    (read-only GOT) alike."""
    ours = exported()
    rel = [(n, off) for n, off in slots(BUILD / lib) if n in ours]
    names = {n for n, _ in rel}
    assert names == ours, f"the library does not reference {sorted(ours - names)}: add them to deeplib_refs.c"
    shim.policy(POLICY)
    r = shim.run([BUILD / "deepbind", BUILD / lib, mode, "slots"] + [f"{n}@{off}" for n, off in rel])
    assert r.rc == 0, r.err
    where = dict(line.split(" ", 1) for line in r.out.splitlines())
    wrong = {n: o for n, o in where.items() if not o.endswith("libnetshim.so")}
    assert not wrong, f"bound past the shim: {wrong}"


@pytest.mark.shim
@pytest.mark.parametrize("how", ["block", "poll"])
def test_a_deepbind_library_gets_the_read_deadline_and_is_counted(shim, server, how):
    srv = server("silent")
    shim.policy(POLICY)
    r = shim.run([BUILD / "deepbind", BUILD / "libdeeplib-now.so", "now", "fetch", "127.0.0.1", srv.port, how],
                 timeout=10)
    res = r.last_json()
    assert (res["stage"], res["errno"]) == (3, "ETIMEDOUT"), res
    near(res["ms"], 1000)
    e = shim.entry(srv.dest)
    assert (e["calls"], e["timeouts"]) == (1, 1), e


@pytest.mark.shim
def test_a_deepbind_library_fails_fast_on_an_open_breaker(shim, server):
    srv = server("http")
    shim.policy(POLICY)
    assert shim.ctl("open", srv.dest).returncode == 0
    r = shim.run([BUILD / "deepbind", BUILD / "libdeeplib.so", "lazy", "fetch", "127.0.0.1", srv.port, "block"])
    res = r.last_json()
    assert (res["stage"], res["errno"]) == (1, "ECONNREFUSED") and res["ms"] < 50, res
    assert srv.accepts() == 0
    assert shim.entry(srv.dest)["rejected"] == 1


PHP_CURL = r'''<?php
$c = curl_init($argv[1]);
curl_setopt($c, CURLOPT_RETURNTRANSFER, true);
$t = microtime(true);
$body = curl_exec($c);
echo json_encode(["curl_errno" => curl_errno($c), "error" => curl_error($c),
                  "ms" => (microtime(true) - $t) * 1000, "body" => $body === false ? null : $body]), "\n";
'''

PHP_FGC = r'''<?php
$body = @file_get_contents($argv[1]);
echo json_encode(["body" => $body === false ? null : $body]), "\n";
'''

php = pytest.mark.skipif(not shutil.which("php"), reason="php-cli not installed")


def php_run(sh, tmp_path, script, url, **kw):
    p = tmp_path / "client.php"
    p.write_text(script)
    return sh.run(["php", p, url], **kw).last_json()


@php
@pytest.mark.shim
def test_php_curl_gets_the_read_deadline_and_is_counted(shim, server, tmp_path):
    """php-curl is a RTLD_DEEPBIND extension whose libcurl binds libc
    directly; the shim's rebinding brings its recv under the deadline."""
    srv = server("silent")
    shim.policy(POLICY)
    res = php_run(shim, tmp_path, PHP_CURL, srv.url, timeout=10)
    assert res["curl_errno"] == 56 and "timed out" in res["error"], res
    near(res["ms"], 1000)
    e = shim.entry(srv.dest)
    assert (e["calls"], e["timeouts"]) == (1, 1), e


@php
@pytest.mark.shim
def test_php_curl_fails_fast_on_an_open_breaker(shim, server, tmp_path):
    srv = server("http")
    shim.policy(POLICY)
    assert shim.ctl("open", srv.dest).returncode == 0
    res = php_run(shim, tmp_path, PHP_CURL, srv.url)
    assert res["curl_errno"] == 7 and res["ms"] < 200, res
    assert srv.accepts() == 0


@php
@pytest.mark.shim
def test_php_file_get_contents_keeps_working_and_is_counted(shim, server, tmp_path):
    srv = server("http")
    shim.policy(POLICY)
    bare = php_run(shim, tmp_path, PHP_FGC, srv.url, shim=False)
    under = php_run(shim, tmp_path, PHP_FGC, srv.url)
    assert bare["body"] and under == bare
    e = shim.entry(srv.dest)
    assert (e["calls"], e["failures"]) == (1, 0), e


# ---- io_uring

NODE_GET = r'''
const http = require('http'); const t = Date.now();
http.get(process.argv[2], res => { console.log(JSON.stringify({status: res.statusCode})); res.resume(); })
  .on('error', e => console.log(JSON.stringify({code: e.code, ms: Date.now() - t})));
'''


@pytest.mark.shim
def test_node_on_io_uring_falls_back_to_epoll_and_gets_the_read_deadline(shim, server, tmp_path):
    srv = server("silent")
    shim.policy(POLICY)
    js = tmp_path / "get.js"
    js.write_text(NODE_GET)
    r = shim.run(["node", js, srv.url], timeout=10, env={"UV_USE_IO_URING": "1", "NETSHIM_LOG": "info"})
    res = r.last_json()
    assert res["code"] == "ETIMEDOUT", res
    near(res["ms"], 1000)
    assert "netshim: io_uring_setup refused (ENOSYS)" in r.err
    assert shim.entry(srv.dest)["timeouts"] == 1


IO_URING_SETUP = r'''
import ctypes, json, os, select, sys
if sys.argv[1] == "epoll":
    ep = select.epoll()             # an event loop's instance, made before its ring (libuv does)
libc = ctypes.CDLL(None, use_errno=True)
params = ctypes.create_string_buffer(120)
fd = libc.syscall(425, 8, params)   # io_uring_setup
print(json.dumps({"fd": fd, "errno": ctypes.get_errno() if fd < 0 else 0,
                  "getpid": libc.syscall(39) == os.getpid()}))
'''


def uring_setup(shim, tmp_path, env=None, loop="epoll"):
    p = tmp_path / "uring.py"
    p.write_text(IO_URING_SETUP)
    shim.policy(POLICY)
    res = shim.run([PY, p, loop], env=env).last_json()
    assert res["getpid"], "every other number passes through"
    return res


@pytest.mark.shim
def test_io_uring_setup_is_refused_to_an_event_loop_while_the_shim_governs(shim, tmp_path):
    res = uring_setup(shim, tmp_path)
    assert (res["fd"], res["errno"]) == (-1, 38), res   # ENOSYS


def test_a_program_with_no_event_loop_keeps_io_uring_for_its_own_io(shim, tmp_path):
    """A program that wants io_uring for its file I/O (and has no epoll
    instance to escape the shim through) gets its ring (issue 20, defect 17)."""
    res = uring_setup(shim, tmp_path, loop="none")
    assert res["fd"] >= 0, res


def test_netshim_io_uring_allow_keeps_io_uring(shim, tmp_path):
    res = uring_setup(shim, tmp_path, env={"NETSHIM_IO_URING": "allow"})
    assert res["fd"] >= 0, res


# ---- stdio

busybox = pytest.mark.skipif(not shutil.which("busybox"), reason="busybox not installed")


@busybox
@pytest.mark.shim
def test_busybox_wget_reading_through_stdio_reports_and_counts_the_timeout(shim, server):
    srv = server("silent")
    shim.policy(POLICY)
    r = shim.run(["busybox", "wget", "-q", "-O-", srv.url], timeout=10)
    assert r.rc == 1 and "Connection timed out" in r.err, (r.rc, r.err)
    near(r.elapsed * 1000, 1000, late=500)
    e = shim.entry(srv.dest)
    assert (e["calls"], e["timeouts"]) == (1, 1), e


@busybox
@pytest.mark.shim
def test_busybox_wget_healthy_is_unchanged_and_counted_as_success(shim, server):
    srv = server("http")
    shim.policy(POLICY)
    bare = shim.run(["busybox", "wget", "-q", "-O-", srv.url], shim=False)
    under = shim.run(["busybox", "wget", "-q", "-O-", srv.url])
    assert (under.rc, under.out) == (bare.rc, bare.out) and bare.rc == 0
    e = shim.entry(srv.dest)
    assert (e["calls"], e["failures"], e["timeouts"]) == (1, 0, 0), e


# ---- what stays out of reach is said, not silent

def test_shimrun_says_when_the_program_is_statically_linked(shim):
    # by default (engine auto) the seccomp engine takes it, and says so;
    # with the preload engine asked for, shimrun says it escapes
    r = shim.run([BUILD / "fclient-static", "127.0.0.1", "1"])
    assert "fclient-static (statically linked): governed by the seccomp engine" in r.err, r.err
    r = shim.run(["--engine", "preload", "--", BUILD / "fclient-static", "127.0.0.1", "1"], shimrun_args=True)
    assert "fclient-static is statically linked: LD_PRELOAD cannot reach into it" in r.err, r.err
    r = shim.run([BUILD / "fclient", "127.0.0.1", "1"])
    assert "statically linked" not in r.err, r.err
    r = shim.run(["sh", "-c", "exit 0"])
    assert r.rc == 0 and "statically linked" not in r.err


def test_shimrun_says_when_the_program_is_a_go_program(shim, tmp_path):
    """Go's net package makes raw system calls even in a dynamically linked
    (cgo) binary. A Go toolchain marks its binaries with a .go.buildinfo
    section (and .note.go.buildid); fclient given one stands in for a Go
    program here (test_engine.py runs real ones)."""
    for section in (".go.buildinfo", ".note.go.buildid"):
        gobin = tmp_path / f"goprog{section.replace('.', '_')}"
        subprocess.run(["objcopy", "--add-section", f"{section}=/dev/null", str(BUILD / "fclient"), str(gobin)],
                       check=True)
        r = shim.run([gobin, "127.0.0.1", "1"])
        assert f"{gobin.name} (a Go program): governed by the seccomp engine" in r.err, r.err
        r = shim.run(["--engine", "preload", "--", gobin, "127.0.0.1", "1"], shimrun_args=True)
        assert f"{gobin.name} is a Go program: Go makes its network system calls itself" in r.err, r.err
    r = shim.run([BUILD / "fclient", "127.0.0.1", "1"])
    assert "Go program" not in r.err, r.err


# ---- a plugin with its own OpenSSL (issue 20, defect 11)

def private_openssl_plugins(tmp_path):
    """Two builds of sslplugin.c: one against a renamed copy of libssl (as
    auditwheel ships it in a wheel), one against the system's."""
    sys_ssl = subprocess.run(["cc", "-print-file-name=libssl.so.3"], capture_output=True, text=True).stdout.strip()
    private = tmp_path / "libssl-0a1b2c3d.so.3"
    shutil.copy(sys_ssl, private)
    subprocess.run(["patchelf", "--set-soname", private.name, str(private)], check=True)
    src = ROOT / "tests" / "clients" / "sslplugin.c"
    mine = tmp_path / "libplugin-private.so"
    theirs = tmp_path / "libplugin-system.so"
    subprocess.run(["cc", "-O2", "-fPIC", "-shared", "-o", str(mine), str(src), str(private), "-lcrypto",
                    f"-Wl,-rpath,{tmp_path}"], check=True)
    subprocess.run(["cc", "-O2", "-fPIC", "-shared", "-o", str(theirs), str(src), "-lssl", "-lcrypto"], check=True)
    return mine, theirs


@pytest.mark.parametrize("how", ["local", "deepbind"])
def test_a_plugins_private_openssl_keeps_working_under_the_shim(shim, tmp_path, how):
    """The plugin's SSL_write binds to the shim's; the real one is its own
    private, renamed libssl, which the shim once could not find (ENOSYS, no
    ClientHello). With the system's libssl loaded too (the second plugin,
    first), each caller must reach its own copy."""
    mine, theirs = private_openssl_plugins(tmp_path)
    args = [client("sslhost")] + (["--deepbind"] if how == "deepbind" else [])
    bare = shim.run(args + [mine], shim=False).last_json()
    assert bare["hello_bytes"][0] > 100, bare   # a ClientHello, without the shim
    r = shim.run(args + [mine])
    assert r.last_json() == bare and "ENOSYS" not in r.err, (r.out, r.err)
    r = shim.run(args + [theirs, mine])
    assert r.last_json()["hello_bytes"] == bare["hello_bytes"] * 2 and "ENOSYS" not in r.err, (r.out, r.err)

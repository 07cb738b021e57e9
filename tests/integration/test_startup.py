"""A process that never touches the network pays for the loader's mapping
of the library and nothing more: the shim binds libc, makes its fd table
and reads the policy on the first call that needs each, not at start. And
since the policy and the table are read late, they are read from the
NETSHIM_ variables the process started with, not from an environment the
program has cleared since."""
import collections
import shutil
import subprocess

import pytest

from conftest import BUILD, NEGATIVE, PY, base_env, py_script

LIB = str((BUILD / "libnetshim.so").resolve())


def calls(tmp_path, lib, prog):
    """The system calls of prog after its exec, with lib preloaded: a count by name."""
    out = tmp_path / "trace"
    env = base_env("nstest.startup", None)
    if lib:
        env["LD_PRELOAD"] = lib
    subprocess.run(["strace", "-f", "-qq", "-o", str(out), "/usr/bin/env"] + prog, env=env, check=True,
                   capture_output=True, timeout=60)
    lines = out.read_text().splitlines()
    start = max(i for i, l in enumerate(lines) if f'execve("{prog[0]}"' in l)
    return collections.Counter(l.split()[1].split("(")[0] for l in lines[start:] if len(l.split()) > 1)


@pytest.fixture(scope="module")
def empty_lib(tmp_path_factory):
    """A preloaded library with nothing in it but a little data: what the
    loader alone costs a process."""
    d = tmp_path_factory.mktemp("empty")
    (d / "e.c").write_text("char ns_empty_data[64] = {1};\nint ns_empty_bss[8192];\n")
    subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-Wl,-z,now", "-Wl,-z,relro", "-o", str(d / "libe.so"),
                    str(d / "e.c")], check=True)
    return str(d / "libe.so")


@pytest.mark.shim
@pytest.mark.parametrize("prog", [["/usr/bin/true"], [PY, "-c", "pass"]], ids=["true", "python3 -c pass"])
def test_a_process_that_never_touches_the_network_makes_no_system_call_of_the_shims(tmp_path, empty_lib, prog):
    if not shutil.which("strace"):
        pytest.skip("strace is not installed (.ci/run installs it)")
    if NEGATIVE:
        pytest.skip("NETSHIM_DISABLE=1 changes nothing here: the shim does nothing at start either way")
    bare = calls(tmp_path, None, prog)
    empty = calls(tmp_path, empty_lib, prog)
    shim = calls(tmp_path, LIB, prog)
    # the loader's work for any library the size of ours: the same calls as
    # for an empty one, but one more mapping for a larger .bss; nothing of
    # the shim's own (no fd table, policy, pid, random seed, once's wake)
    more = {k: shim[k] - empty[k] for k in shim if shim[k] > empty[k]}
    assert more in ({}, {"mmap": 1}), (more, sum(bare.values()), sum(empty.values()), sum(shim.values()))


# The program loses its NETSHIM_ variables before its first connect:
# "clear" unsets them (os.environ.clear: unsetenv each), "overwrite" writes
# over the strings the process started with, as setproctitle does (python's
# module, daemons) to make room for the process title.
CLEARS = r"""
import ctypes, errno, json, os, socket, sys
port, how = int(sys.argv[1]), sys.argv[2]
if how == "clear":
    os.environ.clear()
else:
    env = ctypes.POINTER(ctypes.c_void_p).in_dll(ctypes.CDLL(None), "environ")
    i = 0
    while env[i]:
        s = ctypes.string_at(env[i])
        if s.startswith(b"NETSHIM_"):
            ctypes.memset(env[i], ord("x"), len(s))
        i += 1
got = []
for _ in range(2):
    s = socket.socket()
    try:
        s.connect(("127.0.0.1", port))
        got.append(0)
    except OSError as e:
        got.append(e.errno)
    s.close()
print(json.dumps({"errnos": got}))
"""


@pytest.mark.shim
@pytest.mark.parametrize("how", ["clear", "overwrite"])
def test_the_policy_and_table_are_those_the_process_started_with_after_it_loses_its_environment(shim, tmp_path,
                                                                                                 how):
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()   # nothing listens: each connect is refused
    shim.policy("[defaults]\nfailure_threshold = 1\nopen_duration = 60s\n")
    r = shim.run(py_script(tmp_path, CLEARS) + [port, how])
    assert r.rc == 0, r.err
    assert r.last_json() == {"errnos": [111, 111]}, r.out
    e = shim.entry(f"127.0.0.1:{port}")
    # the first refused by the kernel, counted in the table the program was
    # started with; the second refused at once by the open breaker
    assert e is not None and e["state"] == "open" and e["failures"] == 1 and e["rejected"] == 1, e

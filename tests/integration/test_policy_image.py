"""A policy compiled once for the machine (policy/polimage.h): the first
process that reads a large policy file writes its image to /dev/shm, every
later process maps it instead of parsing the file, and resolves through its
index: the settings of a section after 10,000 others reach the program."""
import json
import os
import subprocess

import pytest

from conftest import BUILD, base_env
from rediscluster import spare_port

CLIENT = """
import errno, json, socket, sys
out = []
for _ in range(2):
    s = socket.socket()
    try:
        s.connect(("127.0.0.1", int(sys.argv[1])))
        out.append("OK")
    except OSError as e:
        out.append(errno.errorcode[e.errno])
    s.close()
print(json.dumps(out))
"""


def image_path(policy):
    """Where polimage.c writes the image of the file at policy (FNV-1a of
    its path as given, lower-cased)."""
    h = 0xcbf29ce484222325
    for c in str(policy).encode():
        c = c + 32 if 65 <= c <= 90 else c
        h = ((h ^ c) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return f"/dev/shm/netshim-policy.{os.geteuid()}.1.{h:016x}"


def closed_port():
    return spare_port()   # (nothing listens there)


@pytest.fixture
def big_policy(shim):
    port = closed_port()
    lines = ["[defaults]", "connect_timeout = 2s"]
    for i in range(10000):
        lines += [f'[host "h{i}.example.com"]', f"read_timeout = {i % 50 + 1}s"]
    # the last section: one failure opens the breaker (the default is 5)
    lines += [f'[host "127.0.0.1:{port}"]', "failure_threshold = 1", "open_duration = 60s"]
    path = shim.policy("\n".join(lines) + "\n")
    yield path, port
    for p in (image_path(path), image_path(path) + ".tmp"):
        try:
            os.unlink(p)
        except FileNotFoundError:
            pass


def run_client(shim, tmp_path, port, strace=None):
    script = tmp_path / "client.py"
    script.write_text(CLIENT)
    cmd = ["/usr/bin/python3", str(script), str(port)]
    if strace:
        cmd = ["strace", "-f", "-e", "trace=openat,open", "-o", str(strace)] + cmd
    env = base_env(shim.table, shim.policy_path, {"LD_PRELOAD": str(BUILD / "libnetshim.so")})
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.mark.shim
def test_a_large_policy_is_compiled_once_and_mapped_by_the_next_processes(shim, big_policy, tmp_path):
    path, port = big_policy
    image = image_path(path)
    assert not os.path.exists(image)
    # the first process parses the file and leaves its image
    assert run_client(shim, tmp_path, port) == ["ECONNREFUSED", "ECONNREFUSED"]
    assert os.path.exists(image), "no image was written"
    st = os.stat(image)
    assert st.st_uid == os.geteuid() and not st.st_mode & 0o222, oct(st.st_mode)   # read-only
    e = shim.entry(f"127.0.0.1:{port}")
    assert (e["failures"], e["rejected"], e["state"]) == (1, 1, "open"), e   # the last section's threshold
    shim.ctl("reset", "--all")
    # the next one maps the image: the policy file is never opened
    log = tmp_path / "strace.log"
    assert run_client(shim, tmp_path, port, strace=log) == ["ECONNREFUSED", "ECONNREFUSED"]
    opened = log.read_text()
    assert image in opened, opened[-2000:]
    assert f'"{path}"' not in "\n".join(l for l in opened.splitlines() if "openat" in l or "open(" in l), \
        "the policy file was read again"
    e = shim.entry(f"127.0.0.1:{port}")
    assert (e["failures"], e["rejected"], e["state"]) == (2, 2, "open"), e   # (counts since the table began)


@pytest.mark.shim
def test_an_edited_policy_is_read_again_not_its_old_image(shim, big_policy, tmp_path):
    path, port = big_policy
    assert run_client(shim, tmp_path, port) == ["ECONNREFUSED", "ECONNREFUSED"]
    assert os.path.exists(image_path(path))
    # an editor's save: a new file in its place, the threshold back to 5
    text = path.read_text().replace("failure_threshold = 1", "failure_threshold = 5")
    new = path.with_suffix(".new")
    new.write_text(text)
    os.rename(new, path)
    shim.ctl("reset", "--all")
    assert run_client(shim, tmp_path, port) == ["ECONNREFUSED", "ECONNREFUSED"]
    e = shim.entry(f"127.0.0.1:{port}")
    assert (e["failures"], e["rejected"], e["state"]) == (3, 1, "closed"), e   # (counts since the table began)


@pytest.mark.shim
def test_check_install_compiles_the_policy_for_every_process(shim, big_policy, tmp_path):
    path, port = big_policy
    r = subprocess.run([str(BUILD / "shimctl"), "check", "--install", str(path)], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    assert f"installed as {image_path(path)} (10002 sections" in r.stdout, r.stdout
    log = tmp_path / "strace.log"
    assert run_client(shim, tmp_path, port, strace=log) == ["ECONNREFUSED", "ECONNREFUSED"]
    opened = log.read_text()
    assert image_path(path) in opened and f'"{path}"' not in opened, opened[-2000:]


@pytest.mark.shim
def test_a_cut_short_image_is_said_once_never_used_and_written_again(shim, big_policy, tmp_path):
    path, port = big_policy
    assert run_client(shim, tmp_path, port) == ["ECONNREFUSED", "ECONNREFUSED"]
    image = image_path(path)
    size = os.path.getsize(image)
    os.chmod(image, 0o600)
    os.truncate(image, size // 2)
    os.chmod(image, 0o400)
    script = tmp_path / "client.py"
    env = base_env(shim.table, shim.policy_path, {"LD_PRELOAD": str(BUILD / "libnetshim.so")})
    said = []
    for _ in range(2):
        r = subprocess.run(["/usr/bin/python3", str(script), str(port)], capture_output=True, text=True, timeout=60,
                           env=env)
        said.append([l for l in r.stderr.splitlines() if "policy image" in l])
    assert len(said[0]) == 1 and image in said[0][0] and "cut short" in said[0][0], said
    assert said[1] == [], said   # written again: the next process maps it, nothing to say
    assert os.path.getsize(image) == size

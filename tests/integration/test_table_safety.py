"""The table file: created 0600; a corrupt or foreign one is refused and
programs keep working."""
import json
import os
import stat

import pytest

from conftest import client

POLICY = "[defaults]\nread_timeout = 1s\n"


def test_table_created_0600_even_with_a_permissive_umask(shim, server):
    srv = server("http")
    shim.policy(POLICY)
    r = shim.run(["sh", "-c", f"umask 000; exec {client('fclient')} {srv.host} {srv.port}"])
    assert r.rc == 0
    st = os.stat(f"/dev/shm/{shim.table}")
    assert stat.S_IMODE(st.st_mode) == 0o600 and st.st_uid == os.geteuid()


@pytest.mark.parametrize("damage", ["garbage", "short", "foreign", "group_writable"])
def test_bad_table_is_refused_and_programs_keep_working(shim, server, damage):
    srv = server("http")
    shim.policy(POLICY)
    path = f"/dev/shm/{shim.table}"
    if damage == "garbage":
        with open(path, "wb") as f:
            f.write(os.urandom(8192))
    else:
        assert shim.run([client("fclient"), srv.host, srv.port]).rc == 0
        if damage == "short":
            os.truncate(path, 100)
        elif damage == "foreign":
            os.chown(path, 65534, 65534)
        else:
            os.chmod(path, 0o660)
    os.chmod(path, 0o600) if damage in ("garbage", "short") else None
    r = shim.run([client("fclient"), srv.host, srv.port])
    assert r.rc == 0 and "hello from faultsrv" in r.out
    lines = [l for l in r.err.splitlines() if l.startswith("netshim:")]
    assert len(lines) == 1 and "refused" in lines[0] and path in lines[0], r.err
    p = shim.ctl("status")
    assert p.returncode == 1 and path in p.stderr and "refused" in p.stderr, p.stderr


def test_missing_table_is_said_plainly(shim):
    p = shim.ctl("status")
    assert p.returncode == 1
    assert "no such table" in p.stderr

"""Exact counts under contention: threads, a forked child, many processes."""
import subprocess

import pytest

from conftest import BUILD, base_env, client

NEVER_OPEN = "[defaults]\nfailure_threshold = 0\n"


@pytest.mark.shim
def test_eight_threads_and_a_forked_child_are_counted_exactly(shim, server):
    srv = server("refuse")
    shim.policy(NEVER_OPEN)
    r = shim.run([client("fclient"), "--loop", 100, "--threads", 8, "--fork", srv.host, srv.port], timeout=120)
    assert r.rc == 0
    e = shim.entry(srv.dest)
    assert (e["calls"], e["failures"], e["rejected"]) == (1600, 1600, 0)


@pytest.mark.shim
def test_eight_processes_times_500_failed_connects_is_4000(shim, server):
    srv = server("refuse")
    pol = shim.policy(NEVER_OPEN)
    procs = [subprocess.Popen([str(BUILD / "shimrun"), "--policy", str(pol), "--",
                               str(client("fclient")), "--loop", "500", srv.host, str(srv.port)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=base_env(shim.table))
             for _ in range(8)]
    for p in procs:
        assert p.wait(timeout=120) == 0
    e = shim.entry(srv.dest)
    assert (e["calls"], e["failures"], e["consecutive_failures"]) == (4000, 4000, 4000)


@pytest.mark.shim
def test_threads_sharing_an_open_breaker_count_every_rejection(shim, server):
    srv = server("refuse")
    shim.policy(NEVER_OPEN)
    assert shim.ctl("open", srv.dest).returncode == 0
    r = shim.run([client("fclient"), "--loop", 250, "--threads", 8, srv.host, srv.port], timeout=120)
    assert '"refused": 2000' in r.err
    e = shim.entry(srv.dest)
    assert (e["calls"], e["rejected"]) == (0, 2000)

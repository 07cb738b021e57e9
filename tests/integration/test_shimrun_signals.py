"""shimrun as a supervisor's child (seccomp engine: shimrun stays the
program's parent): a signal sent to shimrun (kill, a service manager
stopping it, a HUP) is passed on to the program, and shimrun exits with
the program's status, 128 + the signal that ended it. SIGKILL to shimrun
takes the program with it (PR_SET_PDEATHSIG): a program left behind would
have every connect fail ENOSYS, with nobody to answer them.

Before: shimrun died of the signal (143) and the program went on under
pid 1."""
import os
import signal
import subprocess
import time

import pytest

from conftest import BUILD, base_env


def default_signals():
    for sig in (signal.SIGINT, signal.SIGQUIT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)


def started(shim, srv):
    """fclient-static under shimrun --engine seccomp, connected to a server
    that never answers, waiting for the answer (its connect counted)."""
    shim.policy("[defaults]\nconnect_timeout = 5s\nread_timeout = 60s\n")
    STARTED.append(srv)
    cmd = [str(BUILD / "shimrun"), "--policy", str(shim.policy_path), "--engine", "seccomp", "--",
           str(BUILD / "fclient-static"), srv.host, str(srv.port)]
    # (a test run started in the background without job control has SIGINT
    # and SIGQUIT ignored, and an ignored signal stays ignored across exec:
    # the program here is one that dies of them, as from a terminal)
    p = subprocess.Popen(cmd, env=base_env(shim.table, shim.policy_path), stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, preexec_fn=default_signals)
    end = time.monotonic() + 20
    while time.monotonic() < end:
        # (the table is made by the program's first connect: until then
        # shimctl has none to read)
        e = shim.entry(srv.dest) if os.path.exists(f"/dev/shm/{shim.table}") else None
        if e and e["calls"] >= 1:
            break
        time.sleep(0.05)
    return p


STARTED = []   # the servers the test's programs were pointed at


@pytest.fixture(autouse=True)
def nothing_left_behind():
    # (only this test's programs: another test, run at once by another
    # worker, may have its own fclient-static running)
    yield
    while STARTED:
        srv = STARTED.pop()
        subprocess.run(["pkill", "-KILL", "-f", pattern(srv)])


def pattern(srv):
    return f"^{BUILD / 'fclient-static'} {srv.host} {srv.port}$"


def left(srv):
    """fclient-static processes still connected to srv's port."""
    out = subprocess.run(["pgrep", "-f", pattern(srv)], capture_output=True, text=True)
    return out.stdout.split()


@pytest.mark.shim
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP], ids=lambda s: s.name)
def test_a_signal_to_shimrun_reaches_the_program_and_its_exit_mirrors_it(shim, server, sig):
    srv = server("silent")
    p = started(shim, srv)
    e = shim.entry(srv.dest)
    assert e is not None and e["calls"] == 1 and e["engines"] == ["seccomp"], e   # governed, waiting
    p.send_signal(sig)
    rc = p.wait(timeout=60)   # (a starved machine: the mechanism, not a time, is asserted)
    assert rc == 128 + sig, rc   # the program died of it, and shimrun says so
    assert left(srv) == []


@pytest.mark.shim
def test_sigkill_to_shimrun_leaves_no_program_with_dead_networking(shim, server):
    srv = server("silent")
    p = started(shim, srv)
    e = shim.entry(srv.dest)
    assert e is not None and e["calls"] == 1, e
    assert len(left(srv)) == 1
    p.kill()
    p.wait(timeout=20)
    end = time.monotonic() + 10
    while left(srv) and time.monotonic() < end:
        time.sleep(0.05)
    assert left(srv) == []

"""docs/faults.md's pytest example for fault-injection runs, run as written
(with this suite's table and build paths)."""
import subprocess

import pytest

from clients import PY_REQUESTS
from conftest import BUILD, py_script

SHIMCTL = str(BUILD / "shimctl")


@pytest.fixture
def inject(shim):
    dests = []

    def add(dest, faults, seconds=60):
        subprocess.run([SHIMCTL, "--table", shim.table, "inject", dest, faults, "--for", f"{seconds}s"], check=True)
        dests.append(dest)
    yield add
    for d in dests:
        subprocess.run([SHIMCTL, "--table", shim.table, "inject", "--clear", d])


@pytest.mark.shim
def test_scraper_survives_a_flaky_api(inject, shim, server, tmp_path):
    srv = server("http")
    inject("127.0.0.1", "status 503")
    res = shim.run(py_script(tmp_path, PY_REQUESTS) + [srv.url]).last_json()
    assert res["ok"] and res["status"] == 503, res
    assert srv.accepts() == 1   # the connect was real; the request never reached the server

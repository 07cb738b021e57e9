"""shimrun with a NETSHIM_TABLE no process could open (not a plain file
name) stops with exit 2 and says why, as it does for a bad policy; before,
it started the program, whose library then passed every call through
ungoverned. (A table that exists but is damaged or another user's keeps
the library's fail-safe answer: test_table_safety.)"""
import pytest


@pytest.mark.shim
@pytest.mark.parametrize("name", ["a/b", ".."])
def test_a_bad_table_stops_shimrun_as_a_bad_policy_does(shim, tmp_path, name):
    mark = tmp_path / "started"
    shim.policy("[defaults]\n")
    r = shim.run(["/bin/sh", "-c", f"touch {mark}"], env={"NETSHIM_TABLE": name})
    assert r.rc == 2, (r.rc, r.err)
    assert f"NETSHIM_TABLE={name}: bad table name" in r.err and "not starting /bin/sh" in r.err, r.err
    assert not mark.exists()

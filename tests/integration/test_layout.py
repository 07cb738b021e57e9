"""The source's shape, as the build produced it: no two files of shim/
call each other in a loop, and every shim/*.c stays a size one can read.
The call graph is read from the objects (nm): what each one uses that
another defines."""
import os
import subprocess
from pathlib import Path

from conftest import BUILD

ROOT = Path(__file__).resolve().parents[2]
MAX_LINES = 800


def shim_graph():
    srcs = {p.stem for p in (ROOT / "shim").glob("*.c")}
    objs = sorted(o for o in (BUILD / "shim").glob("*.o") if o.stem in srcs)
    defined, used = {}, {}
    for o in objs:
        out = subprocess.run(["nm", str(o)], capture_output=True, text=True, check=True).stdout
        name = o.stem
        used[name] = set()
        for line in out.splitlines():
            parts = line.split()
            # the shim's own functions (ns_*): the exported libc names are
            # the program's interface (real.c only compares their addresses)
            if len(parts) == 2 and parts[0] == "U" and parts[1].startswith("ns_"):
                used[name].add(parts[1])
            elif len(parts) == 3 and parts[1] in "TtDdBbRr" and parts[1].isupper():
                defined.setdefault(parts[2], name)
    graph = {n: sorted({defined[s] for s in u if s in defined and defined[s] != n}) for n, u in used.items()}
    return graph


def find_cycle(graph):
    state = {}

    def visit(n, path):
        state[n] = 1
        for m in graph.get(n, ()):
            if state.get(m) == 1:
                return path[path.index(m):] + [m]
            if not state.get(m):
                c = visit(m, path + [m])
                if c:
                    return c
        state[n] = 2
        return None

    for n in sorted(graph):
        if not state.get(n):
            c = visit(n, [n])
            if c:
                return c
    return None


def test_no_two_shim_files_call_each_other_in_a_loop():
    graph = shim_graph()
    assert len(graph) >= 20, graph   # the objects were found
    assert "connect" in graph["wrappers"] and "outcome" in graph["connect"], graph
    cycle = find_cycle(graph)
    assert cycle is None, " -> ".join(cycle)


def test_the_cycle_finder_finds_a_cycle():
    # the check above is only as good as this
    assert find_cycle({"a": ["b"], "b": ["c"], "c": ["a"]}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": ["b"], "b": ["c"], "c": []}) is None


def test_no_shim_source_file_is_over_800_lines():
    long = {p.name: n for p in (ROOT / "shim").glob("*.c")
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, long

"""The source's shape, as the build produced it: no two files of shim/ (or
of the fleet agent, tools/agent/) call each other in a loop, every such file
stays a size one can read, and every agent symbol another file can see
carries the agent's prefix. The call graph is read from the objects (nm):
what each one uses that another defines."""
import os
import subprocess
from pathlib import Path

from conftest import BUILD

ROOT = Path(__file__).resolve().parents[2]
MAX_LINES = 800


def object_graph(folder, prefix=""):
    """{file: [files it uses a symbol of]} for the objects of folder's .c
    files; only symbols starting with prefix are counted."""
    srcs = {p.stem for p in (ROOT / folder).glob("*.c")}
    objs = sorted(o for o in (BUILD / folder).glob("*.o") if o.stem in srcs)
    defined, used = {}, {}
    for o in objs:
        out = subprocess.run(["nm", str(o)], capture_output=True, text=True, check=True).stdout
        name = o.stem
        used[name] = set()
        for line in out.splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[0] == "U" and parts[1].startswith(prefix):
                used[name].add(parts[1])
            elif len(parts) == 3 and parts[1] in "TtDdBbRrCc" and parts[1].isupper():
                defined.setdefault(parts[2], name)
    graph = {n: sorted({defined[s] for s in u if s in defined and defined[s] != n}) for n, u in used.items()}
    return graph, defined


def shim_graph():
    # the shim's own functions (ns_*): the exported libc names are the
    # program's interface (real.c only compares their addresses)
    return object_graph("shim", "ns_")[0]


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


def test_no_c_file_of_the_shim_the_core_or_the_tools_is_over_800_lines():
    # (issue 48: the rooms say what they hold; before, the shim and the
    # agent only, and policy/table.c 865, ctl_status.c 836 grew past it)
    files = [p for d in ("shim", "policy", "tools") for p in (ROOT / d).rglob("*.c")]
    assert len(files) > 60, files   # the files were found
    long = {str(p.relative_to(ROOT)): n for p in files if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, long


def test_no_two_agent_files_call_each_other_in_a_loop():
    graph, _ = object_graph("tools/agent")
    assert len(graph) >= 8, graph   # the objects were found
    assert "model" in graph["agent"], graph
    cycle = find_cycle(graph)
    assert cycle is None, " -> ".join(cycle)


def test_every_agent_symbol_carries_the_prefix():
    _, defined = object_graph("tools/agent")
    bare = sorted(s for s in defined if not s.startswith("ag_") and s != "main")
    assert len(defined) > 40 and not bare, bare


def test_no_two_policy_files_call_each_other_in_a_loop():
    # the scalar parsers sit below values.c and faultspec.c, which once
    # called each other
    graph, _ = object_graph("policy", "ns_")
    assert len(graph) >= 12 and "scalars" in graph["values"], graph
    cycle = find_cycle(graph)
    assert cycle is None, " -> ".join(cycle)


def test_no_two_source_files_share_a_name():
    # what ships (the library and the programs): a name says which file
    names = {}
    for d in ("shim", "policy", "tools"):
        for p in (ROOT / d).glob("**/*.c"):
            names.setdefault(p.name, []).append(str(p.relative_to(ROOT)))
    assert not {n: w for n, w in names.items() if len(w) > 1}

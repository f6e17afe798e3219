"""The repository's shape, held by tests: packages by job, one import name for each file, no import circle.

The import graph covers module_utils/, library/, filter_plugins/, reporting/, lab/ and every import in them (a lazy
import inside a function is an edge too: it is how a circle hides). Names are read from the files, never listed here:
ansible-core's own module_utils names from the installed ansible-core, the standard library's from the interpreter.
"""
from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import ansible.module_utils
import pytest

ROOT = Path(__file__).resolve().parents[2]
MODULE_UTILS = ROOT / "module_utils"
GRAPH_DIRS = ("module_utils", "library", "filter_plugins", "reporting", "lab")
OUR_PACKAGES = sorted(p.name for p in MODULE_UTILS.iterdir() if p.is_dir() and not p.name.startswith("__"))


def python_files(*dirs):
    for d in dirs:
        for path in sorted((ROOT / d).rglob("*.py")):
            if "__pycache__" not in path.parts:
                yield path


def node_of(path: Path) -> str:
    """The dotted name a file is imported under: module_utils/x/y.py -> ansible.module_utils.x.y."""
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    if parts[0] == "module_utils":
        parts = ["ansible", "module_utils"] + parts[1:]
    return ".".join(parts)


def _files_by_node():
    return {node_of(p): p for p in python_files(*GRAPH_DIRS)}


def imported_names(path: Path):
    """(dotted name, line, inside `except ImportError`) for every import in the file, relative ones resolved."""
    tree = ast.parse(path.read_text(), str(path))
    package = node_of(path) if path.name == "__init__.py" else node_of(path).rpartition(".")[0]
    guarded = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Try):
            catches = [h.type for h in node.handlers]
            if any(isinstance(t, ast.Name) and t.id in ("ImportError", "ModuleNotFoundError") for t in catches) or \
                    any(isinstance(t, ast.Tuple) and any(getattr(e, "id", "") in ("ImportError", "ModuleNotFoundError")
                                                         for e in t.elts) for t in catches):
                for inner in ast.walk(ast.Module(body=node.body + [s for h in node.handlers for s in h.body],
                                                 type_ignores=[])):
                    guarded.add(id(inner))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno, id(node) in guarded
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[:len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            yield base, node.lineno, id(node) in guarded
            for alias in node.names:
                yield f"{base}.{alias.name}", node.lineno, id(node) in guarded


def import_graph():
    """{file node: {file nodes it imports}} over our own files only."""
    files = _files_by_node()
    graph = {}
    for node, path in files.items():
        edges = set()
        for name, _, _ in imported_names(path):
            # the deepest of our files the name reaches: a.b.c imports a.b.c, else the package a.b
            parts = name.split(".")
            for n in range(len(parts), 0, -1):
                target = ".".join(parts[:n])
                if target in files:
                    if target != node:
                        edges.add(target)
                    break
        graph[node] = edges
    return graph


def cycles(graph):
    """Strongly connected components of more than one node (Tarjan), each sorted."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10000))
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_circle_anywhere():
    found = cycles(import_graph())
    assert not found, "import circles (each a set of files that import each other): %s" % found


def test_the_cycle_finder_finds_a_circle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_module_utils_files_are_found_under_their_import_name():
    graph = import_graph()
    assert "ansible.module_utils.hf.verify" in graph
    assert "ansible.module_utils.hf.verify" in graph["ansible.module_utils.fanout.peer_unit"]


@pytest.mark.parametrize("path", list(python_files(*GRAPH_DIRS, "bench", "tests")), ids=lambda p: str(p.relative_to(ROOT)))
def test_one_import_name_for_our_code(path):
    """No `try: import ... except ImportError: import it another way` of our own code, and never the old flat names."""
    bad = []
    for name, line, guarded in imported_names(path):
        ours = name.startswith("ansible.module_utils.") and name.split(".")[2] in OUR_PACKAGES
        if name.startswith("module_utils") or (ours and guarded):
            bad.append(f"{path.relative_to(ROOT)}:{line}: {name}" + (" (inside except ImportError)" if guarded else ""))
    assert not bad, "our code has one import name, ansible.module_utils.<package>.<module>: %s" % bad


def test_no_filter_plugin_loads_files_by_path():
    for path in python_files("filter_plugins"):
        text = path.read_text()
        assert "spec_from_file_location" not in text and "SourceFileLoader" not in text, path


def test_module_utils_is_packages_each_with_an_empty_init():
    loose = sorted(p.name for p in MODULE_UTILS.glob("*.py"))
    assert not loose, f"module_utils/ holds packages only, by job: {loose}"
    assert OUR_PACKAGES
    for pkg in OUR_PACKAGES:
        init = MODULE_UTILS / pkg / "__init__.py"
        assert init.is_file() and init.read_text().strip() == "", f"{init}: ansible-core ships it, keep it empty"


def test_no_package_shadows_an_ansible_core_module_utils_name():
    """Local module_utils paths are searched before ansible-core's: a package of ours named like one of its own
    (errors, common, facts, urls, basic, ...) would replace it in every module's payload."""
    core = {p.stem if p.suffix == ".py" else p.name for d in ansible.module_utils.__path__[:1]
            for p in Path(d).iterdir() if not p.name.startswith("__")}
    assert {"basic", "common", "urls", "facts", "errors"} <= core  # read from the installed ansible-core
    assert not set(OUR_PACKAGES) & core, f"these shadow ansible-core's own module_utils: {sorted(set(OUR_PACKAGES) & core)}"


def test_reporting_imports_everything_at_the_top_of_its_files():
    """reporting/ is layered (load -> speedup -> acceptance/objective/status -> sections/plots -> render/proposal):
    a function-level import is how its circle once hid."""
    late = []
    for path in python_files("reporting"):
        tree = ast.parse(path.read_text(), str(path))
        top = {id(n) for n in tree.body}
        late += [f"{path.relative_to(ROOT)}:{n.lineno}" for n in ast.walk(tree)
                 if isinstance(n, (ast.Import, ast.ImportFrom)) and id(n) not in top]
    assert not late, f"imports inside functions: {late}"


def test_architecture_md_names_every_package_and_every_test_path_it_cites():
    text = (ROOT / "ARCHITECTURE.md").read_text()
    missing = [p for p in OUR_PACKAGES if f"| `{p}/` |" not in text]
    assert not missing, f"ARCHITECTURE.md has no row for: {missing}"
    cited = {c for line in text.splitlines() if line.startswith("|")
             for c in re.findall(r"`(tests/unit/[\w/]+\.py)`", line)}
    assert cited and not [c for c in cited if not (ROOT / c).is_file()], "ARCHITECTURE.md cites missing tests"


def test_unit_tests_mirror_the_source_tree():
    """tests/unit/<dir>/test_<name>.py: <dir> is a module_utils package or a source folder of the repository
    (library, filter_plugins, reporting, bench, lab/..., roles/..., group_vars), so the test of x/y.py is found at
    tests/unit/x/test_y.py; only this repository-wide test stays at the top."""
    unit = ROOT / "tests" / "unit"
    flat = sorted(p.name for p in unit.glob("test_*.py"))
    assert flat == ["test_architecture.py"], f"flat test files left in tests/unit: {flat}"
    for test in unit.rglob("test_*.py"):
        rel = test.parent.relative_to(unit)
        if rel == Path("."):
            continue
        source = MODULE_UTILS / rel if rel.parts[0] in OUR_PACKAGES else ROOT / rel
        assert source.is_dir(), f"{test.relative_to(ROOT)} mirrors no source folder ({source.relative_to(ROOT)})"


# One job that cannot be split, and why: each is shipped to a host as ONE standalone script (no Ansible, no package
# beside it), so a second file would have to be shipped and put on its path by hand.
LONG_BY_NECESSITY = {
    "module_utils/fanout/peer_server.py": "the fleet peer server, run from its run dir with only hf_verify.py beside it",
    "module_utils/venv/receive.py": "the venv stream's receiving end, sent inline to `python3 -c` on the target",
}


def test_no_file_over_500_lines_unless_it_is_one_job_that_cannot_be_split():
    long = {str(p.relative_to(ROOT)): n for p in python_files(*GRAPH_DIRS)
            if (n := len(p.read_text().splitlines())) > 500}
    assert set(long) <= set(LONG_BY_NECESSITY), f"split these by job: {sorted(set(long) - set(LONG_BY_NECESSITY))}"
    assert all((ROOT / p).is_file() for p in LONG_BY_NECESSITY)


def test_the_one_import_name_works_where_ansible_core_is_absent():
    """The device scripts run on a Python with no ansible-core: local_module_utils.install() still gives our
    packages their one name (-S: no site-packages, so no ansible-core)."""
    import subprocess
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import local_module_utils; local_module_utils.install(); "
            "from ansible.module_utils.sglang import smoke; from ansible.module_utils.loadgen import matrix; "
            "import ansible.module_utils as mu; print(mu.__path__)")
    out = subprocess.run([sys.executable, "-I", "-S", "-c", code, str(ROOT)], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == repr([str(MODULE_UTILS)])

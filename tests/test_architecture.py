"""The package's layout: no import circle, no long module without a reason, nothing left over.

* The import graph is read from the source (``ast``): every ``import`` and
  ``from ... import`` of every module of ``devalloc``, at module level or
  inside a function (or under ``if TYPE_CHECKING:``), relative ones resolved.
  An edge goes to the deepest module of the package an import names
  (``from devalloc.host import stats`` is an edge to ``devalloc.host.stats``,
  ``from . import layout as L`` one to ``devalloc.layout``). A circle in that
  graph fails, named module by module. ``importlib.import_module`` with a
  computed name (the lazy packages' ``__getattr__``) is not read. The same
  graph keeps the layers of docs/development.md's diagram: the ground, ``sim/``,
  ``device/`` and ``host/`` import nothing above them (:data:`FORBIDDEN`).
* A module of more than :data:`MAX_LINES` lines says why in its docstring, in
  a sentence that starts with :data:`REASON` ("Longer than 500 lines because
  ..."); shorter ones need nothing.
* Nothing left over at the top: no module at an old path (they were removed
  before any release), at most :data:`MAX_TOP_MODULES` modules loose at
  ``devalloc/``'s top, no import circle in ``kernels/`` either;
  ``python -m devalloc.probes`` stays the command.
"""

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "devalloc"

#: Lines a module may have without saying why.
MAX_LINES = 500
#: How a longer module's docstring starts the sentence that says why.
REASON = f"Longer than {MAX_LINES} lines because "


# ------------------------------------------------------------- import graph

def modules_of(package_dir):
    """Return ``{dotted name: path}`` of every module under ``package_dir`` (a package)."""
    package_dir = Path(package_dir)
    out = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = list(path.relative_to(package_dir.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def imports_of(name, path, modules):
    """Return the modules of ``modules`` that module ``name`` (at ``path``) imports."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                if node.level - 1 >= len(parts):
                    raise ValueError(f"{path}:{node.lineno}: relative import beyond the top")
                base = ".".join(parts[:len(parts) - (node.level - 1)]
                                + ([node.module] if node.module else []))
            else:
                base = node.module
            # from X import y: the module X.y if there is one, else X
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                       for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in modules:  # a name inside a module: that module
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def import_graph(package_dir):
    """Return ``{module: set of modules it imports}`` over the package at ``package_dir``."""
    modules = modules_of(package_dir)
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def circles(graph):
    """Return the import circles of ``graph``: one list per strongly connected set, sorted.

    Each circle is given as a path ``a -> b -> ... -> a`` through the set.
    """
    index, low, stack, on_stack, found = {}, {}, [], set(), []
    counter = [0]

    def visit(v):  # Tarjan's algorithm
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            members = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                members.append(w)
                if w == v:
                    break
            if len(members) > 1:
                found.append(_path_through(graph, sorted(members)))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def _path_through(graph, members):
    """Return a circle ``[a, b, ..., a]`` inside the strongly connected ``members``."""
    inside = set(members)
    start = members[0]
    # breadth-first from start back to start, staying inside the set
    paths = {w: [start, w] for w in sorted(graph[start] & inside)}
    queue = list(paths)
    while start not in paths:
        v = queue.pop(0)
        for w in sorted(graph[v] & inside):
            if w not in paths:
                paths[w] = paths[v] + [w]
                queue.append(w)
    return paths[start]


def test_the_package_has_no_import_circle():
    found = circles(import_graph(PACKAGE))
    assert not found, "import circles in devalloc (move the names both use down to a module " \
        "both import):\n" + "\n".join("  " + " -> ".join(c) for c in found)


#: Subpackage -> the subpackages its modules may not import (docs/development.md, "Layout":
#: the arrows of the diagram go one way). ``ground``: the top-level modules
#: both sides stand on (errors.py names host types for annotations only).
FORBIDDEN = {
    "ground": {"device", "host", "tools", "testing", "gpucheck", "sim"},
    "sim": {"device", "host", "tools", "testing", "gpucheck"},
    "device": {"host", "tools", "testing", "gpucheck"},
    "host": {"tools", "testing", "gpucheck"},
}
GROUND = {"devalloc.layout", "devalloc.ctx",
          "devalloc.target", "devalloc._version"}


def _part(module):
    parts = module.split(".")
    if module in GROUND:
        return "ground"
    return parts[1] if len(parts) > 2 or parts[-1] in FORBIDDEN["ground"] else module


def layer_violations(graph):
    """Return ``["a imports b", ...]`` for the imports of ``graph`` against :data:`FORBIDDEN`."""
    wrong = [f"{m} imports {t}" for m, targets in graph.items() for t in targets
             if _part(t) in FORBIDDEN.get(_part(m), ())]
    # host/ launches device/gather.py's kernels (Heap.gather), nothing else of device/
    wrong += [f"{m} imports {t}" for m, targets in graph.items() for t in targets
              if _part(m) == "host" and _part(t) == "device"
              and (m, t) != ("devalloc.host.gather", "devalloc.device.gather")]
    return sorted(wrong)


def test_the_layers_import_downwards():
    wrong = layer_violations(import_graph(PACKAGE))
    assert not wrong, "\n".join(wrong)


def test_the_layer_rule_bites():
    graph = {"devalloc.layout": {"devalloc.device.core"},
             "devalloc.device.core": {"devalloc.layout", "devalloc.host.stats"},
             "devalloc.host.heap": {"devalloc.device.api"},
             "devalloc.host.gather": {"devalloc.device.gather"},
             "devalloc.tools.paths": {"devalloc.device.core", "devalloc.host.stats"}}
    assert layer_violations(graph) == [
        "devalloc.device.core imports devalloc.host.stats",
        "devalloc.host.heap imports devalloc.device.api",
        "devalloc.layout imports devalloc.device.core"]


def test_the_graph_reads_relative_function_level_and_from_imports(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("from .. import base\n")
    (pkg / "base.py").write_text("import os\n")
    (pkg / "a.py").write_text("from .sub import b\nfrom . import base as B\n")
    (pkg / "sub" / "b.py").write_text("def f():\n    from ..base import thing\n")
    graph = import_graph(pkg)
    assert graph == {"pkg": set(), "pkg.sub": {"pkg.base"}, "pkg.base": set(),
                     "pkg.a": {"pkg.sub.b", "pkg.base"}, "pkg.sub.b": {"pkg.base"}}
    assert circles(graph) == []


def test_a_circle_is_found_and_named(tmp_path):
    # a -> b at module level, b -> c inside a function, c -> a by absolute import
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from . import b\n")
    (pkg / "b.py").write_text("def f():\n    from .c import g\n    return g\n")
    (pkg / "c.py").write_text("import pkg.a\n\ndef g():\n    pass\n")
    (pkg / "d.py").write_text("from .a import thing\n")  # into the circle, not part of it
    assert circles(import_graph(pkg)) == [["pkg.a", "pkg.b", "pkg.c", "pkg.a"]]


# --------------------------------------------------------------- module size

def _docstring(path):
    return ast.get_docstring(ast.parse(path.read_text(), str(path))) or ""


def long_modules_without_a_reason(package_dir):
    """Return ``[(path, lines)]`` of modules over :data:`MAX_LINES` lines whose
    docstring has no sentence starting with :data:`REASON` (followed by a reason)."""
    out = []
    for path in sorted(Path(package_dir).rglob("*.py")):
        lines = len(path.read_text().splitlines())
        if lines <= MAX_LINES:
            continue
        doc = " ".join(_docstring(path).split())
        at = doc.find(REASON)
        if at < 0 or len(doc[at + len(REASON):].split(".")[0].split()) < 3:
            out.append((path, lines))
    return out


def test_every_long_module_says_why():
    # kernels/ is installed as devalloc.examples: the package's modules too.
    found = long_modules_without_a_reason(PACKAGE) + long_modules_without_a_reason(ROOT / "kernels")
    assert not found, (
        f"modules over {MAX_LINES} lines: split them, or say why in the docstring "
        f"(\"{REASON}...\"):\n"
        + "\n".join(f"  {p.relative_to(ROOT)}: {n} lines" for p, n in found))


def test_the_size_rule_bites(tmp_path):
    body = "x = 1\n" * MAX_LINES
    (tmp_path / "short.py").write_text('"""Short."""\n' + "x = 1\n" * (MAX_LINES - 1))
    (tmp_path / "long.py").write_text('"""Long."""\n' + body)
    (tmp_path / "vague.py").write_text(f'"""Long.\n\n{REASON}it is.\n"""\n' + body)
    (tmp_path / "said.py").write_text(
        f'"""Long.\n\n{REASON}its tables must be\nread together.\n"""\n' + body)
    found = [p.name for p, _ in long_modules_without_a_reason(tmp_path)]
    assert found == ["long.py", "vague.py"]


def test_every_package_says_in_one_line_what_goes_in_it():
    for init in sorted(PACKAGE.rglob("__init__.py")):
        first = _docstring(init).split("\n")[0]
        assert first.endswith(".") and len(first.split()) >= 5, (init, first)


# ------------------------------------------------- the top: nothing left over

#: The old paths of modules that moved into host/ and tools/ before any
#: release: removed (CHANGELOG.md, "Layout", says where each went).
OLD_PATHS = ("aot", "codesize", "debug_host", "distributed", "gather", "observed", "paths",
             "replayer", "report", "stats", "_moved")
#: Modules loose at devalloc/'s top (``__init__`` aside) at most.
MAX_TOP_MODULES = 8


def test_no_module_is_left_at_an_old_path():
    left = [name for name in OLD_PATHS if (PACKAGE / f"{name}.py").exists()]
    assert not left, left


def test_few_modules_are_loose_at_the_top():
    top = sorted(p.stem for p in PACKAGE.glob("*.py") if p.name != "__init__.py")
    assert len(top) <= MAX_TOP_MODULES, top


def test_the_examples_have_no_import_circle():
    # kernels/ is installed as devalloc.examples: held to the package's rule.
    found = circles(import_graph(ROOT / "kernels"))
    assert not found, "\n".join(" -> ".join(c) for c in found)


def test_using_the_package_warns_nothing():
    # Every module, the public names, the lazy packages' names: no warning of
    # devalloc's (warnings are errors here).
    modules = sorted(m for m in modules_of(PACKAGE) if not m.endswith("__main__"))
    code = ("import importlib, devalloc, devalloc.host\n"
            f"for m in {modules!r}:\n    importlib.import_module(m)\n"
            "for n in devalloc.__all__ + list(devalloc._SUBMODULES):\n"
            "    getattr(devalloc, n)\n"
            "for n in devalloc.host.__all__:\n    getattr(devalloc.host, n)\n")
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "1", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-W", "error:devalloc.:DeprecationWarning", "-c", code],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.mark.parametrize("command", [["devalloc.probes", "--help"]])
def test_documented_commands_run_without_a_warning(command):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    proc = subprocess.run([sys.executable, "-W", "error:devalloc.:DeprecationWarning", "-m",
                           *command],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.startswith("usage: python -m devalloc.probes"), proc.stdout


# ------------------------------------------------------------------ packaging

def test_every_package_is_installed():
    # pyproject lists the packages a plain (non-editable) install copies: a
    # folder missing there is missing from the wheel (tests/test_packaging.py
    # checks the wheel itself).
    tomllib = pytest.importorskip("tomllib")
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())
                 ["tool"]["setuptools"]["packages"])
    found = {name for name, path in modules_of(PACKAGE).items() if path.name == "__init__.py"}
    assert found - listed == set(), "add to pyproject's [tool.setuptools] packages"

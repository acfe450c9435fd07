"""The host API's type hints work for a user's type checker (mypy).

mypy checks devalloc's public host modules, then a user's program that uses
``devalloc.Heap``: the types it infers come from devalloc's hints (through
the lazy package's ``TYPE_CHECKING`` imports), and a misuse is an error.
"""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PUBLIC_MODULES = ["devalloc/__init__.py", "devalloc/host/__init__.py", "devalloc/host/heap.py",
                  "devalloc/host/capacity.py", "devalloc/host/reading.py", "devalloc/host/run.py",
                  "devalloc/host/stats.py", "devalloc/errors.py", "devalloc/host/debug.py"]

USER_PROGRAM = """
import devalloc

heap = devalloc.Heap(1 << 20, debug=True)
reveal_type(heap.usage())
reveal_type(heap.usage().classes)
reveal_type(heap.live())
reveal_type(heap.run)
reveal_type(heap.capacity)
with devalloc.Heap(1 << 20) as h:
    reveal_type(h)
try:
    heap.check()
except devalloc.HeapExhausted as e:
    reveal_type(e.usage)
heap.resize("big")
"""


def mypy(*args, cwd):
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--ignore-missing-imports", "--follow-imports=silent",
         "--no-error-summary", "--hide-error-context", "--cache-dir", str(cwd / ".mypy_cache"),
         *args],
        capture_output=True, text=True, cwd=cwd, timeout=600,
        env={**os.environ, "MYPYPATH": str(ROOT)})
    return proc.returncode, proc.stdout


def test_public_host_modules_type_check(tmp_path):
    code, out = mypy(*(str(ROOT / m) for m in PUBLIC_MODULES), cwd=tmp_path)
    assert code == 0, out


def test_a_users_program_gets_devallocs_types(tmp_path):
    (tmp_path / "user.py").write_text(USER_PROGRAM)
    code, out = mypy("user.py", cwd=tmp_path)
    # (mypy before 2.0 spells builtins in full: builtins.int)
    revealed = [line.split("Revealed type is ")[1].strip('"').replace("builtins.", "")
                for line in out.splitlines() if "Revealed type is" in line]
    assert revealed == [
        "devalloc.host.stats.Usage",
        "dict[int, devalloc.host.stats.ClassUsage]",
        "list[tuple[int, int]]",
        "def (kernel: Any, griddim: Any, blockdim: Any, *args: Any, ceiling: int, "
        "growth: float =, max_attempts: int =) -> devalloc.host.run.RunResult",
        "int",
        "devalloc.host.heap.Heap",
        "devalloc.host.stats.Usage",
    ], out
    errors = [line for line in out.splitlines() if ": error:" in line]
    assert len(errors) == 1 and "resize" in errors[0] and '"str"' in errors[0], out

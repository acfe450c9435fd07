"""``devalloc.__version__``: the installed distribution's version (imports no numba).

Apart from the package's ``__init__`` so that a module the package imports
(:mod:`devalloc.sim.compat`, which names it in its errors) can read it
without importing the package back.
"""

from importlib import metadata as _metadata

try:
    __version__ = _metadata.version("devalloc")
except _metadata.PackageNotFoundError:  # a source tree on sys.path, not installed
    __version__ = "0+unknown"


_source = None


def source_hash():
    """Return the SHA-256 of devalloc's own ``.py`` files (names and contents), hex.

    What compiled code depends on besides the version (a source tree edited
    under the same version): the compiled-body cache
    (:mod:`devalloc.device.bodycache`) keys its folder with it, and a
    heap's ctx type carries it (:class:`devalloc.ctx.PagedMeta`), so that
    Numba's ``cache=True`` never loads a kernel compiled with another devalloc.
    Computed once per process (about a hundred files).
    """
    global _source
    if _source is None:
        import hashlib
        from pathlib import Path

        package = Path(__file__).resolve().parent
        h = hashlib.sha256()
        for path in sorted(package.rglob("*.py")):
            h.update(str(path.relative_to(package).as_posix()).encode())
            h.update(b"\0")
            h.update(path.read_bytes())
            h.update(b"\0")
        _source = h.hexdigest()
    return _source

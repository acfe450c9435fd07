"""The allocator's bodies compiled once: an on-disk cache of their NVVM IR.

A kernel that calls ``alloc`` would otherwise type and lower the allocator's
Python source (about 90 device functions, 130 compilations) in every
process: about 5 seconds on a 2-core machine, where the kernel's own code
takes half a second. :mod:`devalloc.device.outline` compiles each
out-of-line body (``alloc``, ``free`` past its NULL test, ``bump``, scoped's
new chunk and chain of frees) once per (body, argument types, line info) into
one self-contained NVVM IR text (the wrapper the kernel calls and every
function it needs, ``linkonce_odr``), keeps it in this process and on disk,
and links that text into each kernel that calls the body: NVVM compiles it
with the kernel, so the code is the same as when the body is typed in the
kernel's own compilation (it inlines it at a lone site under
``outline="auto"``), and a later process types nothing of the allocator.

Where: :func:`cache_dir` (``DEVALLOC_CACHE_DIR``, else the user's cache
folder), in a folder per :func:`toolchain_key`: devalloc's version and the
hash of its own source files, the versions of Python, numba, numba-cuda and
llvmlite, and NVVM's version and IR version. A change to any of them starts
a new folder; an old one is never read again (``python -m devalloc cache
--clear`` removes them). On unless ``DEVALLOC_CACHE=0`` (:data:`ENV_SWITCH`);
off, the bodies are compiled once per process. The same folder keeps
kernels' compiled code (:mod:`devalloc.device.kernelcache`).

Bounded: past ``DEVALLOC_CACHE_MAX_MB`` MiB (:data:`DEFAULT_MAX_MB`) the
least recently used entries go, every toolchain's (a folder of an older
devalloc is used by nobody, and goes first).

Safe when several processes fill it at once: an entry is written to a
temporary file in its folder and renamed over its name (atomic on one file
system), so a reader sees a whole entry or none; an entry that cannot be
read (truncated by a full disk, another version's pickle) is a miss and is
written again. A folder that cannot be written is a warning, once, and the
process compiles as if the cache were off.

Pure host code (paths, keys, files); no numba import at module level.
"""

import hashlib
import os
import pickle
import sys
import tempfile
import warnings
import zlib
from pathlib import Path

#: The environment variable that names the cache folder.
ENV_DIR = "DEVALLOC_CACHE_DIR"
#: The environment variable that turns the disk cache off (``0``, ``off``,
#: ``false``, ``no``); on otherwise. It was opt-in while a kernel that linked
#: bodies written by several processes at the same time had failed once in
#: ptxas ("Unresolved extern function"): Numba's names carry a per-process
#: counter, so texts of two processes could give one name to two different
#: functions. Every entry now gets names of its writer's
#: (:func:`devalloc.device.bodies.own_names`), and tests/test_bodycache.py
#: links, in one kernel, bodies that two processes filling one folder at the
#: same time wrote. Off, the bodies are still compiled once per process.
ENV_SWITCH = "DEVALLOC_CACHE"
#: The environment variable that bounds the cache's size on disk, in MiB.
ENV_MAX = "DEVALLOC_CACHE_MAX_MB"
#: The bound without it: a kernel's entries take about 300 KB (its PTX,
#: LTO-IR and cubin), the allocator's bodies about 150 KB each.
DEFAULT_MAX_MB = 1024
#: What a full cache is trimmed to (the oldest entries removed first), of the bound.
TRIM_TO = 0.75
#: The suffix of an entry's file.
SUFFIX = ".body"
#: The format of an entry (part of the toolchain: a new format is a new folder).
FORMAT = 3

def default_dir(platform=None, environ=None, home=None):
    """Return the user's cache folder for devalloc on ``platform`` (``sys.platform``).

    Linux and others: ``$XDG_CACHE_HOME/devalloc`` or ``~/.cache/devalloc``;
    macOS: ``~/Library/Caches/devalloc``; Windows:
    ``%LOCALAPPDATA%\\devalloc\\Cache``.
    """
    platform = sys.platform if platform is None else platform
    environ = os.environ if environ is None else environ
    home = Path.home() if home is None else Path(home)
    if platform.startswith("win"):
        base = environ.get("LOCALAPPDATA") or str(home / "AppData" / "Local")
        return Path(base) / "devalloc" / "Cache"
    if platform == "darwin":
        return home / "Library" / "Caches" / "devalloc"
    xdg = environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg and os.path.isabs(xdg) else home / ".cache") / "devalloc"


def cache_dir(environ=None):
    """Return the cache's folder: ``DEVALLOC_CACHE_DIR`` if set, else :func:`default_dir`."""
    environ = os.environ if environ is None else environ
    named = environ.get(ENV_DIR)
    return Path(named).expanduser() if named else default_dir(environ=environ)


def enabled(environ=None):
    """Return whether compiled code goes to disk: unless ``DEVALLOC_CACHE`` is 0/off/false/no."""
    environ = os.environ if environ is None else environ
    return environ.get(ENV_SWITCH, "1").strip().lower() not in ("0", "off", "false", "no")


def max_bytes(environ=None):
    """Return the cache's bound in bytes: ``DEVALLOC_CACHE_MAX_MB`` MiB, else :data:`DEFAULT_MAX_MB`.

    Raises ValueError, naming the variable, for a value that is not a
    positive number.
    """
    environ = os.environ if environ is None else environ
    text = environ.get(ENV_MAX, "").strip()
    if not text:
        return DEFAULT_MAX_MB << 20
    try:
        mb = float(text)
    except ValueError:
        mb = -1.0
    if not mb > 0:
        raise ValueError(f"{ENV_MAX}={text!r}: the cache's bound must be a positive number "
                         f"of MiB (unset: {DEFAULT_MAX_MB})")
    return int(mb * 2**20)


def toolchain():
    """Return what a compiled body depends on besides its own key, as a dict of strings.

    devalloc's version and source hash, Python's, numba's, numba-cuda's and
    llvmlite's versions, and NVVM's version and IR version (loads NVVM).
    """
    from importlib import metadata

    import llvmlite
    import numba
    from numba.cuda.cudadrv import nvvm

    from .._version import __version__, source_hash

    try:
        cuda_version = metadata.version("numba-cuda")
    except metadata.PackageNotFoundError:  # numba's own numba.cuda
        cuda_version = "numba " + numba.__version__
    engine = nvvm.NVVM()
    return {
        "devalloc": __version__,
        "source": source_hash(),
        "python": "%d.%d" % sys.version_info[:2],
        "numba": numba.__version__,
        "numba-cuda": cuda_version,
        "llvmlite": llvmlite.__version__,
        "nvvm": ".".join(map(str, engine.get_version())),
        "nvvm-ir": ".".join(map(str, engine.get_ir_version())),
        "format": str(FORMAT),
    }


def digest(value):
    """Return a 32-hex-digit name for ``value`` (its ``repr``, hashed)."""
    return hashlib.sha256(repr(value).encode()).hexdigest()[:32]


def toolchain_key(chain):
    """Return the folder name for toolchain ``chain`` (:func:`toolchain`): version, then hash."""
    version = "".join(c if c.isalnum() or c in ".+-" else "_" for c in chain["devalloc"])
    return f"{version}-{digest(sorted(chain.items()))}"


class DiskCache:
    """The entries of one toolchain in one folder: ``load(key)``, ``store(key, value)``.

    ``root``: the cache folder (:func:`cache_dir`); ``chain``: the toolchain
    (:func:`toolchain`). An entry is ``(repr(key), value)`` pickled and
    compressed (zlib: IR text shrinks about tenfold); one that cannot be
    loaded, or holds another key, is a miss. Writing never raises: a folder that cannot be written warns
    once and the cache stays in memory.
    """

    def __init__(self, root, chain, limit=None):
        self.root = Path(root)
        self.folder = self.root / toolchain_key(chain)
        self.limit = max_bytes() if limit is None else limit
        self.failed = False

    def path(self, key):
        """Return the file of entry ``key`` (any ``repr``-able value)."""
        return self.folder / (digest(key) + SUFFIX)

    def load(self, key):
        """Return entry ``key``'s value, or None if absent or unreadable."""
        try:
            with open(self.path(key), "rb") as fh:
                stored_key, value = pickle.loads(zlib.decompress(fh.read()))
        except Exception:  # absent, truncated, another format: a miss
            return None
        if stored_key != repr(key):
            return None
        try:  # (used now: the last to go when the cache is trimmed)
            os.utime(self.path(key))
        except OSError:
            pass
        return value

    def store(self, key, value):
        """Write entry ``key`` atomically (a temporary file renamed over it); return success."""
        if self.failed:
            return False
        tmp = None
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.folder, prefix=".tmp-", suffix=SUFFIX)
            with os.fdopen(fd, "wb") as fh:
                fh.write(zlib.compress(pickle.dumps((repr(key), value),
                                                    protocol=pickle.HIGHEST_PROTOCOL), 6))
            os.replace(tmp, self.path(key))
            self.trim()
            return True
        except OSError as e:
            self.failed = True
            warnings.warn(f"devalloc: cannot write the compiled-body cache in {self.folder} "
                          f"({e}); set {ENV_DIR} to a writable folder, or {ENV_SWITCH}=0",
                          RuntimeWarning, stacklevel=3)
            if tmp is not None:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass
            return False

    def trim(self):
        """Remove the least recently used entries (every toolchain's) while the cache is over its bound.

        Bound: :attr:`limit` (:func:`max_bytes`); trimmed to :data:`TRIM_TO`
        of it. Return the number of entries removed.
        """
        try:
            return _trim(self.root, self.limit)
        except OSError:  # the folder went away meanwhile: nothing to trim
            return 0


def _trim(root, limit):
    # The oldest-used entries under root (every toolchain's) removed until
    # they hold TRIM_TO of limit. Another process may remove the same
    # files: what is gone is gone.
    found = []
    for p in entries(root):
        try:
            st = p.stat()
        except OSError:
            continue
        found.append((st.st_mtime, st.st_size, p))
    total = sum(size for _, size, _ in found)
    if total <= limit:
        return 0
    removed = 0
    for _, size, p in sorted(found):
        if total <= TRIM_TO * limit:
            break
        try:
            p.unlink()
            removed += 1
        except OSError:
            pass
        total -= size
    # (folders stay: another process may be about to write into an empty one)
    return removed


def entries(root=None):
    """Return the entry files under cache folder ``root`` (:func:`cache_dir`), every toolchain's."""
    root = cache_dir() if root is None else Path(root)
    if not root.is_dir():
        return []
    return sorted(p for p in root.glob("*/*" + SUFFIX)
                  if p.is_file() and not p.name.startswith(".tmp-"))


def clear(root=None):
    """Remove every entry and toolchain folder under ``root`` (:func:`cache_dir`); return the count.

    Only devalloc's own files (``*.body`` and unfinished temporary files
    in its toolchain folders) are removed, then the folders left empty.
    """
    root = cache_dir() if root is None else Path(root)
    if not root.is_dir():
        return 0
    removed = 0
    for folder in root.iterdir():
        if not folder.is_dir():
            continue
        for p in folder.iterdir():
            if p.is_file() and p.name.endswith(SUFFIX):
                try:
                    p.unlink()
                    removed += not p.name.startswith(".tmp-")
                except OSError:
                    pass
        try:
            folder.rmdir()
        except OSError:  # not empty: something else is in it
            pass
    return removed

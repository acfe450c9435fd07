"""A kernel's compiled code kept on disk: NVVM's PTX and LTO-IR, and the linked cubin.

The body cache (:mod:`devalloc.device.bodies`) spares a later process the
typing of the allocator, but every kernel that links a body still gives
NVVM the allocator's IR and the linker its code: about a second on a
2-core machine per kernel and process, where the kernel's own typing takes
half of one (bench/first_call.py). This module keeps what those steps make,
for the code libraries that link a body (their text defines a
``devalloc_`` wrapper), in the body cache's folder of this toolchain
(:class:`devalloc.device.bodycache.DiskCache`):

* ``get_asm_strs`` (NVVM to PTX; what ``cuda.compile_ptx`` returns and
  what numba-cuda compiles when a kernel is built) and ``get_ltoir``
  (NVVM to LTO-IR) are keyed by the hash of the whole text NVVM is given,
  up to Numba's per-process numbers (:func:`canonical`: the same kernel
  compiled in another process, with its modules in another order), the
  NVVM options and the compute capability;
* ``get_cubin`` (nvJitLink or the driver's linker, at a first launch) by
  the hash of the PTX or LTO-IR it links, the compute capability, the
  register limit, LTO, and the linker's version; a library that links
  files (``link=``, NRT, cudadevrt) is not cached.

Equal inputs give equal outputs: an entry is the compiler's own output for
the input of its key (the same program, its internal functions perhaps
named otherwise), so a hit is what a compilation would have made, in this
process or another. The library's in-memory caches (``_ptx_cache``,
``_ltoir_cache``, ``_cubin_cache``) are filled as the compilation fills
them, so ``@cuda.jit(cache=True)`` pickles the same.
Off with the body cache (``DEVALLOC_CACHE=0``), while numba-cuda dumps
assembly (``NUMBA_DUMP_ASSEMBLY``), and for libraries without a body.

Who calls: numba-cuda, through the methods :func:`install` wraps (at the
import of :mod:`devalloc.device.outline`, off the simulator). Host code.
"""

import hashlib
import re

from numba import config

#: What every body's wrapper symbol starts with, as NVVM's text names it.
MARK = '@"devalloc_'


def _disk():
    from . import bodies

    return bodies._disk_cache()


def _text_digest(strs):
    h = hashlib.sha256()
    for s in strs:
        data = s if isinstance(s, bytes) else s.encode()
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()


def links_body(lib):
    """Return whether code library ``lib``'s text defines or calls a devalloc body."""
    try:
        strs = lib.llvm_strs
    except Exception:  # a library with no modules (rebuilt from a pickle)
        return False
    return any(MARK in s for s in strs)


#: What the wrappers read of a numba-cuda code library (numba-cuda 0.28 to
#: 0.30 have them all); a library without one is compiled as numba-cuda would.
FIELDS = ("_ensure_cc", "_ptx_cache", "_ltoir_cache", "_cubin_cache", "_linkerinfo_cache",
          "_nvvm_options", "_max_registers", "_lto", "_linking_files", "needs_cudadevrt")


def _usable(lib):
    return (not config.DUMP_ASSEMBLY and all(hasattr(lib, f) for f in FIELDS)
            and _disk() is not None and links_body(lib))


def linker_version():
    """Return the version of the linker a first launch uses, or None when it cannot be told.

    nvJitLink's (numba-cuda links with it when it is there), else the
    driver's (its linker).
    """
    try:
        from numba.cuda.cudadrv import driver

        if driver._have_nvjitlink():
            from cuda.bindings import nvjitlink

            return ("nvjitlink", tuple(nvjitlink.version()))
        return ("driver", tuple(driver.driver.get_version()))
    except Exception:
        return None


def _code_of(cubin):
    # (bytes, name) of what the linker made: a cuda.core ObjectCode (numba-cuda
    # 0.2x and later), or the bytes themselves; None for anything else.
    if isinstance(cubin, (bytes, bytearray)):
        return bytes(cubin), None
    code, kind = getattr(cubin, "code", None), getattr(cubin, "code_type", None)
    if isinstance(code, (bytes, bytearray)) and kind == "cubin":
        return bytes(code), getattr(cubin, "name", None)
    return None


def _object_code(code, name):
    # What the linker returns, from what _code_of kept.
    if name is None:
        return code
    from cuda.core import ObjectCode

    return ObjectCode.from_cubin(code, name=name)


#: A quoted name in LLVM text: a global's or a local's (``@"..."``, ``%"..."``)
#: or a debug record's field (``linkageName: "..."``); never a string constant.
_QUOTED = re.compile(r'(?:(?<=[@%])|(?<=: ))"([^"\n]*)"')
#: Numba's per-process numbers in a name: the ABI tag of a mangled name
#: (``B4v106``) and a module's (``free_array$106``).
_NUMBER = re.compile(r"B\d+v(\d+)|\$(\d+)$")
#: A body's text (:mod:`devalloc.device.bodies`): it defines a wrapper or a
#: function renamed for its writer (:func:`devalloc.device.bodies.own_names`).
_BODY_TEXT = re.compile(r'^define [^@\n]*@"(?:devalloc_[^"]*|[^"]*_dv[0-9a-f]{12})"\(', re.M)
#: A comment line (``; ModuleID = ...``): nothing NVVM compiles.
_COMMENT = re.compile(r"^;.*$", re.M)
#: A definition that another module may call by name (not internal to the text).
_EXPORTED = re.compile(r'^define (?!(?:linkonce_odr|linkonce|weak_odr|weak|internal|private|'
                       r'available_externally) )[^@\n]*@"([^"]+)"\(', re.M)


def canonical(strs):
    """Return ``(text, exported)``: a library's texts up to Numba's per-process numbers.

    Numba numbers every function it compiles, in the order of the process
    (``free_array`` is ``v9`` in one process and ``v106`` in another that
    compiled the allocator first), and its mangled names carry the number.
    The texts are sorted with the numbers blanked out, then each number is
    replaced by its rank of first appearance: a bijection on each program's
    numbers, so two libraries with the same canonical text are the same
    program with other names for its internal functions (texts that differ
    only in their numbers are ranked after the others, in an order the
    numbers ranked so far decide; where they cannot, two processes may
    give two texts for one program: a miss, never a wrong hit).
    ``exported``: the names the text defines for other code to call (a
    kernel's entry), kept as they are (the loader looks the entry up by
    name). A body's texts are kept as they are: their names carry their
    writer's numbers and mark, the same in every process. Comment lines
    are dropped.
    """
    def numbers(t):
        return [m.group(1) or m.group(2) for q in _QUOTED.finditer(t)
                for m in _NUMBER.finditer(q.group(1))]

    def written(t, name):
        return _QUOTED.sub(lambda q: '"' + _NUMBER.sub(lambda m: name(m.group(1) or m.group(2)),
                                                      q.group(1)) + '"', t)

    # (a body's text, read from disk or renamed for this process, keeps
    # its writer's numbers: the same in every process that links it)
    bodies = [_COMMENT.sub("", t) for t in strs if _BODY_TEXT.search(t)]
    strs = [_COMMENT.sub("", t) for t in strs if not _BODY_TEXT.search(t)]
    groups = {}
    for t in strs:
        groups.setdefault(written(t, lambda n: "#"), set()).add(t)
    ranks = {}
    # Texts alone in their group first (their order does not depend on the
    # numbers); then each group of texts equal but for their numbers, in the
    # order of their texts with the numbers ranked so far (a caller outside
    # the group ranks its callees first) and the others blanked.
    for blank in sorted(groups):
        if len(groups[blank]) == 1:
            for n in numbers(next(iter(groups[blank]))):
                ranks.setdefault(n, len(ranks))
    for blank in sorted(groups):
        if len(groups[blank]) > 1:
            known = sorted(groups[blank], key=lambda t: written(
                t, lambda n: "#%d" % ranks[n] if n in ranks else "#"))
            for t in known:
                for n in numbers(t):
                    ranks.setdefault(n, len(ranks))
    out = sorted([written(t, lambda n: "#%d" % ranks[n]) for t in strs] + bodies)
    exported = sorted(n for t in strs + bodies for n in _EXPORTED.findall(t))
    return "\n".join(out), exported


def _canonical_of(lib):
    # (once per library: its PTX and its LTO-IR are keyed by the same text)
    known = getattr(lib, "_devalloc_canonical", None)
    if known is None or known[0] is not lib.llvm_strs:
        known = (lib.llvm_strs, canonical(lib.llvm_strs))
        lib._devalloc_canonical = known
    return known[1]


def _ptx_key(lib, cc):
    text, exported = _canonical_of(lib)
    return ("ptx", _text_digest([text]), tuple(exported), tuple(cc),
            tuple(sorted((k, repr(v)) for k, v in lib._nvvm_options.items())))


def _ltoir_key(lib, cc):
    return ("ltoir",) + _ptx_key(lib, cc)[1:]


def _cubin_key(lib, cc, linker):
    if lib._lto:
        inputs = [lib.get_ltoir(cc=cc)]
    else:
        inputs = lib.get_asm_strs(cc=cc)
    return ("cubin", _text_digest(inputs), tuple(cc), lib._max_registers, bool(lib._lto), linker)


def install():
    """Wrap numba-cuda's ``CUDACodeLibrary`` compile steps with the disk cache (once).

    ``get_asm_strs``, ``get_ltoir`` and ``get_cubin`` look their result up
    (:func:`_ptx_key`, :func:`_ltoir_key`, :func:`_cubin_key`) before they
    compile, and store what they compiled; each falls back to numba-cuda's
    own method for any library this cache does not keep.
    """
    from numba.cuda.codegen import CUDACodeLibrary

    if getattr(CUDACodeLibrary.get_asm_strs, "devalloc", False):
        return
    if not all(hasattr(CUDACodeLibrary, m) for m in ("get_asm_strs", "get_ltoir", "get_cubin")):
        return  # (another numba-cuda: its own compile steps, uncached)
    plain_asm = CUDACodeLibrary.get_asm_strs
    plain_ltoir = CUDACodeLibrary.get_ltoir
    plain_cubin = CUDACodeLibrary.get_cubin

    def nvvm_step(plain, memo, key_of, kept):
        # NVVM's step `plain` (to PTX or to LTO-IR) looked up on disk first;
        # memo: the library's in-memory cache of it; kept: what is stored.
        def step(self, cc=None):
            if not _usable(self):
                return plain(self, cc=cc)
            cc = self._ensure_cc(cc)
            if cc in getattr(self, memo):
                return plain(self, cc=cc)
            key, disk = key_of(self, cc), _disk()
            hit = disk.load(key)
            if hit is not None:
                getattr(self, memo)[cc] = hit
                return hit
            made = plain(self, cc=cc)
            disk.store(key, kept(made))
            return made
        return step

    get_asm_strs = nvvm_step(plain_asm, "_ptx_cache", _ptx_key, list)
    get_ltoir = nvvm_step(plain_ltoir, "_ltoir_cache", _ltoir_key, bytes)

    def get_cubin(self, cc=None):
        if not _usable(self):
            return plain_cubin(self, cc=cc)
        cc = self._ensure_cc(cc)
        if cc in self._cubin_cache or self._linking_files or self.needs_cudadevrt:
            return plain_cubin(self, cc=cc)
        linker = linker_version()
        if linker is None:
            return plain_cubin(self, cc=cc)
        key = _cubin_key(self, cc, linker)
        disk = _disk()
        hit = disk.load(key)
        if hit is not None:
            code, name, info = hit
            cubin = _object_code(code, name)
            self._cubin_cache[cc], self._linkerinfo_cache[cc] = cubin, info
            return cubin
        cubin = plain_cubin(self, cc=cc)
        stored = _code_of(cubin)
        if stored is not None:
            disk.store(key, (*stored, self._linkerinfo_cache.get(cc, "")))
        return cubin

    for name, fn, plain in (("get_asm_strs", get_asm_strs, plain_asm),
                            ("get_ltoir", get_ltoir, plain_ltoir),
                            ("get_cubin", get_cubin, plain_cubin)):
        fn.devalloc = True
        fn.__doc__ = plain.__doc__
        fn.__wrapped__ = plain
        setattr(CUDACodeLibrary, name, fn)


__all__ = ["MARK", "install", "links_body", "linker_version"]

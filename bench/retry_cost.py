"""What a lost race costs a call: walked SASS instructions of contended paths (sm_90).

The walked paths of ``python -m devalloc.probes --json`` are the calls that
win their first atomic. These are their contended twins, walked the same
way (:mod:`devalloc.tools.paths`: the cheapest execution through the waypoints,
compiled for sm_90, no GPU needed):

* ``alloc_fresh_slab_lost1``: ``alloc(ctx, 64)`` by one lane whose first
  ``cas`` on the hinted slab's state word loses, the second wins.
* ``alloc_reuse_lost_bits``: a reuse whose picked bit went to another
  reuser (its slot given back as an undone reservation), then a second
  search that reuses a freed block.
* ``bump_lost1``: ``bump(ctx, n)`` whose first ``cas`` on the bump word
  loses, the second wins.

Together with the uncontended paths, the difference is the cost of one
retry. Run from a checkout (``.venv/bin/python bench/retry_cost.py``; it
prints JSON); point ``--root`` at another checkout to measure its code.
"""

import argparse
import json
import os
import sys

#: path -> (probe kernel, what, waypoints as (file under devalloc/, line text)).
CONTENDED = {
    "alloc_fresh_slab_lost1": ("alloc", "alloc(ctx, 64), one lost cas on the hinted slab", (
        ("device/core.py", "return _alloc_small(meta, npages, c, mask, leader, rank, lanes, prof)"),
        ("device/slab.py", "first = uint32(_lo32(s >> L.CURSOR_SHIFT)"),
        ("device/slab.py", "tries = int32(tries - 1)"),
        ("device/slab.py", "first = uint32(_lo32(s >> L.CURSOR_SHIFT)"),
        ("device/slab.py", "glo = uint32((got << L.GRANT_COUNT_SHIFT) | first)"),
        ("device/slab.py", "return ((int64(p) + 1) << L.GRANT_PAGE_SHIFT)"),
        ("device/slab.py", "return _grant_offset(g, uint32(0), c, _pshift(meta))"),
    )),
    "alloc_reuse_lost_bits": ("alloc", "alloc(ctx, 64), a reuse whose bit another reuser "
                              "took, then a reuse", (
        ("device/core.py", "return _alloc_small(meta, npages, c, mask, leader, rank, lanes, prof)"),
        ("device/slab.py", "ghi = uint32(uint32(L.GRANT_REUSE >> 32) | w)"),
        ("device/slab.py", "return ((int64(p) + 1) << L.GRANT_PAGE_SHIFT)"),
        ("device/slab.py", "mine = _lo32(_take_bits("),
        ("device/slab.py", "_release_slots(meta, npages, p, int64(_popc32(pick ^ mine)), True, c, prof)"),
        ("device/slab.py", "ghi = uint32(uint32(L.GRANT_REUSE >> 32) | w)"),
        ("device/slab.py", "return ((int64(p) + 1) << L.GRANT_PAGE_SHIFT)"),
        ("device/slab.py", "mine = _lo32(_take_bits("),
        ("device/slab.py", "return (g & ~L.WORD_MASK) | int64(mine)"),
        ("device/slab.py", "return _grant_offset(g, uint32(0), c, _pshift(meta))"),
    )),
    "bump_lost1": ("bump", "bump(ctx, n), one lost cas on the bump word", (
        # _claim_fast's inline try loses; _claim reads the word again and wins.
        ("device/bumpalloc.py", "base = _claim_fast(meta, npages, uint32(size * lanes), lanes,"),
        ("device/bumpalloc.py", "+ int64(total))  # fast try"),
        ("device/bumpalloc.py", "return _claim(meta, npages, total, cnt, prof)"),
        ("device/bumpalloc.py", "count = L.bump_count(w)"),
        ("device/bumpalloc.py", "return (page << _pshift(meta)) + cursor"),
        ("device/bumpalloc.py", "off = base + int64(uint32(rank * size))"),
    )),
}
#: The uncontended twin of each path (devalloc.tools.paths.PATHS).
TWIN = {"alloc_fresh_slab_lost1": "alloc_fresh_slab", "alloc_reuse_lost_bits": "alloc_reuse",
        "bump_lost1": "bump"}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                   help="the checkout whose devalloc to measure")
    a = p.parse_args(argv)
    os.environ.pop("NUMBA_ENABLE_CUDASIM", None)  # GPU compilation (no GPU needed)
    sys.path.insert(0, a.root)
    from devalloc.tools import paths

    specs = {name: paths.PathSpec(kernel, what, tuple(paths.At(f, t) for f, t in wps))
             for name, (kernel, what, wps) in CONTENDED.items()}
    got = paths.measure(paths=specs)
    base = paths.measure(paths={t: paths.PATHS[t] for t in TWIN.values()})
    out = {"root": a.root, "cc": "sm_90", "paths": {}}
    for name, r in got.items():
        twin = TWIN[name]
        out["paths"][name] = {"instructions": r["instructions"], "what": r["what"],
                              "uncontended": twin,
                              "uncontended_instructions": base[twin]["instructions"],
                              "retry_cost": r["instructions"] - base[twin]["instructions"]}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()

"""The contention model's calibration against the H200, and issue 49's targets.

Pure functions over the rows :func:`devalloc.tools.contention_model.run_row`
returns (plain dicts): one cost per round fitted to the H200's thread-based
throughput rows (:data:`H200`, medians of the warm iterations of
bench/results/gpu-nvidia-h200-2026-11-28.json, commit 0c49ef3), each row's
rounds per block scaled to the GPU's resident warps (:func:`at_scale`) and
bounded below by its hottest word's atomics at the same-word rate the warp
floor kernel measured (:func:`atomic_us`, :func:`predict_ms`); the other
variant's rows predicted out of sample (:func:`calibrate`). And whether a
run meets issue 49's targets (:func:`targets`). Nothing here runs device
code.
"""

from .contention_model import ALLOCATIONS, SMS, VARIANTS, ratio


# ------------------------------------------------------------ calibration

#: The H200's throughput rows the model is calibrated against: medians of
#: iterations 1-4 of 5 (warm), 1 M allocations, survey protocol; from
#: bench/results/gpu-nvidia-h200-2026-11-28.json (``python -m
#: devalloc.gpucheck``, devalloc at commit 0c49ef3), part "throughput".
H200 = {
    "source": "bench/results/gpu-nvidia-h200-2026-11-28.json",
    "commit": "0c49ef3",
    "allocations": 1_000_000,
    # (variant, bytes): (floor_ms, alloc_ms, free_ms)
    "rows": {
        ("thread", 16): (0.0272000003606081, 9.21398401260376, 0.029600000008940697),
        ("thread", 256): (0.027216000482439995, 37.01759910583496, 0.047071998938918114),
        ("thread", 4096): (0.02715199999511242, 441.65943908691406, 0.5029279887676239),
        ("thread", 8192): (0.027184000238776207, 878.6553039550781, 0.9372319877147675),
        ("warp", 16): (0.7444320023059845, 58.32262420654297, 1.1357600092887878),
        ("warp", 256): (0.7439199984073639, 197.009521484375, 0.45900800824165344),
        ("warp", 4096): (0.7404959797859192, 2283.434814453125, 0.7765600085258484),
        ("warp", 8192): (0.7446559965610504, 1224.0486450195312, 1.547104001045227),
    },
}
#: The model's figure that a cost per round multiplies: rounds of the
#: lockstep machine per block of the phase (its time per block at W slots).
MEASURE = "rounds_per_block"
#: Warps the H200 keeps resident: 132 SMs x 64 warps (fewer when registers
#: bound it: 40 registers a thread, alloc's on sm_90, leave 48 a SM).
W_GPU = SMS * 64


def at_scale(pairs, target=W_GPU):
    """Return ``(x, slope)``: a per-block figure at ``target`` warps, from ``pairs`` [(W, x)].

    A power law through the two largest W: ``x(W) = x(W2) (W / W2)**slope``.
    The slope is clamped to [-1, 0]: with no word shared, W slots serve W
    times as fast (rounds per block as 1 / W, slope -1); with a word every
    operation serializes on, no faster at all (slope 0). A figure that grows
    with W is held at its largest W's (not extrapolated 30-fold). One pair:
    its figure, slope 0.
    """
    import math

    pts = sorted(p for p in pairs if p[1] is not None)
    if not pts:
        raise ValueError("no figure to scale")
    w2, x2 = pts[-1]
    if len(pts) == 1 or x2 <= 0:
        return x2, 0.0
    w1, x1 = pts[-2]
    slope = 0.0 if x1 <= 0 else math.log(x2 / x1) / math.log(w2 / w1)
    slope = min(0.0, max(-1.0, slope))
    return x2 * (target / w2) ** slope, slope


def atomic_us(data=None):
    """Return the µs one atomic on a word every thread hits costs, from ``data``'s warp floor.

    The warp-based floor kernel: lane 0 of each of ``allocations`` warps
    adds to one counter (nothing for the compiler to merge within a warp),
    so its time over ``allocations`` is one same-word atomic's share of
    L2's throughput (0.74 ns on the H200). Measured, not fitted.
    """
    data = H200 if data is None else data
    floor_ms = data["rows"][("warp", 16)][0]
    return floor_ms * 1000.0 / data["allocations"]


def predict_ms(x, cost_us, n=ALLOCATIONS, floor_ms=0.0, hot=0.0, atom_us=0.0):
    """Return the predicted milliseconds of ``n`` operations.

    ``floor_ms`` (the launch, as the floor kernel times it: one atomic per
    thread, same shape) plus the larger of ``x`` rounds of ``cost_us`` per
    operation (the latency of the leaders' dependent accesses) and ``hot``
    atomics on the hottest word per operation at ``atom_us`` each (its
    throughput: every operation's atomic there waits for the others').
    """
    return floor_ms + n * max(x * cost_us, hot * atom_us) / 1000.0


def fit_cost(points, n=ALLOCATIONS, floor=True, atom_us=0.0):
    """Return the cost per round (µs) that best predicts ``points``.

    ``points``: ``(x, floor_ms, ms)`` or ``(x, floor_ms, ms, hot)`` (see
    :func:`predict_ms`). Least squares on the logarithms (each row's error
    is a factor, so the 0.03 ms rows count as much as the 900 ms ones):
    without floor or hot words, the geometric mean of ``ms / (x n)``; else
    a grid over log(cost), refined by golden-section search around its
    best point. Rows with ``x == 0`` are left out.
    """
    import math

    pts = [(p[0], p[1] if floor else 0.0, p[2], p[3] if len(p) > 3 else 0.0)
           for p in points if p[0] > 0 and p[2] > 0]
    if not pts:
        raise ValueError("no row with a figure to fit")
    guesses = [math.log(ms * 1000.0 / (x * n)) for x, _, ms, _ in pts]
    if not floor and not any(h for *_, h in pts):
        return math.exp(sum(guesses) / len(guesses))

    def err(logc):
        c = math.exp(logc)
        return sum((math.log(predict_ms(x, c, n, f, h, atom_us)) - math.log(ms)) ** 2
                   for x, f, ms, h in pts)

    lo, hi = min(guesses) - 5.0, max(guesses) + 5.0
    grid = [lo + (hi - lo) * k / 400 for k in range(401)]
    k = min(range(len(grid)), key=lambda k: err(grid[k]))
    lo, hi = grid[max(k - 1, 0)], grid[min(k + 1, len(grid) - 1)]
    g = (math.sqrt(5.0) - 1.0) / 2.0
    for _ in range(100):
        a, b = hi - g * (hi - lo), lo + g * (hi - lo)
        if err(a) <= err(b):
            hi = b
        else:
            lo = a
    return math.exp((lo + hi) / 2.0)


def calibrations(rows, data=None, fit_rows=None):
    """Return the calibrations of ``rows``: the model's (scaled to the GPU's
    warps, with the hottest word's throughput), then the plain one at each W
    (its rounds per block as they are, one cost per round and nothing else).

    ``fit_rows``: fit the model's cost on these rows (the model's figures of
    the code the H200 measured) and predict ``rows`` with it, first.
    """
    ws = sorted({r["leaders"] for r in rows})
    out = []
    if fit_rows is not None:
        fit = calibrate(fit_rows, None, hot=True, data=data)
        if fit:
            out.append(calibrate(rows, None, hot=True, data=data, cost=fit["cost_us"]))
    out += [calibrate(rows, None, hot=True, data=data)]
    out += [calibrate(rows, w, hot=False, data=data) for w in ws]
    return [c for c in out if c]


def calibrate(rows, leaders=None, variant="thread", phase="warm", measure=MEASURE,
              floor=True, hot=True, data=None, target=W_GPU, cost=None):
    """Fit one cost per round on ``variant``'s alloc and free rows of ``data`` (the H200's).

    ``leaders``: the rows' figures at that W as they are; None: at
    ``target`` warps (:func:`at_scale`, from the two largest W of ``rows``).
    ``hot``: each operation also waits for its share of the hottest word's
    atomics at the same-word rate of ``data``'s warp floor
    (:func:`atomic_us`, measured), whichever is longer (:func:`predict_ms`);
    the hottest word's atomics per block are those of the largest W.
    Returns ``{"cost_us", "atomic_us", "rows": [{bytes, op, x, slope, hot,
    floor_ms, measured_ms, predicted_ms, ratio}], "worst_factor",
    "geomean_factor", "others"}`` (``others``: the other variant's rows of
    ``data`` predicted with the same cost, out of sample), or None when
    ``rows`` lack a size of ``data`` for ``variant``. ``cost``: predict
    with that cost per round instead of fitting one (``"fitted": False``),
    e.g. one fitted on the model's figures of the code ``data`` measured.
    """
    import math

    data = H200 if data is None else data
    atom = atomic_us(data) if hot else 0.0

    def points(v):
        out = []
        for (dv, b), (floor_ms, alloc_ms, free_ms) in sorted(data["rows"].items()):
            if dv != v:
                continue
            mine = sorted((r for r in rows if (r["variant"], r["bytes"]) == (v, b)
                           and (leaders is None or r["leaders"] == leaders)),
                          key=lambda r: r["leaders"])
            if not mine:
                return None
            for op, ms in (("alloc", alloc_ms), ("free", free_ms)):
                figures = [r["phases"][f"{phase}_{op}"] for r in mine]
                x, slope = at_scale([(r["leaders"], f[measure]) for r, f in zip(mine, figures)],
                                    target)
                top = figures[-1]
                h = top["hottest"][0][1] / top["blocks"] if hot and top["hottest"] else 0.0
                out.append({"bytes": b, "op": op, "x": x, "slope": slope, "hot": h,
                            "floor_ms": floor_ms, "measured_ms": ms})
        return out

    pts = points(variant)
    if not pts:
        return None
    n = data["allocations"]
    fitted = cost is None
    if fitted:
        cost = fit_cost([(p["x"], p["floor_ms"], p["measured_ms"], p["hot"]) for p in pts], n,
                        floor, atom)

    def fill(ps):
        for p in ps:
            p["predicted_ms"] = predict_ms(p["x"], cost, n, p["floor_ms"] if floor else 0.0,
                                           p["hot"], atom)
            p["ratio"] = p["predicted_ms"] / p["measured_ms"]
        return ps

    fill(pts)
    logs = [abs(math.log(p["ratio"])) for p in pts]
    out = {"variant": variant, "leaders": leaders, "target": None if leaders else target,
           "phase": phase, "measure": measure, "floor": floor, "hot": hot,
           "cost_us": cost, "fitted": fitted, "atomic_us": atom, "rows": pts,
           "worst_factor": math.exp(max(logs)),
           "geomean_factor": math.exp(sum(logs) / len(logs))}
    out["others"] = [p for v in sorted({v for v, _ in data["rows"]}) if v != variant
                     for ps in [points(v)] if ps for p in fill(ps)]
    return out


# ------------------------------------------------------------ targets

#: Issue 49's targets, in this model (W = 128, warm iteration): ``cas``
#: attempts per success at most 2 at every size and variant; serialized
#: atomics per allocation at W = 128 at most 2x those at W = 32 (4x the
#: work: flat means no hot word).
TARGET_W = 128
TARGET_BASE_W = 32
TARGET_CAS = 2.0
TARGET_GROWTH = 2.0


def targets(rows, phase="warm"):
    """Return, per (variant, size), issue 49's two figures and whether each is met.

    ``[{variant, bytes, cas_per_success, cas_ok, growth, growth_ok}]``:
    ``phase``'s alloc ``cas`` per success at W = TARGET_W, and its serialized
    atomics per allocation at TARGET_W over those at TARGET_BASE_W (None
    when a W is missing).
    """
    at = {(r["variant"], r["bytes"], r["leaders"]): r["phases"][f"{phase}_alloc"] for r in rows}
    out = []
    for v, b in sorted({(v, b) for v, b, _ in at}, key=lambda k: (VARIANTS.index(k[0]), k[1])):
        hi, lo = at.get((v, b, TARGET_W)), at.get((v, b, TARGET_BASE_W))
        cas = hi["cas_per_success"] if hi else None
        growth = (ratio(hi["serialized_per_block"], lo["serialized_per_block"])
                  if hi and lo else None)
        out.append({"variant": v, "bytes": b, "cas_per_success": cas,
                    "cas_ok": None if cas is None else cas <= TARGET_CAS,
                    "growth": growth,
                    "growth_ok": None if growth is None else growth <= TARGET_GROWTH})
    return out

"""The GPU check's report: Markdown and a one-screen summary from the parts' results.

Pure functions of the results (no numba, no GPU): unit-tested with made-up
results.
"""

#: Parts whose failure fails the check; the others report figures.
VERIFICATION = ("environment", "tests", "stress", "sanitizer", "examples")
MARK = {"passed": "pass", "failed": "FAIL", "info": "figures", "skipped": "skipped"}


def passed(results):
    """Return True when no verification part failed (figures never fail the check)."""
    return not any(r["status"] == "failed" for r in results if r["part"] in VERIFICATION)


def slug(text):
    """Return ``text`` as a file-name part: letters, digits and '-'."""
    out = "".join(c.lower() if c.isalnum() else "-" for c in text)
    while "--" in out:
        out = out.replace("--", "-")
    return out.strip("-") or "unknown"


def part_line(r, width=12):
    """Return a part's line of the summary the check prints as each part ends."""
    return f"{r['part']:<{width}} {MARK.get(r['status'], r['status']):<8} {r['summary']}"


def _md_escape(s):
    return str(s).replace("|", "\\|").replace("\n", " ")


def _fmt(x, spec=".2f"):
    return "—" if x is None else format(x, spec)


def markdown(meta, results):
    """Return the report as Markdown: the summary table, then each part's details."""
    out = [f"# GPU check: {meta['gpu']}, {meta['date']}", "",
           f"Command: `{meta['command']}` ({meta['mode']} mode); devalloc {meta['version']}"
           f" at commit {meta['commit']}; {meta['seconds']:.0f} s in all.", "",
           f"**Verdict: {meta['verdict']}**", "",
           "| part | result | summary |", "|---|---|---|"]
    out += [f"| {r['part']} | {MARK.get(r['status'], r['status'])} | "
            f"{_md_escape(r['summary'])} |" for r in results]
    for r in results:
        d = r["data"]
        out += ["", f"## {r['part']}", "", _md_escape(r["summary"]), ""]
        if r["part"] == "environment":
            for w in d.get("warnings", []):
                out.append(f"- warning: {w}")
            out.append("- versions: " + ", ".join(f"{k} {v}" for k, v in
                                                  d.get("versions", {}).items() if v))
        elif r["part"] == "tests":
            out += [f"- failed: {f}" for f in d.get("failures", [])]
            out += [f"- skipped ({n}): {why}" for why, n in d.get("skips", {}).items()]
        elif r["part"] == "stress":
            out += ["| pass | threads | rounds | requests | served | NULLs | bad blocks | "
                    "capacity | page | peak | kernel s |", "|---|---:|---:|---:|---:|---:|---:|"
                    "---:|---:|---:|---:|"]
            for key in ("room", "tight", "small_pages"):
                s = d.get(key)
                if s:
                    out.append(f"| {key.replace('_', ' ')} | {s['threads']:,} | {s['rounds']} | "
                               f"{s['requests']:,} | {s['allocs']:,} | {s['nulls']:,} | "
                               f"{s['bad_blocks']} | {s['capacity']:,} | "
                               f"{s.get('page', 16384):,} | {s['peak']:,} | "
                               f"{s['seconds']} |")
            out += [f"- problem: {p}" for p in d.get("problems", [])]
        elif r["part"] == "sanitizer":
            out += ["| tool | target | errors in kernels | CUDA API errors | s |",
                    "|---|---|---:|---:|---:|"]
            for s in d.get("runs", []):
                out.append(f"| {s['tool']} | {s['target']} | {_fmt(s['kernel_errors'], 'd')}"
                           f" | {s['api_errors']} | {s['seconds']} |")
                out += [f"  - {_md_escape(m)}" for m in s.get("messages", [])[:4]]
        elif r["part"] == "throughput":
            out += ["| variant | allocations | size | alloc ÷ floor | free ÷ floor | "
                    "pair ÷ floor | NRT pair ÷ floor | iteration 0 ÷ later (alloc) | "
                    "NULLs | bad |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
            for s in d.get("rows", []):
                out.append(f"| {s['variant']} | {s['allocs']:,} | {s['bytes']} B | "
                           f"{_fmt(s['alloc_over_floor'])} | {_fmt(s['free_over_floor'])} | "
                           f"{_fmt(s['pair_over_floor'])} | {_fmt(s['nrt_pair_over_floor'])}"
                           f" | {_fmt(s['first_over_later_alloc'])} | {s['nulls']} | "
                           f"{s['bad_blocks']} |")
            if d.get("nrt"):
                out += ["", f"NRT: {_md_escape(d['nrt'])}"]
        elif r["part"] == "examples":
            out += ["| example | threads | identical | failed allocs | heap peak B | "
                    "heap capacity B | worst case B | heap ÷ worst time | first call s |",
                    "|---|---:|---|---:|---:|---:|---:|---:|---:|"]
            for s in d.get("rows", []):
                out.append(f"| {s['example']} | {s['threads']:,} | "
                           f"{'yes' if s['identical'] else 'NO'} | {s['failed_allocs']} | "
                           f"{s['heap_peak_bytes']:,} | {s['heap_capacity_bytes']:,} | "
                           f"{s['worst_case_bytes']:,} | {_fmt(s['time_ratio'])} | "
                           f"{_fmt(s['first_call_latency_s'])} |")
            out += [f"- problem: {p}" for p in d.get("problems", [])]
        elif r["part"] == "latency":
            out.append(f"- one-alloc kernel: first call {d.get('first_s', 0):.3f} s on an empty "
                       f"body cache, {d.get('warm_s', 0):.3f} s in a second process, later "
                       f"calls {d.get('later_s', 0) * 1e3:.3f} ms")
            for name, row in (d.get("examples") or {}).items():
                out.append(f"- {name}: first call {row['first_s']:.3f} s in a second process, "
                           f"a second run {row['later_s']:.3f} s")
            out += [f"- problem: {p}" for p in d.get("problems", [])]
        if d.get("traceback"):
            out += ["", "```", d["traceback"][-3000:], "```"]
    return "\n".join(out) + "\n"

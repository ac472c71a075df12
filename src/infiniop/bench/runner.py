"""Run the suite: measure the ceiling, check agreement, time interleaved, report."""

from __future__ import annotations

import json
import shutil
import sys
import time
from dataclasses import asdict

import numpy as np

from .allocator import allocator, keep_freed_memory
from .machine import bandwidth, bandwidth_line, best_of, ceiling_legend, ceiling_mark, describe, rate, twin
from .suite import Case, default_suite
from .timing import interleaved


def _same(x: np.ndarray, y: np.ndarray) -> bool:
    """Bit-identical, except that any NaN equals any NaN."""
    x, y = np.asarray(x), np.asarray(y)
    if x.shape != y.shape or x.dtype != y.dtype:
        return False
    if x.dtype.kind == "f" or x.dtype.name == "bfloat16":
        x, y = x.astype(np.float64), y.astype(np.float64)  # exact for every float type we use
        nx, ny = np.isnan(x), np.isnan(y)
        x, y = np.where(nx, 0.0, x), np.where(ny, 0.0, y)
        return bool(np.array_equal(nx, ny) and np.array_equal(x.view(np.int64), y.view(np.int64)))
    return bool(np.array_equal(x, y))


def _select(cases: list[Case], ops, dtypes, layouts, sizes) -> list[Case]:
    """The cases the filters keep. A filter value no case has (a typo, ``f4`` for float32 is
    read as such), or filters that keep nothing, are a ValueError that says what there is:
    before it, the bench measured the ceiling and printed an empty table."""
    from ..dtype import as_dtype

    dtypes = [str(as_dtype(d)) for d in dtypes]
    for flag, given, have in (("--op", ops, {c.op for c in cases}),
                              ("--dtype", dtypes, {c.dtype for c in cases}),
                              ("--layout", layouts, {c.layout for c in cases}),
                              ("--size", sizes, {c.size for c in cases})):
        unknown = [v for v in given if v not in have]
        if unknown:
            raise ValueError(f"{flag} {', '.join(map(str, unknown))}: no such case in this suite "
                             f"(it has {', '.join(map(str, sorted(have)))})")
    chosen = [c for c in cases
              if (not ops or c.op in ops) and (not dtypes or c.dtype in dtypes)
              and (not layouts or c.layout in layouts) and (not sizes or c.size in sizes)]
    if not chosen:
        raise ValueError("no case matches these filters together; for example "
                         + "; ".join(sorted({f"{c.op} {c.dtype} {c.layout}" for c in cases
                                             if not ops or c.op in ops})[:6]))
    return chosen


def _check_outputs(json_path: str | None, plot_path: str | None) -> None:
    """Fail before the run, not after it: a JSON file that cannot be written, a plot without
    matplotlib."""
    import importlib.util
    import os

    if json_path and not os.path.isdir(os.path.dirname(os.path.abspath(json_path))):
        raise ValueError(f"--json {json_path}: no such folder")
    if plot_path and importlib.util.find_spec("matplotlib") is None:
        raise ValueError(f"--plot {plot_path}: needs matplotlib (pip install matplotlib)")


def run(*, quick: bool = False, ops=(), dtypes=(), layouts=(), sizes=(), threads: int | None = None,
        json_path: str | None = None, plot_path: str | None = None, device: str = "cpu",
        ceiling_bytes: int | None = None, rounds: int | None = None, out=sys.stdout,
        progress=None, cases: list[Case] | None = None, keep_freed: bool = True) -> list[dict]:
    """Run the benchmark and return its records (also printed, and written as JSON lines).
    Progress goes to ``progress`` (stderr by default) as the cases run. ``keep_freed``: keep the
    C allocator from handing freed memory back for the rest of the process (allocator.py), so
    that peers which allocate their outputs are timed without page faults."""
    if device != "cpu":
        from ..handle import create_handle

        create_handle(device)  # raises the right status if the device is not usable here
        raise SystemExit(f"infiniop bench: device {device} runs benchmarks/bench_gpu.py on a GPU machine")
    from ..backends.cpu import runtime

    _check_outputs(json_path, plot_path)
    if threads is not None:  # 0 or too many: ValueError, before anything runs
        runtime.set_num_threads(threads)
    threads = runtime.num_threads()
    rounds = rounds or (3 if quick else 5)
    min_time = 0.01 if quick else 0.03
    if keep_freed:
        keep_freed_memory()  # before any case allocates
    machine = {**describe(), "allocator": allocator()}
    selected = cases if cases is not None else _select(default_suite(quick, threads), ops, dtypes,
                                                       layouts, sizes)
    bar = Progress(len(selected), sys.stderr if progress is None else progress)
    bar.note(f"measuring memory bandwidth ({'quick' if quick else 'full'})...")
    ceiling_args = (ceiling_bytes or ((256 << 20) if quick else (512 << 20)), 3 if quick else 5)
    ceiling = bandwidth(*ceiling_args)
    header = {"kind": "machine", "date": time.strftime("%Y-%m-%d"), **machine, "bandwidth": ceiling}
    records = [header]
    for i, case in enumerate(selected):
        bar.start(i, case.name)
        records.append(_run_case(case, ceiling, rounds, min_time))
        bar.done(i, case.name, _summary(records[-1]))
    bar.note("measuring memory bandwidth again...")  # the ceiling: best of before and after
    header["bandwidth"] = ceiling = best_of(ceiling, bandwidth(*ceiling_args))
    rate(records[1:], ceiling)
    bar.close()
    _print_table(records, out)
    if json_path:
        with open(json_path, "w") as f:
            for r in records:
                f.write(json.dumps(r) + "\n")
    if plot_path:
        from .plot import plot

        plot(records, plot_path)
    return records


def _run_case(case: Case, bw: dict, rounds: int, min_time: float) -> dict:
    rec = {"kind": "case", "op": case.op, "dtype": case.dtype, "layout": case.layout,
           "shape": list(case.shape), "size": case.size}
    try:
        prep = case.build()
    except Exception as e:  # noqa: BLE001 - a case that cannot be built is reported, not fatal
        return {**rec, "error": f"build failed: {type(e).__name__}: {e}"}
    rec["bytes"] = prep.nbytes
    for name, fn in prep.impls.items():
        try:
            fn()
        except Exception as e:  # noqa: BLE001 - report, keep benchmarking the other cases
            return {**rec, "error": f"{name} failed: {type(e).__name__}: {e}"}
    ref = prep.results["infiniop"]()
    bad = [k for k in prep.impls if k != "infiniop" and not _same(prep.results[k](), ref)]
    if bad:
        return {**rec, "error": f"results disagree with infiniop: {', '.join(bad)}; not timed"}
    impls, moved = dict(prep.impls), {}
    llc = bw.get("llc_bytes")
    if llc and prep.nbytes > llc:  # from memory: a copy of the same bytes in the same rounds
        impls["twin"], moved["twin"] = twin(prep.nbytes, prep.streams_in)
    timings = interleaved(impls, rounds=rounds, min_time=min_time)
    rec["ceiling"] = "triad" if prep.streams_in > 1 else "copy"
    ceiling = bw[rec["ceiling"] + "_gbps"]
    rec["impls"] = {}
    for k, t in timings.items():
        gbps = moved.get(k, prep.nbytes) / t.median / 1e9
        rec["impls"][k] = {**asdict(t), "spread": t.spread, "gbps": gbps, "of_ceiling": gbps / ceiling}
    if "twin" in rec["impls"]:
        rec["of_twin"] = rec["impls"]["infiniop"]["gbps"] / rec["impls"]["twin"]["gbps"]
    ours = timings["infiniop"].median
    for peer in ("numpy", "torch"):
        if peer in timings:
            rec[f"speedup_vs_{peer}"] = timings[peer].median / ours
    peers = [timings[p].median for p in ("numpy", "torch") if p in timings]
    rec["speedup_vs_best_peer"] = min(peers) / ours
    return rec


class Progress:
    """Where the run is, on ``stream``: a bar redrawn in place on a terminal, else one line per
    finished case (a log or a pipe gets whole lines)."""

    WIDTH = 20

    def __init__(self, total: int, stream):
        self.total, self.stream = total, stream
        self.tty = bool(getattr(stream, "isatty", lambda: False)())
        self.t0 = time.perf_counter()

    def note(self, text: str) -> None:
        if self.tty:
            self._line(text)
        else:
            print(text, file=self.stream, flush=True)

    def start(self, i: int, name: str) -> None:
        if self.tty:
            self._line(f"{self._bar(i)} {name}")

    def done(self, i: int, name: str, summary: str) -> None:
        if self.tty:
            self._line(f"{self._bar(i + 1)} {name}: {summary}")
        else:
            print(f"[{i + 1}/{self.total}] {name}: {summary} ({self._elapsed()})", file=self.stream,
                  flush=True)

    def close(self) -> None:
        if self.tty:
            print("\r\033[K", end="", file=self.stream, flush=True)

    def _bar(self, done: int) -> str:
        fill = self.WIDTH * done // max(self.total, 1)
        return f"[{'#' * fill}{'.' * (self.WIDTH - fill)}] {done}/{self.total} {self._elapsed()}"

    def _elapsed(self) -> str:
        return f"{time.perf_counter() - self.t0:.0f} s"

    def _line(self, text: str) -> None:
        cols = shutil.get_terminal_size().columns - 1
        print("\r\033[K" + text[:cols], end="", file=self.stream, flush=True)


def _summary(rec: dict) -> str:
    if "error" in rec:
        return "ERROR: " + rec["error"]
    text = _fmt_time(rec["impls"]["infiniop"]["median"])
    for peer in ("numpy", "torch"):
        if f"speedup_vs_{peer}" in rec:
            text += f", x{rec[f'speedup_vs_{peer}']:.2f} {peer}"
    return text


def _fmt_time(s: float) -> str:
    return f"{s * 1e6:.1f}us" if s < 1e-3 else f"{s * 1e3:.2f}ms"


_KNOWN = {"infiniop", "infiniop.fn", "numpy", "torch", "twin"}


def _print_table(records: list[dict], out) -> None:
    head = records[0]
    b = head["bandwidth"]
    print(f"infiniop {head['infiniop']} bench, {head['date']}, {head['cpu']} ({head['cores']} cores, "
          f"{head.get('threads')} threads, {head.get('threading_layer')}; allocator: "
          f"{head.get('allocator', 'system default')})", file=out)
    print(bandwidth_line(b), file=out)
    print("times are medians over interleaved rounds; GB/s = bytes read + written / time; %ceil = "
          "of the copy ceiling for one-input cases, of the triad ceiling otherwise; %twin = of a copy "
          "(one input) or an add (more) of the same bytes timed in the same rounds (cases larger "
          "than the last-level cache): the ceiling at the case's own moment", file=out)
    cols = ["case", "infiniop", "GB/s", "%ceil", "%twin", "fn", "numpy", "torch", "x numpy", "x torch",
            "spread"]
    # implementations beyond ours and the peers (a C probe, say): a %ceil column each
    extra = sorted({k for r in records[1:] for k in r.get("impls", ())} - _KNOWN)
    cols += [f"{k} %ceil" for k in extra]
    rows = []
    for r in records[1:]:
        name = f"{r['op']} {r['dtype']} {r['layout']} {'x'.join(map(str, r['shape']))}"
        if "error" in r:
            rows.append([name, "ERROR: " + r["error"]] + [""] * (len(cols) - 2))
            continue
        im = r["impls"]
        g = im["infiniop"]
        rows.append([
            name, _fmt_time(g["median"]), f"{g['gbps']:.1f}",
            f"{100 * g['of_ceiling']:.0f}%{ceiling_mark(r)}",
            f"{100 * r['of_twin']:.0f}%" if "of_twin" in r else "-",
            _fmt_time(im["infiniop.fn"]["median"]) if "infiniop.fn" in im else "-",
            _fmt_time(im["numpy"]["median"]) if "numpy" in im else "-",
            _fmt_time(im["torch"]["median"]) if "torch" in im else "-",
            f"{r['speedup_vs_numpy']:.2f}" if "speedup_vs_numpy" in r else "-",
            f"{r['speedup_vs_torch']:.2f}" if "speedup_vs_torch" in r else "-",
            f"{100 * g['spread']:.0f}%",
        ] + [f"{100 * im[k]['of_ceiling']:.0f}%" if k in im else "-" for k in extra])
    if "torch" not in head:
        print("torch: not installed, so its column is empty (pip install 'infiniop[torch]'; "
              "the README shows the CPU-only wheel)", file=out)
    widths = [max(len(str(x)) for x in col) for col in zip(cols, *rows)]
    line = "  ".join(h.ljust(w) if i == 0 else h.rjust(w) for i, (h, w) in enumerate(zip(cols, widths)))
    print(line, file=out)
    for row in rows:
        if row[1].startswith("ERROR"):
            print(row[0].ljust(widths[0]) + "  " + row[1], file=out)
            continue
        print("  ".join(str(x).ljust(w) if i == 0 else str(x).rjust(w)
                        for i, (x, w) in enumerate(zip(row, widths))), file=out)
    for line in ceiling_legend(records):
        print(line, file=out)

"""`infiniop bench`: output format, JSON lines, and that disagreeing implementations are reported
as errors instead of being timed. Tiny sizes: this checks the tool, not the machine."""

from __future__ import annotations

import io
import json
import re
import sys

import numpy as np
import pytest

from infiniop.bench import runner
from infiniop.bench.suite import Case, Prepared, default_suite

TINY = dict(ceiling_bytes=1 << 20, rounds=1)


def _run(**kw):
    """The runner in this process, leaving glibc's malloc as the other tests have it (the kept
    freed memory is tested in a subprocess below)."""
    out = io.StringIO()
    records = runner.run(out=out, **TINY, keep_freed=False, **kw)
    return records, out.getvalue()


def test_quick_suite_on_tiny_sizes_writes_table_and_json(tmp_path, monkeypatch):
    monkeypatch.setattr("infiniop.bench.suite.QUICK_SIZES", (1 << 12,))
    path = tmp_path / "b.jsonl"
    records, text = _run(quick=True, ops=["sub", "clip"], dtypes=["float32"],
                         layouts=["contiguous"], json_path=str(path))
    head, cases = records[0], records[1:]
    assert head["kind"] == "machine" and head["cores"] >= 1
    for key in ("copy_gbps", "triad_gbps", "copy_numpy_gbps", "copy_infiniop_gbps"):
        assert head["bandwidth"][key] > 0
    assert len(head["bandwidth"]["copy_runs"]) == 2  # measured before and after the cases
    assert head["bandwidth"]["copy_gbps"] == max(head["bandwidth"]["copy_runs"])
    assert [c["op"] for c in cases] == ["sub", "clip"]
    for c in cases:
        assert "error" not in c, c
        assert c["size"] == 4096 and c["shape"] == [4096]
        assert {"infiniop", "infiniop.fn", "numpy"} <= set(c["impls"])
        for t in c["impls"].values():
            assert 0 < t["low"] <= t["median"] <= t["high"]
            assert t["gbps"] == pytest.approx(c["bytes"] / t["median"] / 1e9)
        assert c["speedup_vs_numpy"] == pytest.approx(
            c["impls"]["numpy"]["median"] / c["impls"]["infiniop"]["median"])
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert lines == json.loads(json.dumps(records))
    assert "bandwidth: copy" in text and "sub float32 contiguous 4096" in text


def test_cases_from_memory_are_timed_against_a_twin_copy_in_the_same_rounds(monkeypatch):
    """A case larger than the last-level cache gets a copy (one input) or an add (two) of the
    same bytes in its interleaved rounds, and %twin = its rate over the twin's; cases that fit
    in the cache get none ("-")."""
    monkeypatch.setattr("infiniop.bench.suite.QUICK_SIZES", (1 << 12,))
    monkeypatch.setattr("infiniop.bench.machine.last_level_cache_bytes", lambda: 40_000)
    records, text = _run(quick=True, ops=["sub", "clip"], dtypes=["float32"], layouts=["contiguous"])
    sub, clip = records[1:]
    assert sub["bytes"] == 3 * 4096 * 4 > 40_000 > clip["bytes"]
    assert "twin" in sub["impls"]  # 48 KiB moved: larger than the (pretended) cache
    t = sub["impls"]["twin"]
    assert t["gbps"] * t["median"] * 1e9 == pytest.approx(3 * 4096 * 4)  # an add of the same bytes
    assert sub["of_twin"] == pytest.approx(sub["impls"]["infiniop"]["gbps"] / t["gbps"])
    assert "twin" not in clip["impls"] and "of_twin" not in clip  # 32 KiB: from the cache
    head = next(line for line in text.splitlines() if line.startswith("case"))
    assert "%twin" in head.split()
    row = next(line for line in text.splitlines() if line.startswith("sub float32")).split()
    assert row[head.split().index("%twin") + 3] == f"{100 * sub['of_twin']:.0f}%"
    row = next(line for line in text.splitlines() if line.startswith("clip float32")).split()
    assert row[head.split().index("%twin") + 3] == "-"


_TORCH_POLICY = """
import os, sys, infiniop
seen = {}
class Spy:  # notes the wait policy in force when torch starts importing
    def find_spec(self, name, path=None, target=None):
        if name == "torch":
            seen["policy"] = os.environ.get("OMP_WAIT_POLICY")
sys.meta_path.insert(0, Spy())
from infiniop.bench.suite import _torch
assert _torch() is not None
print(seen["policy"], os.environ.get("OMP_WAIT_POLICY"))
"""


def test_the_bench_imports_torch_with_its_own_wait_policy():
    """``import infiniop`` asks OpenMP to sleep (passive) for processes mixing the two; the
    bench's peer is torch as a user runs it alone, so torch is imported without that setting
    (restored after), and with the user's own setting where there is one."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    for setting, want in ((None, ["None", "passive"]), ("active", ["active", "active"])):
        run_env = env if setting is None else {**env, "OMP_WAIT_POLICY": setting}
        out = subprocess.run([sys.executable, "-c", _TORCH_POLICY], capture_output=True, text=True,
                             env=run_env)
        assert out.returncode == 0, out.stderr
        assert out.stdout.split() == want


_FAULTS = """
import resource, sys
import numpy as np
from infiniop.bench import allocator

def faults_of_fresh_output():  # an allocating peer's call: a new 64 MiB output, written once
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    np.empty(1 << 24, np.float32).fill(1.0)
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before

faults_of_fresh_output()
default = faults_of_fresh_output()
kept = allocator.keep_freed_memory()
faults_of_fresh_output()
print(kept, default, faults_of_fresh_output(), allocator.allocator())
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_the_bench_keeps_freed_memory_so_allocating_peers_skip_page_faults():
    """torch's row operators allocate their outputs; with glibc's defaults every call faulted in
    fresh pages (torch.softmax float32 4096^2: 23-25 ms against 6.3 ms for its kernel). After
    keep_freed_memory a second 64 MiB output reuses the first one's pages."""
    import subprocess

    out = subprocess.run([sys.executable, "-c", _FAULTS], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    kept, default, after, name = out.stdout.split(maxsplit=3)
    if kept != "True":
        pytest.skip("not glibc: mallopt unavailable")
    assert int(default) >= 32  # 16,384 pages of 4 KiB, or 32 huge pages of 2 MiB
    assert int(after) <= int(default) // 8
    assert name.strip() == "glibc, freed memory kept"


def test_the_machine_record_names_the_allocator():
    records, text = _run(cases=[_quiet_case()])
    assert records[0]["allocator"] == "system default"  # keep_freed=False in this process
    assert "allocator: system default" in text


def test_disagreement_is_an_error_not_a_timing():
    a = np.arange(8, dtype=np.float32)

    def build():
        good, bad = a.copy(), a.copy()
        bad[3] += 1  # a peer that computes something else
        return Prepared({"infiniop": lambda: None, "numpy": lambda: None},
                        {"infiniop": lambda: good, "numpy": lambda: bad}, nbytes=64)

    records, text = _run(cases=[Case("sub", "float32", "contiguous", (8,), build)])
    rec = records[1]
    assert "impls" not in rec
    assert "disagree" in rec["error"] and "numpy" in rec["error"]
    assert "ERROR" in text


def test_nan_positions_agree_but_values_must_match():
    x = np.array([np.nan, 1.0, -0.0], np.float32)
    assert runner._same(x, np.array([np.nan, 1.0, -0.0], np.float32))
    assert not runner._same(x, np.array([np.nan, 1.0, 0.0], np.float32))  # sign of zero
    assert not runner._same(x, np.array([1.0, 1.0, -0.0], np.float32))


def test_default_suite_covers_the_issue_cases():
    cases = default_suite(quick=False, threads=2)
    names = {(c.op, c.dtype, c.layout) for c in cases}
    for op in ("sub", "add", "mul", "clip"):
        for dt in ("float32", "float16", "bfloat16", "float64"):
            assert (op, dt, "contiguous") in names
    for layout in ("scalar_bcast", "numpy_bcast", "transposed", "strided_out"):
        assert ("sub", "float32", layout) in names
    for layout in ("copy", "nchw_nhwc", "transpose2d", "permute6d"):
        assert ("rearrange", "float32", layout) in names
    assert ("silu", "float32", "offset_out") in names
    sizes = {c.size for c in cases if c.layout == "contiguous"}
    assert min(sizes) == 4096 and max(sizes) == 1 << 26
    for op in ("silu", "gelu", "gelutanh", "sigmoid", "tanh", "softplus", "hardswish", "hardtanh",
               "erf", "log1p", "reciprocal", "swiglu", "equal", "addcmul"):
        for dt in ("float32", "float16", "bfloat16"):
            assert any((c.op, c.dtype, c.layout, c.size) == (op, dt, "contiguous", 1 << 25)
                       for c in cases), (op, dt)


def test_math_peers_agree_within_ulps_not_beyond():
    from infiniop.bench.suite import _agreeing

    y = np.array([0.0, 1e-3, 0.5, 3.0, -100.0, np.inf, np.nan], np.float32)
    k = 4 * 2.0 ** -23
    near = y + 3 * 2.0 ** -23 * np.maximum(np.abs(y), 1) * np.array([1, -1, 1, -1, 1, 1, 1])
    assert _agreeing(lambda: y, lambda: near.astype(np.float32), (k, k))() is y
    far = y.copy()
    far[3] = np.nextafter(np.float32(3.0 + 8 * 3 * 2.0 ** -23), np.float32(9))
    assert _agreeing(lambda: y, lambda: far, (k, k))() is far  # reported as a disagreement
    nan_moved = y.copy()
    nan_moved[0] = np.nan
    assert _agreeing(lambda: y, lambda: nan_moved, (k, k))() is nan_moved


def test_math_cases_agree_with_their_peers():
    """Tolerant agreement (gelu: torch cancels for x < -3), bool output (equal), NumPy peers in
    float16 and bfloat16 (tanh, atanh, log10), inputs within the domain (atanh, erfinv, log10),
    a composed torch peer (quickgelu)."""
    pytest.importorskip("torch")
    from infiniop.bench.suite import _math

    picked = [("gelu", "bfloat16"), ("tanh", "float16"), ("equal", "float16"),
              ("atanh", "float16"), ("erfinv", "bfloat16"), ("quickgelu", "float32"),
              ("erfc", "float16"), ("log10", "bfloat16")]
    records, text = _run(cases=[_math(op, dt, 4096, 1) for op, dt in picked])
    cases = records[1:]
    assert [(c["op"], c["dtype"]) for c in cases] == picked
    for c in cases:
        assert "error" not in c, c
        assert {"infiniop", "infiniop.fn", "torch"} <= set(c["impls"])
        assert ("numpy" in c["impls"]) == (c["op"] in ("tanh", "equal", "atanh", "log10"))
    assert "gelu bfloat16 contiguous 4096" in text


def test_cli_quick_filters(capsys, monkeypatch):
    from infiniop import cli

    monkeypatch.setattr("infiniop.bench.suite.QUICK_SIZES", (1 << 12,))
    monkeypatch.setattr(runner, "run", lambda **kw: [{"kind": "machine"}, {"kind": "case", **kw}])
    assert cli.main(["bench", "--quick", "--op", "sub", "--dtype", "float16", "--size", "4096"]) == 0


@pytest.mark.parametrize("args,says", [
    (["--op", "sbu"], "--op sbu: no such case in this suite (it has "),
    (["--op", "sub", "--dtype", "float64"], "--dtype float64: no such case"),
    (["--op", "sub", "--layout", "transposd"], "--layout transposd: no such case"),
    (["--op", "rope", "--layout", "transposed"], "no case matches these filters together"),
    (["--threads", "0"], "number of threads must be between 1 and"),
    (["--threads", "9999"], "number of threads must be between 1 and"),
    (["--device", "cuda"], "BAD_PARAM: unknown device 'cuda'"),
    (["--json", "/nonexistent-dir/x.json"], "--json /nonexistent-dir/x.json: no such folder"),
], ids=lambda v: " ".join(v) if isinstance(v, list) else None)
def test_cli_refuses_bad_arguments_before_measuring_anything(args, says, capsys, monkeypatch):
    """A typo, a filter set no case has, or an unusable thread count / device / output path
    ran the ceiling measurement first (10-25 s), then printed an empty table (exit 0) or a
    traceback. Now: a usage error, exit 2, and the bandwidth is never measured."""
    from infiniop import cli

    monkeypatch.setattr(runner, "bandwidth", lambda *a: pytest.fail("measured the bandwidth"))
    with pytest.raises(SystemExit) as e:
        cli.main(["bench", "--quick", *args])
    assert e.value.code == 2
    assert says in capsys.readouterr().err


class _Stop(Exception):
    pass


def _stop(*args):
    raise _Stop


def test_cli_dtype_filters_read_numpy_codes(monkeypatch):
    seen = {}
    monkeypatch.setattr(runner, "bandwidth", _stop)
    monkeypatch.setattr(runner, "describe", lambda: {})
    real = runner._select

    def spy(cases, *filters):
        seen["chosen"] = real(cases, *filters)
        return seen["chosen"]

    monkeypatch.setattr(runner, "_select", spy)
    with pytest.raises(_Stop):
        runner.run(quick=True, ops=["sub"], dtypes=["f4"], keep_freed=False)
    assert seen["chosen"] and {c.dtype for c in seen["chosen"]} == {"float32"}


def _quiet_case(name="sub"):
    a = np.arange(8, dtype=np.float32)
    return Case(name, "float32", "contiguous", (8,), lambda: Prepared(
        {"infiniop": lambda: None, "numpy": lambda: None},
        {"infiniop": lambda: a, "numpy": lambda: a}, nbytes=64))


class _Tty(io.StringIO):
    def isatty(self):
        return True


def test_progress_one_line_per_finished_case_when_not_a_terminal():
    log = io.StringIO()
    _run(cases=[_quiet_case("sub"), _quiet_case("add")], progress=log)
    lines = log.getvalue().splitlines()
    assert lines[0].startswith("measuring memory bandwidth")
    assert re.fullmatch(r"\[1/2\] sub/float32/contiguous/8: [\d.]+us, x[\d.]+ numpy \(\d+ s\)",
                        lines[1]), lines[1]
    assert lines[2].startswith("[2/2] add/float32/contiguous/8: ")
    assert lines[3].startswith("measuring memory bandwidth again") and len(lines) == 4
    assert "\r" not in log.getvalue() and "\033" not in log.getvalue()


def test_progress_bar_on_a_terminal():
    tty = _Tty()
    _run(cases=[_quiet_case("sub"), _quiet_case("add")], progress=tty)
    text = tty.getvalue()
    assert "\r\033[K[" in text and "] 1/2" in text and "] 2/2" in text
    assert "[" + "#" * runner.Progress.WIDTH + "] 2/2" in text
    assert text.endswith("\r\033[K")  # the bar is wiped before the table


def test_an_empty_torch_column_says_why(monkeypatch):
    from infiniop.bench import machine

    real = machine.describe
    monkeypatch.setattr(runner, "describe", lambda: {k: v for k, v in real().items() if k != "torch"})
    _, text = _run(cases=[_quiet_case()])
    assert "torch: not installed, so its column is empty" in text
    monkeypatch.undo()
    _, text = _run(cases=[_quiet_case()])
    assert "not installed" not in text


def test_torch_peers_do_not_warn():
    """torch deprecates ``x.T`` beyond 2 dims; the 6-d rearrange case used it."""
    import warnings

    case = next(c for c in default_suite(quick=True, threads=1) if c.layout == "permute6d")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        prep = case.build()
        prep.impls["torch"]()


def test_ceiling_is_the_best_of_before_and_after_and_marks_explain_rates_above_it():
    from infiniop.bench import machine

    start = {"copy_gbps": 30.0, "triad_gbps": 40.0, "copy_numpy_gbps": 30.0,
             "copy_infiniop_gbps": 20.0, "triad_numpy_gbps": 40.0, "triad_infiniop_gbps": 35.0,
             "llc_bytes": 1 << 20}
    end = {**start, "copy_gbps": 50.0, "copy_infiniop_gbps": 50.0, "triad_gbps": 38.0}
    bw = machine.best_of(start, end)
    assert bw["copy_gbps"] == 50.0 and bw["triad_gbps"] == 40.0 and bw["copy_numpy_gbps"] == 30.0
    assert bw["copy_runs"] == [30.0, 50.0] and bw["triad_runs"] == [40.0, 38.0]

    def case(nbytes, gbps, ceiling="copy"):
        return {"kind": "case", "op": "sub", "dtype": "float32", "layout": "contiguous",
                "shape": [nbytes // 12], "size": nbytes // 12, "bytes": nbytes, "ceiling": ceiling,
                "impls": {"infiniop": {"gbps": gbps, "median": 1.0, "of_ceiling": 9.9}}}

    cached, memory_fast, memory_ok = case(1 << 19, 100.0), case(1 << 30, 55.0), case(1 << 30, 36.0, "triad")
    records = [{"kind": "machine", "bandwidth": bw}, cached, memory_fast, memory_ok]
    machine.rate(records[1:], bw)
    assert cached["impls"]["infiniop"]["of_ceiling"] == pytest.approx(2.0)
    assert memory_ok["impls"]["infiniop"]["of_ceiling"] == pytest.approx(0.9)
    assert [machine.ceiling_mark(r) for r in records[1:]] == ["c", "!", ""]
    legend = "\n".join(machine.ceiling_legend(records))
    assert "1 MiB last-level cache" in legend and "30.0, 50.0" in legend
    assert machine.ceiling_legend([records[0], memory_ok]) == []
    assert "best of 30.0/50.0" in machine.bandwidth_line(bw)


def test_last_level_cache_size_is_read():
    from infiniop.bench import machine

    llc = machine.last_level_cache_bytes()
    assert llc is None or llc >= 1 << 20

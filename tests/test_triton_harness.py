"""Run pytest cases in a worker process under TRITON_INTERPRET=1: a crash is one failed case.

A kernel bug on the interpreter can corrupt the heap and kill the process (an unmasked store
writes straight into host memory). So the Triton cases never run in the main pytest process:

- **Parent** (the normal pytest run): :class:`Runner` collects the node ids of the chosen test
  files in a worker, and each parent test (one per node id) asks the runner for its outcome.
  The runner starts one worker pytest that runs the selected node ids in order and streams
  every outcome to a JSON-lines file. If the worker dies (signal, abort, timeout), the case it
  was running fails with the exit status and the tail of its output, and a new worker carries
  on with the cases after it.
- **Worker** (this module loaded as a pytest plugin, ``-p test_triton_harness``, with
  ``INFINIOP_TRITON_WORKER=1``): routes the CPU handle to a Triton device
  (``INFINIOP_TRITON_DEVICE``, default nvidia), so the CPU backend's own tests (the ``handle``
  fixture, the functional front end, rearrange's helpers) run on the Triton kernels, then
  filters/reorders the collected items and reports each outcome.

The bottom of the file tests the harness itself (a case that aborts the process is a failed
test and the cases after it still run).
"""

from __future__ import annotations

import atexit
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest

TESTS = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(TESTS)
IN_WORKER = os.environ.get("INFINIOP_TRITON_WORKER") == "1"


# ============================================================================ worker (plugin)

_ADDR = re.compile(r"0x[0-9a-fA-F]+")
_asked: dict[str, str] = {}  # worker node id -> the id the parent asked for


def _key(nodeid: str) -> str:
    """Node ids with object addresses (``<object object at 0x7f..>`` parameters) differ between
    processes; compare them without the addresses."""
    return _ADDR.sub("0x?", nodeid)


def _emit(record: dict) -> None:
    path = os.environ.get("INFINIOP_TRITON_RESULTS")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(record) + "\n")


def route_cpu_to(device: str):
    """Make every place that opens the CPU handle get a Triton handle instead."""
    import infiniop
    from infiniop import device as devmod
    from infiniop.elementwise import functional
    from infiniop.handle import create_handle as real
    from infiniop.rearrange import functional as rearrange  # (infiniop.rearrange: the function)


    handle = real(device)

    def create_handle(dev="cpu", device_id=0):
        try:
            is_cpu = devmod.as_device(dev) is devmod.Device.CPU
        except Exception:  # noqa: BLE001 - let the real function raise the real error
            is_cpu = False
        return handle if is_cpu and device_id == 0 else real(dev, device_id)

    infiniop.create_handle = create_handle
    functional._handle = handle
    functional.clear_cache()
    rearrange._HANDLE = handle
    rearrange._COPIES.clear()
    rearrange._PLANS.clear()
    return handle


def pytest_configure(config):
    if IN_WORKER and os.environ.get("INFINIOP_TRITON_ROUTE", "1") == "1":
        route_cpu_to(os.environ.get("INFINIOP_TRITON_DEVICE", "nvidia"))


@pytest.hookimpl(trylast=True)  # after -k / -m deselection
def pytest_collection_modifyitems(session, config, items):
    if not IN_WORKER:
        return
    if os.environ.get("INFINIOP_TRITON_COLLECT") == "1":
        for it in items:
            _emit({"collected": it.nodeid})
        items[:] = []
        return
    sel = os.environ.get("INFINIOP_TRITON_SELECT")
    if sel:
        with open(sel) as f:
            want = json.load(f)
        by_key = {_key(it.nodeid): it for it in items}
        chosen = []
        for n in want:
            it = by_key.get(_key(n))
            if it is not None:
                chosen.append(it)
                _asked[it.nodeid] = n
        items[:] = chosen


_phases: dict[str, list] = {}


def pytest_runtest_logstart(nodeid, location):
    if IN_WORKER:
        _emit({"start": _asked.get(nodeid, nodeid)})


def pytest_runtest_logreport(report):
    if not IN_WORKER:
        return
    _phases.setdefault(report.nodeid, []).append(report)
    if report.when != "teardown":
        return
    reports = _phases.pop(report.nodeid)
    outcome, text = "passed", ""
    for r in reports:
        if r.failed:
            outcome, text = "failed", f"[{r.when}] {r.longreprtext}"
            break
        if r.skipped:
            outcome = "skipped"
            lr = r.longrepr
            text = lr[2] if isinstance(lr, tuple) and len(lr) == 3 else str(lr)
    _emit({"done": _asked.get(report.nodeid, report.nodeid), "outcome": outcome, "text": text,
           "duration": round(sum(r.duration for r in reports), 4)})


# ============================================================================ parent (runner)

class Runner:
    """Runs node ids of ``files`` in worker processes; ``outcome(nodeid)`` -> dict."""

    def __init__(self, files, *, keyword: str | None = None, device: str = "nvidia",
                 route: bool = True, timeout: float = 300.0, rootdir: str = ROOT,
                 gpu: bool = False):
        self.gpu = gpu  # a real GPU, host buffers staged (INFINIOP_TRITON_STAGED), no interpreter
        self.files = list(files)
        self.keyword = keyword
        self.device = device
        self.route = route
        self.timeout = timeout
        self.rootdir = rootdir
        # the temp folder is made when a worker starts and removed by close(); collect() uses
        # one of its own, so a process that only collects (an xdist worker) leaves none
        self.tmp = None
        atexit.register(self.close)
        self.done: dict[str, dict] = {}
        self.order: list[str] | None = None  # what the current/next worker runs
        self.proc = None
        self.log = None
        self.current: str | None = None
        self.workers = 0

    # -- processes
    def _env(self, results: str, **extra) -> dict:
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("INFINIOP_TRITON_") and k != "TRITON_INTERPRET"}
        env.update({"INFINIOP_TRITON_STAGED": "1"} if self.gpu else {"TRITON_INTERPRET": "1"})
        env.update(INFINIOP_TRITON_WORKER="1",
                   INFINIOP_TRITON_RESULTS=results, INFINIOP_TRITON_DEVICE=self.device,
                   INFINIOP_TRITON_ROUTE="1" if self.route else "0",
                   PYTHONPATH=os.pathsep.join([TESTS] + [p for p in [env.get("PYTHONPATH")] if p]))
        env.update(extra)
        return env

    def _cmd(self, *extra) -> list[str]:
        cmd = [sys.executable, "-m", "pytest", "-p", "test_triton_harness", "-q", "-o", "addopts=",
               "-p", "no:cacheprovider", "-W", "ignore", "--rootdir", self.rootdir, *extra,
               *self.files]
        if self.keyword:
            cmd += ["-k", self.keyword]
        return cmd

    def collect(self) -> list[str]:
        """The node ids the worker would run (collected in a worker: same plugins, same ids)."""
        with tempfile.TemporaryDirectory(prefix="infiniop-triton-") as tmp:
            results = os.path.join(tmp, "collect.jsonl")
            p = subprocess.run(self._cmd("--co"), cwd=self.rootdir, capture_output=True,
                               text=True, env=self._env(results, INFINIOP_TRITON_COLLECT="1"),
                               timeout=600)
            ids = []
            if os.path.exists(results):
                with open(results) as f:
                    ids = [json.loads(line)["collected"] for line in f if line.strip()]
        if not ids:
            raise RuntimeError(f"collection in the worker failed (exit {p.returncode}):\n"
                               f"{(p.stdout + p.stderr)[-4000:]}")
        return ids

    def _start(self, nodeids: list[str]) -> None:
        if self.tmp is None:
            self.tmp = tempfile.mkdtemp(prefix="infiniop-triton-")
        self.workers += 1
        n = self.workers
        sel = os.path.join(self.tmp, f"select{n}.json")
        with open(sel, "w") as f:
            json.dump(nodeids, f)
        self.results = os.path.join(self.tmp, f"results{n}.jsonl")
        open(self.results, "w").close()
        self.log = open(os.path.join(self.tmp, f"worker{n}.log"), "w+")
        self.proc = subprocess.Popen(self._cmd(), cwd=self.rootdir, stdout=self.log,
                                     stderr=subprocess.STDOUT,
                                     env=self._env(self.results, INFINIOP_TRITON_SELECT=sel))
        self.order = list(nodeids)
        self.offset = 0
        self.current = None
        self.last_progress = time.monotonic()

    def _read(self) -> None:
        with open(self.results) as f:
            f.seek(self.offset)
            chunk = f.read()
        end = chunk.rfind("\n") + 1
        self.offset += end
        for line in chunk[:end].splitlines():
            rec = json.loads(line)
            self.last_progress = time.monotonic()
            if "start" in rec:
                self.current = rec["start"]
            elif "done" in rec:
                self.done[rec["done"]] = rec
                self.current = None

    def _tail(self) -> str:
        self.log.flush()
        self.log.seek(0)
        return self.log.read()[-3000:]

    def _stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def close(self) -> None:
        """Stop the worker and remove the temp folder (a later worker makes a new one)."""
        self._stop()
        if self.log is not None:
            self.log.close()
        if self.tmp is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)
            self.tmp = None

    # -- results
    def outcome(self, nodeid: str, upcoming: list[str]) -> dict:
        """The outcome of ``nodeid``; ``upcoming`` are the node ids the caller will ask for
        next, in order (``nodeid`` first): what a new worker is started with."""
        while True:
            if nodeid in self.done:
                return self.done.pop(nodeid)
            if self.proc is None:
                self._start([n for n in upcoming if n not in self.done])
            self._read()
            if nodeid in self.done:
                continue
            code = self.proc.poll()
            stalled = time.monotonic() - self.last_progress > self.timeout
            if code is None and not stalled:
                time.sleep(0.02)
                continue
            if code is None:  # stalled: kill it
                self._stop()
                code = "timeout"
            else:
                self._read()
                if nodeid in self.done:
                    self.proc = None
                    continue
            started = self.current == nodeid
            crashed = self.current
            self.proc = None
            if started or crashed is None:
                why = (f"signal {signal.Signals(-code).name}" if isinstance(code, int) and code < 0
                       else f"exit status {code}")
                what = "crashed while running it" if started else "ended without running it"
                return {"done": nodeid, "outcome": "crashed",
                        "text": f"the {'GPU' if self.gpu else 'interpreter'} worker {what} "
                                f"({why}); worker output:\n"
                                f"{self._tail()}"}
            # the worker died in another case (not ours): record that one, go on with ours
            self.done[crashed] = {"done": crashed, "outcome": "crashed",
                                  "text": f"worker died ({code}):\n{self._tail()}"}


class ShardedRunner:
    """``shards`` Runners over consecutive slices of the node ids, their workers running side by
    side (on a GPU, compiling kernels is the slow part and it uses one core per process)."""

    def __init__(self, files, *, shards: int, **kw):
        self.one = Runner(files, **kw)
        self.shards = max(1, shards)
        self.runners: list[Runner] = []
        self.shard_of: dict[str, int] = {}

    def collect(self) -> list[str]:
        return self.one.collect()

    def outcome(self, nodeid: str, upcoming: list[str]) -> dict:
        if nodeid not in self.shard_of:  # first call (or ids never seen): deal out what is left
            self.close()
            n = len(upcoming)
            k = min(self.shards, max(1, n))
            self.runners = [Runner(self.one.files, keyword=self.one.keyword,
                                   device=self.one.device, route=self.one.route,
                                   timeout=self.one.timeout, rootdir=self.one.rootdir,
                                   gpu=self.one.gpu) for _ in range(k)]
            self.shard_of = {u: i * k // n for i, u in enumerate(upcoming)}
            for j, r in enumerate(self.runners):
                r._start([u for u in upcoming if self.shard_of[u] == j])
        j = self.shard_of[nodeid]
        return self.runners[j].outcome(nodeid, [u for u in upcoming if self.shard_of.get(u) == j])

    def close(self) -> None:
        for r in self.runners:
            r.close()
        self.one.close()


def check(outcome: dict, where: str = "under the Triton interpreter") -> None:
    """Turn a worker outcome into this test's outcome."""
    kind = outcome["outcome"]
    if kind == "passed":
        return
    log = os.environ.get("INFINIOP_TRITON_FAILURES")  # each failure as it comes (a run cut
    if log and kind != "skipped":                     # short by a time cap keeps them)
        with open(log, "a") as f:
            f.write(f"=== {outcome['done']} {kind}\n{outcome['text']}\n")
    if kind == "skipped":
        pytest.skip(outcome["text"])
    pytest.fail(f"{kind} {where}: {outcome['text']}", pytrace=False)


def upcoming_ids(request, argname: str) -> list[str]:
    """The values of ``argname`` of this test function's remaining parametrized items, in the
    order the session runs them (what the worker should run, starting with this one)."""
    items = request.session.items
    me = request.node
    out, seen = [], False
    for it in items:
        if it is me:
            seen = True
        if seen and getattr(it, "originalname", None) == me.originalname and \
                it.module is me.module and hasattr(it, "callspec"):
            out.append(it.callspec.params[argname])
    return out


# ================================================================= tests of the harness itself

_SAMPLE = '''
import os, pytest
def test_ok(): pass
def test_abort(): os.abort()
def test_after_abort(): assert 1 + 1 == 2
def test_fails(): assert 1 == 2, "boom"
@pytest.mark.skip(reason="not here")
def test_skipped(): pass
def test_segfault():
    import ctypes
    ctypes.string_at(0)
def test_last(): pass
'''


@pytest.mark.skipif(IN_WORKER, reason="parent-side test")
def test_a_crash_is_one_failed_case_and_the_rest_still_run(tmp_path):
    path = tmp_path / "test_sample_cases.py"
    path.write_text(_SAMPLE)
    r = Runner([str(path)], route=False, rootdir=str(tmp_path), timeout=120)
    try:
        ids = r.collect()
        names = [i.split("::")[-1] for i in ids]
        assert names == ["test_ok", "test_abort", "test_after_abort", "test_fails",
                         "test_skipped", "test_segfault", "test_last"]
        got = {}
        for k, nid in enumerate(ids):
            got[nid.split("::")[-1]] = r.outcome(nid, ids[k:])
    finally:
        r.close()
    assert got["test_ok"]["outcome"] == "passed"
    assert got["test_abort"]["outcome"] == "crashed"
    assert "SIGABRT" in got["test_abort"]["text"]
    assert got["test_after_abort"]["outcome"] == "passed"
    assert got["test_fails"]["outcome"] == "failed" and "boom" in got["test_fails"]["text"]
    assert got["test_skipped"]["outcome"] == "skipped" and "not here" in got["test_skipped"]["text"]
    assert got["test_segfault"]["outcome"] == "crashed"
    assert "SIGSEGV" in got["test_segfault"]["text"]
    assert got["test_last"]["outcome"] == "passed"
    assert r.workers == 3  # one start, one restart after each crash

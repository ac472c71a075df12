"""The CPU backend's correctness suite, run on the Triton backend under TRITON_INTERPRET=1.

Each test here is one test of the files in ``FILES`` (the elementwise operator table, the
elementwise bad-input matrix, the reference library's sub/add/mul/clip tables, the catalogue
table of InfiniCore's other elementwise operators and its scripts' tables, rearrange with
the reference library's tables, the Triton internals, the row operators and rope with their
bad-input cases and the reference library's tables), run in an interpreter worker
(see test_triton_harness.py) where
the CPU handle is routed to ``create_handle("nvidia")``: the same operator table, layouts,
references, rounding/NaN/in-place/broadcast/negative-stride cases and the reference library's
tables, bit for bit, on the real Triton kernels. A case that crashes the interpreter fails alone.

Left out: the CPU-only robustness/memory/concurrency suites (child processes that open the
CPU handle themselves, RSS soaks, threads), the CPU backend's large-size tests (``large``:
millions of elements, minutes on the
interpreter) and its forced-parallel/NT variants (``forced``: a CPU-only knob, the same cases
as the default variant here). Skipped cleanly when triton is not installed.

On a real GPU: ``python -m pytest tests/test_triton_suite.py --gpu`` runs the same cases on the
device, in parallel workers (one per core, up to 16: compiling the kernels is the slow part),
with the host buffers the tests make staged through device memory around each launch
(``INFINIOP_TRITON_STAGED``, memory.py) and fenced by guard bytes.
"""

from __future__ import annotations

import importlib.util
import os

import pytest

if importlib.util.find_spec("triton") is None or importlib.util.find_spec("torch") is None:
    pytest.skip("triton/torch not installed (pip install 'infiniop[gpu]')", allow_module_level=True)
if os.environ.get("INFINIOP_TRITON_WORKER") == "1":
    pytest.skip("parent-side module", allow_module_level=True)

from test_triton_harness import Runner, ShardedRunner, check, upcoming_ids  # noqa: E402

GPU = os.environ.get("INFINIOP_GPU") == "1"  # set by --gpu (conftest.py)
if GPU:
    import torch

    if not torch.cuda.is_available():
        pytest.skip("--gpu: torch sees no CUDA device", allow_module_level=True)

FILES = ["tests/test_elementwise.py", "tests/test_elementwise_errors.py",
         "tests/test_reference_tables.py", "tests/test_catalogue.py",
         "tests/test_reference_catalogue.py", "tests/test_rearrange.py",
         "tests/test_triton_kernels.py", "tests/test_rows.py", "tests/test_rows_errors.py",
         "tests/test_rows_reference_tables.py"]
KEYWORD = "not large and not forced"

_FILES = [f for f in FILES if os.path.exists(os.path.join(os.path.dirname(
    os.path.dirname(os.path.abspath(__file__))), f))]
# workers side by side: on a GPU one per core (up to 16), on the interpreter one (the CI run
# already puts a test file on each core); INFINIOP_TRITON_SHARDS overrides
SHARDS = int(os.environ.get("INFINIOP_TRITON_SHARDS", min(16, os.cpu_count() or 1) if GPU else 1))
if SHARDS > 1:
    RUNNER = ShardedRunner(_FILES, keyword=KEYWORD, device="nvidia", gpu=GPU, shards=SHARDS)
else:
    RUNNER = Runner(_FILES, keyword=KEYWORD, device="nvidia", gpu=GPU)
try:
    NODEIDS = RUNNER.collect()
    COLLECT_ERROR = None
except Exception as e:  # noqa: BLE001 - shown as one failing test
    NODEIDS, COLLECT_ERROR = ["<collection>"], str(e)


@pytest.fixture(scope="module", autouse=True)
def _close_runner():
    yield
    RUNNER.close()


def _id(nodeid: str) -> str:
    return nodeid.removeprefix("tests/")


@pytest.mark.parametrize("nodeid", NODEIDS, ids=_id)
def test_on_triton_interpreter(request, nodeid):
    if COLLECT_ERROR is not None:
        pytest.fail(COLLECT_ERROR, pytrace=False)
    check(RUNNER.outcome(nodeid, upcoming_ids(request, "nodeid")),
          "on the GPU" if GPU else "under the Triton interpreter")

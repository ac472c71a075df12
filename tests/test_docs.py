"""The README's Python examples and the docstring examples run and print what they claim."""

from __future__ import annotations

import doctest
import importlib
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
MODULES = ["infiniop.status", "infiniop.dtype", "infiniop.tensor", "infiniop.handle", "infiniop.memory",
           "infiniop.elementwise.operator", "infiniop.elementwise.descriptor",
           "infiniop.rows.operator", "infiniop.rows.descriptor", "infiniop.rows.rope",
           "infiniop.rearrange.functional"]


def _readme_blocks() -> list[str]:
    text = (ROOT / "README.md").read_text()
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def test_readme_examples_run_in_order():
    """The README's examples form one session (later blocks use names from earlier ones)."""
    blocks = _readme_blocks()
    assert len(blocks) >= 3
    text = "\n".join(blocks)
    test = doctest.DocTestParser().get_doctest(text, {}, "README", "README.md", 0)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    runner.run(test)
    assert runner.failures == 0 and runner.tries >= 10


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    mod = importlib.import_module(name)
    result = doctest.testmod(mod, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0

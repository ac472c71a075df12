"""The command line the README points newcomers to."""

from __future__ import annotations

import subprocess
import sys

from infiniop import cli


def test_demo_prints_what_it_did(capsys):
    assert cli.main(["demo"]) == 0
    out = capsys.readouterr().out
    assert "sub(a, b) =" in out and "equal to numpy: True" in out
    assert "InfiniError(BAD_TENSOR_SHAPE)" in out


def test_info_lists_devices(capsys):
    assert cli.main(["info"]) == 0
    out = capsys.readouterr().out
    assert "cpu        available" in out and "kernel cache" in out
    assert "ascend" in out and "DEVICE_TYPE_NOT_SUPPORTED" in out


def test_python_dash_m_entry_point():
    r = subprocess.run([sys.executable, "-m", "infiniop", "--help"], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0 and "bench" in r.stdout

"""The command line the README points newcomers to."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

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


def test_info_groups_devices_that_fail_for_the_same_reason(capsys):
    """One line per reason, not the same long GPU message six times."""
    from infiniop.device import Device

    assert cli.main(["info"]) == 0
    lines = capsys.readouterr().out.splitlines()
    device_lines = lines[1:lines.index(next(x for x in lines if x.startswith("threads")))]
    reasons = [x.split(": ", 1)[1] for x in device_lines if ": " in x]
    assert len(reasons) == len(set(reasons)), device_lines  # each reason once
    named = [n for x in device_lines for n in re.match(r"\s+([a-z]+(?:, [a-z]+)*)", x)[1].split(", ")]
    assert sorted(named) == sorted(d.name.lower() for d in Device)  # each device named once
    grouped = "  cambricon, ascend, qy, ali: DEVICE_TYPE_NOT_SUPPORTED: device <device> has no backend"
    assert grouped in "\n".join(lines)


def test_version_and_a_plain_description(capsys):
    import infiniop

    with pytest.raises(SystemExit) as e:
        cli.main(["--version"])
    assert e.value.code == 0
    assert capsys.readouterr().out.strip() == f"infiniop {infiniop.__version__}"
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    text = capsys.readouterr().out
    assert "``" not in text and "python -m infiniop" in text and "--version" in text


def test_python_dash_m_entry_point():
    r = subprocess.run([sys.executable, "-m", "infiniop", "--help"], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0 and "bench" in r.stdout

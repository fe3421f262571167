"""The image builds its wheel from copied folders: every package the wheel lists must be copied."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

REPO = Path(__file__).resolve().parents[2]


def test_every_wheel_package_folder_is_copied_into_the_build_stage() -> None:
    tool = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    mapped = tool.get("package-dir", {})
    folders = {mapped.get(pkg, pkg.split(".")[0]).split("/")[0] for pkg in tool["packages"]}
    copied = set(re.findall(r"^COPY (\S+) \./\1$", (REPO / "Dockerfile").read_text(), flags=re.M))
    assert folders - copied == set(), f"Dockerfile does not COPY {sorted(folders - copied)}"

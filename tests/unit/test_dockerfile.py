"""The image builds its wheel from copied folders: every package the wheel lists must be copied."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

REPO = Path(__file__).resolve().parents[2]


def test_every_wheel_package_folder_is_copied_into_the_build_stage() -> None:
    """The wheel is `ajet_runner/` and the folders it links to: the build stage needs each of them."""
    linked = {p.name for p in (REPO / "ajet_runner").iterdir() if p.is_symlink()}
    folders = linked | {"ajet_runner"}
    copied = set(re.findall(r"^COPY (\S+) \./\1$", (REPO / "Dockerfile").read_text(), flags=re.M))
    assert folders - copied == set(), f"Dockerfile does not COPY {sorted(folders - copied)}"

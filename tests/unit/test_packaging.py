"""The wheel installs one import package, `ajet_runner`: its sub-packages are the repository's top-level
folders, linked into `ajet_runner/` (tests/integration/test_wheel_demo.py builds the wheel and looks inside)."""

from __future__ import annotations

import os
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("statemachine", "store", "workers", "service", "cli", "resultdir", "logsetup", "examples")


def _config() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def test_only_ajet_runner_is_discovered() -> None:
    find = _config()["packages"]["find"]
    assert find["include"] == ["ajet_runner*"] and find["namespaces"] is True


def test_every_folder_is_linked_into_the_one_package() -> None:
    for name in FOLDERS:
        link = ROOT / "ajet_runner" / name
        assert link.is_symlink() and os.readlink(link) == f"../{name}", name
        assert (link / "__init__.py").is_file(), name


def test_the_lua_scripts_ship_as_package_data() -> None:
    """store/scripts.py reads the `.lua` files with importlib.resources: the wheel must carry them."""
    data = _config()["package-data"]
    patterns = [*data.get("*", []), *data.get("ajet_runner.store", [])]
    scripts = sorted((ROOT / "store").glob("*.lua"))
    assert scripts, "no Lua scripts found under store/"
    assert all(any(path.match(pattern) for pattern in patterns) for path in scripts), patterns


def test_the_package_says_it_is_typed() -> None:
    assert (ROOT / "ajet_runner" / "py.typed").is_file()
    assert "py.typed" in _config()["package-data"]["*"]

"""Every Python package of the project is listed in pyproject's explicit `packages`, so the wheel
(and the Docker image built from it) carries all of them."""

from __future__ import annotations

from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[2]
TOP = ("statemachine", "store", "workers", "service", "cli", "resultdir", "logsetup")


def test_every_subpackage_is_in_the_wheel() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    found = {".".join(init.parent.relative_to(ROOT).parts) for top in TOP for init in (ROOT / top).rglob("__init__.py")}
    assert found - listed == set(), f"missing from [tool.setuptools] packages: {sorted(found - listed)}"
    assert "ajet_runner_examples" in listed and config["package-dir"]["ajet_runner_examples"] == "examples"


def test_the_lua_scripts_ship_as_package_data() -> None:
    """store/scripts.py reads the `.lua` files with importlib.resources: the wheel must carry them."""
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    patterns = [*data.get("*", []), *data.get("store", [])]
    scripts = sorted((ROOT / "store").glob("*.lua"))
    assert scripts, "no Lua scripts found under store/"
    assert all(any(path.match(pattern) for pattern in patterns) for path in scripts), patterns

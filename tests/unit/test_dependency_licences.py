"""ajet-runner is Apache-2.0: nothing it installs may be GPL-licensed (bashlex, GPLv3+, was).

Reads the installed metadata of ajet-runner's runtime dependency closure (`importlib.metadata`:
License-Expression, License, classifiers); distributions without metadata are skipped. The
declared dependencies in pyproject.toml are checked too, so a stale editable install cannot hide
a GPL package added to the source.
"""

from __future__ import annotations

import os
import re
import sys
from importlib.metadata import Distribution, PackageNotFoundError, distribution
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
# GPL or AGPL (not the Lesser / Library GPL, which an Apache-2.0 program may link).
_GPL_TEXT = re.compile(r"(?<![LA-Za-z])A?GPL|(?<!Lesser )(?<!Library )(?<!Affero )General Public License|Affero")
_SPDX_GPL = re.compile(r"(?<![A-Za-z])A?GPL-[0-9]")


def _key(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _closure(root: str) -> dict[str, Distribution]:
    """Every installed distribution `root` needs at run time (no extras), by normalised name."""
    found: dict[str, Distribution] = {}
    todo = [root]
    while todo:
        name = todo.pop()
        if _key(name) in found:
            continue
        try:
            dist = distribution(name)
        except PackageNotFoundError:
            continue  # not installed here (a platform-only dependency): nothing to read
        found[_key(name)] = dist
        for line in dist.requires or []:
            req = Requirement(line)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return found


def _field(dist: Distribution, name: str) -> str:
    return (dist.metadata.get_all(name) or [""])[0]


def _gpl(dist: Distribution) -> str | None:
    """The licence text that makes `dist` GPL-licensed, or None."""
    meta = dist.metadata
    expression = _field(dist, "License-Expression")
    if _SPDX_GPL.search(expression.replace("LGPL", "")):
        return expression
    licence = _field(dist, "License").strip().splitlines()
    first = licence[0] if licence else ""  # some put the whole licence text there: its title line names it
    if _GPL_TEXT.search(first):
        return first
    for classifier in meta.get_all("Classifier") or []:
        if classifier.startswith("License ::") and _GPL_TEXT.search(classifier):
            return classifier
    return None


def test_the_licence_check_recognises_gpl() -> None:
    """The check itself: bashlex's metadata reads as GPL, the Lesser GPL and MIT do not."""

    class Meta(Distribution):
        def __init__(self, **fields: str) -> None:
            self.fields = fields

        def read_text(self, filename: str) -> str | None:
            if filename != "METADATA":
                return None
            return "".join(f"{k}: {v}\n" for k, v in self.fields.items())

        def locate_file(self, path: str | os.PathLike[str]) -> Path:  # pragma: no cover - unused
            return Path(path)

    assert _gpl(Meta(License="GPLv3+", Classifier="License :: OSI Approved :: GNU General Public License v3 or "
                                                     "later (GPLv3+)"))
    assert _gpl(Meta(**{"License-Expression": "GPL-3.0-or-later"}))
    assert _gpl(Meta(**{"License-Expression": "AGPL-3.0-only"}))
    assert not _gpl(Meta(**{"License-Expression": "LGPL-2.1-or-later"}))
    assert not _gpl(Meta(Classifier="License :: OSI Approved :: GNU Lesser General Public License v3 (LGPLv3)"))
    assert not _gpl(Meta(License="MIT", Classifier="License :: OSI Approved :: MIT License"))


def test_no_installed_dependency_is_gpl() -> None:
    closure = _closure("ajet-runner")
    if "ajet-runner" not in closure:
        pytest.skip("ajet-runner is not installed in this environment")
    assert "tree-sitter-bash" in closure and "tree-sitter" in closure
    assert "bashlex" not in closure, "bashlex (GPLv3+) is in ajet-runner's dependency tree"
    offenders = {name: why for name, dist in closure.items() if (why := _gpl(dist))}
    assert not offenders, f"GPL-licensed distributions in ajet-runner's dependency tree: {offenders}"


@pytest.mark.skipif(sys.version_info < (3, 11), reason="tomllib is in the standard library from 3.11")
def test_pyproject_declares_no_gpl_parser() -> None:
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = {_key(Requirement(r).name) for r in project["dependencies"]}
    assert "bashlex" not in names and {"tree-sitter", "tree-sitter-bash"} <= names

"""Conformance tier: tests against the REAL AgentJet from PyPI (see harness.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conformance import harness


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "conformance: runs the real AgentJet (agentjet==0.0.1 from PyPI) under GPU stand-ins"
    )


@pytest.fixture(scope="session")
def conf_python() -> str:
    return harness.venv_python()


@pytest.fixture()
def codebase(tmp_path: Path, conf_python: str) -> Path:
    return harness.make_codebase(tmp_path)


@pytest.fixture()
def make_env(codebase: Path) -> Iterator:
    """`make_env(**kw)` -> `harness.env_for(codebase, **kw)`; every process left carrying one of
    these envs' sandbox tokens (a `--with-ray` companion, a hung trainer) is ended afterwards."""
    made: list[dict[str, str]] = []

    def factory(**kwargs) -> dict[str, str]:
        env = harness.env_for(codebase, **kwargs)
        made.append(env)
        return env

    yield factory
    for env in made:
        harness.kill_sandbox(env)

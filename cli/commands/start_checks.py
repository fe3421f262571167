"""The checks `worker` and `run` make before they start (the adviser's settings, the site's catalogue), kept apart
from the `catalogue` command so that every worker start does not load rich and its console for them."""

from __future__ import annotations

import typer

from ajet_runner.store.settings import get_settings


def install_site_catalogue(prog: str) -> list[str]:
    """Load AJET_RUNNER_CATALOGUE_EXTRA (when set) into the catalogue; a bad file is a clear exit 2."""
    path = get_settings().catalogue_extra
    if not path:
        return []  # the catalogue is not loaded for nothing: `worker` calls this before its first heartbeat
    from ajet_runner.statemachine.failures.signatures import use_extension

    try:
        return use_extension(path)
    except ValueError as exc:
        typer.echo(f"ajet-runner {prog}: AJET_RUNNER_CATALOGUE_EXTRA is not a valid catalogue: {exc}", err=True)
        raise typer.Exit(2) from None


def check_adviser(prog: str) -> None:
    """Refuse to start with adviser settings that cannot work (the key itself is never printed)."""
    problems = get_settings().adviser_problems()
    for p in problems:
        typer.echo(f"ajet-runner {prog}: {p}", err=True)
    if problems:
        raise typer.Exit(2)

"""A laptop that only submits installs no plotting stack: matplotlib, numpy and Pillow are the `node` extra
(`make install`, `make demo`, `make test` and the image install it), and the HTTP client and the
submit / scan / wait commands run with them absent."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import tomllib
from packaging.requirements import Requirement

from tests.unit.test_dependency_licences import _closure, _key

ROOT = Path(__file__).resolve().parents[2]
PLOTTING = {"matplotlib", "numpy", "pillow", "contourpy", "fonttools", "kiwisolver", "cycler"}

# Run the CLI with the plotting stack made unimportable, as on a client-only install.
BLOCKED = textwrap.dedent("""
    import sys
    from importlib.abc import MetaPathFinder

    class NoPlotting(MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in ("matplotlib", "numpy", "PIL"):
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, NoPlotting())
    sys.argv = ["ajet-runner", *sys.argv[1:]]
    from ajet_runner.client import AjetRunnerClient  # noqa: F401  (the import the README shows)
    from ajet_runner.cli.app import main
    main()
""")


def _project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def test_the_plotting_stack_is_an_extra_not_a_dependency() -> None:
    project = _project()
    base = {_key(Requirement(r).name) for r in project["dependencies"]}
    node = {_key(Requirement(r).name) for r in project["optional-dependencies"]["node"]}
    assert not base & PLOTTING, base & PLOTTING
    assert {"matplotlib", "numpy", "pillow"} <= node
    assert any(Requirement(r).name == "ajet-runner" and "node" in Requirement(r).extras
               for r in project["optional-dependencies"]["test"])
    makefile = (ROOT / "Makefile").read_text()
    assert "-e '.[node]'" in makefile and "-e '.[node,test]'" in makefile  # make demo / make test: a whole node
    assert '"ajet-runner[node]"' in (ROOT / "Dockerfile").read_text()


def test_the_installed_client_pulls_no_plotting_package() -> None:
    """What `pip install ajet-runner` resolves to, read from the installed metadata (no extras)."""
    closure = _closure("ajet-runner")
    assert "ajet-runner" in closure and "httpx" in closure
    assert not set(closure) & PLOTTING, sorted(set(closure) & PLOTTING)


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    # `wait` retries an unreachable API for the reconnect limit (30 s): 1 s shows the same answer.
    env = {**os.environ, "AJET_RUNNER_RECONNECT_LIMIT": "1"}
    return subprocess.run([sys.executable, "-c", BLOCKED, *args], capture_output=True, text=True, timeout=120,
                          cwd=cwd, check=False, env=env)


def test_submit_scan_and_wait_run_without_matplotlib(tmp_path: Path) -> None:
    """Each command gets as far as the network (nothing listens: exit 3), never to an ImportError."""
    bp = tmp_path / "bp.md"
    bp.write_text("## [exp_purpose]\nx\n")
    url = "--url=http://127.0.0.1:9"
    for args in (("submit", str(bp), url), ("scan", url), ("wait", "--stage", "s", url), ("status", "abc", url)):
        out = _cli(*args, cwd=tmp_path)
        assert out.returncode == 3, (args, out.stderr)
        assert "cannot reach" in out.stderr and "ModuleNotFoundError" not in out.stderr, out.stderr


def test_a_report_without_matplotlib_says_why_it_has_no_plot(tmp_path: Path) -> None:
    script = BLOCKED.split("sys.argv =")[0] + textwrap.dedent("""
        from pathlib import Path
        from ajet_runner.workers.report.evaluations import Eval
        from ajet_runner.workers.report.plot import write_plot
        print(write_plot(Path("p.png"), [Eval(step=1, dataset="", metrics={"mean_reward": 0.5})], "t"))
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=tmp_path,
                         check=False)
    assert out.returncode == 0, out.stderr
    assert "ajet-runner[node]" in out.stdout and not (tmp_path / "p.png").exists()



def test_compare_without_matplotlib_says_why_the_stage_has_no_plot(tmp_path: Path) -> None:
    """`compare` on a client-only install writes the stage report without the plot and says why (it once said
    "No experiment has a curve yet" of runs that had curves)."""
    from tests.unit.test_compare import _result_dir

    dirs = [_result_dir(tmp_path / "runs", name, value) for name, value in (("a", 0.5), ("b", 0.7))]
    out = _cli("compare", *map(str, dirs), "-o", str(tmp_path / "stage"), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    why = "is not installed here (pip install 'ajet-runner[node]' draws the plots)"
    assert "plot: not drawn: " in out.stdout and why in out.stdout, out.stdout
    report = (tmp_path / "stage" / "stage_report.md").read_text()
    assert "No plot: " in report and why in report and "No experiment has a curve yet" not in report, report
    assert not (tmp_path / "stage" / "stage_plot.png").exists()
    assert "Traceback" not in out.stderr, out.stderr

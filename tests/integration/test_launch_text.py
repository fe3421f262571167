"""Only the author's text runs: paths and multi-line commands reach bash exactly as written (real tmux)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from ajet_runner.statemachine.blueprint.parse import parse_blueprint
from ajet_runner.workers.executors.local.tmux import TmuxRunner
from ajet_runner.workers.executors.wrapper import command_path

pytestmark = pytest.mark.integration


def _paths(root: Path, n: int = 1) -> dict[str, Path]:
    logs = root / "logs"
    return {"log_path": logs / f"attempt-{n}.log", "rc_path": logs / f"attempt-{n}.rc",
            "pid_path": logs / f"attempt-{n}.pid"}


def test_tmux_format_in_the_code_dir_runs_nothing(tmux_socket: str, tmp_path: Path) -> None:
    """Repro: tmux 3.3a expands `#(...)` in `new-session -c`; the code dir must reach only the wrapper's cd."""
    marker = tmp_path / "PWN"
    code = tmp_path / f"code#(touch {marker})"
    code.mkdir(parents=True)
    runner = TmuxRunner(tmux_socket, linger=0)
    handle = runner.start("ajet_fmt", "pwd; echo '#(touch x)' #{pane_pid}", cwd=str(code), env={},
                          **_paths(tmp_path / f"res#(touch {marker})"))
    assert runner.wait_for_exit(handle, 10) == 0
    assert handle.log_path.read_text().splitlines() == [str(code), "#(touch x)"]
    assert not marker.exists()


HEREDOC_BLUEPRINT = """\
## [exp_launch_command]
```bash
cat > made.txt <<'EOF'
touch should-not-exist
$HOME stays literal
EOF
if [ -s made.txt ]; then
  echo "heredoc ok"
else
  echo "heredoc lost"
fi
# a comment line stays a comment
for f in made.txt; do wc -l < "$f"; done
```
"""


def test_multi_line_command_runs_as_a_script(tmux_socket: str, tmp_path: Path) -> None:
    """Repro: a heredoc and if/then/fi were `&&`-joined; now the block is the body of a script."""
    command = parse_blueprint(HEREDOC_BLUEPRINT).exp_launch_command
    assert "\n" in command and "&&" not in command
    runner = TmuxRunner(tmux_socket, linger=0)
    paths = _paths(tmp_path)
    handle = runner.start("ajet_heredoc", command, cwd=str(tmp_path), env={}, **paths)
    assert runner.wait_for_exit(handle, 10) == 0
    assert (tmp_path / "made.txt").read_text() == "touch should-not-exist\n$HOME stays literal\n"
    assert not (tmp_path / "should-not-exist").exists()
    assert paths["log_path"].read_text().split() == ["heredoc", "ok", "2"]
    script = command_path(paths["log_path"]).read_text()
    assert script.endswith(textwrap.dedent(command) + "\n")

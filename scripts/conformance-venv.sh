#!/usr/bin/env bash
# Build the conformance tier's venv: the REAL AgentJet launcher from PyPI (agentjet==0.0.1),
# without a GPU stack.
#
#   scripts/conformance-venv.sh [VENV_DIR]      (default: build/conformance-venv in the repo)
#
# Installs with --no-deps: agentjet==0.0.1 and verl-bundle==0.5.0.post2 (the verl that
# agentjet's `verl` extra pins; its `verl.__version__` passes the launcher's environment
# check). Then only the light packages that the launcher, the config loader, `import ajet`
# and the real trainer modules the stand-ins call import at load time, every version pinned
# by tests/conformance/constraints.txt. torch, vllm, tensordict and torchdata are NOT
# installed: tests/conformance/standins/ provides import stand-ins, put on PYTHONPATH by
# tests/conformance/harness.py. The venv's `bin/ray` becomes a dispatcher: the launcher runs
# `<venv>/bin/ray start --head --block` for --with-ray, and with AJET_CONF_RAY_CLI set (the
# harness sets it) that is the fake CLI from the stand-ins instead of a real Ray head.
#
# Idempotent: a complete venv holds .conformance-venv-ok with the hash of this script and of
# the constraints file; when it matches, nothing is done. Anything else is rebuilt from scratch.
# Python: $AJET_CONF_PYTHON, else the first of python3.11 python3.12 python3.10 python3 that
# is 3.10-3.12 (agentjet 0.0.1 requires <3.13).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${1:-$REPO/build/conformance-venv}"
CONSTRAINTS="$REPO/tests/conformance/constraints.txt"
STANDINS="$REPO/tests/conformance/standins"
MARKER="$VENV/.conformance-venv-ok"
HASH="$(cat "${BASH_SOURCE[0]}" "$CONSTRAINTS" | sha256sum | cut -d' ' -f1)"

if [[ -f "$MARKER" && "$(cat "$MARKER")" == "$HASH" && -x "$VENV/bin/python" ]]; then
  echo "conformance venv is complete: $VENV"
  exit 0
fi

pick_python() {
  if [[ -n "${AJET_CONF_PYTHON:-}" ]]; then echo "$AJET_CONF_PYTHON"; return; fi
  local c
  for c in python3.11 python3.12 python3.10 python3; do
    if command -v "$c" >/dev/null 2>&1 &&
       "$c" -c 'import sys; sys.exit(0 if (3, 10) <= sys.version_info[:2] <= (3, 12) else 1)' 2>/dev/null; then
      command -v "$c"; return
    fi
  done
  echo "conformance-venv: no Python 3.10-3.12 found (set AJET_CONF_PYTHON)" >&2
  exit 2
}
PY="$(pick_python)"
START=$SECONDS
echo "conformance-venv: building $VENV with $PY ($("$PY" -V 2>&1))"
rm -rf "$VENV"
"$PY" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check --no-input -q)

# 1. The real code, without its declared GPU/cloud dependencies.
"${PIP[@]}" install -c "$CONSTRAINTS" --no-deps agentjet==0.0.1 verl-bundle==0.5.0.post2

# 2. What its import chains need on a CPU-only machine (found by trying, see
#    docs/agentjet-real-formats.md "The conformance venv"):
#    launcher + config loader: loguru python-dotenv hydra-core omegaconf beast-logger PyYAML psutil
#      packaging debugpy
#    `import ajet` (ajet/__init__ -> copilot.job, tuner, workflow): ray agentscope (agentjet pins
#      1.0.7; mcp<2) transformers (tokenizer types only; huggingface-hub<1 for 4.57) websockets
#      pydantic numpy (<2, as verl-bundle requires)
#    the real trainer modules the stand-in calls (ajet.backbone.trainer_verl, verl's tracking,
#      checkpoint and ray_trainer modules): datasets codetiming tqdm
"${PIP[@]}" install -c "$CONSTRAINTS" \
  loguru python-dotenv hydra-core omegaconf beast-logger PyYAML psutil packaging debugpy \
  ray agentscope mcp transformers huggingface-hub websockets pydantic numpy \
  datasets codetiming tqdm

# 3. `<venv>/bin/ray` dispatcher (the real CLI stays as bin/ray-real).
if [[ -f "$VENV/bin/ray" ]]; then
  mv "$VENV/bin/ray" "$VENV/bin/ray-real"
  cat > "$VENV/bin/ray" <<'EOF'
#!/bin/sh
# conformance venv: AgentJet's launcher runs <venv>/bin/ray (not the ray on PATH) for --with-ray.
# With AJET_CONF_RAY_CLI set (tests/conformance/harness.py sets it) no real Ray head is started.
if [ -n "${AJET_CONF_RAY_CLI:-}" ]; then exec "$AJET_CONF_RAY_CLI" "$@"; fi
exec "$(dirname "$0")/ray-real" "$@"
EOF
  chmod +x "$VENV/bin/ray"
fi

# 4. Check: the real launcher's and trainer's modules import with the stand-ins.
PYTHONPATH="$STANDINS" "$VENV/bin/python" - <<'EOF'
import ajet.launcher, ajet.utils.config_utils, ajet.backbone.trainer_verl  # noqa: F401
import verl
from verl.utils.logger.aggregate_logger import concat_dict_to_str
assert "0.5.0.post" in verl.__version__, verl.__version__
assert concat_dict_to_str({"a": 1}, step=0) == "step:0 - a:1"
import torch
assert getattr(torch, "__ajet_conformance_standin__", False), "a real torch is installed in the venv"
EOF

echo "$HASH" > "$MARKER"
echo "conformance-venv: done in $((SECONDS - START)) s, $(du -sh "$VENV" | cut -f1) at $VENV"

"""Simulated `ajet.backbone.main_verl`: the trainer process the launcher starts."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ajet.sim import interrupts
from ajet.sim.config import read_yaml
from ajet.sim.trainer import Trainer, run_safely


def main(argv: list[str] | None = None, backbone: str = "verl") -> int:
    interrupts.install()
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]  # typed TextIO; a TextIOWrapper here
    parser = argparse.ArgumentParser(prog=f"ajet.backbone.main_{backbone}")
    parser.add_argument("--config-path", "--config", dest="config_path", required=True)
    parser.add_argument("--config-name", dest="config_name", default="")
    args, _ = parser.parse_known_args(argv)
    path = Path(args.config_path) / args.config_name if args.config_name else Path(args.config_path)
    return run_safely(Trainer(read_yaml(path), backbone=backbone))


if __name__ == "__main__":
    sys.exit(main())

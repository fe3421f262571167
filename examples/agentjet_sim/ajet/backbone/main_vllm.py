"""Simulated `ajet.backbone.main_vllm`: same trainer as verl, another banner."""

from __future__ import annotations

import sys

from ajet.backbone.main_verl import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], backbone="vllm"))

"""Stand-in `ajet.swarm_cli` / `ajet-swarm` (absent from agentjet 0.0.1): `start --swarm-port=N`.

    ajet-swarm start [--swarm-port=10086] [--conf X.yaml]
    python -m ajet.swarm_cli start ...        (routed here by sitecustomize while AgentJet has none)

Default config: ./ajet/default_config/ajet_swarm_default.yaml in the cwd (later AgentJet
versions ship one inside the package). See swarm_server for what runs.
"""

from __future__ import annotations

import argparse
import os
import sys

from ajet.utils.launch_utils import set_loguru_default_color
from loguru import logger

DEFAULT_CONF = "ajet/default_config/ajet_swarm_default.yaml"


def cmd_start(args) -> int:
    from ajet.utils.config_utils import prepare_experiment_config

    conf = args.conf or DEFAULT_CONF
    if not os.path.exists(conf):
        logger.error(f"Default config file not found. Please provide a valid config file. ({conf})")
        return 1
    if not os.path.dirname(conf):
        conf = os.path.join(".", conf)
    _yaml, _base, _name, exp_config = prepare_experiment_config(conf, "saved_experiments", "verl")
    ajet = exp_config["ajet"]
    assert ajet.get("enable_swarm_mode", False), "Please enable_swarm_mode in config to start swarm server."
    trainer_common = ajet.get("trainer_common", {})
    if trainer_common.get("val_before_train") or exp_config.get("trainer", {}).get("val_only"):
        raise ValueError("swarm_mode is not compatible with val_before_train and val_only")
    from ajet_conformance.swarm_server import serve

    serve(exp_config, args.swarm_port)
    return 0


def main(argv=None) -> int:
    set_loguru_default_color()
    parser = argparse.ArgumentParser(description="AgentJet Swarm Management (ajet-runner conformance stand-in)")
    sub = parser.add_subparsers(dest="command")
    start = sub.add_parser("start", help="Start the swarm server")
    start.add_argument("--swarm-port", type=int, default=10086)
    start.add_argument("--conf", type=str, default="")
    start.set_defaults(func=cmd_start)
    args = parser.parse_args(argv)
    if not hasattr(args, "func"):
        parser.print_help()
        return 0
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())

"""Simulated `ajet-swarm start --swarm-port=N [--conf YAML]`: the swarm server.

Like the real one it logs `Starting swarm server on port N` once it listens, then blocks
(serving clients) until stopped; it keeps running after a client finishes. Failure modes
for tests: a `--conf` YAML without `ajet.enable_swarm_mode: true` is refused; with
`AJET_SIM_SWARM_DIE_AFTER=<steps>` the server dies after serving that many training steps
(once per codebase: a marker in `.sim_state/` keeps the restarted server alive); with
`AJET_SIM_SWARM_ENGINE_STUCK=1` the first server's engine cannot start: it logs the engine-state
error and answers the client's job configuration with a bare HTTP 500 (once per codebase too).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


def _log(level: str, text: str) -> None:
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    sys.stdout.write(f"{stamp} | {level:<8} | ajet.swarm_server - {text}\n")
    sys.stdout.flush()


class _Engine:
    """The training engine state the server reports and the steps it has served."""

    def __init__(self, die_after: int, marker: Path) -> None:
        self.status = "ENGINE.BOOTING"
        self.steps = 0
        self.die_after = die_after
        self.marker = marker
        self.lock = threading.Lock()
        self.stuck = os.environ.get("AJET_SIM_SWARM_ENGINE_STUCK") == "1"


def _handler(engine: _Engine) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, fmt: str, *args: Any) -> None:  # quiet access log
            return

        def _reply(self, code: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # http.server's naming
            self._reply(200, {"engine_status": engine.status, "steps": engine.steps})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            req = json.loads(self.rfile.read(length) or b"{}")
            if self.path == "/sync_train_config":
                if engine.stuck and not engine.marker.with_name(engine.marker.name + "_stuck").exists():
                    stuck = engine.marker.with_name(engine.marker.name + "_stuck")
                    stuck.parent.mkdir(parents=True, exist_ok=True)
                    stuck.write_text("stuck once\n")
                    engine.status = "ENGINE.CANNOT_CONNECT"
                    _log("ERROR", "Cannot sync train config or start engine when engine is in status: "
                         f"{engine.status}")
                    self._reply(500, {"error": "Internal Server Error"})
                    return
                if req.get("val_before_train") or req.get("val_only"):
                    _log("ERROR", "swarm_mode is not compatible with val_before_train and val_only")
                    self._reply(400, {"error": "swarm_mode is not compatible with val_before_train and val_only"})
                    return
                engine.status = "ENGINE.ROLLING"
                _log("INFO", f"Train config synced: {req.get('project_name', 'swarm')}")
                self._reply(200, {"engine_status": engine.status})
                return
            with engine.lock:
                engine.steps += 1
                step = engine.steps
            kl = 0.02 / (1 + step)
            _log("INFO", f"step {step}: kl_loss: {kl:.5f} global_step: {step}")
            self._reply(200, {"step": step, "kl_loss": kl})
            if engine.die_after and step >= engine.die_after and not engine.marker.exists():
                engine.marker.parent.mkdir(parents=True, exist_ok=True)
                engine.marker.write_text("died once\n")
                _log("ERROR", "Engine crashed: CUDA error: an illegal memory access was encountered")
                sys.stdout.flush()
                os._exit(1)

    return Handler


def _start(args: argparse.Namespace) -> int:
    if args.conf:
        import yaml

        data = yaml.safe_load(Path(args.conf).read_text(encoding="utf-8")) or {}
        if not (data.get("ajet") or {}).get("enable_swarm_mode"):
            _log("ERROR", "Please enable_swarm_mode in config to start swarm server.")
            return 1
    die_after = int(os.environ.get("AJET_SIM_SWARM_DIE_AFTER", "0") or 0)
    engine = _Engine(die_after, Path.cwd() / ".sim_state" / f"swarm_died_{args.swarm_port}")
    boot = float(os.environ.get("AJET_SIM_SWARM_BOOT_SECONDS", "1"))
    _log("INFO", "Loading the training engine ...")
    time.sleep(boot)
    server = ThreadingHTTPServer(("127.0.0.1", args.swarm_port), _handler(engine))
    engine.status = "ENGINE.OFFLINE"

    def _stop(signum: int, _frame: Any) -> None:
        _log("INFO", f"Received signal {signum}, shutting down swarm server.")
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    _log("INFO", f"Starting swarm server on port {args.swarm_port}")
    server.serve_forever(poll_interval=0.2)
    server.server_close()
    _log("INFO", "Swarm server stopped.")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ajet-swarm")
    sub = parser.add_subparsers(dest="cmd", required=True)
    start = sub.add_parser("start", help="start the swarm server and block")
    start.add_argument("--swarm-port", "--port", type=int, default=10086)
    start.add_argument("--conf", default="")
    args = parser.parse_args(argv)
    return _start(args)


if __name__ == "__main__":
    sys.exit(main())

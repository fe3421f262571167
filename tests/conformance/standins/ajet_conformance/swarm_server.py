"""Stand-in swarm server: agentjet 0.0.1 has none (`ajet-swarm`, `ajet.swarm_cli` and the
launcher's `--swarm-server` appear in later AgentJet versions only).

Shaped after the later `ajet.swarm_cli start`: the REAL 0.0.1 `prepare_experiment_config`
(experiment naming, `Experiment Name: ...`, backup dir), the refusals later versions print,
`Starting swarm server on port N` once it listens, then it blocks and keeps running after a
client finishes. It "runs the training engine": every `POST /step` of a client is one
training step printed through the REAL verl console logger (`step:N - ... actor/kl_loss:...`),
with the stand-in trainer's numbers and failure knobs. HTTP on 127.0.0.1 only; our own tiny
protocol (GET /status, POST /start, POST /step, GET /global_step), not AgentJet's.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from loguru import logger

OFFLINE, BOOTING, ROLLING = "ENGINE.OFFLINE", "ENGINE.BOOTING", "ENGINE.ROLLING"


class Engine:
    def __init__(self, config) -> None:
        from omegaconf import OmegaConf
        from verl.utils.tracking import Tracking

        from ajet_conformance.trainer import StandinTrainer

        self.config = OmegaConf.create(config)
        self.trainer = StandinTrainer(self.config)
        # The classic launcher maps ajet.trainer_common.use_kl_loss onto verl's key; do the same here.
        self.trainer.use_reference_policy = bool(self.config.ajet.trainer_common.get("use_kl_loss", True))
        self.trainer.verl_logger = Tracking(
            project_name=self.config.ajet.project_name,
            experiment_name=self.config.ajet.experiment_name,
            default_backend=self.config.trainer.logger,
            config=OmegaConf.to_container(self.config, resolve=True),
        )
        self.status = OFFLINE
        self.lock = threading.Lock()

    def start(self) -> tuple[int, dict]:
        with self.lock:
            if self.status != OFFLINE:
                return 409, {"error": f"Cannot sync train config or start engine when engine is in status: "
                                      f"{self.status}"}
            self.status = BOOTING
            logger.info(f"engine status: {self.status}")
            self.trainer.global_steps = 0
            self.status = ROLLING
            logger.info(f"engine status: {self.status}")
            return 200, {"engine_status": self.status}

    def step(self) -> tuple[int, dict]:
        from ajet_conformance import failures

        with self.lock:
            if self.status != ROLLING:
                return 409, {"error": f"engine is in status: {self.status}"}
            t = self.trainer
            t.global_steps += 1
            timing: dict = {}
            failures.maybe_warn(t.knobs, t.global_steps)
            try:
                failures.maybe_fail(t.knobs, t.global_steps)
            except Exception:  # noqa: BLE001 - any engine failure ends the server, as the real one
                logger.exception("training engine failed")
                raise SystemExit(1) from None
            metrics = t._train_step_metrics(0, timing)
            metrics.update(t._data_metrics(0, timing))
            t.verl_logger.log(data=metrics, step=t.global_steps)
            return 200, {"global_step": t.global_steps}


def serve(config, port: int) -> None:
    engine = Engine(config)

    class Handler(BaseHTTPRequestHandler):
        def _reply(self, code: int, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):  # http.server's naming
            if self.path == "/status":
                self._reply(200, {"engine_status": engine.status})
            elif self.path == "/global_step":
                self._reply(200, {"global_step": engine.trainer.global_steps})
            else:
                self._reply(404, {"error": self.path})

        def do_POST(self):
            try:
                if self.path == "/start":
                    self._reply(*engine.start())
                elif self.path == "/step":
                    self._reply(*engine.step())
                else:
                    self._reply(404, {"error": self.path})
            except SystemExit:
                self._reply(500, {"error": "engine died"})
                threading.Thread(target=httpd.shutdown, daemon=True).start()
                engine.status = OFFLINE
                Handler.failed = True

        def log_message(self, fmt, *args):  # no access log on the console
            return

    Handler.failed = False
    httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    logger.info(f"Starting swarm server on port {port}")
    httpd.serve_forever()
    if Handler.failed:
        raise SystemExit(1)

"""Swarm mode: the swarm server died while the client still needed it, or its log explains why
the client failed.

The client would notice a dead server only after its own retry (about 16 s in AgentJet) and then
fail with `Unable to connect to swarm server.`, which says nothing about why. Watching the server
directly ends the attempt at once, diagnosed from the server's own log (see
`ajet_runner.statemachine.blueprint.swarm_blueprint.server_failure_finding`);
the catalogue's plan restarts the server, awaits it
and relaunches the client, within the repair budget. When the client fails with nothing specific
in its own log while the live server's log shows a swarm signature (an engine-state error, say),
that signature is the diagnosis.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ajet_runner.statemachine.blueprint.swarm_blueprint import server_failure_finding
from ajet_runner.statemachine.failures.signatures import signature
from ajet_runner.statemachine.lifecycle import Trigger
from ajet_runner.statemachine.models import Finding
from ajet_runner.statemachine.rules.base import Observation, Proposal


def _unspecific(cause: Finding | None) -> bool:
    if cause is None:
        return True
    try:
        return signature(cause.signature).generic
    except KeyError:
        return False  # a site's own signature is specific


@dataclass(frozen=True)
class SwarmServerRule:
    name: str = "swarm_server"
    inputs = ("completed_run", "process_alive", "exit_code", "server_alive", "server_cause", "server_last_line",
              "cause")

    def wake_at(self, obs: Observation) -> float:
        return math.inf

    def check(self, obs: Observation) -> Proposal | None:
        if obs.completed_run:
            return None
        if not obs.process_alive and obs.exit_code == 0:
            return None  # the client finished first: its exit decides (a server may stop after that)
        if not obs.server_alive:
            finding = server_failure_finding(obs.server_cause, obs.server_last_line)
            return Proposal(Trigger.anomaly, f"the swarm server died while the client ran: {finding.signature}",
                            self.name, finding)
        server = obs.server_cause
        if (not obs.process_alive and server is not None and server.signature.startswith("swarm_")
                and _unspecific(obs.cause)):
            code = "no exit code" if obs.exit_code is None else f"code {obs.exit_code}"
            return Proposal(Trigger.anomaly, f"the client exited ({code}); the swarm server's log shows "
                            f"{server.signature}", self.name, server)
        return None

"""Swarm mode: the swarm server died while the client still needed it.

The client would notice only after its own retry (about 16 s in AgentJet) and then fail with
`Unable to connect to swarm server.`, which says nothing about why. Watching the server
directly ends the attempt at once, diagnosed from the server's own log (see
`statemachine.swarm.server_failure_finding`); the catalogue's plan restarts the server,
awaits it and relaunches the client, within the repair budget.
"""

from __future__ import annotations

from dataclasses import dataclass

from statemachine.rules.base import Observation, Proposal
from statemachine.swarm import server_failure_finding


@dataclass(frozen=True)
class SwarmServerRule:
    name: str = "swarm_server"

    def check(self, obs: Observation) -> Proposal | None:
        if obs.server_alive or obs.completed_run:
            return None
        if not obs.process_alive and obs.exit_code == 0:
            return None  # the client finished first: its exit decides (a server may stop after that)
        finding = server_failure_finding(obs.server_cause, obs.server_last_line)
        return Proposal("anomaly", f"the swarm server died while the client ran: {finding.signature}",
                        self.name, finding)

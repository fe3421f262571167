"""The variables every rank of a multi-node run gets, as torchrun and AgentJet's launch_utils expect."""

from __future__ import annotations

import socket
from collections.abc import Mapping
from typing import Any


def gang_env(launch: Mapping[str, Any], rank: int) -> dict[str, str]:
    """MASTER_ADDR / MASTER_PORT (the head's), NODE_RANK (0 = head) and NNODES."""
    return {"MASTER_ADDR": str(launch["master_addr"]), "MASTER_PORT": str(launch["master_port"]),
            "NODE_RANK": str(rank), "NNODES": str(launch["nnodes"])}


def free_port() -> int:
    """A TCP port nothing listens on now, on this (the head's) node: the Ray head's port."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("", 0))
        return int(sock.getsockname()[1])

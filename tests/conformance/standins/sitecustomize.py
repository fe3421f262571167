"""Conformance tier: route AgentJet entry points that need GPUs to GPU-free stand-ins.

Imported by Python at start-up because the harness puts this directory on PYTHONPATH.
`python -m ajet.backbone.main_verl` (the training subprocess of the real launcher) then runs
`ajet_conformance/backbone/main_verl.py`; `ajet.swarm_cli` (absent from agentjet 0.0.1) runs
`ajet_conformance/swarm_cli.py`. Everything else (the launcher, the config loader, the
trainer's printing code) stays the installed AgentJet. Set AJET_CONF_REDIRECT=0 to turn the
routing off (the real main_verl then fails on the missing GPU stack, as it would here).
"""

import importlib.abc
import importlib.util
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
_REDIRECTS = {
    "ajet.backbone.main_verl": os.path.join(_HERE, "ajet_conformance", "backbone", "main_verl.py"),
    "ajet.swarm_cli": os.path.join(_HERE, "ajet_conformance", "swarm_cli.py"),
}
_ONLY_IF_ABSENT = {"ajet.swarm_cli"}


class _ConformanceRedirect(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        origin = _REDIRECTS.get(fullname)
        if origin is None:
            return None
        if fullname in _ONLY_IF_ABSENT:
            for finder in sys.meta_path:
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                if finder.find_spec(fullname, path, target) is not None:
                    return None  # a newer AgentJet has the real one: use it
        return importlib.util.spec_from_file_location(fullname, origin)


if os.environ.get("AJET_CONF_REDIRECT", "1") != "0":
    sys.meta_path.insert(0, _ConformanceRedirect())

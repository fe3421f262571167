"""GPU-free stand-ins that let the real AgentJet 0.0.1 launcher run end to end (conformance tier).

Placed on PYTHONPATH by ``tests/conformance/harness.py`` only; never installed. The
``sitecustomize`` next to this package routes ``python -m ajet.backbone.main_verl`` (the
launcher's training subprocess) to :mod:`ajet_conformance.backbone_verl`.
"""

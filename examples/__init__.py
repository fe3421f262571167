"""Installed as `ajet_runner.examples`: the simulated AgentJet codebase and the sample blueprints that
`ajet-runner demo` copies (this folder, `examples/`, stays their source in the repository)."""

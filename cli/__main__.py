"""`python -m ajet_runner.cli ...` is `ajet-runner ...`."""

from ajet_runner.cli.app import main

main()

"""`python -m ajet_runner ...` is `ajet-runner ...`."""

from ajet_runner.cli.app import main

main()

"""`python -m cli ...` is `ajet-runner ...`."""

from cli.app import main

main()

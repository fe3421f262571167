"""What both the control plane and the workers do to a result dir: atomic writes, `finish.flag`,
moving an earlier run's files aside, the report of a blueprint refused before it ran.

It imports neither `service` nor `workers` (both import it), only `statemachine`.
"""

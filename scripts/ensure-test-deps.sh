#!/usr/bin/env bash
# System tools only the tests need. promtool (Debian's `prometheus` package) runs the alert rules and the
# dashboard's queries against synthetic series (tests/unit/test_promtool.py). Best effort: without root or
# apt the test skips and says why, the rest of the suite still runs.
set -uo pipefail
if command -v promtool >/dev/null 2>&1; then exit 0; fi
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  echo "promtool not found: installing Debian's prometheus package with apt-get" >&2
  # No daemon start inside a build container: the package's postinst would try to start the server.
  export DEBIAN_FRONTEND=noninteractive RUNLEVEL=1
  if apt-get update -qq && apt-get install -y -qq --no-install-recommends prometheus >/dev/null; then
    exit 0
  fi
  echo "could not install prometheus (promtool): the promtool tests will be skipped" >&2
else
  echo "promtool not found (install Debian's 'prometheus' package): the promtool tests will be skipped" >&2
fi
exit 0

#!/usr/bin/env bash
# Test-only system packages: Debian's chromium + chromium-driver for the web console's browser test
# (tests/integration/test_ui_browser.py). Best effort: where they cannot be installed (not root, no
# apt-get, no network) the browser test skips and says why; nothing else needs them.
set -uo pipefail
if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then exit 0; fi
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  echo "chromium/chromedriver not found: installing them with apt-get (for the browser test)" >&2
  if apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
       chromium chromium-driver fonts-dejavu-core >/dev/null; then
    exit 0
  fi
  echo "could not install chromium: the browser test will be skipped" >&2
else
  echo "chromium + chromium-driver are not installed (the browser test will be skipped):" \
       "'sudo apt-get install chromium chromium-driver'" >&2
fi
exit 0

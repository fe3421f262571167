#!/usr/bin/env bash
# System tools only the tests need, best effort (without root or apt the tests that need them skip and say why):
# - Debian's chromium + chromium-driver for the web console's browser test (tests/integration/test_ui_browser.py);
# - promtool (Debian's `prometheus` package) for the alert rules and dashboard queries (tests/unit/test_promtool.py);
# - openssh-server + openssh-client for the ssh executor's private sshd (tests/integration/sshd.py; its daemon is
#   not started by the package here: the tests start their own on a free port and stop it by pid).
set -uo pipefail
want=()
command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1 || want+=(chromium chromium-driver fonts-dejavu-core)
command -v promtool >/dev/null 2>&1 || want+=(prometheus)
[ -x /usr/sbin/sshd ] && command -v ssh >/dev/null 2>&1 || want+=(openssh-server openssh-client)
[ ${#want[@]} -eq 0 ] && exit 0
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing test tools with apt-get: ${want[*]}" >&2
  # No daemon start inside a build container: prometheus' postinst would try to start the server.
  export DEBIAN_FRONTEND=noninteractive RUNLEVEL=1
  if apt-get update -qq && apt-get install -y -qq --no-install-recommends "${want[@]}" >/dev/null; then
    exit 0
  fi
  echo "could not install ${want[*]}: the tests that need them will be skipped" >&2
else
  echo "not installed (tests that need them will be skipped): ${want[*]} — 'sudo apt-get install ${want[*]}'" >&2
fi
exit 0

#!/usr/bin/env bash
# System tools only the tests need, best effort (without root or apt the tests that need them skip and say why):
# - Debian's chromium + chromium-driver for the web console's browser test (tests/integration/test_ui_browser.py);
# - promtool (Debian's `prometheus` package) for the alert rules and dashboard queries (tests/unit/test_promtool.py);
# - fonts-noto-cjk, so Chinese purposes render in the console's screenshots and the PNG plots (most shipped samples
#   are Chinese; tests/integration/test_stage_page_browser.py, tests/unit/test_stage_plot.py look at them).
# - slurm-wlm + munge for the SLURM executor's tests (tests/integration/test_slurm_executor.py).
# - openssh-server + openssh-client for the ssh executor's private sshd (tests/integration/sshd.py).
# - proxychains4, so CI runs on a host that has it, as GPU nodes often do: the network repair looks it up, and
#   the tests give the code its tools explicitly (tests/unit/test_repair_driving.py), so they pass with or without it.
set -uo pipefail
want=()
command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1 || want+=(chromium chromium-driver fonts-dejavu-core)
command -v promtool >/dev/null 2>&1 || want+=(prometheus)
command -v fc-list >/dev/null 2>&1 && [ -n "$(fc-list :lang=zh 2>/dev/null)" ] || want+=(fonts-noto-cjk)
[ -x /usr/sbin/slurmctld ] && [ -x /usr/sbin/munged ] || want+=(slurm-wlm munge)  # the private one-node SLURM (tests/integration/slurm_cluster.py)
[ -x /usr/sbin/sshd ] && command -v ssh >/dev/null 2>&1 || want+=(openssh-server openssh-client)  # the private sshd
command -v proxychains4 >/dev/null 2>&1 || want+=(proxychains4)  # a host with it: the tests must not assume it absent
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

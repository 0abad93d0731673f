#!/usr/bin/env bash
# Opt-in real-adapter suite: installs Claude Code's, Codex's and Gemini CLI's ACP adapters from
# npm into a cache directory, then drives each through Legate (and directly over ACP) against
# the scripted model server of legate-testkit (127.0.0.1 only; no account, no network beyond
# the npm registry at install time).
#
#   scripts/real-adapters.sh                     # the current releases, all three
#   scripts/real-adapters.sh claude              # only tests whose name contains "claude"
#   LEGATE_ADAPTERS=old scripts/real-adapters.sh # the releases the presets first supported
#   scripts/real-adapters.sh kubernetes          # Claude's adapter in a pod of the local cluster
#                                                # (scripts/k8s-local.sh up; KUBECONFIG exported)
#
# LEGATE_ADAPTERS_DIR: where each set's node_modules goes, as <dir>/current and <dir>/old
# (default ~/.cache/legate-adapters). The versions are the ones the presets' `verified`
# ranges name (crates/legate-supervisor/src/preset.rs) and docs/backends/acp.md records.
set -euo pipefail

set_name="${LEGATE_ADAPTERS:-current}"
case "$set_name" in
  current)
    want="@agentclientprotocol/claude-agent-acp@0.101.0 @agentclientprotocol/codex-acp@2.6.0 @google/gemini-cli@0.61.0" ;;
  old)
    want="@zed-industries/claude-agent-acp@0.23.1 @zed-industries/codex-acp@0.16.0 @google/gemini-cli@0.61.0" ;;
  *) echo "real-adapters: LEGATE_ADAPTERS must be current or old (got $set_name)" >&2; exit 2 ;;
esac

base="${LEGATE_ADAPTERS_DIR:-$HOME/.cache/legate-adapters}"
dir="$base/$set_name"
# shellcheck source=scripts/npm-cache.sh
source "$(dirname "$0")/npm-cache.sh"
npm_cache_install "$dir" real-adapters "$want"

cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
export LEGATE_ADAPTERS_DIR="$base"
export LEGATE_ADAPTERS="$set_name"
echo "real-adapters: $set_name set: $want ($(date -u +%Y-%m-%dT%H:%MZ))" >&2
start=$(date +%s)
if [ "${1:-}" = kubernetes ]; then
  : "${KUBECONFIG:?run scripts/k8s-local.sh up and export the KUBECONFIG line it prints}"
  cargo test -p legate --test kubernetes -- --ignored --nocapture claude_runs_in_a_pod
else
  cargo test -p legate-testkit --features real-adapters --test real_adapters -- \
    --test-threads=1 --nocapture "${1:-}"
fi
echo "real-adapters: finished in $(( $(date +%s) - start )) s" >&2

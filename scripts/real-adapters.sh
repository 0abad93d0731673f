#!/usr/bin/env bash
# Opt-in real-adapter suite: installs Claude Code's, Codex's and Gemini CLI's ACP adapters from
# npm into a cache directory, then drives each through Legate against the scripted model server
# of legate-testkit (127.0.0.1 only; no account, no network beyond the npm registry).
#
#   scripts/real-adapters.sh            # install (if needed) and run all three
#   scripts/real-adapters.sh claude     # only tests whose name contains "claude"
#
# LEGATE_ADAPTERS_DIR: where node_modules goes (default ~/.cache/legate-adapters).
# Versions are pinned to the ones /work/shared/ACP-ADAPTERS.md describes; change them here.
set -euo pipefail

CLAUDE_ACP="@zed-industries/claude-agent-acp@0.23.1"
CODEX_ACP="@zed-industries/codex-acp@0.16.0"
GEMINI_CLI="@google/gemini-cli@0.61.0"

dir="${LEGATE_ADAPTERS_DIR:-$HOME/.cache/legate-adapters}"
mkdir -p "$dir"
command -v node >/dev/null || { echo "real-adapters: node (20 or newer) is required" >&2; exit 2; }
command -v npm >/dev/null || { echo "real-adapters: npm is required" >&2; exit 2; }

stamp="$dir/.installed"
want="$CLAUDE_ACP $CODEX_ACP $GEMINI_CLI"
if [[ ! -f "$stamp" || "$(cat "$stamp")" != "$want" ]]; then
  echo "real-adapters: installing $want into $dir" >&2
  [[ -f "$dir/package.json" ]] || echo '{"name":"legate-real-adapters","private":true}' > "$dir/package.json"
  (cd "$dir" && npm install --no-audit --no-fund --loglevel=error $want)
  echo "$want" > "$stamp"
fi

cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
export LEGATE_ADAPTERS_DIR="$dir"
start=$(date +%s)
cargo test -p legate-testkit --features real-adapters --test real_adapters -- \
  --test-threads=1 --nocapture "${1:-}"
echo "real-adapters: finished in $(( $(date +%s) - start )) s" >&2

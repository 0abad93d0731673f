# Sourced by scripts/real-adapters.sh and scripts/real-callers.sh: installs npm packages into a
# cache directory once, and again only when the wanted set changes (a stamp file records it).
#
#   npm_cache_install <dir> <label> "<package@version …>"

npm_cache_install() {
  local dir="$1" label="$2" want="$3"
  mkdir -p "$dir"
  command -v node >/dev/null || { echo "$label: node (20 or newer) is required" >&2; exit 2; }
  command -v npm >/dev/null || { echo "$label: npm is required" >&2; exit 2; }
  local stamp="$dir/.installed"
  if [[ ! -f "$stamp" || "$(cat "$stamp")" != "$want" ]]; then
    echo "$label: installing $want into $dir" >&2
    [[ -f "$dir/package.json" ]] || echo "{\"name\":\"legate-$label\",\"private\":true}" > "$dir/package.json"
    # shellcheck disable=SC2086 # one word per package
    (cd "$dir" && npm install --no-audit --no-fund --loglevel=error $want)
    echo "$want" > "$stamp"
  fi
}

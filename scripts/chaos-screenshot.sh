#!/usr/bin/env bash
# Renders a `guildhall chaos` report to a PNG with headless Chromium: the
# picture in the README is made this way from a real run.
#
#   scripts/chaos-screenshot.sh DIR/report.html OUT.png [WIDTH] [HEIGHT]
#
# Chromium: `apt-get install chromium` on Debian. The page is
# self-contained (inline SVG, no script), so no network is needed; the
# browser gets a throwaway profile and is bounded in time.
set -euo pipefail
if (($# < 2)); then
  echo "usage: $0 DIR/report.html OUT.png [WIDTH] [HEIGHT]" >&2
  exit 2
fi
html=$(realpath "$1")
out=$(realpath -m "$2")
width=${3:-1000}
height=${4:-2600}
browser=$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)
if [[ -z "$browser" ]]; then
  echo "no Chromium found (apt-get install chromium)" >&2
  exit 1
fi
profile=$(mktemp -d)
trap 'rm -rf "$profile"' EXIT
timeout 60 "$browser" --headless --no-sandbox --disable-gpu --hide-scrollbars \
  --user-data-dir="$profile" --window-size="$width,$height" \
  --screenshot="$out" "file://$html" 2>/dev/null
test -s "$out"
echo "$out"

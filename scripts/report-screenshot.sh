#!/usr/bin/env bash
# Renders a simulation report and screenshots it in headless Chromium (Debian's `chromium` package), so a change to
# the report can be looked at as a reader sees it: `bash scripts/report-screenshot.sh [OUT_DIR]` writes
# OUT_DIR/report.html (a seeded bursty week on the built-in config) and OUT_DIR/report.png (full page, 1280 wide).
# It fails when Chromium is missing, the page does not render, or the PNG is implausibly small.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-out/screenshot}
browser=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$browser" ]; then
    echo "chromium is not installed (apt-get install chromium)" >&2
    exit 1
fi
mkdir -p "$out"
cargo build --release -q -p spillway
target/release/spillway simulate --jobs 600 --days 2 --out "$out" > "$out.summary.txt"
page="$(realpath "$out")/report.html"
# The page is one self-contained file (no scripts, no network): a tall window catches the whole of it.
"$browser" --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1280,4200 \
    --screenshot="$out/report.png" "file://$page" 2> "$out/chromium.log"
size=$(stat -c %s "$out/report.png")
if [ "$size" -lt 50000 ]; then
    echo "the screenshot is only $size bytes: see $out/chromium.log" >&2
    exit 1
fi
echo "$out/report.png ($size bytes); summary in $out.summary.txt"

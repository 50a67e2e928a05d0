#!/usr/bin/env bash
# view-trace.sh - screenshot a Chrome Trace Event Format JSON file as a user sees
# it in the speedscope web viewer, rendered by headless Chromium.
# Usage: view-trace.sh TRACE.json OUT.png [WIDTHxHEIGHT]   (default 1600x900)
# Installs, when missing: chromium (Debian apt) and speedscope (npm, into
# ${XDG_CACHE_HOME:-$HOME/.cache}/tessera/speedscope).
# speedscope shows one thread (pid,tid) at a time, the first by default; the top
# bar reads "PROCESS (pid P), THREAD (tid T) (i/N)". Optional environment:
#   VIEW_TRACE_THREAD=PID:TID  show that thread (the trace is cut down to it)
#   VIEW_TRACE_VIEW=time-ordered|left-heavy|sandwich   (default time-ordered)
#   VIEW_TRACE_BUDGET_MS=5000  virtual time the page gets to load
set -euo pipefail

die() { echo "view-trace: $*" >&2; exit 1; }
[ $# -ge 2 ] && [ $# -le 3 ] || die "usage: $0 TRACE.json OUT.png [WIDTHxHEIGHT]"
trace=$1 out=$2 size=${3:-1600x900}
[[ $size =~ ^([0-9]+)x([0-9]+)$ ]] || die "bad size '$size', want WIDTHxHEIGHT"
w=${BASH_REMATCH[1]} h=${BASH_REMATCH[2]}
[ -f "$trace" ] || die "trace file not found: $trace"

tmp=$(mktemp -d)
srv=""
cleanup() { [ -n "$srv" ] && kill "$srv" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
trap 'exit 130' INT TERM
# Check the JSON (and cut it to one thread if asked) while copying it in.
python3 - "$trace" "$tmp/trace.json" "${VIEW_TRACE_THREAD:-}" <<'PY' || exit 1
import json, sys
src, dst, thread = sys.argv[1:]
try:
    d = json.load(open(src))
except ValueError as e:
    sys.exit(f"view-trace: not valid JSON: {src}: {e}")
ev = d if isinstance(d, list) else d.get("traceEvents") if isinstance(d, dict) else None
if not isinstance(ev, list):
    sys.exit(f"view-trace: no traceEvents array in {src}")
if thread:
    pid, _, tid = thread.partition(":")
    same = lambda e, k, v: str(e.get(k)) == v
    ev = [e for e in ev if same(e, "pid", pid) and (same(e, "tid", tid) or
          (e.get("ph") == "M" and e.get("name") == "process_name"))]
    if not any(e.get("ph") in ("X", "B", "E") for e in ev):
        sys.exit(f"view-trace: no X/B/E events for pid:tid {thread} in {src}")
    d = {"traceEvents": ev}
json.dump(d, open(dst, "w"))
PY

# Chromium from Debian.
chrome=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$chrome" ]; then
  echo "view-trace: installing chromium (Debian package)" >&2
  sudo_=""; [ "$(id -u)" -eq 0 ] || sudo_=sudo
  $sudo_ apt-get install -y chromium >/dev/null || die "could not install chromium"
  chrome=$(command -v chromium) || die "chromium not found after install"
fi

# speedscope from npm, into a cache dir (never the project).
ss=${XDG_CACHE_HOME:-$HOME/.cache}/tessera/speedscope
rel=$ss/node_modules/speedscope/dist/release
if [ ! -f "$rel/index.html" ]; then
  echo "view-trace: installing speedscope (npm) into $ss" >&2
  mkdir -p "$ss"
  npm install --prefix "$ss" --no-audit --no-fund --silent speedscope >/dev/null \
    || die "could not install speedscope"
  [ -f "$rel/index.html" ] || die "speedscope release files not found in $rel"
fi

# Serve speedscope + the trace from one local origin (same origin: no CORS needed).
cp -r "$rel" "$tmp/www"
mv "$tmp/trace.json" "$tmp/www/trace.json"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
python3 -m http.server --bind 127.0.0.1 --directory "$tmp/www" "$port" >"$tmp/server.log" 2>&1 &
srv=$!
base=http://127.0.0.1:$port
for _ in $(seq 50); do curl -fs -o /dev/null "$base/index.html" && break; sleep 0.1; done
curl -fs -o /dev/null "$base/trace.json" || { cat "$tmp/server.log" >&2; die "local server did not start"; }

url="$base/index.html#profileURL=$base/trace.json&view=${VIEW_TRACE_VIEW:-time-ordered}"
mkdir -p "$(dirname "$out")"
rm -f "$out"
timeout 120 "$chrome" --headless --no-sandbox --disable-gpu --hide-scrollbars \
  --user-data-dir="$tmp/profile" --window-size="$w,$h" \
  --virtual-time-budget="${VIEW_TRACE_BUDGET_MS:-5000}" --screenshot="$out" "$url" \
  >"$tmp/chrome.log" 2>&1 || { cat "$tmp/chrome.log" >&2; die "chromium failed"; }
[ -s "$out" ] || { cat "$tmp/chrome.log" >&2; die "no screenshot written"; }
echo "view-trace: wrote $out (${w}x${h}) from $trace"

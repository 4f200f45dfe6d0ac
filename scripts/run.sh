#!/usr/bin/env bash
# The main job: probe this machine, build its trees, run the collectives against the
# peers and print the comparison. Extra arguments go to `smelt run`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
cargo build --release -p smelt-cli -p smelt-capi
target/release/smelt run "$@"
# Then the picture of this machine: every benchmark that applies, on one page
# (smelt-out/report/report.html), from the model the run probed.
out=smelt-out
prev=""
for a in "$@"; do
    [ "$prev" = "--out" ] && out="$a"
    prev="$a"
done
model=()
[ -f "$out/model.json" ] && model=(--model "$out/model.json")
exec target/release/smelt report "${model[@]}" --out "$out/report" --time-limit 300

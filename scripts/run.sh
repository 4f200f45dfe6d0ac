#!/usr/bin/env bash
# The main job: probe this machine, build its trees, run the collectives against the
# peers and print the comparison. Extra arguments go to `smelt run`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
cargo build --release -p smelt-cli -p smelt-capi
exec target/release/smelt run "$@"

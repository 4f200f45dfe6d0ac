#!/usr/bin/env bash
# The whole test suite: installs what it needs, then builds and tests every crate
# (unit, integration, CLI, C API example). Stress runs are bounded; scale them with
# SMELT_STRESS=<factor> (default 1).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
cargo build --workspace --all-targets
cargo test --workspace 2>&1

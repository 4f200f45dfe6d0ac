#!/bin/sh
# Runs the main figures of smelt from a bundle (scripts/bundle.sh) on a machine with no
# Rust, no compiler and no MPI, within a time budget, and keeps every output:
#
#   sh bench/bundle_report.sh BUNDLE OUTDIR [QUICK_SECONDS]
#
# Steps (each bounded): probe this machine (kept as the host's model in OUTDIR/cache),
# tune `auto` on it, the tree auto picks and the predictions of every topology, the
# collectives against the bundled peers (threads, then processes), and the large
# messages. The host's cache goes to OUTDIR/cache so nothing outside OUTDIR is written.
set -u
bundle="$1"
out="$2"
budget="${3:-60}"
mkdir -p "$out/cache"
XDG_CACHE_HOME="$out/cache"
export XDG_CACHE_HOME
smelt="$bundle/smelt"
step() { # step NAME SECONDS ARGS...: runs smelt ARGS into OUTDIR/NAME.txt
    name="$1"
    secs="$2"
    shift 2
    echo "== $name: smelt $*" | tee -a "$out/steps.txt"
    start=$(date +%s)
    if command -v timeout >/dev/null; then
        timeout -k 5 "$secs" "$smelt" "$@" >"$out/$name.txt" 2>"$out/$name.err"
    else
        "$smelt" "$@" >"$out/$name.txt" 2>"$out/$name.err"
    fi
    echo "   exit $? after $(($(date +%s) - start)) s" | tee -a "$out/steps.txt"
}
{
    uname -a
    nproc
    grep -m1 "model name" /proc/cpuinfo
} >"$out/machine.txt" 2>&1
step probe $((budget * 2)) probe --quick --time-limit "$budget" --cache -o "$out/model.json" --quiet
step model 30 model show "$out/model.json"
step tune $((budget * 2 + 30)) tune --quick --time-limit "$budget" --model "$out/model.json"
step tree 60 tree --model "$out/model.json" --algo auto
step evaluate 120 evaluate --model "$out/model.json"
step bench $((budget * 3 + 60)) bench --quick --model "$out/model.json" --time-limit $((budget * 3)) --json-out "$out/bench.json"
step processes $((budget * 2 + 60)) bench processes --quick --model "$out/model.json" --time-limit $((budget * 2)) --json-out "$out/processes.json"
step large $((budget + 60)) bench large --quick --model "$out/model.json" --json-out "$out/large.json"
echo "done: $out" | tee -a "$out/steps.txt"

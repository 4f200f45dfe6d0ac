#!/usr/bin/env bash
# Before/after figures of smelt: builds revision REV (in a git worktree) and today's
# tree, runs the same figures with the two builds alternately, N times, and prints
# every pair and the median ratio new/old (below 1: today is faster).
#
#   scripts/bench-compare.sh REV [-n N] [--new REV2 | --new-tree DIR] [--out DIR] [-- PROBE-ARGS]
#   scripts/bench-compare.sh --report DIR      # the table again, from a run's files
#
# PROBE-ARGS go to the figure program (bench/compare/probe.rs) of both builds:
#   --figures a,b,...  (default: all; `--list` names them)   --scale F (loop counts x F)
#   --reps R (timed repetitions per figure, median; default 5)   --cpus A,B (default: the
#   first two CPUs this process may use)   --wait dedicated|oversubscribed (the
#   collectives' wait policy; default: each build's own choice)
#
# The figures: queuepair one-way latency and streaming; back-to-back broadcast,
# reduce, allreduce and barrier of 2 members as threads and as processes; active
# message round trip and stream (per request with its reply) between threads. The
# same probe source is built against each revision's library crates (features for
# what a revision has); a figure a build cannot measure is "missing", one that failed
# "FAILED", and neither stops the run. See docs/bench.md.
set -euo pipefail

usage() {
    sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
}
die() {
    echo "bench-compare: $*" >&2
    exit 2
}

# --- the table: DIR holds old.K / new.K (probe output) and load.K --------------------
report() {
    local dir=$1
    [ -d "$dir" ] || die "no such directory: $dir"
    ls "$dir"/old.* >/dev/null 2>&1 || die "$dir has no old.K files"
    local old_name new_name
    old_name=$(cat "$dir/old.name" 2>/dev/null || echo old)
    new_name=$(cat "$dir/new.name" 2>/dev/null || echo new)
    echo "old: $old_name"
    echo "new: $new_name"
    if ls "$dir"/load.* >/dev/null 2>&1; then
        for f in $(ls "$dir"/load.* | sort -t. -k2 -n); do
            echo "pair ${f##*.}: load average $(cat "$f")"
        done
    fi
    # Every line `FIGURE<TAB>NS` or `FIGURE<TAB>missing|FAILED<TAB>WHY`.
    local files=()
    for f in $(ls "$dir"/old.* | grep -E '/old\.[0-9]+$' | sort -t. -k2 -n); do
        local k=${f##*.}
        [ -f "$dir/new.$k" ] || die "$dir/new.$k is missing (pair $k)"
        files+=("$f" "$dir/new.$k")
    done
    awk -F'\t' '
    function med(arr, n,   i, j, t) {
        for (i = 2; i <= n; i++) { t = arr[i]; for (j = i - 1; j >= 1 && arr[j] > t; j--) arr[j + 1] = arr[j]; arr[j + 1] = t }
        if (n % 2) return arr[(n + 1) / 2]
        return (arr[n / 2] + arr[n / 2 + 1]) / 2
    }
    FNR == 1 {
        side = (FILENAME ~ /\/old\.[0-9]+$/) ? "old" : "new"
        pair = FILENAME; sub(/.*\./, "", pair); pair += 0
        if (pair > npairs) npairs = pair
    }
    NF >= 2 && $1 ~ /^[a-z_0-9]+$/ {
        f = $1
        if (!(f in seen)) { seen[f] = 1; order[++nf] = f }
        if ($2 ~ /^[0-9.]+([eE][-+]?[0-9]+)?$/) val[f, side, pair] = $2 + 0
        else { bad[f, side, pair] = $2; why[f, side] = $3 }
    }
    END {
        printf "\n%-22s %-6s %s\n", "figure (ns)", "", "pairs: old -> new (new/old)"
        for (i = 1; i <= nf; i++) {
            f = order[i]; n = 0; line = ""
            for (p = 1; p <= npairs; p++) {
                o = ((f, "old", p) in val) ? sprintf("%.1f", val[f, "old", p]) : (((f, "old", p) in bad) ? bad[f, "old", p] : "none")
                w = ((f, "new", p) in val) ? sprintf("%.1f", val[f, "new", p]) : (((f, "new", p) in bad) ? bad[f, "new", p] : "none")
                if (((f, "old", p) in val) && ((f, "new", p) in val) && val[f, "old", p] > 0) {
                    r[++n] = val[f, "new", p] / val[f, "old", p]
                    line = line sprintf("  %s->%s (%.3f)", o, w, r[n])
                } else line = line sprintf("  %s->%s", o, w)
            }
            if (n > 0) summary = sprintf("median %.3f", med(r, n))
            else {
                summary = "no ratio"
                for (s = 1; s <= 2; s++) {
                    side = (s == 1) ? "old" : "new"
                    if ((f, side) in why) summary = summary sprintf("; %s: %s", side, why[f, side])
                }
            }
            printf "%-22s %s\n%-22s %s\n", f, summary, "", line
        }
    }' "${files[@]}"
}

[ $# -ge 1 ] || usage
if [ "$1" = "--report" ]; then
    [ $# -eq 2 ] || usage
    report "$2"
    exit 0
fi
case "$1" in -h | --help) usage ;; -*) die "the first argument is the revision to compare with (see --help)" ;; esac

rev=$1
shift
pairs=5
new_rev=
new_tree=
out=
probe_args=()
while [ $# -gt 0 ]; do
    case "$1" in
        -n)
            [ $# -ge 2 ] || die "-n needs a number"
            pairs=$2
            shift 2
            ;;
        --new)
            [ $# -ge 2 ] || die "--new needs a revision"
            new_rev=$2
            shift 2
            ;;
        --new-tree)
            [ $# -ge 2 ] || die "--new-tree needs a directory"
            [ -f "$2/crates/smelt-runtime/Cargo.toml" ] || die "$2 is not a smelt source tree"
            new_tree=$(cd "$2" && pwd)
            shift 2
            ;;
        --out)
            [ $# -ge 2 ] || die "--out needs a directory"
            out=$2
            shift 2
            ;;
        --)
            shift
            probe_args=("$@")
            break
            ;;
        *) die "unknown argument $1 (see --help)" ;;
    esac
done
[[ "$pairs" =~ ^[0-9]+$ ]] && [ "$pairs" -ge 1 ] && [ "$pairs" -le 1000 ] || die "-n takes 1 to 1000 pairs"

root=$(git -C "$(dirname "$0")/.." rev-parse --show-toplevel) || die "not in a git checkout"
cd "$root"
base=$root/target/bench-compare
mkdir -p "$base"
probe_src=$root/bench/compare/probe.rs
[ -f "$probe_src" ] || die "missing $probe_src"

# Worktree of a revision (reused while it is at that commit).
checkout() { # REV -> prints the source directory
    local sha dir
    sha=$(git rev-parse --verify --quiet "$1^{commit}") || die "unknown revision $1"
    dir=$base/${sha:0:12}/src
    if [ -d "$dir" ] && [ "$(git -C "$dir" rev-parse HEAD 2>/dev/null)" = "$sha" ]; then
        echo "$dir"
        return
    fi
    rm -rf "$dir"
    git worktree prune
    git worktree add --detach --force "$dir" "$sha" >&2 || die "git worktree add failed for $1"
    echo "$dir"
}

# Builds the probe against the crates in SRC, with its own target directory under
# WORK; prints the binary's path.
build_probe() { # SRC WORK
    local src=$1 work=$2 feats=() deps
    mkdir -p "$work/probe"
    cp "$probe_src" "$work/probe/probe.rs"
    [ -f "$src/Cargo.lock" ] && cp "$src/Cargo.lock" "$work/probe/Cargo.lock"
    deps="smelt-transport = { path = \"$src/crates/smelt-transport\" }
smelt-runtime = { path = \"$src/crates/smelt-runtime\" }
smelt-tree = { path = \"$src/crates/smelt-tree\", default-features = false }"
    grep -qs 'pub fn from_raw' "$src/crates/smelt-tree/src/tree.rs" "$src/crates/smelt-plan/src/tree.rs" && feats+=(from_raw)
    if [ -f "$src/crates/smelt-runtime/src/process.rs" ] && [ -d "$src/crates/smelt-ids" ]; then
        feats+=(process)
        grep -qs 'pub struct GroupJob' "$src/crates/smelt-runtime/src/process.rs" && feats+=(group_job)
    fi
    grep -qs 'pub link: smelt_mesh::LinkConfig' "$src/crates/smelt-runtime/src/group.rs" && feats+=(link_config)
    grep -qs 'pub fn pin_current_thread(cpu: CpuId)' "$src"/crates/smelt-transport/src/*.rs && feats+=(pin_cpu_id)
    if [ -f "$src/crates/smelt-am/Cargo.toml" ]; then
        feats+=(am)
        grep -qs 'pub struct AmConfig' "$src"/crates/smelt-am/src/*.rs && feats+=(am_config)
        deps="$deps
smelt-am = { path = \"$src/crates/smelt-am\", optional = true }"
    fi
    # The probe is built as the revision builds its own release binaries (its
    # workspace's codegen-units), so a change of the profile shows in the figures.
    local cgu
    cgu=$(awk '/^\[/{r=($0=="[profile.release]")} r && /^codegen-units *=/{gsub(/[^0-9]/,"");print;exit}' "$src/Cargo.toml")
    cgu=${cgu:-16}
    cat >"$work/probe/Cargo.toml" <<EOF
# Written by scripts/bench-compare.sh for the crates in $src.
[package]
name = "smelt-compare-probe"
version = "0.0.0"
edition = "2021"
publish = false

[[bin]]
name = "probe"
path = "probe.rs"

[dependencies]
$deps

[features]
from_raw = []
process = []
group_job = []
pin_cpu_id = []
link_config = []
am_config = []
am = [$(grep -q '^smelt-am' <<<"$deps" && echo '"dep:smelt-am"')]

[profile.release]
debug = 1
codegen-units = $cgu

[workspace]
EOF
    local f
    f=$(IFS=,; echo "${feats[*]:-}")
    echo "bench-compare: building the probe against $src (features: ${f:-none})" >&2
    (cd "$work/probe" && CARGO_TARGET_DIR=$work/target cargo build --release --quiet \
        ${f:+--features "$f"}) >&2 || die "building the probe against $src failed"
    echo "$work/target/release/probe"
}

old_src=$(checkout "$rev")
old_bin=$(build_probe "$old_src" "$base/$(basename "$(dirname "$old_src")")")
if [ -n "$new_rev" ] && [ -n "$new_tree" ]; then
    die "--new and --new-tree exclude each other"
elif [ -n "$new_tree" ]; then
    new_bin=$(build_probe "$new_tree" "$base/tree-$(echo "$new_tree" | cksum | cut -d' ' -f1)")
    new_name="the tree in $new_tree"
elif [ -n "$new_rev" ]; then
    new_src=$(checkout "$new_rev")
    new_bin=$(build_probe "$new_src" "$base/$(basename "$(dirname "$new_src")")")
    new_name="$new_rev ($(git rev-parse --short=12 "$new_rev"))"
else
    new_bin=$(build_probe "$root" "$base/worktree")
    dirty=$(git status --porcelain --untracked-files=no -- crates bench | head -1)
    new_name="today's tree (HEAD $(git rev-parse --short=12 HEAD)${dirty:+, with uncommitted changes})"
fi

# Keep copies: another build in the tree must not change a binary between pairs.
out=${out:-$base/runs/$(date +%Y%m%d-%H%M%S)}
mkdir -p "$out"
cp "$old_bin" "$out/old-probe"
cp "$new_bin" "$out/new-probe"
echo "$rev ($(git rev-parse --short=12 "$rev"))" >"$out/old.name"
echo "$new_name" >"$out/new.name"

# The figures: those of --figures, else every figure the probe knows.
figures=$("$out/new-probe" --list) || die "the new build's probe does not run"
for ((i = 0; i < ${#probe_args[@]}; i++)); do
    if [ "${probe_args[$i]}" = "--figures" ] && [ $((i + 1)) -lt ${#probe_args[@]} ]; then
        figures=$(tr ',' ' ' <<<"${probe_args[$((i + 1))]}")
    fi
done
for ((k = 1; k <= pairs; k++)); do
    load=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo unknown)
    echo "$load" >"$out/load.$k"
    echo "bench-compare: pair $k of $pairs (load average $load)" >&2
    : >"$out/old.$k"
    : >"$out/new.$k"
    # Figure by figure, the two builds right after each other (this VM changes regime
    # within seconds), and which goes first alternates, so a drift hits both.
    j=0
    for f in $figures; do
        if (((k + j) % 2)); then order="old new"; else order="new old"; fi
        j=$((j + 1))
        for side in $order; do
            "$out/$side-probe" "${probe_args[@]}" --figures "$f" >>"$out/$side.$k" 2>>"$out/$side.$k.err" || {
                rc=$?
                [ "$rc" -eq 2 ] && die "the probe refused its arguments: $(cat "$out/$side.$k.err")"
                echo "bench-compare: the $side build's probe exited with status $rc ($f, pair $k)" >&2
            }
        done
    done
done
echo "bench-compare: files in $out (scripts/bench-compare.sh --report $out)" >&2
report "$out"

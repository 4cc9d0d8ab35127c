#!/usr/bin/env bash
# Runs every libFuzzer target in build/fuzz/fuzz/ (built by `make fuzz`) for a bounded time on a
# scratch copy of its seed corpus fuzz/corpus/<name>/ and of the grown one fuzz/corpus/grown/<name>.tar.gz (the repo
# corpus is never modified).
# usage: scripts/fuzz-ci.sh [TOTAL_SECONDS]    (default 60, split evenly over the targets)
# Exits non-zero when a target crashes, leaks or times out; the reproducer is copied to
# build/fuzz/crashes/<name>/.
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
total=${1:-${FUZZ_SECONDS:-60}}
bindir=build/fuzz/fuzz
targets=()
for t in "$bindir"/fuzz_*; do [ -x "$t" ] && targets+=("$t"); done
if [ ${#targets[@]} -eq 0 ]; then
    echo "fuzz-ci: no fuzz targets in $bindir (run: make fuzz)"; exit 1
fi
per=$(( total / ${#targets[@]} )); [ "$per" -lt 5 ] && per=5
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failed=()
for t in "${targets[@]}"; do
    name=$(basename "$t"); short=${name#fuzz_}
    corpus="$work/$short"; mkdir -p "$corpus"
    [ -d "fuzz/corpus/$short" ] && cp -r "fuzz/corpus/$short/." "$corpus/"
    # and the corpus grown by longer runs (fuzz/corpus/grown/NAME.tar.gz: merged with -merge=1, the seeds above left out)
    [ -f "fuzz/corpus/grown/$short.tar.gz" ] && tar -xzf "fuzz/corpus/grown/$short.tar.gz" -C "$corpus"
    art="$work/artifacts-$short/"; mkdir -p "$art"
    echo "fuzz-ci: $name for ${per}s on $(ls "$corpus" | wc -l) seeds"
    ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1} UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
        "$t" -max_total_time="$per" -timeout=10 -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 \
        -artifact_prefix="$art" "$corpus" > "$work/$name.log" 2>&1
    rc=$?
    grep -E "^#[0-9]+.*DONE|stat::number_of_executed_units|stat::peak_rss_mb" "$work/$name.log" | sed 's/^/  /'
    if [ $rc -ne 0 ]; then
        failed+=("$name")
        echo "fuzz-ci: $name FAILED (exit $rc):"; tail -n 40 "$work/$name.log"
        mkdir -p "build/fuzz/crashes/$short" && cp "$art"* "build/fuzz/crashes/$short/" 2>/dev/null
        echo "fuzz-ci: reproducers in build/fuzz/crashes/$short/ (replay: $t FILE)"
    fi
done
if [ ${#failed[@]} -gt 0 ]; then echo "fuzz-ci: failed: ${failed[*]}"; exit 1; fi
echo "fuzz-ci: ${#targets[@]} target(s) ran clean"

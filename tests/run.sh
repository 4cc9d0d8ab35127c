#!/usr/bin/env bash
# Runs every test: the C unit tests in $1 (build dir), then the oracle tests under tests/py with the
# venv's pytest (VLLMC_TEST_ONLY_C=1 skips those). Ends with "N passed, N failed, N skipped".
set -u
build=${1:-build}
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
# The shared test data (tokenizer vectors, chat templates) sits beside the checkout.
if [ -z "${VLLMC_SHARED:-}" ] && [ -d ../shared ]; then export VLLMC_SHARED=$(cd ../shared && pwd); fi
pass=0; fail=0; skip=0; failed=()
mkdir -p "$build/logs"
for t in "$build"/tests/test_*; do
    [ -x "$t" ] || continue
    n=$(basename "$t")
    if "$t" > "$build/logs/$n.log" 2>&1; then
        pass=$((pass + 1)); tail -n 1 "$build/logs/$n.log"
    else
        fail=$((fail + 1)); failed+=("$n"); echo "---- $n FAILED:"; tail -n 30 "$build/logs/$n.log"
    fi
done
# Fuzz targets (built by `make fuzz`), each for a bounded time: one test item.
if [ -z "${VLLMC_TEST_ONLY_C:-}" ] && ls build/fuzz/fuzz/fuzz_* > /dev/null 2>&1; then
    if bash scripts/fuzz-ci.sh "${FUZZ_SECONDS:-80}" > "$build/logs/fuzz.log" 2>&1; then
        pass=$((pass + 1)); tail -n 1 "$build/logs/fuzz.log"
    else
        fail=$((fail + 1)); failed+=("fuzz"); echo "---- fuzz FAILED:"; tail -n 40 "$build/logs/fuzz.log"
    fi
fi
if [ -z "${VLLMC_TEST_ONLY_C:-}" ] && ls tests/py/test_*.py > /dev/null 2>&1; then
    py=${VLLMC_PYTHON:-.venv/bin/python}
    if [ ! -x "$py" ]; then
        echo "tests/run.sh: no test venv at .venv (run: bash scripts/setup-venv.sh); oracle tests not run"
        fail=$((fail + 1)); failed+=("oracle-venv-missing")
    else
        VLLMC_BUILD="$build" "$py" -m pytest -q -rs tests/py 2>&1 | tee "$build/logs/pytest.log"
        line=$(grep -aE "^(=+ )?[0-9]+ (passed|failed|skipped|error)" "$build/logs/pytest.log" | tail -n 1)
        p=$(echo "$line" | grep -oE "[0-9]+ passed" | grep -oE "[0-9]+"); f=$(echo "$line" | grep -oE "[0-9]+ (failed|errors?)" | awk "{s+=\$1} END{print s+0}")
        s=$(echo "$line" | grep -oE "[0-9]+ skipped" | grep -oE "[0-9]+")
        pass=$((pass + ${p:-0})); fail=$((fail + ${f:-0})); skip=$((skip + ${s:-0}))
        [ -z "$line" ] && { fail=$((fail + 1)); failed+=("pytest-crashed"); }
        [ "${f:-0}" != "0" ] && failed+=("pytest")
    fi
fi
[ ${#failed[@]} -gt 0 ] && echo "failed: ${failed[*]}"
echo "$pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ]

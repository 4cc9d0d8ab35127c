#!/usr/bin/env bash
# Starts `vllmc serve` on a model, runs `vllmc bench serve` against it once the server answers /health,
# stops the server and exits with the benchmark's status. For scripts and the GPU machine:
#   scripts/bench-serve.sh BUILD_DIR MODEL.gguf [bench serve options...] [-- serve options...]
# e.g. scripts/bench-serve.sh build/gpu model.gguf --concurrency 1,4,16,64 --num-prompts 64 \
#        --input-len 512 --output-len 128 --id-max 150000 --json "$OUT/serve.json" -- --max-num-seqs 64
# The server's log goes to ${SERVE_LOG:-/tmp/vllmc-bench-serve.log}; the port is ${PORT:-18000}.
set -u
if [ $# -lt 2 ]; then sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; exit 2; fi
build=$1; model=$2; shift 2
bench_args=(); serve_args=()
while [ $# -gt 0 ]; do
    if [ "$1" = "--" ]; then shift; serve_args=("$@"); break; fi
    bench_args+=("$1"); shift
done
port=${PORT:-18000}
log=${SERVE_LOG:-/tmp/vllmc-bench-serve.log}
"$build/vllmc" serve "$model" --port "$port" "${serve_args[@]}" > "$log" 2>&1 &
srv=$!
trap 'kill "$srv" 2>/dev/null; wait "$srv" 2>/dev/null' EXIT
"$build/vllmc" bench serve --base-url "http://127.0.0.1:$port" --ready-timeout "${READY_TIMEOUT:-600}" "${bench_args[@]}" &
bench=$!
# whichever ends first: a server that dies (a bad model, a bad flag) stops the benchmark's wait
wait -n "$srv" "$bench"
if kill -0 "$bench" 2>/dev/null; then
    kill "$bench" 2>/dev/null; wait "$bench" 2>/dev/null
    echo "bench-serve: the server exited early; its log ($log):"; tail -n 20 "$log"
    exit 1
fi
wait "$bench"
rc=$?
if ! kill -0 "$srv" 2>/dev/null; then echo "bench-serve: the server exited during the run; its log ($log):"; tail -n 20 "$log"; rc=1; fi
exit $rc

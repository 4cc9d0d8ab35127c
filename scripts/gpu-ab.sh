#!/usr/bin/env bash
# GPU machine: environment A/B of the engine's throughput (`vllmc bench --concurrency`) on synth_gguf.py shapes, the
# variants in turn, AB_REPS times. AB_MODELS (default qwen35-4b), AB_ARGS (default --concurrency 16 -p 128 -g 128 -r 3),
# AB_VARIANTS ("name:VAR=v,VAR2=w ..."; "base:X=1" is the default build as it is). Binaries from .carry/bin.tar.xz
# (scripts/gpu-carry.sh). A line a run: output tok/s and ITL per concurrency.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu-out}
mkdir -p "$OUT" /tmp/models /tmp/abbin
tar xJf .carry/bin.tar.xz -C /tmp/abbin
export LD_LIBRARY_PATH=$PWD/.carry/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
for m in ${AB_MODELS:-qwen35-4b}; do
    [ -s /tmp/models/$m.gguf ] || python3 .carry/synth_gguf.py "$m" /tmp/models/$m.gguf >/tmp/models/$m.log 2>&1
done
for rep in $(seq 1 "${AB_REPS:-2}"); do
    for m in ${AB_MODELS:-qwen35-4b}; do
        for v in ${AB_VARIANTS:-base:X=1}; do
            name=${v%%:*}; envs=${v#*:}
            # a comma before NAME= separates variables; others stay in the value (VLLMC_CUDA_MMR=64,10,8), as in gpu-check
            # shellcheck disable=SC2046,SC2086
            env $(echo "$envs" | sed 's/,\([A-Z_][A-Z0-9_]*=\)/ \1/g') timeout 200 /tmp/abbin/vllmc bench -m /tmp/models/$m.gguf ${AB_ARGS:---concurrency 16 -p 128 -g 128 -r 3} \
                >"$OUT/ab_${m}_${name}_$rep.txt" 2>&1
            echo "$m $name run $rep: $(grep '^| [0-9]' "$OUT/ab_${m}_${name}_$rep.txt" | awk -F'|' '{printf "N=%s %s tok/s ITL %s ms; ", $2, $4, $7}')"
        done
    done
done

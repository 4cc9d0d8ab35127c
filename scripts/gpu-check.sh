#!/usr/bin/env bash
# GPU machine: build the CUDA kernels and their benchmarks, check them against the CPU reference, time them.
# Writes logs under $OUT (when set) and prints a short table last.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu-out}
mkdir -p "$OUT" build/gpu
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,memory.total --format=csv | tee "$OUT/gpu.txt"
CFLAGS="-std=c11 -D_GNU_SOURCE -O2 -Iinclude -Isrc"
objs=()
for f in src/common/*.c src/quant/*.c; do
    o=build/gpu/$(echo "$f" | tr / _).o
    cc $CFLAGS $( [[ $f == *_avx2.c ]] && echo "-mavx2 -mfma -mf16c" ) $( [[ $f == *_avx512.c ]] && echo "-mavx2 -mfma -mf16c -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni -mavxvnni" ) -c "$f" -o "$o" || exit 1
    objs+=("$o")
done
NV="nvcc -O3 -std=c++17 -gencode=arch=compute_90,code=sm_90 -Iinclude -Isrc -lineinfo"
for f in src/backend/cuda/gemv_q.cu; do $NV -c "$f" -o build/gpu/$(basename "$f" .cu).o || exit 1; done
$NV -o build/gpu/bench_gemv bench/bench_gemv.cu build/gpu/gemv_q.o "${objs[@]}" -lm -lpthread || exit 1
./build/gpu/bench_gemv 30 2>&1 | tee "$OUT/bench_gemv.txt"

#!/usr/bin/env bash
# GPU machine: the call that measured the MoE norm + quantize folds, off by default (VLLMC_CUDA_FUSE_NQ bits 128 the MoE
# mix + norm, 256 the MoE router + norm; VLLMC_CUDA_MIX_CL=1 the mix's cluster form; BENCHMARKS.md "The norm folds
# measured"). Binaries from .carry/bin.tar.xz (scripts/gpu-carry.sh), models made here with .carry/synth_gguf.py, the tiny
# qwen35moe files from .carry/moe. In order of what decides most, each stage skipped past FOLD_BUDGET seconds (default
# 540): the bits (test_cuda_ops mix_row gdn_cluster); qwen36-14b-a3b default (64) against the folds in turn, twice,
# with the greedy ids of each setting; graph == eager on the tiny models with the folds; the engine; compute-sanitizer
# (racecheck, memcheck) over test_cuda_ops mix_row; qwen36-35b-a3b once each. Summary in $OUT/summary.txt.
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu-out}; mkdir -p "$OUT"; S=$OUT/summary.txt; : > "$S"; T0=$(date +%s)
BUDGET=${FOLD_BUDGET:-540}
el() { echo $(( $(date +%s) - T0 )); }
left() { [ "$(el)" -lt "$1" ]; }
nvidia-smi --query-gpu=name,clocks.sm,driver_version --format=csv,noheader | tee -a "$S"
BIN=.carry/bin; mkdir -p "$BIN" /tmp/models
[ -f .carry/bin.tar.xz ] && tar xJf .carry/bin.tar.xz -C "$BIN"
export LD_LIBRARY_PATH=$PWD/.carry/lib:/usr/local/cuda/lib64
g=/tmp/models/qwen36-14b-a3b.gguf; h=/tmp/models/qwen36-35b-a3b.gguf
# each file under its own name only once written whole (a reader of a file still being written fails)
synth() { python3 .carry/synth_gguf.py "$1" "$2.part" > "/tmp/synth_$1.txt" 2>&1 && mv "$2.part" "$2"; }
( synth qwen36-14b-a3b "$g" ) &
timeout 120 "$BIN/test_cuda_ops" mix_row gdn_cluster > /tmp/ops.txt 2>&1; echo "test_cuda_ops mix_row gdn_cluster rc=$? $(tail -1 /tmp/ops.txt) (at $(el) s)" | tee -a "$S"
grep "moe norms\|gdn\|FAIL" /tmp/ops.txt | cut -c1-200 | tee -a "$S"
b() { local n=$1 m=$2; shift 2
  env "$@" timeout 70 "$BIN/vllmc" bench -m "$m" -p 512 -g 256 -r 5 > /tmp/$n.txt 2>&1
  echo "$n: $(grep '^output tok/s' /tmp/$n.txt | head -1 | sed 's/ | TTFT.*//') (at $(el) s)" | tee -a "$S"
}
ids() { local m=$1; shift; env "$@" timeout 60 "$BIN/vllmc" generate -m "$m" --prompt-ids "[11,22,33,44,55,66,77,88,99,111,222,333,444,555,666,777]" --ids --ignore-eos -n 128 2>/dev/null | md5sum | cut -c1-12; }
wait
( synth qwen36-35b-a3b "$h" ) &
echo "14b ids: 64 $(ids $g X=1) 448 $(ids $g VLLMC_CUDA_FUSE_NQ=448) 448cl $(ids $g VLLMC_CUDA_FUSE_NQ=448 VLLMC_CUDA_MIX_CL=1) (at $(el) s)" | tee -a "$S"
for r in 1 2; do left $((BUDGET - 120)) && { b 14b_def_$r $g; b 14b_448_$r $g VLLMC_CUDA_FUSE_NQ=448; b 14b_448cl_$r $g VLLMC_CUDA_FUSE_NQ=448 VLLMC_CUDA_MIX_CL=1; }; done
for m in .carry/moe/qwen35moe-tiny-q4_k_m.gguf .carry/moe/qwen35moe-tiny-q8_0.gguf; do
  left $((BUDGET - 60)) || break
  VLLMC_CUDA_FUSE_NQ=448 VLLMC_CUDA_MIX_CL=1 timeout 100 "$BIN/test_cuda_model" $m 40 24 > /tmp/mm.txt 2>&1
  echo "test_cuda_model $(basename $m) 448cl rc=$? $(grep -o 'graph == eager in [0-9]*/[0-9]*' /tmp/mm.txt | head -1) $(tail -1 /tmp/mm.txt) (at $(el) s)" | tee -a "$S"
done
left $((BUDGET - 60)) && { VLLMC_CUDA_FUSE_NQ=448 timeout 60 "$BIN/test_cuda_engine" .carry/moe/qwen35moe-tiny-q4_k_m.gguf 64 12 > /tmp/e.txt 2>&1
  echo "test_cuda_engine tiny moe 448 rc=$? $(tail -1 /tmp/e.txt) (at $(el) s)" | tee -a "$S"; }
CS=/usr/local/cuda/bin/compute-sanitizer
for tool in racecheck memcheck; do
  left $((BUDGET - 60)) || break
  timeout 60 $CS --tool $tool "$BIN/test_cuda_ops" mix_row > /tmp/$tool.txt 2>&1
  echo "$tool mix_row rc=$? $(grep -m1 'SUMMARY' /tmp/$tool.txt) (at $(el) s)" | tee -a "$S"
done
left $((BUDGET - 70)) && { wait; b 35b_def $h; left $((BUDGET - 35)) && b 35b_448 $h VLLMC_CUDA_FUSE_NQ=448; }
mkdir -p "$OUT/logs"; cp /tmp/*.txt "$OUT/logs/" 2>/dev/null
echo "===== summary"; cat "$S"

#!/usr/bin/env bash
# GPU machine: `vllmc generate` with pipelined decode steps against --no-pipeline (step by step) on synthetic
# qwen35 models: the same ids for several lengths and a context cap, the tok/s of each, and a memcheck run.
# Needs .carry from scripts/gpu-carry.sh (carry [".carry"]).
export LD_LIBRARY_PATH=$PWD/.carry/lib:/usr/local/cuda/lib64
B=/tmp/bin; mkdir -p $B; tar xJf .carry/bin.tar.xz -C $B
mkdir -p /tmp/models; python3 .carry/synth_gguf.py qwen35-tiny /tmp/models/tiny.gguf >/dev/null 2>&1; python3 .carry/synth_gguf.py qwen35-4b /tmp/models/q4b.gguf >/dev/null 2>&1
P="[11,22,33,44,55,66,77,88,99,111,222,333,444,555,666,777]"
for m in tiny q4b; do
  for cfg in "-n 200" "-n 1" "-n 2" "-n 3" "-n 200 --ctx 40"; do
    a=$($B/vllmc generate -m /tmp/models/$m.gguf --prompt-ids "$P" --ids --ignore-eos $cfg --no-pipeline 2>/tmp/a.err)
    b=$($B/vllmc generate -m /tmp/models/$m.gguf --prompt-ids "$P" --ids --ignore-eos $cfg 2>/tmp/b.err)
    na=$(echo "$a" | tr ',' '\n' | wc -l)
    if [ "$a" = "$b" ] && [ -n "$a" ]; then r=SAME; else r=DIFF; fi
    echo "$m $cfg: $r ($na ids) | step: $(grep generation /tmp/a.err) | pipe: $(grep generation /tmp/b.err) $(grep -i error /tmp/b.err)"
  done
done
for k in 1 2; do for f in "--no-pipeline" ""; do $B/vllmc generate -m /tmp/models/q4b.gguf --prompt-ids "$P" --ids --ignore-eos -n 512 $f 2>&1 >/dev/null | grep generation | sed "s/^/q4b n512 $f: /"; done; done
timeout 120 compute-sanitizer --tool memcheck $B/vllmc generate -m /tmp/models/tiny.gguf --prompt-ids "$P" --ids --ignore-eos -n 20 2>&1 | grep -E "ERROR SUMMARY"

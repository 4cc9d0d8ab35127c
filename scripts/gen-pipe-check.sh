#!/usr/bin/env bash
# GPU machine: `vllmc generate` with pipelined decode steps against --no-pipeline (step by step) on synthetic
# qwen35 models: the same ids for several lengths and a context cap, the tok/s of each, and a memcheck run; then
# sampled decoding (plain sampling drawn on the device): pipelined = --no-pipeline = the host sampler
# (VLLMC_DEVICE_SAMPLE=0) for the same seed.
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
for m in tiny q4b; do
  for smp in "--temperature 0.8 --top-p 0.9 --seed 7" "--temperature 0.7 --top-k 40 --seed 3" "--temperature 1 --min-p 0.05 --seed 11"; do
    a=$($B/vllmc generate -m /tmp/models/$m.gguf --prompt-ids "$P" --ids --ignore-eos -n 100 $smp --no-pipeline 2>/tmp/a.err)
    b=$($B/vllmc generate -m /tmp/models/$m.gguf --prompt-ids "$P" --ids --ignore-eos -n 100 $smp 2>/tmp/b.err)
    c=$(VLLMC_DEVICE_SAMPLE=0 $B/vllmc generate -m /tmp/models/$m.gguf --prompt-ids "$P" --ids --ignore-eos -n 100 $smp 2>/tmp/c.err)
    if [ "$a" = "$b" ] && [ "$a" = "$c" ] && [ -n "$a" ]; then r=SAME; else r=DIFF; fi
    echo "$m sampled $smp: $r | step: $(grep generation /tmp/a.err) | pipe: $(grep generation /tmp/b.err) | host: $(grep generation /tmp/c.err) $(grep -i error /tmp/b.err /tmp/c.err)"
    [ "$r" = DIFF ] && { echo " a=$a"; echo " b=$b"; echo " c=$c"; } | cut -c1-400
  done
done
for k in 1 2; do for f in "--no-pipeline" ""; do $B/vllmc generate -m /tmp/models/q4b.gguf --prompt-ids "$P" --ids --ignore-eos -n 512 $f 2>&1 >/dev/null | grep generation | sed "s/^/q4b n512 $f: /"; done; done
for f in "--no-pipeline" "" "host"; do
  if [ "$f" = host ]; then e="VLLMC_DEVICE_SAMPLE=0"; f=""; else e=""; fi
  env $e $B/vllmc generate -m /tmp/models/q4b.gguf --prompt-ids "$P" --ids --ignore-eos -n 512 --temperature 0.7 --top-p 0.9 $f 2>&1 >/dev/null | grep generation | sed "s/^/q4b n512 T0.7 top-p 0.9 $e $f: /"
done
timeout 120 compute-sanitizer --tool memcheck $B/vllmc generate -m /tmp/models/tiny.gguf --prompt-ids "$P" --ids --ignore-eos -n 20 --temperature 0.8 --top-p 0.9 2>&1 | grep -E "ERROR SUMMARY"
timeout 120 compute-sanitizer --tool memcheck $B/vllmc generate -m /tmp/models/tiny.gguf --prompt-ids "$P" --ids --ignore-eos -n 20 2>&1 | grep -E "ERROR SUMMARY"

#!/usr/bin/env bash
# GPU machine: check the CUDA backend against the CPU reference, run it under compute-sanitizer, time the
# mat-vec kernel and the whole decode of synthetic models. Logs under $OUT; a short table printed last.
# Binaries come from .carry/bin.tar.xz (scripts/gpu-carry.sh builds them with `make CUDA=1` on the dev machine and
# copies the shared libraries they need to .carry/lib) when they start there, else are built here. Models are generated here with
# .carry/synth_gguf.py. STAGES (default "ops model dense moe moesan engine gemv sanitize bench") picks what runs: moe runs the
# tiny qwen35moe files carried in .carry/moe (tests/tools/make_tiny_qwen35.py output) through test_cuda_model, moesan
# runs the q4_k_m one under compute-sanitizer. BENCH_MODELS names synth_gguf.py shapes (qwen36-14b-a3b: the MoE body);
# BENCH_ARGS the prompt / generation / repetitions; BENCH_EAGER=0 skips the eager rerun. Stage ab (not in the
# default list) times the decode of each BENCH_MODELS shape with the backend's switches (VLLMC_CUDA_PDL,
# VLLMC_CUDA_FUSE_ADD, VLLMC_CUDA_MM) from the previous kernels to all on, with AB_ARGS (default -p 512 -g 256
# -r 3); VLLMC_CUDA_MM's best value per row class is taken from this run's bench_gemv output when there is one
# (models after the first: the previous kernels and that best only; AB_CFG adds one more VLLMC_CUDA_MM value).
# Stage engine runs test_cuda_engine (the engine on CUDA: 64 requests alone vs together vs eager, bf16 / fp8 KV; then
# without batch invariance, how many requests differ between alone and together)
# on the tiny models (a few seconds) and on the synth_gguf.py shapes in ENGINE_MODELS (default none; ENGINE_ARGS:
# requests and tokens); stage
# ebench runs `vllmc bench --concurrency` (EBENCH_ARGS) on EBENCH_MODELS (default BENCH_MODELS) with the f16 and fp8 KV caches, and
# with EBENCH_VARIANT=1 twice more (f16) with --batch-invariant (the cost of batch invariance), the second with the
# column-split kernels kept under it (VLLMC_CUDA_MMV_INVARIANT=1), with EBENCH_DEC=N
# once more (f16) with the few-row decode kernel for steps of up to N rows (VLLMC_CUDA_DEC).
# Stage epipe (not default) runs the engine with its decode steps waited step by step (VLLMC_ENGINE_PIPELINE=0; the
# default pipelines them where graphs run): test_cuda_engine on the tiny models and ENGINE_MODELS, then `vllmc bench`
# (EPIPE_ARGS) on EPIPE_MODELS (default the first of BENCH_MODELS) pipelined and step by step in turn, EPIPE_REPS times.
# Stage gen runs `vllmc generate` on the tiny qwen35 (and GEN_MODELS files) with graphs, eager and on the CPU, and
# with --profile; stage serve runs scripts/bench-serve.sh (the server with --device cuda under `vllmc bench serve`)
# on SERVE_MODELS (default qwen35-4b) with SERVE_ARGS. Neither is in the default list.
# Stages prefill (test_cuda_prefill), prefillmodel (the tiny qwen35 with a 150-token prompt, with and without the
# prefill paths) and prefillbench (pp512 with its prefill profile; PP_OLD=0 skips the rerun without the prefill paths,
# PP_LONG=N adds a ppN run, PP_SWEEP the GEMM row-threshold sweep) are not in the default list either, nor is stage
# real: a real checkpoint at REAL_MODEL (default /tmp/real/tm.gguf, assembled there from parts carried one call each
# while the machine stays warm): greedy ids on 4 prompts with graphs / eager / CPU, the perplexity of 4 texts on the
# CPU and with the prefill GEMM's activation modes (f16 rows, q8 values, GEMM off), and the batch-1 bench.
# Stage gdnruns (not default) checks and times the GDN's runs side by side in mixed steps (VLLMC_CUDA_GDN_RUNS, on by
# default): test_cuda_prefill, test_cuda_engine with it on, then bench serve and the engine bench off and on in turn.
# Stage mmrrt (not default) checks mm_kernel_mmrs with 2 / 4 16-row tiles a CTA (VLLMC_CUDA_MMR_RT): test_cuda_ops mmr, then
# the engine bench with 1 / 2 / 4 tiles in turn.
# Stage mmqsan (not default): compute-sanitizer memcheck of test_cuda_ops mmr and of test_cuda_engine on the tiny qwen35.
# Stage ssm (not default): the GDN state in bf16 (--mamba-ssm-cache-dtype bfloat16): test_cuda_ops gdn (and memcheck),
# the bench both ways at batch 1 and in the engine.
# Stage mmr128 (not default): decode steps of 65-128 sequences on the several-row kernels (the default since MM_MMR 128):
# test_cuda_ops mmr, test_cuda_engine with 128 requests (and under memcheck), the bench against the f16 GEMM from 65 rows
# (VLLMC_CUDA_MMR=64 VLLMC_CUDA_GEMM_ROWS=32,65, the previous default).
# Stage mmq (not default) checks mm_kernel_mmq: test_cuda_ops mmr, then the engine bench with VLLMC_CUDA_MMQ at each of
# MMQ_ROWS (default "0 16": off, then from 16 rows, the default) in turn. Stage ncu (not default) runs Nsight Compute on
# a few launches (NCU_KERNEL, default mm_kernel_mmq) of the engine bench of the first of BENCH_MODELS: its sections and
# the warps' stall reasons.
# Stage mask (not default) checks and times a same-bits form of the tensor-core mat-vec by its VLLMC_CUDA_MMA bit
# (MASK_ON, MASK_NAME, MASK_REPS: see the stage).
# Stage large (not default): the launches alone at the LM head's shape in every decode weight type.
# Stage colx (not default) checks and times the column-split kernel for the other weight types (COLX_TYPES, COLX_MODELS,
# COLX_REPS, COLX_GEMV=0 skips bench_gemv, COLX_GEMV_VALS the VLLMC_CUDA_COLX values it takes, COLX_ENGINE=1 adds the
# engine bench with 1, 4 and 16 requests in flight off and on).
# Stage lmh (not default) checks and times the LM head's ring of tiles (LMH_ON, LMH_REPS, LMH_MODELS: see the stage).
# Stage types (not default): the F16 / BF16 / IQ4_NL / MXFP4 weights and the Q2_K / Q3_K prefill GEMM on requantized models (see the stage).
# Stage pfnext (not default) checks and times the next round's rows into L2 after the release (PFNEXT_CFGS, PFNEXT_REPS).
# Stage hot (not default) times the decode of HOT_MODELS (default the first of BENCH_MODELS) with the weights-from-cache
# measurement build (EXTRA_BUILDS="hot:-DVLLMC_HOT_W=65536", gemv_q.cu's mv_woff) against the default, HOT_REPS (default 2)
# times in turn, then traces both (as stage trace does): the launch chain's cost with the weight stream
# taken away, kernel by kernel. HOT_VARIANTS ("NAME:VAR=v[,VAR2=w] ...") adds vllmc_hot runs with those variables to
# each turn, e.g. "nq1:VLLMC_HOT_NQ=1 nq2:VLLMC_HOT_NQ=2" (the norm + quantize launches empty, then gone: dense models).
# Stage timeline (not default) runs the -DVLLMC_MV_TIMELINE build (EXTRA_BUILDS="tl:-DVLLMC_MV_TIMELINE") of TIMELINE_MODELS
# (default the first of BENCH_MODELS) and summarizes its per-CTA timeline of the tensor-core mat-vec (scripts/mv_timeline.py).
# Stage trace (not default; TRACE_KEEP=1 also returns the raw kernel records, trace_MODEL.csv.gz) runs a 64-token decode of TRACE_MODELS (default the first of BENCH_MODELS) under Nsight
# Systems or, where there is none, the CUPTI tracer .carry/cupti_trace.so (tools/cupti_trace.c), and charges each
# graph-replayed step's time to its kernels (scripts/trace_steps.py: the cost of a kernel is how far it moves the end
# of the timeline); TRACE_ENV="VAR=v VAR2=w" adds a second trace with those variables. Stage var (not default) times the batch-1 decode of BENCH_MODELS once per VARIANTS entry
# ("name:VAR=v,VAR2=w ..."; a comma before NAME= separates variables, other commas stay in the value; VAR_ARGS,
# default -p 512 -g 256 -r 5): environment A/B runs on one machine; variants with the fused
# norm + quantize are skipped when stage nq found it wrong. Stage binvar
# (not default) does the same for the vllmc_<name> builds gpu-carry.sh's EXTRA_BUILDS put beside vllmc (compile-time
# A/B, e.g. EXTRA_BUILDS="name:-DFLAG"; on BINVAR_MODELS, default BENCH_MODELS).
# Stage nq (not default) runs test_cuda_model on the tiny models with the norm + quantize inside the launch before it
# the MoE mix in the down launch and the attention combine in its split launch (VLLMC_CUDA_FUSE_NQ=63, every part), and
# test_cuda_engine with them. Stage mega (not default) runs bench/bench_mega.cu (the persistent FFN chain against the
# launch chain: bit parity, then us a layer; MEGA_ARGS="reps layers", MEGA_SAN=1 adds a memcheck run on 2 layers).
# Stage mega2 (not default) runs the tiled chain inside the decode (MEGA2_CFGS, default "4 4,pj": ps 4, then with the output projection):
# test_cuda_model on BENCH_MODELS (graph == eager: its bits), then the decode off and on, MEGA2_REPS times in turn;
# MEGA2_SAN=1 adds a memcheck run of a few decode steps with it. Stage moe2 (not default) does the same for the tiled MoE
# experts (VLLMC_CUDA_MOE2=1) on the MoE models of BENCH_MODELS (e.g. BENCH_MODELS="qwen36-14b-a3b"): test_cuda_model
# (graph == eager: its bits), MOE2_SAN=1 memcheck, then the decode off and on, MOE2_REPS times in turn. Stage actpf (not
# default) checks and times the tensor-core mat-vec's later super-blocks' activation prefetched / staged after the wait
# (VLLMC_CUDA_MMA bits 32 / 64; ACTPF_GEMV, ACTPF_CFGS, ACTPF_REPS, ACTPF_MODELS (default BENCH_MODELS), ACTPF_SAN=1 a
# memcheck run). Stage moepre (not default)
# does the same for the MoE down launch routing before its wait (VLLMC_CUDA_MOE_PRE=1; MOEPRE_REPS, MOEPRE_SAN=1).
# Stage presplit (not default) checks and times the decode attention's prologue inside its split launch
# (VLLMC_CUDA_ATTN_PRE_SPLIT=1; PRESPLIT_MODELS, PRESPLIT_REPS: see the stage).
# Stage defer (not default) checks and times the FFN's RMSNorm deferred into the output projection's launch and the gate /
# up mat-vec (VLLMC_CUDA_DEFER_NORM=1; DEFER_MODELS, DEFER_REPS, DEFER_ABL: see the stage).
# Stage mmx (not default) checks and times the tensor-core mat-vec with more rows a CTA in shared memory (VLLMC_CUDA_MMA
# bits 128 / 256; MMX_GEMV, MMX_CFGS, MMX_REPS, MMX_MODELS; MMX_CHECKS=0 skips the checks before the timings).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu-out}
STAGES=${STAGES:-"ops model dense moe moesan engine gemv sanitize bench"}
BENCH_MODELS=${BENCH_MODELS:-"qwen35-4b"}
BENCH_ARGS=${BENCH_ARGS:-"-p 512 -g 256 -r 5"}
BENCH_EAGER=${BENCH_EAGER:-1}
mkdir -p "$OUT"
: >"$OUT/summary.txt"
has() { [[ " $STAGES " == *" $1 "* ]]; }
wait_models() { for i in $(seq 1 240); do [ -f /tmp/models/done ] && break; sleep 1; done; } # the background synth
summary=()
# each line also goes to $OUT/summary.txt as it is made: a call cut off by its time limit still brings back what ran
note() { summary+=("$1"); echo "== $1"; echo "$1" >>"$OUT/summary.txt"; }
# A/B of a kernel switch (stage actpf and others): the 128 greedy ids `generate` gives on model file $1 with the environment
# "$2..." (VAR=value; none: the default), and the decode of model $2 (file $3) with variable $4 at each value of $5, $6
# times in turn (logs $OUT/TAG_MODEL_VALUE_REP.txt, TAG = $1)
greedy_ids() {
    local f=$1; shift
    env "$@" timeout 120 "$BIN/vllmc" generate -m "$f" --prompt-ids "[11,22,33,44,55,66,77,88,99,111,222,333,444,555,666,777]" \
        --ids --ignore-eos -n 128 2>/dev/null
}
decode_ab() {
    local tag=$1 m=$2 f=$3 var=$4 vals=$5 reps=$6 rep v rc
    for rep in $(seq 1 "$reps"); do
        for v in $vals; do
            # shellcheck disable=SC2086
            env "$var=$v" timeout 150 "$BIN/vllmc" bench -m "$f" ${VAR_ARGS:--p 512 -g 256 -r 5} >"$OUT/${tag}_${m}_${v}_$rep.txt" 2>&1; rc=$?
            note "$tag $m $var=$v run $rep rc=$rc: $(grep '^output tok/s' "$OUT/${tag}_${m}_${v}_$rep.txt" | head -1)"
        done
    done
}

# A same-bits switch on model $2 (file $3), tag $1: the 128 greedy ids with $4 at each value of $5 against the default
# (a note each; false if any differ)
ids_same() {
    local tag=$1 m=$2 f=$3 var=$4 vals=$5 ref got r v ok=0
    ref=$(greedy_ids "$f")
    for v in $vals; do
        got=$(greedy_ids "$f" "$var=$v")
        if [ -n "$ref" ] && [ "$ref" = "$got" ]; then r=SAME; else r=DIFF; ok=1; fi
        note "$tag $v $m generate 128 greedy ids against the default: $r"
    done
    return $ok
}
# ... and a 4-step generate under compute-sanitizer memcheck with $4... (VAR=value), where there is one
san_generate() {
    local tag=$1 m=$2 f=$3 rc
    command -v compute-sanitizer >/dev/null || return 0
    env "${@:4}" timeout 240 compute-sanitizer --tool memcheck --error-exitcode 9 "$BIN/vllmc" generate -m "$f" \
        --prompt-ids "[11,22,33,44,55,66,77,88]" --ids --ignore-eos -n 4 >"$OUT/${tag}_san_$m.txt" 2>&1; rc=$?
    note "$tag ${*:4} $m under memcheck (generate, 4 steps) rc=$rc: $(grep -m1 'ERROR SUMMARY' "$OUT/${tag}_san_$m.txt")"
}
# the test_cuda_model run of log $1 (exit status $2) broke what a same-bits switch must keep: it crashed or timed out, or a
# recorded step differs from its eager one (graph == eager n/m with n < m). Its CPU bound alone does not count: the CPU
# oracle now rounds the prefill's matmuls as the f16 GEMM does, but an activation crossing a Q8 rounding boundary still
# moves some seeds' logits by 1e-2 and more (BENCHMARKS "The other weight types"). The switch's values are held to the
# default's by the stage's other checks: test_cuda_ops bit for bit against the default kernels, and the greedy ids of
# the real-shape models.
model_broke() {
    local ge
    ge=$(grep -o 'graph == eager in [0-9]*/[0-9]*' "$1" | head -1 | sed 's/.* //')
    [ -z "$ge" ] && return 0
    [ "${ge%/*}" != "${ge#*/}" ] && return 0
    [ "$2" = 0 ] || grep -q 'max |dlogit|' "$1" || return 0
    grep 'FAIL' "$1" | grep -qv 'max |dlogit|' && return 0
    return 1
}
# test_cuda_model on the tiny qwen35 with the environment $3... (tag $1, log $OUT/$1_model_tiny_$2.txt, a note); false
# where model_broke finds it broken
tiny_switch() {
    local tag=$1 name=$2 rc log="$OUT/$1_model_tiny_$2.txt"; shift 2
    env "$@" timeout 150 "$BIN/test_cuda_model" /tmp/models/qwen35-tiny.gguf 40 24 >"$log" 2>&1; rc=$?
    note "$tag $name test_cuda_model tiny rc=$rc: $(grep 'worst' "$log" | head -1 | cut -c1-120)$(grep -m1 FAIL "$log" | cut -c1-200)"
    ! model_broke "$log" $rc
}
# bench_gemv l2 5 with the environment $2... (tag $1): its "cold" rows as notes
gemv_l2() {
    local tag=$1 rc log="$OUT/$1_gemv_$(echo "${*:2}" | tr -c 'A-Za-z0-9_\n' _).txt"; shift
    env "$@" timeout 120 "$BIN/bench_gemv" l2 5 >"$log" 2>&1; rc=$?
    note "$tag bench_gemv l2 $* rc=$rc"
    while read -r l; do note "  $l"; done < <(grep 'cold\|(OFF)\|measured read' "$log" | sed 's/  */ /g')
}
# "VAR=v,VAR2=w" -> "VAR=v VAR2=w": a comma before NAME= separates variables, others stay in the value (VLLMC_CUDA_LMH=3,65536)
variant_envs() { echo "$1" | sed 's/,\([A-Z_][A-Z0-9_]*=\)/ \1/g'; }
# trace_run BINARY MODEL_FILE NAME [VAR=v ...]: a 64-token decode of MODEL_FILE by BINARY (with those variables) under
# Nsight Systems or, where there is none, the CUPTI tracer .carry/cupti_trace.so (tools/cupti_trace.c), its graph-replayed
# steps charged to their kernels by scripts/trace_steps.py into $OUT/trace_NAME.txt (stages trace and hot); the
# binary's exit status
trace_run() {
    local bin=$1 f=$2 t=$3 csv rc nsys
    shift 3
    rm -f /tmp/trace_$t.*
    nsys=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys /usr/local/cuda/nsight-systems*/bin/nsys 2>/dev/null | head -1)
    # shellcheck disable=SC2086
    if [ -n "$nsys" ]; then
        env "$@" X_TRACE=1 timeout 200 "$nsys" profile --cuda-graph-trace=node -t cuda -o /tmp/trace_$t --force-overwrite true \
            "$bin" bench -m "$f" -p 512 -g 64 -r 1 ${TRACE_ARGS:-} >"$OUT/trace_${t}_run.txt" 2>&1; rc=$?
        timeout 200 "$nsys" stats --report cuda_gpu_trace --format csv -o /tmp/trace_$t /tmp/trace_$t.nsys-rep >>"$OUT/trace_${t}_run.txt" 2>&1
        csv=/tmp/trace_${t}_cuda_gpu_trace.csv
    else
        csv=/tmp/trace_$t.csv
        env "$@" X_TRACE=1 CUDA_INJECTION64_PATH=$PWD/.carry/cupti_trace.so VLLMC_TRACE_OUT=$csv timeout 200 "$bin" bench -m "$f" \
            -p 512 -g 64 -r 1 ${TRACE_ARGS:-} >"$OUT/trace_${t}_run.txt" 2>&1; rc=$?
    fi
    python3 scripts/trace_steps.py "$csv" >"$OUT/trace_$t.txt" 2>&1
    [ "${TRACE_KEEP:-0}" = 1 ] && gzip -c "$csv" >"$OUT/trace_$t.csv.gz" # the raw records, for a look here
    return $rc
}

nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,memory.total,driver_version --format=csv | tee "$OUT/gpu.txt"
# models in the background while the tests run
# a warm machine keeps /tmp from the last call: KEEP_MODELS=1 reuses the models a previous call finished
[ "${KEEP_MODELS:-0}" = 1 ] || rm -rf /tmp/models
mkdir -p /tmp/models; rm -f /tmp/models/done /tmp/models/tiny.done
synth() { [ -f "/tmp/models/$1.ok" ] || { python3 .carry/synth_gguf.py "$1" "/tmp/models/$1.gguf" >"/tmp/models/$1.log" 2>&1 &&
    touch "/tmp/models/$1.ok"; }; }
( synth qwen35-tiny; touch /tmp/models/tiny.done
  for m in $BENCH_MODELS $(has serve && echo "${SERVE_MODELS:-qwen35-4b}") $(has hot && echo "${HOT_MODELS:-}"); do synth "$m"; done
  touch /tmp/models/done ) &

BIN=.carry/bin
if [ -f .carry/bin.tar.xz ]; then rm -rf "$BIN"; mkdir -p "$BIN"; tar xJf .carry/bin.tar.xz -C "$BIN"; fi
export LD_LIBRARY_PATH=$PWD/.carry/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
if ! "$BIN/vllmc" --version >"$OUT/bin.txt" 2>&1; then BIN=""; fi
if [ -z "$BIN" ]; then
    echo "carried binaries do not run here: building" | tee "$OUT/build.log"
    BIN=build/gpu
    make -j16 CUDA=1 BUILD=build/gpu all cuda-tests >>"$OUT/build.log" 2>&1 || { note "build FAILED (see build.log)"; tail -30 "$OUT/build.log"; }
    cp build/gpu/tests/cuda/test_cuda_* build/gpu/ 2>/dev/null
    nvcc -O3 -std=c++17 -gencode=arch=compute_90,code=sm_90 -Iinclude -Isrc -o build/gpu/bench_gemv bench/bench_gemv.cu \
        build/gpu/libvllmc.a -lpcre2-8 -lcjson -lm -lpthread -lcublas -lcublasLt >>"$OUT/build.log" 2>&1
    nvcc -O3 -std=c++17 -gencode=arch=compute_90,code=sm_90 -Iinclude -Isrc -o build/gpu/bench_mega bench/bench_mega.cu \
        build/gpu/libvllmc.a -lpcre2-8 -lcjson -lm -lpthread -lcublas -lcublasLt >>"$OUT/build.log" 2>&1
fi
echo "binaries: $BIN"

if has ops; then
    timeout 150 "$BIN/test_cuda_ops" >"$OUT/test_cuda_ops.txt" 2>&1; rc=$? # ~40 s; a hang must not eat the call
    tail -25 "$OUT/test_cuda_ops.txt"
    note "test_cuda_ops rc=$rc: $(tail -1 "$OUT/test_cuda_ops.txt")"
    # a failure names its check and the seed that replays it (the log itself may not come back from the machine)
    [ $rc = 0 ] || note "  $(grep -m1 'seed' "$OUT/test_cuda_ops.txt"); $(grep -m3 '^FAIL' "$OUT/test_cuda_ops.txt" | cut -c1-300 | tr '\n' ' ')"
fi

if has prefill; then # the prefill paths: f16 dequant, GEMM matmuls, chunked GDN vs references
    timeout 200 "$BIN/test_cuda_prefill" >"$OUT/test_cuda_prefill.txt" 2>&1; rc=$?
    grep -v '^matmul' "$OUT/test_cuda_prefill.txt" | tail -12
    note "test_cuda_prefill rc=$rc: $(tail -1 "$OUT/test_cuda_prefill.txt")"
fi

for i in $(seq 1 120); do [ -f /tmp/models/tiny.done ] && break; sleep 1; done
if has prefillmodel; then # tiny qwen35 with a prompt long enough for the GEMM and the chunked GDN, then without them
    timeout 120 "$BIN/test_cuda_model" /tmp/models/qwen35-tiny.gguf 150 8 >"$OUT/test_cuda_model_p150.txt" 2>&1; rc=$?
    note "test_cuda_model prompt 150 rc=$rc: $(grep 'worst' "$OUT/test_cuda_model_p150.txt" | head -1 | sed 's/.*steps, //' | cut -c1-120)$(grep -m1 FAIL "$OUT/test_cuda_model_p150.txt")"
    VLLMC_CUDA_GEMM_ROWS=0 VLLMC_CUDA_GDN_CHUNKED=0 timeout 120 "$BIN/test_cuda_model" /tmp/models/qwen35-tiny.gguf 150 8 \
        >/tmp/model_p150_old.txt 2>&1; rc=$?
    cat /tmp/model_p150_old.txt >>"$OUT/test_cuda_model_p150.txt"
    note "same, prefill paths off rc=$rc: $(grep 'worst' /tmp/model_p150_old.txt | head -1 | sed 's/.*steps, //' | cut -c1-120)"
    VLLMC_CUDA_GEMM_ACT=q8 timeout 120 "$BIN/test_cuda_model" /tmp/models/qwen35-tiny.gguf 150 8 >/tmp/model_p150_q8.txt 2>&1; rc=$?
    cat /tmp/model_p150_q8.txt >>"$OUT/test_cuda_model_p150.txt"
    note "same, GEMM on the quantized activations (VLLMC_CUDA_GEMM_ACT=q8) rc=$rc: $(grep 'worst' /tmp/model_p150_q8.txt | head -1 | sed 's/.*steps, //' | cut -c1-120)"
fi
if has model; then
    timeout 150 "$BIN/test_cuda_model" /tmp/models/qwen35-tiny.gguf 40 24 >"$OUT/test_cuda_model.txt" 2>&1; rc=$?
    tail -12 "$OUT/test_cuda_model.txt"
    note "test_cuda_model rc=$rc: $(grep 'worst' "$OUT/test_cuda_model.txt" | head -1 | cut -c1-160)"
    # the ill-conditioned seed (BENCHMARKS "A failing seed of test_cuda_model"), against the f16 oracle
    for ga in f32; do
        VLLMC_CUDA_GEMM_ACT=$ga VLLMC_TEST_SEED=4768398220125797430 timeout 60 "$BIN/test_cuda_model" /tmp/models/qwen35-tiny.gguf 40 24 \
            >"$OUT/test_cuda_model_seed_$ga.txt" 2>&1; rc=$?
        note "  seed 4768398220125797430, GEMM act $ga rc=$rc: $(grep 'worst' "$OUT/test_cuda_model_seed_$ga.txt" | head -1 | sed 's/.*steps, //' | cut -c1-110)$(grep -m1 FAIL "$OUT/test_cuda_model_seed_$ga.txt" | cut -c1-120)"
    done
fi

if has nq; then # the norm + quantize inside the launch before it (off by default until measured): test_cuda_ops' check,
    # then graph == eager and CPU parity on the tiny models with it on
    nq_ok=$(grep -c "^norm + quantize in the matmul launch .* 0 of" "$OUT/test_cuda_ops.txt" 2>/dev/null)
    note "nq: test_cuda_ops clean configurations ${nq_ok:-0} of 4"
    [ "${nq_ok:-0}" = 4 ] || NQ_BAD=1
    # NQ_CFGS: the masks to check (default every producer-side part); NQ_MODELS:
    # more files, e.g. /tmp/models/qwen35-4b.gguf
    for cfg in ${NQ_CFGS:-VLLMC_CUDA_FUSE_NQ=63}; do
        for f in /tmp/models/qwen35-tiny.gguf .carry/moe/qwen35moe-tiny-q4_k_m.gguf .carry/models/*.gguf ${NQ_MODELS:-}; do
            [ -f "$f" ] || continue
            n=$(basename "$f" .gguf); tag=$(echo "$cfg" | tr -c 'A-Za-z0-9_\n' _)
            env $(echo "$cfg" | sed 's/,VLLMC/ VLLMC/g') timeout 60 "$BIN/test_cuda_model" "$f" 30 16 >"$OUT/nq_${n}_$tag.txt" 2>&1; rc=$?
            [ $rc = 0 ] || NQ_BAD=1
            note "nq $cfg $n rc=$rc: $(grep 'worst' "$OUT/nq_${n}_$tag.txt" | head -1 | sed 's/.*steps, //' | cut -c1-100)$(grep -m1 FAIL "$OUT/nq_${n}_$tag.txt")$(grep -m1 'recorded into the launch' "$OUT/nq_${n}_$tag.txt" | sed 's/.*before them/; fused/')"
        done
    done
    # the engine with it (alone = together = eager), the column-split kernels kept under batch invariance so it is taken
    for f in /tmp/models/qwen35-tiny.gguf .carry/moe/*q4_k_m*.gguf; do
        [ -f "$f" ] || continue
        n=$(basename "$f" .gguf)
        VLLMC_CUDA_FUSE_NQ=63 VLLMC_CUDA_MMV_INVARIANT=1 timeout 120 "$BIN/test_cuda_engine" "$f" 64 12 >"$OUT/nq_engine_$n.txt" 2>&1; rc=$?
        note "nq test_cuda_engine $n rc=$rc: $(grep -m1 'together' "$OUT/nq_engine_$n.txt" | sed 's/test_cuda_engine: //' | cut -c1-120)$(grep -m1 FAIL "$OUT/nq_engine_$n.txt")"
        [ $rc = 0 ] || NQ_BAD=1
    done
fi

if has dense; then # dense llama / qwen2 / qwen3 (tests/tools/make_tiny_models.py output carried in .carry/models)
    for f in .carry/models/*.gguf; do
        [ -f "$f" ] || continue
        n=$(basename "$f" .gguf)
        timeout 120 "$BIN/test_cuda_model" "$f" 30 16 >"$OUT/model_$n.txt" 2>&1; rc=$?
        note "test_cuda_model $n rc=$rc: $(grep 'worst' "$OUT/model_$n.txt" | head -1 | sed 's/.*steps, //' | cut -c1-120)$(grep -m1 FAIL "$OUT/model_$n.txt")"
    done
fi

if has moe; then # tiny qwen35moe (routed + shared experts): CPU vs CUDA graphs vs CUDA eager
    for f in .carry/moe/*.gguf; do
        [ -f "$f" ] || continue
        n=$(basename "$f" .gguf)
        timeout 120 "$BIN/test_cuda_model" "$f" 24 12 >"$OUT/model_$n.txt" 2>&1; rc=$?
        tail -4 "$OUT/model_$n.txt"
        note "test_cuda_model $n rc=$rc: $(grep 'worst' "$OUT/model_$n.txt" | head -1 | sed 's/.*steps, //' | cut -c1-120)$(grep -m1 FAIL "$OUT/model_$n.txt")"
        # a 100-row prompt (the MoE grouped by expert where the types allow, else the general path), with the f16 GEMM
        # and chunked GDN prefill paths off so the logit error is the quantized kernels'; then the same, MoE general path
        for g in 1 0; do
            VLLMC_CUDA_MOE_GROUP=$g VLLMC_CUDA_GEMM_ROWS=0 VLLMC_CUDA_GDN_CHUNKED=0 VLLMC_CUDA_ATTN_PREFILL=0 timeout 120 \
                "$BIN/test_cuda_model" "$f" 100 6 >"$OUT/model_${n}_p100_g$g.txt" 2>&1; rc=$?
            note "  prompt 100, prefill GEMM off, MoE grouped $g rc=$rc: $(grep 'worst' "$OUT/model_${n}_p100_g$g.txt" | head -1 | sed 's/.*steps, //' | cut -c1-100); $(grep -o 'grouped by expert [0-9]*' "$OUT/model_${n}_p100_g$g.txt")$(grep -m1 FAIL "$OUT/model_${n}_p100_g$g.txt")"
        done
    done
fi

if has moesan; then
    f=.carry/moe/qwen35moe-tiny-q4_k_m.gguf
    if command -v compute-sanitizer >/dev/null && [ -f "$f" ]; then
        timeout 200 compute-sanitizer --tool memcheck --leak-check full --error-exitcode 9 "$BIN/test_cuda_model" \
            "$f" 12 4 >"$OUT/sanitizer_moe.txt" 2>&1; rc=$?
        tail -4 "$OUT/sanitizer_moe.txt"
        note "memcheck (tiny qwen35moe q4_k_m: prefill 12 + decode 4, graph and eager) rc=$rc: $(grep -c 'Invalid\|ERROR SUMMARY: [1-9]' "$OUT/sanitizer_moe.txt") error lines; $(grep 'ERROR SUMMARY' "$OUT/sanitizer_moe.txt" | head -1)"
    else
        note "moesan: compute-sanitizer or $f missing"
    fi
fi

if has engine; then # the engine on CUDA: batch invariance (alone = together = eager), KV dtypes
    for f in /tmp/models/qwen35-tiny.gguf .carry/models/*q8_0*.gguf .carry/moe/*q4_k_m*.gguf; do
        [ -f "$f" ] || continue
        n=$(basename "$f" .gguf)
        timeout 120 "$BIN/test_cuda_engine" "$f" 64 12 --no-invariant >"$OUT/engine_$n.txt" 2>&1; rc=$?
        note "test_cuda_engine $n rc=$rc: $(grep -m1 'together' "$OUT/engine_$n.txt" | sed 's/test_cuda_engine: //' | cut -c1-150)$(grep -m1 FAIL "$OUT/engine_$n.txt")"
        # without batch invariance (the several-row kernels' own sums): how many requests differ from alone
        # and graphs = eager there (the residual add in the several-row kernel's epilogue is a graph-only fusion)
        note "  $(grep 'batch_invariant = 0' "$OUT/engine_$n.txt" | sed 's/test_cuda_engine: //' | tr '\n' ' ')"
        # the column-split kernels under batch invariance (VLLMC_CUDA_MMV_INVARIANT=1, not yet the default)
        VLLMC_CUDA_MMV_INVARIANT=1 timeout 120 "$BIN/test_cuda_engine" "$f" 64 12 >"$OUT/engine_${n}_colsinv.txt" 2>&1; rc=$?
        note "  same, column-split kernels invariant rc=$rc: $(grep -m1 'together' "$OUT/engine_${n}_colsinv.txt" | sed 's/test_cuda_engine: //' | cut -c1-150)$(grep -m1 FAIL "$OUT/engine_${n}_colsinv.txt")"
    done
    VLLMC_CUDA_MMV_INVARIANT=1 timeout 300 "$BIN/test_cuda_ops" >"$OUT/test_cuda_ops_colsinv.txt" 2>&1; rc=$?
    note "test_cuda_ops with VLLMC_CUDA_MMV_INVARIANT=1 rc=$rc: $(tail -1 "$OUT/test_cuda_ops_colsinv.txt")"
fi

if has epipe; then # the engine's decode steps waited step by step (VLLMC_ENGINE_PIPELINE=0): alone = together = eager on
    # the tiny models and ENGINE_MODELS, then the engine bench pipelined against step by step, in turn
    wait_models
    for f in /tmp/models/qwen35-tiny.gguf .carry/models/*q8_0*.gguf .carry/moe/*q4_k_m*.gguf $(for m in ${ENGINE_MODELS:-}; do echo "/tmp/models/$m.gguf"; done); do
        [ -f "$f" ] || continue
        n=$(basename "$f" .gguf)
        # a synthetic model of several GB: 14 engines are created (~10 s each for qwen36-14b-a3b)
        to=150; case $f in /tmp/models/*) to=300 ;; esac
        VLLMC_ENGINE_PIPELINE=0 timeout $to "$BIN/test_cuda_engine" "$f" 64 12 --no-invariant >"$OUT/epipe_$n.txt" 2>&1; rc=$?
        note "epipe test_cuda_engine $n rc=$rc: $(grep -m1 'together' "$OUT/epipe_$n.txt" | sed 's/test_cuda_engine: //' | cut -c1-150)$(grep -m1 FAIL "$OUT/epipe_$n.txt")"
        note "  $(grep 'batch_invariant = 0\|sampling' "$OUT/epipe_$n.txt" | sed 's/test_cuda_engine: //' | cut -c1-200 | tr '\n' ' ')"
    done
    for m in ${EPIPE_MODELS:-${BENCH_MODELS%% *}}; do
        f=/tmp/models/$m.gguf
        [ -s "$f" ] || { note "epipe $m: no model"; continue; }
        for rep in $(seq 1 "${EPIPE_REPS:-2}"); do
            for v in 1 0; do
                # shellcheck disable=SC2086
                VLLMC_ENGINE_PIPELINE=$v timeout 200 "$BIN/vllmc" bench -m "$f" ${EPIPE_ARGS:---concurrency 1,4,16,64 -p 128 -g 128 -r 2} \
                    >"$OUT/epipe_${m}_${v}_$rep.txt" 2>&1; rc=$?
                note "epipe $m pipelined=$v run $rep rc=$rc: $(grep '^| [0-9]' "$OUT/epipe_${m}_${v}_$rep.txt" | awk -F'|' '{printf "N=%s %s tok/s ITL %s ms;", $2, $4, $7}')"
            done
        done
    done
fi

if has gemv; then
    timeout 300 "$BIN/bench_gemv" 20 >"$OUT/bench_gemv.txt" 2>&1
    cat "$OUT/bench_gemv.txt"
fi

if has mega; then # the persistent dataflow FFN chain against the launch chain (bench/bench_mega.cu); MEGA_ARGS="reps layers"
    # two layers once first: a hang there costs a minute, not the call
    timeout 60 "$BIN/bench_mega" 1 2 >"$OUT/bench_mega2.txt" 2>&1; rc=$?
    note "mega (2 layers) rc=$rc: $(grep -c 'same bits' "$OUT/bench_mega2.txt") same, $(grep -c DIFFERS "$OUT/bench_mega2.txt") differ"
    [ $rc = 0 ] && { timeout 240 "$BIN/bench_mega" ${MEGA_ARGS:-7 32} >"$OUT/bench_mega.txt" 2>&1; rc=$?; }
    cat "$OUT/bench_mega.txt" "$OUT/bench_mega2.txt"
    note "mega rc=$rc: $(grep -m1 '^launch chain' "$OUT/bench_mega.txt" | cut -c1-100)"
    while read -r line; do note "  ${line:0:170}"; done < <(grep '^persistent\|^tiles\|^with\|^Q6_K\|^device packer' "$OUT/bench_mega.txt")
    if [ "${MEGA_SAN:-0}" = 1 ] && command -v compute-sanitizer >/dev/null; then
        timeout 200 compute-sanitizer --tool memcheck --error-exitcode 9 "$BIN/bench_mega" 1 2 >"$OUT/mega_san.txt" 2>&1; rc=$?
        note "mega under memcheck rc=$rc: $(grep -m1 'ERROR SUMMARY' "$OUT/mega_san.txt")"
    fi
fi

if has sanitize; then
    if command -v compute-sanitizer >/dev/null; then
        timeout 300 compute-sanitizer --tool memcheck --leak-check full --error-exitcode 9 "$BIN/test_cuda_model" \
            /tmp/models/qwen35-tiny.gguf 20 6 >"$OUT/sanitizer.txt" 2>&1; rc=$?
        tail -6 "$OUT/sanitizer.txt"
        note "memcheck (tiny qwen35: prefill 20 + decode 6, graph and eager) rc=$rc: $(grep -c 'Invalid\|ERROR SUMMARY: [1-9]' "$OUT/sanitizer.txt") error lines; $(grep 'ERROR SUMMARY' "$OUT/sanitizer.txt" | head -1)"
    else
        note "compute-sanitizer not found"
    fi
fi

if has ssm; then # the Gated DeltaNet state in bf16 (--mamba-ssm-cache-dtype bfloat16): test_cuda_ops gdn (f32 and bf16
    # state against the CPU backend, the bf16 run with a 40-row prefill on the chunked kernels), the same under memcheck,
    # then the first of BENCH_MODELS both ways: batch 1 (SSM_ARGS1) and the engine (SSM_ARGS)
    timeout 200 "$BIN/test_cuda_ops" gdn >"$OUT/ssm_ops.txt" 2>&1; rc=$?
    note "ssm test_cuda_ops gdn rc=$rc: $(tail -1 "$OUT/ssm_ops.txt") $(grep -m2 '^FAIL' "$OUT/ssm_ops.txt" | cut -c1-200 | tr '\n' ' ')"
    while read -r line; do note "  ${line:0:170}"; done < <(grep '^gdn' "$OUT/ssm_ops.txt")
    if command -v compute-sanitizer >/dev/null; then
        timeout 300 compute-sanitizer --tool memcheck --error-exitcode 9 "$BIN/test_cuda_ops" gdn >"$OUT/ssm_san.txt" 2>&1; rc=$?
        note "ssm memcheck rc=$rc: $(grep 'ERROR SUMMARY' "$OUT/ssm_san.txt" | head -1) $(grep -m3 'FAIL\|seed' "$OUT/ssm_san.txt" | cut -c1-220 | tr '\n' ' ')"
    fi
    for r in $(seq 1 "${SSM_OPS_REPS:-0}"); do # fresh seeds
        timeout 100 "$BIN/test_cuda_ops" gdn >"$OUT/ssm_ops_$r.txt" 2>&1; rc=$?
        note "ssm test_cuda_ops gdn run $r rc=$rc: $(tail -1 "$OUT/ssm_ops_$r.txt") $(grep -m3 'FAIL\|seed' "$OUT/ssm_ops_$r.txt" | cut -c1-220 | tr '\n' ' ')"
    done
    wait_models
    m=${BENCH_MODELS%% *}; f=/tmp/models/$m.gguf
    if [ -s "$f" ] && [ "${SSM_BENCH:-1}" = 1 ]; then
        for r in 1 2; do
            for d in float32 bfloat16; do
                timeout 150 "$BIN/vllmc" bench -m "$f" --mamba-ssm-cache-dtype $d ${SSM_ARGS1:--p 512 -g 256 -r 5} >"$OUT/ssm_b1_${d}_$r.txt" 2>&1; rc=$?
                note "ssm bench $m batch 1 $d rc=$rc: $(grep -m1 '^output tok/s' "$OUT/ssm_b1_${d}_$r.txt")"
            done
        done
        for v in float32:-1 float32:2 bfloat16:-1 bfloat16:1; do # the state's type : the rule kernel's rows a thread
            d=${v%%:*}; r=${v#*:}
            VLLMC_CUDA_GDN_R=$r timeout 200 "$BIN/vllmc" bench -m "$f" --mamba-ssm-cache-dtype $d ${SSM_ARGS:---concurrency 16,64,128 -p 128 -g 64 -r 1} \
                >"$OUT/ssm_eng_${d}_$r.txt" 2>&1; rc=$?
            note "ssm bench $m engine $d rows $r rc=$rc: $(grep '^| [0-9]' "$OUT/ssm_eng_${d}_$r.txt" | tr '\n' ' ')"
        done
    fi
fi

if has mmr128; then # decode steps of 65-128 sequences on the several-row kernels (the default: MM_MMR 128, the decode GEMM from
    # 129 rows): test_cuda_ops mmr (96 / 128 rows), test_cuda_engine with 128 requests on the tiny
    # models (alone = together = eager), the same under memcheck, then the engine bench of the first of BENCH_MODELS
    # against the previous default, the f16 GEMM from 65 rows (MMR128_ARGS)
    timeout 200 "$BIN/test_cuda_ops" mmr >"$OUT/mmr128_ops.txt" 2>&1; rc=$?
    note "mmr128 test_cuda_ops mmr rc=$rc: $(tail -1 "$OUT/mmr128_ops.txt") $(grep -m2 '^FAIL' "$OUT/mmr128_ops.txt" | cut -c1-200 | tr '\n' ' ')"
    for f in /tmp/models/qwen35-tiny.gguf .carry/moe/qwen35moe-tiny-q4_k_m.gguf; do
        [ -s "$f" ] || continue
        n=$(basename "$f" .gguf)
        timeout 200 "$BIN/test_cuda_engine" "$f" 128 12 --no-invariant \
            >"$OUT/mmr128_engine_$n.txt" 2>&1; rc=$?
        note "mmr128 test_cuda_engine $n 128 requests rc=$rc: $(grep -m1 'together = alone' "$OUT/mmr128_engine_$n.txt")"
    done
    if command -v compute-sanitizer >/dev/null; then
        timeout 300 compute-sanitizer --tool memcheck --error-exitcode 9 \
            "$BIN/test_cuda_engine" /tmp/models/qwen35-tiny.gguf 128 12 --no-invariant >"$OUT/mmr128_san.txt" 2>&1; rc=$?
        note "mmr128 memcheck rc=$rc: $(grep 'ERROR SUMMARY' "$OUT/mmr128_san.txt" | head -1)"
    fi
    wait_models
    m=${BENCH_MODELS%% *}; f=/tmp/models/$m.gguf
    if [ -s "$f" ]; then
        for v in "VLLMC_CUDA_MMR=64 VLLMC_CUDA_GEMM_ROWS=32,65" ""; do
            # shellcheck disable=SC2086
            env $v timeout 200 "$BIN/vllmc" bench -m "$f" ${MMR128_ARGS:---concurrency 64,96,128 -p 128 -g 64 -r 1} \
                >"$OUT/mmr128_bench_${v:+gemm}.txt" 2>&1; rc=$?
            note "mmr128 bench $m ${v:-default} rc=$rc: $(grep '^| [0-9]' "$OUT/mmr128_bench_${v:+gemm}.txt" | tr '\n' ' ')"
        done
    fi
fi

if has mmqsan; then # compute-sanitizer memcheck of mm_kernel_mmq: test_cuda_ops mmr (every instance, split, runs) and the
    # engine on the tiny qwen35 (64 requests: several-row steps of 16-64 rows take it)
    if command -v compute-sanitizer >/dev/null; then
        timeout 400 compute-sanitizer --tool memcheck --error-exitcode 9 "$BIN/test_cuda_ops" mmr >"$OUT/mmqsan_ops.txt" 2>&1; rc=$?
        note "memcheck test_cuda_ops mmr rc=$rc: $(grep -c 'Invalid\|ERROR SUMMARY: [1-9]' "$OUT/mmqsan_ops.txt") error lines; $(grep 'ERROR SUMMARY' "$OUT/mmqsan_ops.txt" | head -1); $(grep 'checks passed' "$OUT/mmqsan_ops.txt" | tail -1)"
        timeout 300 compute-sanitizer --tool memcheck --error-exitcode 9 "$BIN/test_cuda_engine" /tmp/models/qwen35-tiny.gguf 64 12 --no-invariant \
            >"$OUT/mmqsan_engine.txt" 2>&1; rc=$?
        note "memcheck test_cuda_engine tiny qwen35 rc=$rc: $(grep -c 'Invalid\|ERROR SUMMARY: [1-9]' "$OUT/mmqsan_engine.txt") error lines; $(grep 'ERROR SUMMARY' "$OUT/mmqsan_engine.txt" | head -1); $(grep -m1 'together = alone' "$OUT/mmqsan_engine.txt")"
    else
        note "compute-sanitizer not found"
    fi
fi

if has bench; then
    wait_models
    for m in $BENCH_MODELS; do
        f=/tmp/models/$m.gguf
        [ -s "$f" ] || { note "$m: model not generated ($(tail -2 /tmp/models/$m.log))"; continue; }
        # shellcheck disable=SC2086
        timeout 240 "$BIN/vllmc" bench -m "$f" $BENCH_ARGS --profile >"$OUT/bench_$m.txt" 2>&1; rc=$?
        cat "$OUT/bench_$m.txt"
        note "$m graphs rc=$rc: $(grep '^output tok/s' "$OUT/bench_$m.txt" | head -1)"
        note "$m: $(grep '^weights / TPOT' "$OUT/bench_$m.txt" | head -1)"
        if [ "$BENCH_EAGER" = 1 ]; then
            # shellcheck disable=SC2086
            timeout 120 "$BIN/vllmc" bench -m "$f" $BENCH_ARGS --enforce-eager >"$OUT/bench_${m}_eager.txt" 2>&1; rc=$?
            note "$m eager rc=$rc: $(grep '^output tok/s' "$OUT/bench_${m}_eager.txt" | head -1)"
        fi
    done
fi

if { has engine && [ -n "${ENGINE_MODELS:-}" ]; } || has ebench; then
    wait_models
fi
if has engine; then # batch invariance on the real shapes (tile order vs row order matters at 2,560 columns)
    for m in ${ENGINE_MODELS:-}; do
        f=/tmp/models/$m.gguf
        [ -s "$f" ] || continue
        # shellcheck disable=SC2086
        timeout 300 "$BIN/test_cuda_engine" "$f" ${ENGINE_ARGS:-64 8} --no-invariant >"$OUT/engine_$m.txt" 2>&1; rc=$?
        cat "$OUT/engine_$m.txt" | tail -8
        note "test_cuda_engine $m rc=$rc: $(grep -m1 'together' "$OUT/engine_$m.txt" | sed 's/test_cuda_engine: //' | cut -c1-150)$(grep -m1 FAIL "$OUT/engine_$m.txt")"
        note "$m: $(grep 'batch_invariant = 0' "$OUT/engine_$m.txt" | sed 's/test_cuda_engine: //' | tr '\n' ' ')"
    done
fi
if has ebench; then # engine throughput: N requests in flight
    for m in ${EBENCH_MODELS:-$BENCH_MODELS}; do
        f=/tmp/models/$m.gguf
        [ -s "$f" ] || continue
        runs="${EBENCH_KV:-f16 fp8}" # EBENCH_KV: the KV dtypes to run
        [ "${EBENCH_VARIANT:-0}" = 1 ] && runs="$runs variant colsinv"
        [ -n "${EBENCH_DEC:-}" ] && runs="$runs dec"
        for kvd in $runs; do
            extra="--kv-cache-dtype $kvd"; dec=0
            [ "$kvd" = variant ] && extra="--kv-cache-dtype f16 --batch-invariant"
            [ "$kvd" = colsinv ] && extra="--kv-cache-dtype f16 --batch-invariant" # + VLLMC_CUDA_MMV_INVARIANT=1 below
            [ "$kvd" = dec ] && { extra="--kv-cache-dtype f16"; dec=$EBENCH_DEC; } # the few-row decode kernel up to EBENCH_DEC rows
            # shellcheck disable=SC2086
            VLLMC_CUDA_MMV_INVARIANT=$([ "$kvd" = colsinv ] && echo 1 || echo 0) VLLMC_CUDA_DEC=$dec timeout 200 "$BIN/vllmc" bench -m "$f" $extra ${EBENCH_ARGS:---concurrency 1,4,16,64 -p 128 -g 128 -r 2} \
                >"$OUT/ebench_${m}_$kvd.txt" 2>&1; rc=$?
            grep -v '^vllmc info' "$OUT/ebench_${m}_$kvd.txt"
            note "ebench $m $kvd rc=$rc: $(grep '^| [0-9]' "$OUT/ebench_${m}_$kvd.txt" | awk -F'|' '{printf "N=%s %s tok/s ITL %s ms;", $2, $4, $7}')"
        done
    done
fi

if has gen; then # `vllmc generate` on the GPU: greedy ids with graphs, eager and on the CPU; the --profile tables
    for i in $(seq 1 240); do [ -f /tmp/models/tiny.done ] && break; sleep 1; done
    for f in /tmp/models/qwen35-tiny.gguf ${GEN_MODELS:-}; do
        [ -s "$f" ] || continue
        m=$(basename "$f" .gguf)
        args=(-m "$f" --prompt-ids "[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]" -n 48 --ignore-eos --ids)
        for d in cuda eager cpu; do
            dev=(--device "$d"); [ "$d" = eager ] && dev=(--device cuda --enforce-eager)
            timeout 120 "$BIN/vllmc" generate "${args[@]}" "${dev[@]}" >"$OUT/gen_${m}_$d.txt" 2>"$OUT/gen_${m}_$d.err"
            echo "rc=$?" >>"$OUT/gen_${m}_$d.err"
        done
        same() { cmp -s "$OUT/gen_${m}_$1.txt" "$OUT/gen_${m}_$2.txt" && echo same || echo DIFFERENT; }
        note "generate $m: graphs vs eager $(same cuda eager), graphs vs cpu $(same cuda cpu); $(grep -h '^generation' "$OUT/gen_${m}_cuda.err")"
        timeout 120 "$BIN/vllmc" generate "${args[@]}" --device cuda --profile >/dev/null 2>"$OUT/gen_${m}_profile.txt"; rc=$?
        sed -n '/profile of the decode/,/GPU busy/p' "$OUT/gen_${m}_profile.txt"
        note "generate $m --profile rc=$rc: $(grep -c '^[a-z_0-9]* *[0-9.]* *[0-9.]* *[0-9.]*%' "$OUT/gen_${m}_profile.txt") table rows; $(grep 'ms/token' "$OUT/gen_${m}_profile.txt")"
    done
fi

if has serve; then # the OpenAI server on the GPU under `vllmc bench serve` (SERVE_MODELS, SERVE_ARGS)
    wait_models
    for m in ${SERVE_MODELS:-qwen35-4b}; do
        f=/tmp/models/$m.gguf
        [ -s "$f" ] || { note "serve $m: model not generated"; continue; }
        # shellcheck disable=SC2086
        SERVE_LOG="$OUT/serve_${m}_server.log" timeout 400 bash scripts/bench-serve.sh "$BIN" "$f" \
            ${SERVE_ARGS:---concurrency 1,4,16,64 --input-len 512 --output-len 128 --id-max 150000} --json "$OUT/serve_$m.json" \
            -- --device cuda --max-num-seqs 64 >"$OUT/serve_$m.txt" 2>&1; rc=$?
        cat "$OUT/serve_$m.txt"
        note "bench serve $m rc=$rc: $(grep -c '^ *[0-9]' "$OUT/serve_$m.txt") concurrency levels (serve_$m.txt)"
    done
fi

if has gdnruns; then # the GDN's runs side by side in mixed steps (VLLMC_CUDA_GDN_RUNS, off until this stage passes):
    # test_cuda_prefill (its mixed batches against the CPU, on and off; short runs bit for bit), test_cuda_engine with it
    # on (alone = together = eager, the stepped runs), then bench serve on GDNRUNS_MODELS (default the first of
    # BENCH_MODELS) off and on in turn (GDNRUNS_ARGS), and the engine bench (GDNRUNS_EARGS)
    timeout 200 "$BIN/test_cuda_prefill" >"$OUT/gdnruns_prefill.txt" 2>&1; rc=$?
    note "gdnruns test_cuda_prefill rc=$rc: $(grep -m2 '^gdn mixed' "$OUT/gdnruns_prefill.txt" | tr '\n' ' ')$(grep 'checks passed' "$OUT/gdnruns_prefill.txt" | tail -1) $(grep -m1 FAIL "$OUT/gdnruns_prefill.txt")"
    wait_models
    for f in /tmp/models/qwen35-tiny.gguf .carry/moe/*q4_k_m*.gguf; do
        [ -f "$f" ] || continue
        n=$(basename "$f" .gguf)
        VLLMC_CUDA_GDN_RUNS=1 timeout 150 "$BIN/test_cuda_engine" "$f" 64 12 --no-invariant >"$OUT/gdnruns_engine_$n.txt" 2>&1; rc=$?
        note "gdnruns test_cuda_engine $n rc=$rc: $(grep -m1 'together' "$OUT/gdnruns_engine_$n.txt" | sed 's/test_cuda_engine: //' | cut -c1-150)$(grep -m1 FAIL "$OUT/gdnruns_engine_$n.txt")"
    done
    m=${GDNRUNS_MODELS:-${BENCH_MODELS%% *}}
    f=/tmp/models/$m.gguf
    if [ -s "$f" ]; then
        for rep in $(seq "${GDNRUNS_REPS:-1}"); do
            for v in 0 1; do
                # shellcheck disable=SC2086
                VLLMC_CUDA_GDN_RUNS=$v SERVE_LOG="$OUT/gdnruns_server.log" timeout 300 bash scripts/bench-serve.sh "$BIN" "$f" \
                    ${GDNRUNS_ARGS:---concurrency 16,64 --num-prompts 128 --input-len 512 --output-len 128 --id-max 150000} \
                    -- --device cuda --max-num-seqs 64 --max-num-batched-tokens 512 >"$OUT/gdnruns_serve_${v}_$rep.txt" 2>&1; rc=$?
                note "gdnruns serve $m runs=$v rep $rep rc=$rc: $(grep '^ *[0-9]' "$OUT/gdnruns_serve_${v}_$rep.txt" | awk '{printf "c%s %s tok/s tpot50 %s ttft50 %s; ", $1, $6, $12, $9}')"
            done
        done
        # the off / on runs above at a 512-token step budget (the GPU's default before 2,048); this one at the default
        # 2,048 with it on; GDNRUNS_SHORT=1 skips this and the engine bench (a short call)
        [ "${GDNRUNS_SHORT:-0}" = 1 ] || VLLMC_CUDA_GDN_RUNS=1 SERVE_LOG="$OUT/gdnruns_server.log" timeout 300 bash scripts/bench-serve.sh "$BIN" "$f" \
            ${GDNRUNS_ARGS:---concurrency 16,64 --num-prompts 128 --input-len 512 --output-len 128 --id-max 150000} \
            -- --device cuda --max-num-seqs 64 --max-num-batched-tokens 2048 >"$OUT/gdnruns_serve_b2048.txt" 2>&1; rc=$?
        [ "${GDNRUNS_SHORT:-0}" = 1 ] || note "gdnruns serve $m runs=1 budget 2048 rc=$rc: $(grep '^ *[0-9]' "$OUT/gdnruns_serve_b2048.txt" | awk '{printf "c%s %s tok/s tpot50 %s ttft50 %s; ", $1, $6, $12, $9}')"
        for v in $([ "${GDNRUNS_SHORT:-0}" = 1 ] || echo 0 1); do
            # shellcheck disable=SC2086
            VLLMC_CUDA_GDN_RUNS=$v timeout 200 "$BIN/vllmc" bench -m "$f" ${GDNRUNS_EARGS:---concurrency 16,64 -p 512 -g 128 -r 1} \
                >"$OUT/gdnruns_ebench_$v.txt" 2>&1; rc=$?
            note "gdnruns engine bench $m runs=$v rc=$rc: $(grep '^| [0-9]' "$OUT/gdnruns_ebench_$v.txt" | tr '\n' ' ')"
        done
    else
        note "gdnruns: $m not generated"
    fi
fi

if has real; then # a real checkpoint at REAL_MODEL (carried in parts: docs/BENCHMARKS.md "Real checkpoint on the GPU")
    f=${REAL_MODEL:-/tmp/real/tm.gguf}
    if [ -s "$f" ]; then
        i=0
        for p in "The capital of France is" "def fibonacci(n):" "Once upon a time, in a small village," "The three laws of thermodynamics are"; do
            i=$((i + 1))
            for d in cuda eager cpu; do
                dev=(--device "$d"); [ "$d" = eager ] && dev=(--device cuda --enforce-eager)
                timeout 60 "$BIN/vllmc" generate -m "$f" -p "$p" -n 64 --ignore-eos --ids "${dev[@]}" >"$OUT/real_${i}_$d.txt" 2>/dev/null
            done
            same() { cmp -s "$OUT/real_${i}_$1.txt" "$OUT/real_${i}_$2.txt" && echo same || echo DIFFERENT; }
            note "real prompt $i greedy 64: graphs vs cpu $(same cuda cpu), eager vs cpu $(same eager cpu), graphs vs eager $(same cuda eager)"
        done
        head -c 6000 tests/data/ppl_declaration.txt >/tmp/real_t1.txt
        cat tests/data/conversations/*.json | head -c 6000 >/tmp/real_t2.txt
        head -c 5000 README.md >/tmp/real_t3.txt
        head -c 5000 docs/DESIGN.md >/tmp/real_t4.txt
        for t in 1 2 3 4; do
            line="real perplexity text $t:"
            for v in cpu default q8 off; do
                e=(X=1); d=cuda
                [ "$v" = cpu ] && d=cpu
                [ "$v" = q8 ] && e=(VLLMC_CUDA_GEMM_ACT=q8)
                [ "$v" = off ] && e=(VLLMC_CUDA_GEMM_ROWS=0)
                line="$line $v $(env "${e[@]}" timeout 100 "$BIN/vllmc" generate -m "$f" --perplexity /tmp/real_t$t.txt --device $d 2>/dev/null |
                    tail -1 | grep -o '"ppl": [0-9.]*' | cut -d' ' -f2)"
            done
            note "$line"
        done
        timeout 100 "$BIN/vllmc" bench -m "$f" -p 512 -g 256 -r 5 >"$OUT/real_bench.txt" 2>&1
        note "real bench: $(grep '^output tok/s' "$OUT/real_bench.txt")"
    else
        note "real: no model at $f"
    fi
fi

if has hot; then # the weights-from-cache build (vllmc_hot) against the default: the decode, then a trace of each
    wait_models
    for m in ${HOT_MODELS:-${BENCH_MODELS%% *}}; do
        f=/tmp/models/$m.gguf
        if [ ! -x "$BIN/vllmc_hot" ]; then note "hot: no vllmc_hot (gpu-carry.sh EXTRA_BUILDS=\"hot:-DVLLMC_HOT_W=65536\")"; break; fi
        [ -s "$f" ] || { note "hot $m: model not generated"; continue; }
        for rep in $(seq 1 "${HOT_REPS:-2}"); do
            for b in vllmc vllmc_hot; do
                timeout 150 "$BIN/$b" bench -m "$f" -p 512 -g 256 -r 5 >"$OUT/hot_${m}_${b}_$rep.txt" 2>&1; rc=$?
                note "hot $m $b rc=$rc: $(grep '^output tok/s' "$OUT/hot_${m}_${b}_$rep.txt" | head -1)"
            done
            for v in ${HOT_VARIANTS:-}; do # NAME:VAR=v[,VAR2=w]: vllmc_hot with those variables, in the same turn
                # shellcheck disable=SC2046
                env $(variant_envs "${v#*:}") timeout 150 "$BIN/vllmc_hot" bench -m "$f" -p 512 -g 256 -r 5 \
                    >"$OUT/hot_${m}_${v%%:*}_$rep.txt" 2>&1; rc=$?
                note "hot $m vllmc_hot ${v#*:} rc=$rc: $(grep '^output tok/s' "$OUT/hot_${m}_${v%%:*}_$rep.txt" | head -1)"
            done
        done
        for b in vllmc vllmc_hot; do
            trace_run "$BIN/$b" "$f" "hot_${m}_$b"; rc=$?
            note "hot trace $m $b rc=$rc: $(head -1 "$OUT/trace_hot_${m}_$b.txt")"
        done
    done
fi
if has timeline; then # per-CTA timeline of the tensor-core mat-vec launches: needs EXTRA_BUILDS="tl:-DVLLMC_MV_TIMELINE"
    wait_models
    for m in ${TIMELINE_MODELS:-${BENCH_MODELS%% *}}; do
        if [ ! -x "$BIN/vllmc_tl" ]; then note "timeline: no vllmc_tl (gpu-carry.sh EXTRA_BUILDS=\"tl:-DVLLMC_MV_TIMELINE\")"; break; fi
        VLLMC_MV_TIMELINE_OUT="$OUT/timeline_$m.csv" timeout 300 "$BIN/vllmc_tl" bench -m "/tmp/models/$m.gguf" -p 512 -g 64 -r 1 \
            >"$OUT/timeline_${m}_run.txt" 2>&1; rc=$?
        python3 scripts/mv_timeline.py "$OUT/timeline_$m.csv" >"$OUT/timeline_$m.txt" 2>&1
        note "timeline $m rc=$rc: $(head -1 "$OUT/timeline_$m.txt")"
    done
fi
if has mmrrt; then # mm_kernel_mmrs with 2 / 4 16-row tiles a CTA (VLLMC_CUDA_MMR_RT, off until measured): test_cuda_ops mmr
    # (against the CPU, and the same bits as one tile a CTA), then the engine bench of the first of BENCH_MODELS with 1 / 2 / 4
    # tiles in turn (MMRRT_TILES, MMRRT_ARGS, MMRRT_REPS)
    timeout 150 "$BIN/test_cuda_ops" mmr >"$OUT/mmrrt_ops.txt" 2>&1; rc=$?
    note "mmrrt test_cuda_ops mmr rc=$rc: $(tail -1 "$OUT/mmrrt_ops.txt") $(grep -m2 '^FAIL' "$OUT/mmrrt_ops.txt" | cut -c1-200 | tr '\n' ' ')"
    wait_models
    m=${BENCH_MODELS%% *}
    f=/tmp/models/$m.gguf
    if [ "$rc" = 0 ] && [ -s "$f" ]; then
        for rep in $(seq "${MMRRT_REPS:-1}"); do
            for rt in ${MMRRT_TILES:-1 2 4}; do
                # shellcheck disable=SC2086
                VLLMC_CUDA_MMR_RT=$rt timeout 200 "$BIN/vllmc" bench -m "$f" ${MMRRT_ARGS:---concurrency 16,32,64 -p 128 -g 128 -r 1} \
                    >"$OUT/mmrrt_${rt}_$rep.txt" 2>&1; rc=$?
                note "mmrrt engine bench $m tiles $rt rep $rep rc=$rc: $(grep '^| [0-9]' "$OUT/mmrrt_${rt}_$rep.txt" | tr '\n' ' ')"
            done
        done
    fi
fi

if has mmq; then # mm_kernel_mmq (several-row steps from VLLMC_CUDA_MMQ rows, default 16): test_cuda_ops mmr (unsplit: the
    # CPU's bits), then the engine bench of the first of BENCH_MODELS with each of MMQ_ROWS in turn (0: off; MMQ_ARGS, MMQ_REPS)
    timeout 150 "$BIN/test_cuda_ops" mmr >"$OUT/mmq_ops.txt" 2>&1; rc=$?
    note "mmq test_cuda_ops mmr rc=$rc: $(tail -1 "$OUT/mmq_ops.txt") $(grep -m2 '^FAIL' "$OUT/mmq_ops.txt" | cut -c1-200 | tr '\n' ' ')"
    wait_models
    m=${BENCH_MODELS%% *}
    f=/tmp/models/$m.gguf
    if [ "$rc" = 0 ] && [ -s "$f" ]; then
        for rep in $(seq "${MMQ_REPS:-1}"); do
            for q in ${MMQ_ROWS:-0 16}; do
                # shellcheck disable=SC2086
                VLLMC_CUDA_MMQ=$q timeout 200 "$BIN/vllmc" bench -m "$f" ${MMQ_ARGS:---concurrency 16,32,64 -p 128 -g 128 -r 1} \
                    >"$OUT/mmq_${q}_$rep.txt" 2>&1; rc=$?
                note "mmq engine bench $m VLLMC_CUDA_MMQ=$q rep $rep rc=$rc: $(grep '^| [0-9]' "$OUT/mmq_${q}_$rep.txt" | tr '\n' ' ')"
            done
        done
    fi
fi

if has trace; then # in-graph kernel costs of the decode (nsys, graph nodes traced): scripts/trace_steps.py
    wait_models
    tenv=${TRACE_ENV:-} # a second trace with these variables ("A=1 B=2,3"), unless the checks found them wrong
    if [ -n "$tenv" ] && [ -n "${NQ_BAD:-}" ] && [[ $tenv == *FUSE_NQ=[1-9]* ]]; then
        note "trace with $tenv: skipped (checks)"; tenv=""
    fi
    for m in ${TRACE_MODELS:-${BENCH_MODELS%% *}}; do
        f=/tmp/models/$m.gguf
        [ -s "$f" ] || { note "trace $m: no model"; continue; }
        for tv in "" ${tenv:+"$tenv"}; do
            t=$m${tv:+_env}
            # shellcheck disable=SC2086
            trace_run "$BIN/vllmc" "$f" "$t" $tv; rc=$?
            head -40 "$OUT/trace_$t.txt"
            note "trace $m ${tv:-(default)} rc=$rc: $(head -1 "$OUT/trace_$t.txt")"
        done
    done
fi

if has idscmp; then # the 128 greedy ids of IDS_MODELS (default the first of BENCH_MODELS) with IDS_ENV ("VAR=v VAR2=w")
    # against the default's: a switch that keeps the bits keeps them
    wait_models
    for m in ${IDS_MODELS:-${BENCH_MODELS%% *}}; do
        f=/tmp/models/$m.gguf
        [ -s "$f" ] || { note "idscmp $m: model not generated"; continue; }
        # shellcheck disable=SC2086
        a=$(greedy_ids "$f"); b=$(greedy_ids "$f" ${IDS_ENV:-X=1})
        note "idscmp $m: 128 greedy ids with ${IDS_ENV:-X=1} against the default: $([ -n "$a" ] && [ "$a" = "$b" ] && echo SAME || echo DIFF)"
    done
fi

if has var; then # decode A/B of environment variants: VARIANTS="name:VAR=v,VAR2=w name2:..." on VAR_MODELS (default
    # BENCH_MODELS; VAR_ARGS)
    wait_models
    for m in ${VAR_MODELS:-$BENCH_MODELS}; do
        f=/tmp/models/$m.gguf
        [ -s "$f" ] || { note "var $m: model not generated"; continue; }
        for v in ${VARIANTS:-default:X=1}; do
            name=${v%%:*}; envs=${v#*:}
            if [ -n "${NQ_BAD:-}" ] && [[ $envs == *VLLMC_CUDA_FUSE_NQ=[1-9]* ]]; then note "var $m $name: skipped (nq check)"; continue; fi
            # shellcheck disable=SC2046
            env $(variant_envs "$envs") timeout 150 "$BIN/vllmc" bench -m "$f" ${VAR_ARGS:--p 512 -g 256 -r 5} >"$OUT/var_${m}_$name.txt" 2>&1; rc=$?
            note "var $m $name ($envs) rc=$rc: $(grep '^output tok/s' "$OUT/var_${m}_$name.txt" | head -1)"
        done
    done
fi

if has mega2; then # the tiled persistent FFN in the decode: test_cuda_model on BENCH_MODELS (graph == eager checks its bits
    # against the launches it replaces), then the decode, off and on in turn. MEGA2_CFGS: "ps" (VLLMC_CUDA_MEGA2=ps) or
    # "ps,pj" (and VLLMC_CUDA_MEGA2_PJ=1: the output projection before the FFN in the same launch)
    wait_models
    m2env() { local ps=${1%%,*}; echo "VLLMC_CUDA_MEGA2=$ps"; [[ $1 == *,pj ]] && echo "VLLMC_CUDA_MEGA2_PJ=1"; }
    for m in $BENCH_MODELS; do
        f=/tmp/models/$m.gguf
        [ -s "$f" ] || { note "mega2 $m: model not generated"; continue; }
        for cfg in ${MEGA2_CFGS:-4 4,pj}; do
            t=${cfg//,/_}
            # shellcheck disable=SC2046
            env $(m2env "$cfg") timeout 240 "$BIN/test_cuda_model" "$f" 30 12 >"$OUT/mega2_model_${m}_$t.txt" 2>&1; rc=$?
            note "mega2 $cfg test_cuda_model $m rc=$rc: $(grep 'worst' "$OUT/mega2_model_${m}_$t.txt" | head -1 | sed 's/.*steps, //' | cut -c1-110); $(grep -o 'FFNs recorded as one tiled persistent launch [0-9]*' "$OUT/mega2_model_${m}_$t.txt")$(grep -m1 'FAIL\|stuck' "$OUT/mega2_model_${m}_$t.txt" | cut -c1-200)"
            [ $rc = 0 ] || MEGA2_BAD="${MEGA2_BAD:-} $cfg"
        done
        if [ "${MEGA2_SAN:-0}" = 1 ] && command -v compute-sanitizer >/dev/null; then # the tiled launches of a few decode steps under memcheck
            cfg=$(echo ${MEGA2_CFGS:-4 4,pj} | tr ' ' '\n' | tail -1)
            # shellcheck disable=SC2046
            env $(m2env "$cfg") timeout 240 compute-sanitizer --tool memcheck --error-exitcode 9 "$BIN/vllmc" generate -m "$f" \
                --prompt-ids "[11,22,33,44,55,66,77,88]" --ids --ignore-eos -n 4 >"$OUT/mega2_san_$m.txt" 2>&1; rc=$?
            note "mega2 $cfg $m under memcheck (generate, 4 steps) rc=$rc: $(grep -m1 'ERROR SUMMARY' "$OUT/mega2_san_$m.txt")"
        fi
        for rep in $(seq 1 "${MEGA2_REPS:-2}"); do
            for cfg in 0 ${MEGA2_CFGS:-4 4,pj}; do
                [[ " ${MEGA2_BAD:-} " == *" $cfg "* ]] && continue
                t=${cfg//,/_}
                # shellcheck disable=SC2046,SC2086
                env $(m2env "$cfg") timeout 150 "$BIN/vllmc" bench -m "$f" ${VAR_ARGS:--p 512 -g 256 -r 5} >"$OUT/mega2_${m}_${t}_$rep.txt" 2>&1; rc=$?
                note "mega2 $m $cfg run $rep rc=$rc: $(grep '^output tok/s' "$OUT/mega2_${m}_${t}_$rep.txt" | head -1)$(grep -o '; .*a recorded step' <(sed 's/^dense FFNs as one tiled persistent launch (VLLMC_CUDA_MEGA2): /; tiled FFNs /' "$OUT/mega2_${m}_${t}_$rep.txt"))"
            done
        done
    done
fi

if has actpf; then # the tensor-core mat-vec's later super-blocks' activation after the wait (VLLMC_CUDA_MMA bit 32: prefetched
    # into L1, bit 64: staged in shared memory): its bits (test_cuda_ops alt_kernel against the column-split kernel; the
    # tiny qwen35's graph == eager; BENCH_MODELS' greedy ids against the default), the launches alone
    # (bench_gemv l2 for each mask of ACTPF_GEMV: the default class, the 9,216-column class, the Q6_K class, each plain,
    # prefetched and staged) and the decode for each of ACTPF_CFGS (default "1 33 65": the default mask, then each form),
    # ACTPF_REPS (default 2) times in turn
    timeout 300 "$BIN/test_cuda_ops" alt_kernel >"$OUT/actpf_ops.txt" 2>&1; rc=$?
    note "actpf test_cuda_ops alt_kernel rc=$rc: $(grep -c 'mma, activation [a-z]* E .*: 0 of' "$OUT/actpf_ops.txt") prefetched / staged launches with 0 outputs different; $(grep -m2 'FAIL' "$OUT/actpf_ops.txt" | cut -c1-200 | tr '\n' ' ')"
    [ $rc = 0 ] || ACTPF_BAD=1
    for mm in ${ACTPF_GEMV:-1 33 65 3 35 67 5 37 69}; do gemv_l2 actpf VLLMC_CUDA_MMA=$mm; done
    for mm in 33 65; do tiny_switch actpf $mm VLLMC_CUDA_MMA=$mm || ACTPF_BAD=1; done
    wait_models
    for m in ${ACTPF_MODELS:-$BENCH_MODELS}; do
        f=/tmp/models/$m.gguf
        [ -s "$f" ] || { note "actpf $m: model not generated"; continue; }
        ids_same actpf "$m" "$f" VLLMC_CUDA_MMA "33 65" || ACTPF_BAD=1
        [ "${ACTPF_SAN:-0}" = 1 ] && san_generate actpf "$m" "$f" VLLMC_CUDA_MMA=65
        [ -n "${ACTPF_BAD:-}" ] && { note "actpf: a check failed, no timing"; continue; }
        decode_ab actpf "$m" "$f" VLLMC_CUDA_MMA "${ACTPF_CFGS:-1 33 65}" "${ACTPF_REPS:-2}"
    done
fi

if has mask; then # same-bits forms of the tensor-core mat-vec by their VLLMC_CUDA_MMA bits: MASK_ON (the masks with them,
    # e.g. "513 1025"), MASK_NAME (a regex of their test_cuda_ops alt_kernel names). Their bits (alt_kernel against the
    # column-split kernel; the tiny qwen35's graph == eager; BENCH_MODELS' greedy ids against the default), memcheck of a
    # tiny generate, the launches alone (bench_gemv l2, mask 1 then each of MASK_ON), then the decode, mask 1 and each of
    # MASK_ON in turn MASK_REPS (default 3) times, on MASK_MODELS (default BENCH_MODELS); memcheck with each of MASK_SAN
    # (default: MASK_ON); MASK_GEMV=0 skips bench_gemv, MASK_BASE (default 1) is the mask the decode is timed against
    timeout 300 "$BIN/test_cuda_ops" alt_kernel >"$OUT/mask_ops.txt" 2>&1; rc=$?
    note "mask test_cuda_ops alt_kernel rc=$rc: $(grep -c "${MASK_NAME:-?} E .*: 0 of" "$OUT/mask_ops.txt") launches of the form with 0 outputs different; $(grep -m2 'FAIL' "$OUT/mask_ops.txt" | cut -c1-200 | tr '\n' ' ')"
    [ $rc = 0 ] || MASK_BAD=1
    for i in $(seq 1 120); do [ -f /tmp/models/tiny.done ] && break; sleep 1; done
    for mm in $MASK_ON; do tiny_switch mask "$mm" VLLMC_CUDA_MMA="$mm" || MASK_BAD=1; done
    for mm in ${MASK_SAN-$MASK_ON}; do san_generate mask tiny /tmp/models/qwen35-tiny.gguf VLLMC_CUDA_MMA="$mm"; done
    [ "${MASK_GEMV:-1}" = 0 ] || for mm in 1 $MASK_ON; do gemv_l2 mask VLLMC_CUDA_MMA=$mm; done
    wait_models
    for m in ${MASK_MODELS:-$BENCH_MODELS}; do
        f=/tmp/models/$m.gguf
        [ -s "$f" ] || { note "mask $m: model not generated"; continue; }
        ids_same mask "$m" "$f" VLLMC_CUDA_MMA "$MASK_ON" || MASK_BAD=1
        [ -n "${MASK_BAD:-}" ] && { note "mask: a check failed, no timing"; continue; }
        decode_ab mask "$m" "$f" VLLMC_CUDA_MMA "${MASK_BASE-1} $MASK_ON" "${MASK_REPS:-3}"
    done
fi

if has large; then # issue #5's >= 80% of the measured bandwidth on large matrices: bench_gemv l2 5 with the LM head's shape
    # in Q4_K, Q5_K, Q6_K, Q8_0, Q4_0 and IQ4_XS (BENCH_GEMV_LARGE=1), each launch checked against the CPU reference
    gemv_l2 large BENCH_GEMV_LARGE=1
fi

if has colx; then # the column-split kernel for the other weight types (mm_kernel_colx, VLLMC_CUDA_COLX, on by default): its
    # values against the CPU (test_cuda_ops colx), the tiny qwen35 requantized to each type (test_cuda_model: graph ==
    # eager, the CPU bound; memcheck), the launches alone off and on (bench_gemv l2 with the LM head's shape and the
    # decode's FFN shapes in each type, and the measured read bandwidth), then COLX_MODELS (default qwen35-4b)
    # requantized to Q5_K_M, an IQ4_XS mix, Q4_0 and Q8_0 (COLX_TYPES; Q5_0 too), their decode off and on (COLX_REPS,
    # default 1); the tiny qwen2 of 896 columns (.carry/models/qwen2w-*: Q5_0 / Q8_0 fallbacks) off and on
    timeout 300 "$BIN/test_cuda_ops" colx >"$OUT/colx_ops.txt" 2>&1; rc=$?
    note "colx test_cuda_ops colx rc=$rc: $(grep -m1 'outputs checked' "$OUT/colx_ops.txt") $(grep -m2 'FAIL' "$OUT/colx_ops.txt" | cut -c1-200 | tr '\n' ' ')"
    while read -r l; do note "  $l"; done < <(grep '^colx E' "$OUT/colx_ops.txt" | cut -c1-150)
    timeout 300 "$BIN/test_cuda_ops" moe >"$OUT/colx_moe.txt" 2>&1; rc=$?
    note "colx test_cuda_ops moe rc=$rc: $(tail -1 "$OUT/colx_moe.txt") $(grep -m2 'FAIL' "$OUT/colx_moe.txt" | cut -c1-200 | tr '\n' ' ')"
    while read -r l; do note "  $l"; done < <(grep '^moe [HIJ] (column-split where\|^moe [HIJ] (grouped where' "$OUT/colx_moe.txt" | cut -c1-160)
    colx_q() { # requantize $1 to $3 as file $2 (IQ4_XS: the matrices of a Q4_K_M mix by --tensor-type)
        case "$3" in
        IQ4_XS) "$BIN/vllmc" quantize --allow-requantize --quiet --tensor-type \
            'ffn_(gate|up|down)|attn_(q|k|v|qkv|gate|output)|ssm_(out|in|qkv|gate)=iq4_xs' "$1" "$2" Q4_K_M ;;
        *) "$BIN/vllmc" quantize --allow-requantize --quiet "$1" "$2" "$3" ;;
        esac
    }
    for base in /tmp/models/qwen35-tiny.gguf .carry/moe/qwen35moe-tiny-q4_k_m.gguf; do
        bn=$(basename "$base" .gguf)
        for ty in ${COLX_TYPES:-Q5_K_M IQ4_XS Q4_0 Q8_0}; do
            f=/tmp/models/$bn-$ty.gguf
            colx_q "$base" "$f" "$ty" >"$OUT/colx_q_${bn}_$ty.txt" 2>&1 || { note "colx $bn $ty: quantize failed: $(tail -1 "$OUT/colx_q_${bn}_$ty.txt")"; continue; }
            timeout 150 "$BIN/test_cuda_model" "$f" 40 24 >"$OUT/colx_model_${bn}_$ty.txt" 2>&1; rc=$?
            note "colx $bn $ty test_cuda_model rc=$rc: $(grep 'worst' "$OUT/colx_model_${bn}_$ty.txt" | head -1 | sed 's/.*steps, //' | cut -c1-110)$(grep -m1 FAIL "$OUT/colx_model_${bn}_$ty.txt" | cut -c1-150)"
            [ "$ty" = Q5_K_M ] || [ "$ty" = IQ4_XS ] && san_generate colx "$bn-$ty" "$f"
        done
    done
    for f in .carry/models/qwen2w*.gguf; do # rows of 896 columns: Q5_0 / Q8_0 (their last super-block part-filled)
        [ -f "$f" ] || continue
        n=$(basename "$f" .gguf)
        for v in 0 1; do
            VLLMC_CUDA_COLX=$v timeout 120 "$BIN/test_cuda_model" "$f" 30 16 >"$OUT/colx_model_${n}_$v.txt" 2>&1; rc=$?
            note "colx $n VLLMC_CUDA_COLX=$v test_cuda_model rc=$rc: $(grep 'worst' "$OUT/colx_model_${n}_$v.txt" | head -1 | sed 's/.*steps, //' | cut -c1-110)$(grep -m1 FAIL "$OUT/colx_model_${n}_$v.txt" | cut -c1-150)"
        done
        ids=() # (a vocabulary of 384: greedy_ids' prompt is out of it)
        for v in 0 1; do
            ids[$v]=$(VLLMC_CUDA_COLX=$v timeout 120 "$BIN/vllmc" generate -m "$f" --prompt-ids "[11,22,33,44,55,66,77,88,99,111,222,333]" \
                --ids --ignore-eos -n 128 2>/dev/null)
        done
        note "colx $n: 128 greedy ids off vs on: $([ -n "${ids[0]}" ] && [ "${ids[0]}" = "${ids[1]}" ] && echo SAME || echo DIFF)"
        if command -v compute-sanitizer >/dev/null; then
            timeout 240 compute-sanitizer --tool memcheck --error-exitcode 9 "$BIN/vllmc" generate -m "$f" \
                --prompt-ids "[11,22,33,44,55,66,77,88]" --ids --ignore-eos -n 4 >"$OUT/colx_san_$n.txt" 2>&1; rc=$?
            note "colx $n under memcheck (generate, 4 steps) rc=$rc: $(grep -m1 'ERROR SUMMARY' "$OUT/colx_san_$n.txt")"
        fi
    done
    if [ "${COLX_GEMV:-1}" = 1 ]; then
        for v in ${COLX_GEMV_VALS:-0 1}; do gemv_l2 colx VLLMC_CUDA_COLX=$v BENCH_GEMV_LARGE=1 BENCH_GEMV_TYPES=1; done
    fi
    wait_models
    for m in ${COLX_MODELS:-qwen35-4b}; do
        [ -s "/tmp/models/$m.gguf" ] || { note "colx $m: model not generated"; continue; }
        for ty in ${COLX_TYPES:-Q5_K_M IQ4_XS Q4_0 Q8_0}; do
            f=/tmp/models/$m-$ty.gguf
            t0=$(date +%s)
            colx_q "/tmp/models/$m.gguf" "$f" "$ty" >"$OUT/colx_q_${m}_$ty.txt" 2>&1 || { note "colx $m $ty: quantize failed: $(tail -1 "$OUT/colx_q_${m}_$ty.txt")"; continue; }
            a=$(greedy_ids "$f" VLLMC_CUDA_COLX=0); b=$(greedy_ids "$f" VLLMC_CUDA_COLX=1)
            note "colx $m $ty ($(du -m "$f" | cut -f1) MB, quantized in $(( $(date +%s) - t0 )) s): 128 greedy ids off vs on: $([ -n "$a" ] && [ "$a" = "$b" ] && echo SAME || echo DIFF)"
            decode_ab "colx_$ty" "$m" "$f" VLLMC_CUDA_COLX "0 1" "${COLX_REPS:-1}"
            if [ "${COLX_ENGINE:-0}" = 1 ]; then # several-row decode steps: the engine with requests in flight
                for v in 0 1; do
                    VLLMC_CUDA_COLX=$v timeout 200 "$BIN/vllmc" bench -m "$f" --concurrency 1,4,16 -p 128 -g 128 -r 2 \
                        >"$OUT/colx_eng_${m}_${ty}_$v.txt" 2>&1; rc=$?
                    note "colx $m $ty engine VLLMC_CUDA_COLX=$v rc=$rc: $(grep '^| [0-9]' "$OUT/colx_eng_${m}_${ty}_$v.txt" | awk -F'|' '{printf "N=%s %s tok/s ITL %s ms;", $2, $4, $7}')"
                done
            fi
            rm -f "$f"
        done
    done
fi
if has types; then # the float weights (F16 / BF16: the one-warp-a-row mat-vec, the GEMM on the f16 rows in place or
    # converted), IQ4_NL and MXFP4 (the 32-element row kernel; MXFP4 experts too) and the Q2_K / Q3_K prefill GEMM: the tiny qwen35, the tiny qwen35moe
    # and the tiny qwen2 of 896 columns requantized to each of TYPES_TINY (Q5_K_M: its 896-column rows Q5_1; test_cuda_model:
    # graph == eager, the CPU bound;
    # a memcheck generate of each of TYPES_SAN, default "F16 IQ4_NL MXFP4", on the dense ones), then TYPES_MODELS (default qwen35-4b) requantized to each of TYPES_BIG
    # (default "BF16 F16 Q3_K_M Q2_K"): vllmc bench (decode, TTFT) with TYPES_ARGS (default -p 512 -g 256 -r 5); for TYPES_COLX
    # (default "Q3_K_M Q2_K") also the greedy ids and the bench with the column-split kernel off (VLLMC_CUDA_COLX=0)
    types_q() { # requantize $1 to $3 as file $2 (IQ4_NL, MXFP4: the matrices of a Q4_K_M mix by --tensor-type)
        case "$3" in
        IQ4_NL | MXFP4) "$BIN/vllmc" quantize --allow-requantize --quiet --tensor-type \
            "ffn_(gate|up|down)|attn_(q|k|v|qkv|gate|output)|ssm_(out|in|qkv|gate)=${3,,}" "$1" "$2" Q4_K_M ;;
        *) "$BIN/vllmc" quantize --allow-requantize --quiet "$1" "$2" "$3" ;;
        esac
    }
    for base in /tmp/models/qwen35-tiny.gguf .carry/moe/qwen35moe-tiny-q4_k_m.gguf .carry/models/qwen2w-tiny-q4_k_m.gguf; do
        [ -f "$base" ] || { note "types: $base missing"; continue; }
        bn=$(basename "$base" .gguf)
        for ty in ${TYPES_TINY:-F16 BF16 IQ4_NL MXFP4 Q3_K_M Q2_K Q4_1 Q5_K_M}; do
            f=/tmp/models/$bn-$ty.gguf
            if [ "$ty" = Q4_1 ] && [ "$bn" = qwen35moe-tiny-q4_k_m ]; then # (Q4_1 / Q5_1 experts: not taken, a clear error)
                note "types $bn $ty: skipped (the CUDA expert kernels take no Q8_1 activations)"; continue
            fi
            types_q "$base" "$f" "$ty" >"$OUT/types_q_${bn}_$ty.txt" 2>&1 || { note "types $bn $ty: quantize failed: $(tail -1 "$OUT/types_q_${bn}_$ty.txt")"; continue; }
            timeout 150 "$BIN/test_cuda_model" "$f" 40 24 >"$OUT/types_model_${bn}_$ty.txt" 2>&1; rc=$?
            note "types $bn $ty test_cuda_model rc=$rc: $(grep 'worst' "$OUT/types_model_${bn}_$ty.txt" | head -1 | sed 's/.*steps, //' | cut -c1-110)$(grep -m1 FAIL "$OUT/types_model_${bn}_$ty.txt" | cut -c1-150)"
            [[ " ${TYPES_SAN:-F16 IQ4_NL MXFP4} " == *" $ty "* ]] && [ "$bn" != qwen35moe-tiny-q4_k_m ] && san_generate types "$bn-$ty" "$f"
        done
    done
    wait_models
    for m in ${TYPES_MODELS:-qwen35-4b}; do
        [ -s "/tmp/models/$m.gguf" ] || { note "types $m: model not generated"; continue; }
        for ty in ${TYPES_BIG:-BF16 F16 Q3_K_M Q2_K}; do
            f=/tmp/models/$m-$ty.gguf
            t0=$(date +%s)
            types_q "/tmp/models/$m.gguf" "$f" "$ty" >"$OUT/types_q_${m}_$ty.txt" 2>&1 || { note "types $m $ty: quantize failed: $(tail -1 "$OUT/types_q_${m}_$ty.txt")"; continue; }
            # shellcheck disable=SC2086
            timeout 200 "$BIN/vllmc" bench -m "$f" ${TYPES_ARGS:--p 512 -g 256 -r 5} >"$OUT/types_bench_${m}_$ty.txt" 2>&1; rc=$?
            note "types $m $ty ($(du -m "$f" | cut -f1) MB, quantized in $(( $(date +%s) - t0 )) s) rc=$rc: $(grep '^output tok/s' "$OUT/types_bench_${m}_$ty.txt" | head -1); $(grep -m1 '| pp' "$OUT/types_bench_${m}_$ty.txt" | tr -s ' ')"
            if [[ " ${TYPES_COLX:-Q3_K_M Q2_K} " == *" $ty "* ]]; then # their rows on the column-split kernel against the row kernel
                a=$(greedy_ids "$f" VLLMC_CUDA_COLX=0); b=$(greedy_ids "$f")
                note "types $m $ty: 128 greedy ids, column-split off vs on: $([ -n "$a" ] && [ "$a" = "$b" ] && echo SAME || echo DIFF)"
                # shellcheck disable=SC2086
                VLLMC_CUDA_COLX=0 timeout 200 "$BIN/vllmc" bench -m "$f" ${TYPES_ARGS:--p 512 -g 256 -r 5} >"$OUT/types_bench_${m}_${ty}_colx0.txt" 2>&1; rc=$?
                note "types $m $ty VLLMC_CUDA_COLX=0 rc=$rc: $(grep '^output tok/s' "$OUT/types_bench_${m}_${ty}_colx0.txt" | head -1)"
            fi
            rm -f "$f"
        done
    done
fi
if has lmh; then # the LM head's ring of row tiles in shared memory (VLLMC_CUDA_LMH=ns[,rows]): its bits (test_cuda_ops lmh
    # against the column-split kernel; the tiny qwen35's graph == eager and memcheck with its LM head taken, rows 8; the
    # greedy ids of LMH_MODELS, default BENCH_MODELS), the launches alone, then the decode at each of LMH_ON (default
    # "3") and 0 in turn LMH_REPS (default 2) times
    timeout 300 "$BIN/test_cuda_ops" lmh >"$OUT/lmh_ops.txt" 2>&1; rc=$?
    note "lmh test_cuda_ops lmh rc=$rc: $(grep -c 'lmh ring of .*: 0 of' "$OUT/lmh_ops.txt") launches with 0 outputs different; $(grep -m2 'FAIL' "$OUT/lmh_ops.txt" | cut -c1-200 | tr '\n' ' ')"
    [ $rc = 0 ] || LMH_BAD=1
    for i in $(seq 1 120); do [ -f /tmp/models/tiny.done ] && break; sleep 1; done
    tiny_switch lmh 3 VLLMC_CUDA_LMH=3,8 || LMH_BAD=1
    san_generate lmh tiny /tmp/models/qwen35-tiny.gguf VLLMC_CUDA_LMH=3,8
    for v in 0 ${LMH_ON:-3}; do gemv_l2 lmh VLLMC_CUDA_LMH=$v; done
    wait_models
    for m in ${LMH_MODELS:-$BENCH_MODELS}; do
        f=/tmp/models/$m.gguf
        [ -s "$f" ] || { note "lmh $m: model not generated"; continue; }
        ids_same lmh "$m" "$f" VLLMC_CUDA_LMH "${LMH_ON:-3}" || LMH_BAD=1
        [ -n "${LMH_BAD:-}" ] && { note "lmh: a check failed, no timing"; continue; }
        decode_ab lmh "$m" "$f" VLLMC_CUDA_LMH "0 ${LMH_ON:-3}" "${LMH_REPS:-2}"
    done
fi

if has pfnext; then # the next round's rows into L2 after the release (VLLMC_CUDA_MMA bit 2048: the tensor-core mat-vec;
    # VLLMC_CUDA_COLS_LB bits 8 / 16: the bounded LM-head / down-row instances): their bits (test_cuda_ops cols_lb and
    # alt_kernel against the default instances; the tiny qwen35's graph == eager and memcheck with all of them; the greedy
    # ids of BENCH_MODELS), the launches alone, then the decode of each PFNEXT_CFGS entry ("name:VAR=v,VAR2=w ...") in
    # turn PFNEXT_REPS (default 3) times
    all="VLLMC_CUDA_MMA=2049 VLLMC_CUDA_COLS_LB=30"
    timeout 300 "$BIN/test_cuda_ops" cols_lb alt_kernel >"$OUT/pfnext_ops.txt" 2>&1; rc=$?
    note "pfnext test_cuda_ops cols_lb alt_kernel rc=$rc: $(grep -c 'next round into L2, E .*: 0 of' "$OUT/pfnext_ops.txt") column-split and $(grep -c 'next round to L2 E .*: 0 of' "$OUT/pfnext_ops.txt") tensor-core launches with 0 outputs different; $(grep -m2 'FAIL' "$OUT/pfnext_ops.txt" | cut -c1-200 | tr '\n' ' ')"
    [ $rc = 0 ] || PFNEXT_BAD=1
    for i in $(seq 1 120); do [ -f /tmp/models/tiny.done ] && break; sleep 1; done
    # shellcheck disable=SC2086
    tiny_switch pfnext all $all || PFNEXT_BAD=1
    # shellcheck disable=SC2086
    san_generate pfnext tiny /tmp/models/qwen35-tiny.gguf $all
    gemv_l2 pfnext VLLMC_CUDA_MMA=1
    # shellcheck disable=SC2086
    gemv_l2 pfnext $all
    wait_models
    for m in $BENCH_MODELS; do
        f=/tmp/models/$m.gguf
        [ -s "$f" ] || { note "pfnext $m: model not generated"; continue; }
        ref=$(greedy_ids "$f")
        # shellcheck disable=SC2086
        got=$(greedy_ids "$f" $all)
        if [ -n "$ref" ] && [ "$ref" = "$got" ]; then note "pfnext $m generate 128 greedy ids with all of them against the default: SAME"
        else note "pfnext $m generate 128 greedy ids with all of them against the default: DIFF"; PFNEXT_BAD=1; fi
        [ -n "${PFNEXT_BAD:-}" ] && { note "pfnext: a check failed, no timing"; continue; }
        for rep in $(seq 1 "${PFNEXT_REPS:-3}"); do
            for v in ${PFNEXT_CFGS:-base:VLLMC_CUDA_MMA=1 mma:VLLMC_CUDA_MMA=2049 all:VLLMC_CUDA_MMA=2049,VLLMC_CUDA_COLS_LB=30}; do
                name=${v%%:*}; envs=${v#*:}
                # shellcheck disable=SC2046,SC2086
                env $(variant_envs "$envs") timeout 150 "$BIN/vllmc" bench -m "$f" ${VAR_ARGS:--p 512 -g 256 -r 5} >"$OUT/pfnext_${m}_${name}_$rep.txt" 2>&1; rc=$?
                note "pfnext $m $name run $rep rc=$rc: $(grep '^output tok/s' "$OUT/pfnext_${m}_${name}_$rep.txt" | head -1)"
                rm -f "$OUT/pfnext_${m}_${name}_$rep.txt"
            done
        done
    done
fi

if has mmx; then # the tensor-core mat-vec with 16 / 8 more rows a CTA in shared memory (VLLMC_CUDA_MMA bits 128 / 256,
    # mm_kernel_mmx): its bits (test_cuda_ops alt_kernel against the column-split kernel; the tiny qwen35's graph == eager
    # with it on every launch size; MMX_MODELS' greedy ids against the default), memcheck of a tiny generate, the launches
    # alone (bench_gemv l2, MMX_GEMV: "VAR=v,VAR2=w ..." per run), then the decode of MMX_MODELS (default BENCH_MODELS) for
    # each of MMX_CFGS ("name:VAR=v,VAR2=w ...", as stage var's VARIANTS), MMX_REPS (default 2) times in turn
    [ "${MMX_CHECKS:-1}" = 0 ] || {
    timeout 300 "$BIN/test_cuda_ops" alt_kernel >"$OUT/mmx_ops.txt" 2>&1; rc=$?
    note "mmx test_cuda_ops alt_kernel rc=$rc: $(grep -c 'rows more in shared memory E .*: 0 of' "$OUT/mmx_ops.txt") launches with 0 outputs different; $(grep -m2 'FAIL' "$OUT/mmx_ops.txt" | cut -c1-200 | tr '\n' ' ')"
    [ $rc = 0 ] || MMX_BAD=1
    for mm in 129 257; do tiny_switch mmx $mm VLLMC_CUDA_MMA=$mm VLLMC_CUDA_MMX_ROWS=1 || MMX_BAD=1; done
    san_generate mmx tiny /tmp/models/qwen35-tiny.gguf VLLMC_CUDA_MMA=129 VLLMC_CUDA_MMX_ROWS=1
    }
    for e in ${MMX_GEMV-VLLMC_CUDA_MMA=1 VLLMC_CUDA_MMA=129 VLLMC_CUDA_MMA=257 VLLMC_CUDA_MMA=257,VLLMC_CUDA_CARVEOUT=28}; do
        # shellcheck disable=SC2046
        gemv_l2 mmx $(variant_envs "$e")
    done
    wait_models
    for m in ${MMX_MODELS:-$BENCH_MODELS}; do
        f=/tmp/models/$m.gguf
        [ -s "$f" ] || { note "mmx $m: model not generated"; continue; }
        ids_same mmx "$m" "$f" VLLMC_CUDA_MMA "129 257" || MMX_BAD=1
        [ -n "${MMX_BAD:-}" ] && { note "mmx: a check failed, no timing"; continue; }
        for rep in $(seq 1 "${MMX_REPS:-2}"); do
            for v in ${MMX_CFGS:-base:VLLMC_CUDA_MMA=1 x16:VLLMC_CUDA_MMA=129 x8:VLLMC_CUDA_MMA=257 co28:VLLMC_CUDA_CARVEOUT=28 x8co28:VLLMC_CUDA_MMA=257,VLLMC_CUDA_CARVEOUT=28 x16co58:VLLMC_CUDA_MMA=129,VLLMC_CUDA_CARVEOUT=58}; do
                name=${v%%:*}; envs=${v#*:}
                # shellcheck disable=SC2046,SC2086
                env $(variant_envs "$envs") timeout 150 "$BIN/vllmc" bench -m "$f" ${VAR_ARGS:--p 512 -g 256 -r 5} >"$OUT/mmx_${m}_${name}_$rep.txt" 2>&1; rc=$?
                note "mmx $m $name run $rep rc=$rc: $(grep '^output tok/s' "$OUT/mmx_${m}_${name}_$rep.txt" | head -1)"
            done
        done
    done
fi

if has presplit; then # the decode attention's q / k norm + RoPE + KV store inside its split launch
    # (VLLMC_CUDA_ATTN_PRE_SPLIT=1, off until measured): graph == eager (its bits against the separate launches) and CPU
    # parity on the tiny qwen35 and qwen35moe, the engine with it (alone = together = eager: decode steps of several
    # sequences), a memcheck generate, the greedy ids of PRESPLIT_MODELS (default BENCH_MODELS) against the default, then
    # their decode off and on, PRESPLIT_REPS (default 2) times in turn, and once more with the attention combine in the
    # split launch as well (VLLMC_CUDA_FUSE_NQ=96: the default's bit 64 and bit 32), one launch an attention layer
    tiny_switch presplit on VLLMC_CUDA_ATTN_PRE_SPLIT=1 || PS_BAD=1
    # with the combine in the split launch too (VLLMC_CUDA_FUSE_NQ bit 32, off: level or slower alone): one launch a layer
    tiny_switch presplit comb VLLMC_CUDA_ATTN_PRE_SPLIT=1 VLLMC_CUDA_FUSE_NQ=96 || PS_COMB_BAD=1
    for f in .carry/moe/qwen35moe-tiny-q4_k_m.gguf; do
        [ -f "$f" ] || continue
        VLLMC_CUDA_ATTN_PRE_SPLIT=1 timeout 150 "$BIN/test_cuda_model" "$f" 40 24 >"$OUT/presplit_model_moe.txt" 2>&1; rc=$?
        note "presplit test_cuda_model $(basename "$f" .gguf) rc=$rc: $(grep 'worst' "$OUT/presplit_model_moe.txt" | head -1 | cut -c1-120); $(grep -o 'prologue inside the split launch [0-9]*' "$OUT/presplit_model_moe.txt")$(grep -m1 FAIL "$OUT/presplit_model_moe.txt" | cut -c1-200)"
        model_broke "$OUT/presplit_model_moe.txt" $rc && PS_BAD=1
    done
    for f in /tmp/models/qwen35-tiny.gguf .carry/moe/*q4_k_m*.gguf; do
        [ -f "$f" ] || continue
        n=$(basename "$f" .gguf)
        VLLMC_CUDA_ATTN_PRE_SPLIT=1 timeout 120 "$BIN/test_cuda_engine" "$f" 64 12 >"$OUT/presplit_engine_$n.txt" 2>&1; rc=$?
        [ $rc = 0 ] || PS_BAD=1
        note "presplit test_cuda_engine $n rc=$rc: $(grep -m1 'together' "$OUT/presplit_engine_$n.txt" | sed 's/test_cuda_engine: //' | cut -c1-150)$(grep -m1 FAIL "$OUT/presplit_engine_$n.txt")"
    done
    san_generate presplit tiny /tmp/models/qwen35-tiny.gguf VLLMC_CUDA_ATTN_PRE_SPLIT=1
    wait_models
    for m in ${PRESPLIT_MODELS:-$BENCH_MODELS}; do
        f=/tmp/models/$m.gguf
        [ -s "$f" ] || { note "presplit $m: model not generated"; continue; }
        ids_same presplit "$m" "$f" VLLMC_CUDA_ATTN_PRE_SPLIT 1 || PS_BAD=1
        [ -n "${PS_BAD:-}" ] && { note "presplit: a check failed, no timing"; continue; }
        decode_ab presplit "$m" "$f" VLLMC_CUDA_ATTN_PRE_SPLIT "0 1" "${PRESPLIT_REPS:-2}"
        [ -n "${PS_COMB_BAD:-}" ] && { note "presplit comb: its check failed, no timing"; continue; }
        # shellcheck disable=SC2086
        VLLMC_CUDA_ATTN_PRE_SPLIT=1 VLLMC_CUDA_FUSE_NQ=96 timeout 150 "$BIN/vllmc" bench -m "$f" ${VAR_ARGS:--p 512 -g 256 -r 5} \
            >"$OUT/presplit_${m}_comb.txt" 2>&1; rc=$?
        note "presplit $m with the combine in the split (FUSE_NQ=96) rc=$rc: $(grep '^output tok/s' "$OUT/presplit_${m}_comb.txt" | head -1)"
    done
fi

if has defer; then # the FFN's RMSNorm deferred (VLLMC_CUDA_DEFER_NORM=1, off until measured): the writer and the reader
    # against their references (test_cuda_ops kd: bytes and bits) and under memcheck, the tiny qwen35's CPU parity and
    # graph == eager with it, the engine with it (alone = together = eager), a memcheck generate; then on DEFER_MODELS
    # (default the dense ones of BENCH_MODELS) how many of the 128 greedy ids match the default's (the activation's
    # quantization changes: a scale every 16 values, so ids may part late), and the decode off and on, DEFER_REPS
    # (default 2) times in turn
    timeout 200 "$BIN/test_cuda_ops" kd >"$OUT/defer_ops.txt" 2>&1; rc=$?
    [ $rc = 0 ] || DF_BAD=1
    note "defer test_cuda_ops kd rc=$rc: $(grep -c '^kd ' "$OUT/defer_ops.txt") lines, $(tail -1 "$OUT/defer_ops.txt" | cut -c1-100)"
    while read -r l; do note "  $l"; done < <(grep '^kd \|FAIL' "$OUT/defer_ops.txt" | head -12 | cut -c1-230)
    if command -v compute-sanitizer >/dev/null; then
        timeout 300 compute-sanitizer --tool memcheck --error-exitcode 9 "$BIN/test_cuda_ops" kd >"$OUT/defer_ops_san.txt" 2>&1; rc=$?
        note "defer test_cuda_ops kd under memcheck rc=$rc: $(grep -m1 'ERROR SUMMARY' "$OUT/defer_ops_san.txt")"
    fi
    tiny_switch defer on VLLMC_CUDA_DEFER_NORM=1 || DF_BAD=1
    note "defer tiny: $(grep -o 'deferred norms [0-9]*[^;]*' "$OUT/defer_model_tiny_on.txt" | head -1)"
    VLLMC_CUDA_DEFER_NORM=1 timeout 120 "$BIN/test_cuda_engine" /tmp/models/qwen35-tiny.gguf 64 12 >"$OUT/defer_engine.txt" 2>&1; rc=$?
    [ $rc = 0 ] || DF_BAD=1
    note "defer test_cuda_engine tiny rc=$rc: $(grep -m1 'together' "$OUT/defer_engine.txt" | sed 's/test_cuda_engine: //' | cut -c1-150)$(grep -m1 FAIL "$OUT/defer_engine.txt")"
    san_generate defer tiny /tmp/models/qwen35-tiny.gguf VLLMC_CUDA_DEFER_NORM=1
    wait_models
    for m in ${DEFER_MODELS:-$(echo "$BENCH_MODELS" | tr ' ' '\n' | grep -v a3b)}; do
        f=/tmp/models/$m.gguf
        [ -s "$f" ] || { note "defer $m: model not generated"; continue; }
        ref=$(greedy_ids "$f"); got=$(greedy_ids "$f" VLLMC_CUDA_DEFER_NORM=1)
        same=$(python3 -c 'import sys,json
a,b=(json.loads(x) if x.strip().startswith("[") else x.split() for x in sys.argv[1:3])
n=0
for x,y in zip(a,b):
    if x!=y: break
    n+=1
print(f"{n} of {len(a)}")' "$ref" "$got" 2>/dev/null)
        note "defer $m greedy ids: the first ${same:-?} the default's"
        [ -n "${DF_BAD:-}" ] && { note "defer: a check failed, no timing"; continue; }
        decode_ab defer "$m" "$f" VLLMC_CUDA_DEFER_NORM "0 1" "${DEFER_REPS:-2}"
        # DEFER_ABL="1 4 5 2": the timing ablations with it on (VLLMC_CUDA_KD_ABL: 1 the writer without its quantization,
        # 4 the reader on the plain instance, 5 both - the stage gone and no work in its place -, 2 the reader unbounded;
        # 1, 4 and 5 give wrong results), DEFER_REPS times in turn
        for rep in $(seq 1 "${DEFER_REPS:-2}"); do
            for v in ${DEFER_ABL:-}; do
                # shellcheck disable=SC2086
                VLLMC_CUDA_DEFER_NORM=1 VLLMC_CUDA_KD_ABL=$v timeout 150 "$BIN/vllmc" bench -m "$f" ${VAR_ARGS:--p 512 -g 256 -r 5} \
                    >"$OUT/defer_${m}_abl${v}_$rep.txt" 2>&1; rc=$?
                note "defer $m VLLMC_CUDA_KD_ABL=$v run $rep rc=$rc: $(grep '^output tok/s' "$OUT/defer_${m}_abl${v}_$rep.txt" | head -1)"
            done
        done
    done
fi

if has moepre; then # the MoE down launch routing before its dependency wait (VLLMC_CUDA_MOE_PRE=1): its bits (test_cuda_ops moe's
    # path 5 against the column-split path; the tiny qwen35moe files' graph == eager and CPU parity; the MoE models of
    # BENCH_MODELS' greedy ids against the default), then the decode off and on, MOEPRE_REPS (default 2) times in turn
    timeout 200 "$BIN/test_cuda_ops" moe >"$OUT/moepre_ops.txt" 2>&1; rc=$?
    note "moepre test_cuda_ops moe rc=$rc: $(grep -c 'down routing before its wait' "$OUT/moepre_ops.txt") such runs; $(tail -1 "$OUT/moepre_ops.txt") $(grep -m2 'FAIL' "$OUT/moepre_ops.txt" | cut -c1-200 | tr '\n' ' ')"
    [ $rc = 0 ] || MOEPRE_BAD=1
    for f in .carry/moe/*.gguf; do
        [ -f "$f" ] || continue
        n=$(basename "$f" .gguf)
        VLLMC_CUDA_MOE_PRE=1 timeout 120 "$BIN/test_cuda_model" "$f" 24 12 >"$OUT/moepre_model_$n.txt" 2>&1; rc=$?
        note "moepre test_cuda_model $n rc=$rc: $(grep 'worst' "$OUT/moepre_model_$n.txt" | head -1 | sed 's/.*steps, //' | cut -c1-120)$(grep -m1 FAIL "$OUT/moepre_model_$n.txt" | cut -c1-200)"
        model_broke "$OUT/moepre_model_$n.txt" $rc && MOEPRE_BAD=1
    done
    wait_models
    for m in $BENCH_MODELS; do
        [[ $m == qwen36* ]] || continue
        f=/tmp/models/$m.gguf
        [ -s "$f" ] || { note "moepre $m: model not generated"; continue; }
        ids_same moepre "$m" "$f" VLLMC_CUDA_MOE_PRE 1 || MOEPRE_BAD=1
        [ "${MOEPRE_SAN:-0}" = 1 ] && san_generate moepre "$m" "$f" VLLMC_CUDA_MOE_PRE=1
        [ -n "${MOEPRE_BAD:-}" ] && { note "moepre: a check failed, no timing"; continue; }
        decode_ab moepre "$m" "$f" VLLMC_CUDA_MOE_PRE "0 1" "${MOEPRE_REPS:-2}"
    done
fi

if has moe2; then # the tiled persistent MoE experts in the decode: test_cuda_model on the MoE models of BENCH_MODELS (graph ==
    # eager checks its bits against the launches it replaces), then the decode, off and on in turn
    wait_models
    for m in $BENCH_MODELS; do
        [[ $m == qwen36* ]] || continue
        f=/tmp/models/$m.gguf
        [ -s "$f" ] || { note "moe2 $m: model not generated"; continue; }
        VLLMC_CUDA_MOE2=1 timeout 300 "$BIN/test_cuda_model" "$f" 30 12 >"$OUT/moe2_model_$m.txt" 2>&1; rc=$?
        note "moe2 test_cuda_model $m rc=$rc: $(grep 'worst' "$OUT/moe2_model_$m.txt" | head -1 | sed 's/.*steps, //' | cut -c1-110); $(grep -o 'MoE ops recorded as one tiled persistent launch [0-9]*' "$OUT/moe2_model_$m.txt")$(grep -m1 'FAIL\|stuck' "$OUT/moe2_model_$m.txt" | cut -c1-200 | sed 's/^/; /')"
        moe2_ok=$rc
        if [ "${MOE2_SAN:-0}" = 1 ] && command -v compute-sanitizer >/dev/null; then
            VLLMC_CUDA_MOE2=1 timeout 300 compute-sanitizer --tool memcheck --error-exitcode 9 "$BIN/vllmc" generate -m "$f" \
                --prompt-ids "[11,22,33,44,55,66,77,88]" --ids --ignore-eos -n 4 >"$OUT/moe2_san_$m.txt" 2>&1; rc=$?
            note "moe2 $m under memcheck (generate, 4 steps) rc=$rc: $(grep -m1 'ERROR SUMMARY' "$OUT/moe2_san_$m.txt")"
        fi
        for rep in $(seq 1 "${MOE2_REPS:-2}"); do
            for on in 0 1; do
                [ "$on" = 1 ] && [ "$moe2_ok" != 0 ] && continue
                # shellcheck disable=SC2086
                VLLMC_CUDA_MOE2=$on timeout 200 "$BIN/vllmc" bench -m "$f" ${VAR_ARGS:--p 512 -g 256 -r 5} >"$OUT/moe2_${m}_${on}_$rep.txt" 2>&1; rc=$?
                note "moe2 $m $on run $rep rc=$rc: $(grep '^output tok/s' "$OUT/moe2_${m}_${on}_$rep.txt" | head -1)$(grep -o ': [0-9.]* a recorded step' "$OUT/moe2_${m}_${on}_$rep.txt" | head -1)"
            done
        done
    done
fi

if has ncu; then # Nsight Compute on a few launches of the first of BENCH_MODELS's engine bench: NCU_KERNEL (regex, default
    # mm_kernel_mmq), NCU_SKIP / NCU_COUNT launches, NCU_BENCH the bench's arguments, NCU_ENV variables for it; the
    # sections' details and the warps' stall reasons (cycles a warp spends in each state per issued instruction)
    wait_models
    m=${BENCH_MODELS%% *}; f=/tmp/models/$m.gguf
    NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
    if [ -s "$f" ] && [ -n "$NCU" ]; then
        # shellcheck disable=SC2086
        env ${NCU_ENV:-} timeout 300 "$NCU" --clock-control none --graph-profiling node -k "regex:${NCU_KERNEL:-mm_kernel_mmq}" \
            --launch-skip "${NCU_SKIP:-40}" --launch-count "${NCU_COUNT:-6}" --section SpeedOfLight --section WarpStateStats \
            --section SchedulerStats --section Occupancy --section ComputeWorkloadAnalysis --section LaunchStats \
            --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active.ratio" \
            "$BIN/vllmc" bench -m "$f" ${NCU_BENCH:---concurrency 64 -p 32 -g 8 -r 1} >"$OUT/ncu_$m.txt" 2>&1; rc=$?
        note "ncu $m rc=$rc ($(grep -c 'mm_kernel\|_kernel' "$OUT/ncu_$m.txt") kernel lines, ncu_$m.txt)"
    else
        note "ncu: no model or no ncu"
    fi
fi

if has binvar; then # the vllmc_<name> builds carried beside vllmc (gpu-carry.sh EXTRA_BUILDS), same bench each
    wait_models
    for m in ${BINVAR_MODELS:-$BENCH_MODELS}; do
        f=/tmp/models/$m.gguf
        [ -s "$f" ] || continue
        for rep in $(seq 1 "${BINVAR_REPS:-1}"); do # BINVAR_REPS > 1: the builds in turn, again (the noise between runs)
        for b in "$BIN"/vllmc "$BIN"/vllmc_*; do
            [ -x "$b" ] || continue
            n=$(basename "$b")
            # shellcheck disable=SC2086
            timeout 150 "$b" bench -m "$f" ${VAR_ARGS:--p 512 -g 256 -r 5} >"$OUT/binvar_${m}_$n.txt" 2>&1; rc=$?
            note "binvar $m $n rc=$rc: $(grep '^output tok/s' "$OUT/binvar_${m}_$n.txt" | head -1)"
        done
        done
    done
fi

if has ab; then
    wait_models
    best=""
    [ -s "$OUT/bench_gemv.txt" ] && best=$(python3 - "$OUT/bench_gemv.txt" <<'PYEOF'
import re, sys
# per row class (< 8192, < 65536, more rows): the kernel choice with the least total time over the shapes, with PDL
tot = {}
shape = None
for line in open(sys.argv[1]):
    m = re.match(r'^(.*?)\s+(\S+)\s+(\d+)\s+(\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+(\d+)\s+(\S+)( pdl)?', line)
    if not m or not m.group(10): continue
    name, rows = m.group(1), int(m.group(4)) * int(m.group(5))
    cls = 0 if rows < 8192 else 1 if rows < 65536 else 2
    t = re.match(r'\s*tr (\d) ks (\d) p (\d)', name)
    cfg = (int(t.group(1)), int(t.group(2)), int(t.group(3))) if t else (1 if cls == 0 else 4, 0, 0)
    tot.setdefault(cls, {}).setdefault(cfg, 0.0)
    tot[cls][cfg] += float(m.group(7))
out, pers = [], []
for c in range(3):
    cfg = min(tot[c], key=tot[c].get) if c in tot else (1 if c == 0 else 4, 0, 0)
    out += [str(cfg[0]), str(cfg[1])]
    pers.append(str(cfg[2]))
print(",".join(out + pers))
PYEOF
)
    old="1,0,4,0,4,0,0,0,0"
    AB_ARGS=${AB_ARGS:-"-p 512 -g 256 -r 3"}
    for m in $BENCH_MODELS; do
        f=/tmp/models/$m.gguf
        [ -s "$f" ] || { note "$m: model not generated"; continue; }
        vs=("0 0 $old" "1 0 $old" "1 1 $old" ${best:+"1 1 $best" "0 1 $best"})
        [ "$m" = "${BENCH_MODELS%% *}" ] || vs=("0 0 $old" "1 1 ${best:-$old}") # further models: before / after
        [ -n "${AB_CFG:-}" ] && vs+=("1 1 $AB_CFG")
        for v in "${vs[@]}"; do
            set -- $v
            # shellcheck disable=SC2086
            VLLMC_CUDA_PDL=$1 VLLMC_CUDA_FUSE_ADD=$2 VLLMC_CUDA_MM=$3 timeout 120 "$BIN/vllmc" bench -m "$f" $AB_ARGS \
                >"$OUT/ab_${m}_$1$2_${3//,/-}.txt" 2>&1; rc=$?
            note "$m pdl=$1 fuse_add=$2 mm=$3 rc=$rc: $(grep '^output tok/s' "$OUT/ab_${m}_$1$2_${3//,/-}.txt" | head -1)"
        done
    done
fi

if has prefillbench; then # pp512 with its profile, the same without the prefill paths, and the GEMM row threshold
    wait_models
    f=/tmp/models/qwen35-4b.gguf
    timeout 100 "$BIN/vllmc" bench -m "$f" -p 512 -g 32 -r 5 --profile >"$OUT/pp_new.txt" 2>&1; rc=$?
    sed -n '/profile of the prefill/,/wall TTFT/p' "$OUT/pp_new.txt"
    note "pp512 new rc=$rc: $(grep '| pp512' "$OUT/pp_new.txt") $(grep '^output tok/s' "$OUT/pp_new.txt" | cut -d'|' -f4)"
    if [ "${PP_OLD:-1}" = 1 ]; then
        VLLMC_CUDA_GEMM_ROWS=0 VLLMC_CUDA_GDN_CHUNKED=0 VLLMC_CUDA_ATTN_PREFILL=0 timeout 100 "$BIN/vllmc" bench -m "$f" -p 512 -g 8 \
            -r 3 --profile >"$OUT/pp_old.txt" 2>&1; rc=$?
        sed -n '/profile of the prefill/,/wall TTFT/p' "$OUT/pp_old.txt"
        note "pp512 old paths rc=$rc: $(grep '| pp512' "$OUT/pp_old.txt") $(grep '^output tok/s' "$OUT/pp_old.txt" | cut -d'|' -f4)"
    fi
    if [ -n "${PP_LONG:-}" ]; then
        timeout 100 "$BIN/vllmc" bench -m "$f" -p "$PP_LONG" -g 8 -r 3 --profile >"$OUT/pp_long.txt" 2>&1; rc=$?
        sed -n '/profile of the prefill/,/wall TTFT/p' "$OUT/pp_long.txt"
        note "pp$PP_LONG rc=$rc: $(grep "| pp$PP_LONG" "$OUT/pp_long.txt") $(grep '^output tok/s' "$OUT/pp_long.txt" | cut -d'|' -f4)"
    fi
    for p in ${PP_SWEEP:-16 32 64 128}; do
        for g in 1 0; do
            VLLMC_CUDA_GEMM_ROWS=$g timeout 40 "$BIN/vllmc" bench -m "$f" -p "$p" -g 2 -r 5 >/tmp/pp_sweep.txt 2>&1; cat /tmp/pp_sweep.txt >>"$OUT/pp_sweep.txt"
            note "pp$p gemm_rows=$g: $(grep "| pp$p" /tmp/pp_sweep.txt)"
        done
    done
fi

echo
echo "================ summary ================"
for s in "${summary[@]}"; do echo "$s"; done

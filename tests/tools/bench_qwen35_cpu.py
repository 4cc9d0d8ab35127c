#!/usr/bin/env python3
"""CPU prefill / decode speed of vllmc vs llama.cpp (llama-cpp-python) on Qwen3.5 hybrid shapes.

usage: bench_qwen35_cpu.py BUILD_DIR OUT_DIR [--shapes qwen35-tiny,qwen35-0.8b,qwen35moe-small]
                           [--threads 1] [--reps 5] [--prompt 64] [--gen 32]
Shapes are written by /work/shared/tools/synth_gguf.py (random Q4_K_M-like bytes), plus two extra shapes
defined here: qwen35-0.8b (Qwen3.5-0.8B: 1024 wide, 24 layers, 16/16 GDN heads, 248320 vocab, tied) and
qwen35moe-small (1024 wide, 8 layers, 64 experts top 8, expert width 512, 32768 vocab).
Runs alternate (ours, llama.cpp) REPS times on the same random prompt (also reported: the median of the
per-pair ratios, and the weight bytes read per decoded token with the GB/s both engines reach); ours reads the speeds that
`vllmc generate` prints (time inside model_forward), llama.cpp is timed around Llama.eval (prompt in one
call, then one eval per generated token; includes ~50 us of Python per call). Prints medians and spreads.
"""
import argparse
import json
import os
import random
import re
import subprocess
import sys
import time

import numpy as np

SYNTH = os.environ.get("VLLMC_SYNTH", "/work/shared/tools/synth_gguf.py")
EXTRA = {
    "qwen35-0.8b": dict(arch="qwen35", n_embd=1024, n_layer=24, n_ff=3584, n_head=8, n_head_kv=2, head_dim=256,
                        ssm_k_heads=16, ssm_v_heads=16, ssm_head_dim=128, conv=4, n_vocab=248320, tied=True),
    "qwen35moe-small": dict(arch="qwen35moe", n_embd=1024, n_layer=8, n_head=8, n_head_kv=2, head_dim=256,
                            ssm_k_heads=16, ssm_v_heads=16, ssm_head_dim=128, conv=4, n_vocab=32768, tied=False,
                            n_expert=64, n_expert_used=8, n_ff_exp=512, n_ff_shexp=512),
}


def make_shape(shape, path):
    if os.path.exists(path):
        return
    sys.path.insert(0, os.path.dirname(SYNTH))
    import synth_gguf
    synth_gguf.SHAPES.update(EXTRA)
    synth_gguf.build(shape).write(path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("out_dir")
    ap.add_argument("--shapes", default="qwen35-tiny,qwen35-0.8b,qwen35moe-small")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--prompt", type=int, default=64)
    ap.add_argument("--gen", type=int, default=32)
    a = ap.parse_args()
    import llama_cpp
    os.makedirs(a.out_dir, exist_ok=True)
    vllmc = os.path.join(a.build, "vllmc")
    random.seed(1)
    ids = [random.randrange(0, 400) for _ in range(a.prompt)]
    rows = []
    for shape in a.shapes.split(","):
        path = os.path.join(a.out_dir, f"synth-{shape}.gguf")
        make_shape(shape, path)
        res = {"ours_pp": [], "ours_tg": [], "ll_pp": [], "ll_tg": []}
        gb_per_token = 0.0
        m = llama_cpp.Llama(model_path=path, logits_all=False, n_ctx=a.prompt + a.gen + 8, n_batch=512,
                            n_threads=a.threads, n_threads_batch=a.threads, verbose=False)
        for _ in range(a.reps):
            out = subprocess.run([vllmc, "generate", "-m", path, "--prompt-ids", json.dumps(ids), "-n", str(a.gen),
                                  "--ids", "--ignore-eos", "-t", str(a.threads)], capture_output=True, text=True)
            pp = re.search(r"prompt: \d+ tokens in [\d.]+ s, ([\d.]+) tok/s", out.stderr)
            tg = re.search(r"generation: \d+ tokens in [\d.]+ s, ([\d.]+) tok/s", out.stderr)
            if not pp or not tg:
                sys.exit(f"vllmc failed on {shape}: {out.stderr[-2000:]}")
            res["ours_pp"].append(float(pp.group(1)))
            res["ours_tg"].append(float(tg.group(1)))
            bw = re.search(r"generation: .*\(([\d.]+) GB/s of weights\)", out.stderr)
            if bw:
                gb_per_token = float(bw.group(1)) / float(tg.group(1))
            m.reset()
            t0 = time.perf_counter()
            m.eval(ids)
            t1 = time.perf_counter()
            steps = []
            for _ in range(a.gen - 1):
                s0 = time.perf_counter()
                m.eval([5])
                steps.append(time.perf_counter() - s0)
            res["ll_pp"].append(a.prompt / (t1 - t0))
            res["ll_tg"].append(len(steps) / sum(steps))
        del m
        med = {k: float(np.median(v)) for k, v in res.items()}
        spread = {k: (min(v), max(v)) for k, v in res.items()}
        # ratios of each interleaved pair (ours run i vs llama.cpp run i), so load drift hits both sides alike
        paired = {k: float(np.median([o / l for o, l in zip(res["ours_" + k], res["ll_" + k])])) for k in ("pp", "tg")}
        rows.append((shape, med, spread, paired, gb_per_token))
        print(f"{shape}: " + ", ".join(f"{k} {med[k]:.1f} ({spread[k][0]:.1f}..{spread[k][1]:.1f})" for k in res) +
              f", paired ratios pp {paired['pp']:.2f}x tg {paired['tg']:.2f}x, weights read per token "
              f"{gb_per_token * 1e3:.1f} MB (ours {gb_per_token * med['ours_tg']:.1f} GB/s, "
              f"llama.cpp {gb_per_token * med['ll_tg']:.1f} GB/s at the median)", flush=True)
    print(f"\n| shape | threads | prefill ours | prefill llama.cpp | ratio | decode ours | decode llama.cpp | ratio |")
    print("|---|---|---|---|---|---|---|---|")
    for shape, med, sp, _, _ in rows:
        print(f"| {shape} | {a.threads} | {med['ours_pp']:.1f} ({sp['ours_pp'][0]:.1f}..{sp['ours_pp'][1]:.1f}) | "
              f"{med['ll_pp']:.1f} ({sp['ll_pp'][0]:.1f}..{sp['ll_pp'][1]:.1f}) | {med['ours_pp'] / med['ll_pp']:.2f}x | "
              f"{med['ours_tg']:.1f} ({sp['ours_tg'][0]:.1f}..{sp['ours_tg'][1]:.1f}) | "
              f"{med['ll_tg']:.1f} ({sp['ll_tg'][0]:.1f}..{sp['ll_tg'][1]:.1f}) | {med['ours_tg'] / med['ll_tg']:.2f}x |")


if __name__ == "__main__":
    main()

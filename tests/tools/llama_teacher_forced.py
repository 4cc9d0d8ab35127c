#!/usr/bin/env python3
"""Teacher-forced logits on the 8 prompts of tests/py/test_real_checkpoint.py: ours against llama.cpp, and
llama.cpp against itself.

usage: llama_teacher_forced.py MODEL.gguf VLLMC_BINARY [N_GEN] [--flash-attn]

For each prompt llama.cpp (llama-cpp-python, the test's settings) decodes N_GEN (64) greedy tokens the way
the test runs it: the prompt in one batch, then one token per step ("step" logits). The same tokens are then
fed as one batch to llama.cpp ("batch") and to vllmc (`generate --prompt-ids ... --dump-logits`; our logits do
not depend on the batch). Per generated position: relative difference ||a - b|| / ||b|| of the full logit
rows, llama.cpp's top-2 gap, and the positions where the argmax differs from llama.cpp's step token.
--flash-attn runs llama.cpp with flash attention on (the test runs it off, llama-cpp-python's default).
"""
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
import numpy as np
import llama_cpp

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "py"))
from test_real_checkpoint import QUESTIONS, chat_prompt  # noqa: E402


def main():
    fa = "--flash-attn" in sys.argv
    args = [a for a in sys.argv[1:] if a != "--flash-attn"]
    model, vllmc = args[0], args[1]
    N = int(args[2]) if len(args) > 2 else 64
    m = llama_cpp.Llama(model_path=model, n_ctx=512, n_threads=2, n_threads_batch=2, verbose=False, logits_all=True,
                        flash_attn=fa)
    nv = m.n_vocab()
    row = lambda i: np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(m._ctx.ctx, i), shape=(nv,)).copy()
    rel = lambda a, b: np.linalg.norm(a - b, axis=-1) / np.linalg.norm(b, axis=-1)
    all_o, all_b, n_close = [], [], 0
    for qi, q in enumerate(QUESTIONS):
        ids = m.tokenize(chat_prompt(q).encode(), add_bos=False, special=True)
        m.reset()
        m.eval(ids)
        gen, step = [], []
        for k in range(N):
            step.append(row(-1))
            gen.append(int(np.argmax(step[-1])))
            if k < N - 1:
                m.eval([gen[-1]])
        step = np.array(step)
        seq = ids + gen[:-1]
        m.reset()
        m.eval(seq)
        batch = np.array([row(i) for i in range(len(ids) - 1, len(seq))])
        with tempfile.TemporaryDirectory() as tmp:
            d = os.path.join(tmp, "logits.f32")
            r = subprocess.run([vllmc, "generate", "-m", model, "--prompt-ids", json.dumps(seq), "-n", "1", "--ids", "-t", "2",
                                "--dump-logits", d], capture_output=True, text=True)
            if r.returncode:
                sys.exit(r.stderr)
            ours = np.fromfile(d, np.float32).reshape(-1, nv)[len(ids) - 1:len(seq)]
        srt = np.sort(step, axis=-1)
        gap = srt[:, -1] - srt[:, -2]
        n_close += int((gap < 0.1).sum())
        o, b = rel(ours, step), rel(batch, step)
        all_o.append(o)
        all_b.append(b)
        d_o = [k for k in range(N) if ours[k].argmax() != gen[k]]
        d_b = [k for k in range(N) if batch[k].argmax() != gen[k]]
        print(f"prompt {qi} ({len(ids)} ids): ours vs llama.cpp step: mean {o.mean():.4f} max {o.max():.4f} | "
              f"llama.cpp batch vs step: mean {b.mean():.4f} max {b.max():.4f} | argmax differs: ours at {d_o} "
              f"(gaps {[round(float(gap[k]), 4) for k in d_o]}), llama.cpp batch at {d_b}", flush=True)
    o, b = np.concatenate(all_o), np.concatenate(all_b)
    print(f"all {o.size} positions: ours vs llama.cpp step: median {np.median(o):.4f} mean {o.mean():.4f} max {o.max():.4f}; "
          f"llama.cpp batch vs step: median {np.median(b):.4f} mean {b.mean():.4f} max {b.max():.4f}; "
          f"steps with llama.cpp top-2 gap < 0.1: {n_close}")


if __name__ == "__main__":
    main()

"""Qwen3.5 hybrids (qwen35 dense, qwen35moe) vs llama.cpp on tiny generated models.

For each arch and weight type (F32, Q8_0, Q4_K_M; made by tests/tools/make_tiny_qwen35.py, quantized by
llama.cpp's llama_model_quantize) and a random 64-token prompt (seed printed; VLLMC_TEST_SEED replays):
  - logits at every prompt position, full vocabulary: per position max |ours - llama| / max |llama|; the
    largest under BOUNDS[arch, type][0] and the median under BOUNDS[arch, type][1];
  - greedy continuation of 32 tokens: identical for F32 (free running), and the logits of every step
    within the bound.
Quantized weights: both sides quantize activations (Q8_0 / Q8_K) from f32 values that differ in the last
bits (different summation orders); once one rounding flips, the two runs carry independent quantization
noise of ~0.5% per layer, and for qwen35moe a flip can also swap a near-tied expert. So the bound is
measured, not bit-exact, and free-running greedy text can legitimately part at a near-tied step; there
the continuation is checked teacher-forced (llama.cpp's tokens fed to both) against the same bound, and
the free-running agreement length is printed.
llama.cpp disagrees with itself by the same amount on the MoE files: its 64-token batch vs its token-by-token
path (n_batch 1) differ by up to 1.7e-2 (Q8_0) / 3.3e-2 (Q4_K_M) relative on the same prompts.
Both sides use an f32 KV cache (llama.cpp's default F16 cache rounds K/V; a separate test compares with
F16 caches on both sides). Our logits come from `vllmc generate --prompt-ids ... --dump-logits`.
Measured 2026-12-02 (2 threads, 12 random prompts each; max over prompts / median position error):
  qwen35    F32 < 1e-6    Q8_0 1.9e-2 / 3.8e-3    Q4_K_M 2.7e-2 / 6.4e-3
  qwen35moe F32 < 7e-6    Q8_0 6.1e-2 / 6.9e-3    Q4_K_M 5.7e-2 / 7.3e-3
"""
import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("VLLMC_BUILD", "build")
VLLMC = os.path.join(ROOT, BUILD, "vllmc") if not os.path.isabs(BUILD) else os.path.join(BUILD, "vllmc")
GEN = os.path.join(ROOT, "tests", "tools", "make_tiny_qwen35.py")

N_PROMPT = 64
N_GEN = 32
N_REAL_VOCAB = 507  # ids below the special tokens of the tiny vocabulary
BOUNDS = {  # (max over positions, median over positions) of the per-position relative error
    ("qwen35", "f32"): (1e-3, 1e-4), ("qwen35", "q8_0"): (6e-2, 2.5e-2), ("qwen35", "q4_k_m"): (6e-2, 2.5e-2),
    ("qwen35moe", "f32"): (1e-3, 1e-4), ("qwen35moe", "q8_0"): (1.5e-1, 4e-2), ("qwen35moe", "q4_k_m"): (1.5e-1, 4e-2),
}

llama_cpp = pytest.importorskip("llama_cpp", reason="llama-cpp-python (the oracle) is not installed")


def seed():
    s = os.environ.get("VLLMC_TEST_SEED")
    return int(s, 0) if s else int(time.time() * 1000) % (1 << 31)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    if not os.path.exists(VLLMC):
        pytest.fail(f"{VLLMC} not built")
    d = tmp_path_factory.mktemp("qwen35")
    out = subprocess.run([sys.executable, GEN, str(d)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-3000:]
    return str(d)


def llama_model(path, f32_kv=True):
    kw = dict(type_k=0, type_v=0) if f32_kv else {}
    return llama_cpp.Llama(model_path=path, logits_all=True, n_ctx=256, n_batch=256, n_threads=2, verbose=False, **kw)


def llama_run(path, ids, n_gen, f32_kv=True):
    """Prompt logits and the greedy continuation (free running) from llama.cpp."""
    m = llama_model(path, f32_kv)
    m.eval(ids)
    prompt = np.array(m.scores[:len(ids)], dtype=np.float64)
    gen = []
    nxt = int(np.argmax(m.scores[len(ids) - 1]))
    for g in range(n_gen):
        gen.append(nxt)
        if g == n_gen - 1:
            break
        m.eval([nxt])
        nxt = int(np.argmax(m.scores[m.n_tokens - 1]))
    all_rows = np.array(m.scores[:m.n_tokens], dtype=np.float64)
    return prompt, gen, all_rows


def ours_run(path, ids, n_gen, tmp, f32_kv=True):
    dump = os.path.join(tmp, "logits.bin")
    cmd = [VLLMC, "generate", "-m", path, "--prompt-ids", json.dumps(ids), "-n", str(n_gen), "--ids",
           "--ignore-eos", "--temperature", "0", "-t", "2", "--dump-logits", dump]
    if f32_kv:
        cmd.append("--kv-f32")
    out = subprocess.run(cmd, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-3000:]
    gen = json.loads(out.stdout.strip().splitlines()[-1])
    return np.fromfile(dump, dtype=np.float32).astype(np.float64), gen


def rel_err_rows(a, b):
    return np.abs(a - b).max(axis=1) / np.abs(b).max(axis=1)


@pytest.mark.parametrize("qtype", ["f32", "q8_0", "q4_k_m"])
@pytest.mark.parametrize("arch", ["qwen35", "qwen35moe"])
def test_logits_and_greedy(models, arch, qtype, tmp_path):
    path = os.path.join(models, f"{arch}-tiny-{qtype}.gguf")
    s = seed()
    ids = [int(x) for x in np.random.default_rng(s).integers(0, N_REAL_VOCAB, N_PROMPT)]
    ref_prompt, ref_gen, ref_all = llama_run(path, ids, N_GEN)
    V = ref_prompt.shape[1]
    ours_flat, our_gen = ours_run(path, ids, N_GEN, str(tmp_path))
    ours = ours_flat.reshape(-1, V)
    assert ours.shape[0] == N_PROMPT + N_GEN - 1
    err = rel_err_rows(ours[:N_PROMPT], ref_prompt)
    agree = next((i for i, (a, b) in enumerate(zip(our_gen, ref_gen)) if a != b), N_GEN)
    print(f"{arch} {qtype} seed {s}: prompt logits rel err max {err.max():.2e} median {np.median(err):.2e}; "
          f"greedy agrees for {agree}/{N_GEN} tokens")
    bound_max, bound_med = BOUNDS[(arch, qtype)]
    assert err.max() < bound_max, f"seed {s}: position {int(err.argmax())} rel err {err.max():.3e}"
    assert np.median(err) < bound_med, f"seed {s}: median rel err {np.median(err):.3e}"
    if qtype == "f32":
        assert our_gen == ref_gen, f"seed {s}: greedy continuation differs at token {agree}"
        n = min(ours.shape[0], ref_all.shape[0])
        e_all = rel_err_rows(ours[:n], ref_all[:n])
        assert e_all.max() < bound_max
        return
    # Teacher-forced along llama.cpp's continuation.
    forced = ids + ref_gen[:-1]
    ours_tf, _ = ours_run(path, forced, 1, str(tmp_path))
    ours_tf = ours_tf.reshape(-1, V)[N_PROMPT - 1:]
    ref_tf = ref_all[N_PROMPT - 1:]
    assert ours_tf.shape == ref_tf.shape
    e_tf = rel_err_rows(ours_tf, ref_tf)
    same = ours_tf.argmax(axis=1) == ref_tf.argmax(axis=1)
    print(f"  teacher-forced continuation: rel err max {e_tf.max():.2e}, argmax equal on {int(same.sum())}/{N_GEN}")
    assert e_tf.max() < bound_max, f"seed {s}: continuation rel err {e_tf.max():.3e}"


@pytest.mark.parametrize("arch", ["qwen35", "qwen35moe"])
def test_f16_kv_cache(models, arch, tmp_path):
    """Default F16 KV caches on both sides (F32 weights)."""
    path = os.path.join(models, f"{arch}-tiny-f32.gguf")
    s = seed()
    ids = [int(x) for x in np.random.default_rng(s).integers(0, N_REAL_VOCAB, N_PROMPT)]
    ref_prompt, ref_gen, _ = llama_run(path, ids, 8, f32_kv=False)
    ours, our_gen = ours_run(path, ids, 8, str(tmp_path), f32_kv=False)
    err = rel_err_rows(ours.reshape(-1, ref_prompt.shape[1])[:N_PROMPT], ref_prompt)
    print(f"{arch} f32 weights, F16 KV, seed {s}: prompt rel err max {err.max():.2e}")
    assert err.max() < 1e-3


@pytest.mark.parametrize("arch", ["qwen35", "qwen35moe"])
def test_mtp_block_skipped(models, arch, tmp_path):
    """A file with an MTP block (block_count = n_layer + 1, nextn_predict_layers = 1) gives the logits of the
    same weights without it, in both engines."""
    s = seed()
    ids = [int(x) for x in np.random.default_rng(s).integers(0, N_REAL_VOCAB, 16)]
    plain, _ = ours_run(os.path.join(models, f"{arch}-tiny-f32.gguf"), ids, 1, str(tmp_path))
    mtp_path = os.path.join(models, f"{arch}-tiny-mtp-f32.gguf")
    with_mtp, _ = ours_run(mtp_path, ids, 1, str(tmp_path))
    assert np.array_equal(plain, with_mtp)
    ref, _, _ = llama_run(mtp_path, ids, 1)
    err = rel_err_rows(with_mtp.reshape(-1, ref.shape[1])[:len(ids)], ref)
    assert err.max() < 1e-3, f"seed {s}: rel err {err.max():.3e}"

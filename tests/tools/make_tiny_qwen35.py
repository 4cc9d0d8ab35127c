#!/usr/bin/env python3
"""Write tiny Qwen3.5 hybrid GGUFs (arch `qwen35` dense and `qwen35moe`) with sane float weights.

The files use the real tensor names, shapes and metadata keys llama.cpp expects (ARCH-QWEN35.md section 3),
in the conventions the converter produces: norm weights with the +1 folded in (ssm_norm without),
ssm_a = -exp(A_log), ssm_dt.bias added inside the softplus, conv taps {4, conv_dim} with tap 3 on the
current token, attn_q rows per head [256 query | 256 gate], value heads tiled (n_v_head = 2 * n_k_head so
the tiling matters). A small byte-level BPE vocabulary (256 byte tokens, merges learned from a fixed
text, ChatML specials) makes llama.cpp's loader happy.

usage: make_tiny_qwen35.py OUT_DIR [--types f32,q8_0,q4_k_m] [--arch qwen35,qwen35moe,qwen35-wide,qwen35moe-wide]
Writes OUT_DIR/qwen35-tiny-{f32,q8_0,q4_k_m}.gguf and qwen35moe-tiny-*.gguf (quantized variants through
llama_cpp.llama_model_quantize), plus {arch}-tiny-mtp-f32.gguf: the same weights followed by an MTP block
(block_count = n_layer + 1, nextn_predict_layers = 1) that a plain forward must skip. Prints the paths.
Deterministic (fixed seeds).
"""
import argparse
import os
import re
import sys
from collections import Counter

import numpy as np

import gguf

# Shapes: 4 layers with full_attention_interval 4, so layers 0-2 are Gated DeltaNet and layer 3 attention.
# Widths are multiples of 256 so every matrix can be a K-quant.
SHAPES = {
    "qwen35": dict(n_embd=256, n_layer=4, n_ff=512, n_head=2, n_kv_head=1, head_dim=256, n_k_head=2,
                   n_v_head=4, d_state=128, d_conv=4, n_vocab=512, tied=True, seed=35),
    "qwen35moe": dict(n_embd=256, n_layer=4, n_head=2, n_kv_head=1, head_dim=256, n_k_head=2, n_v_head=4,
                      d_state=128, d_conv=4, n_vocab=512, tied=False, n_expert=16, n_expert_used=4,
                      n_ff_exp=256, n_ff_shexp=256, seed=36),
    # qwen35-4b's residual width (2,560) with a narrow FFN (1,024) and small heads: the widths the GPU decode's
    # tiled FFN launch takes (VLLMC_CUDA_MEGA2), at ~200 MB of f32 (tests/py/test_cuda_host.py)
    "qwen35-wide": dict(arch="qwen35", n_embd=2560, n_layer=4, n_ff=1024, n_head=2, n_kv_head=1, head_dim=256, n_k_head=2,
                        n_v_head=4, d_state=128, d_conv=4, n_vocab=512, tied=True, seed=37, no_mtp=True),
    # experts and a shared expert in pairs of super-blocks (512 wide): the widths the GPU decode's tiled MoE launch
    # takes (VLLMC_CUDA_MOE2), at ~215 MB of f32
    "qwen35moe-wide": dict(arch="qwen35moe", n_embd=512, n_layer=4, n_head=2, n_kv_head=1, head_dim=256, n_k_head=2,
                           n_v_head=4, d_state=128, d_conv=4, n_vocab=512, tied=False, n_expert=16, n_expert_used=4,
                           n_ff_exp=512, n_ff_shexp=512, seed=38, no_mtp=True),
}
INTERVAL = 4
N_ROT = 64
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"]

TEXT = """The quick brown fox jumps over the lazy dog. The capital of France is Paris, and the capital of
Germany is Berlin. A model reads tokens, one after another, and writes the next one. Every layer keeps a
state: the attention layers keep keys and values, the delta-net layers keep a small matrix that forgets a
little at every step and learns what the new token says. Hello, world! How are you today? I am fine, thank
you. Numbers are split into digits: 1 2 3 4 5 6 7 8 9 0, and 2+2=4. The weather is nice; the sun is shining
and the birds are singing in the trees. def main(): return 0  # a comment in code. She said that they would
come back in the morning, but nobody knew when. Once upon a time there was a little house at the edge of a
forest, and in the house lived an old man with his cat.
"""


def bytes_to_unicode():
    """GPT-2 byte <-> printable unicode mapping (the byte-level BPE alphabet)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\xa1"), ord("\xac") + 1)) + \
        list(range(ord("\xae"), ord("\xff") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, [chr(c) for c in cs]))


def build_vocab(n_vocab):
    """256 byte tokens, then merges learned greedily from TEXT, then the specials at the end."""
    b2u = bytes_to_unicode()
    tokens = [b2u[b] for b in range(256)]
    words = Counter()
    for w in re.findall(r" ?[A-Za-z]+| ?[0-9]| ?[^\sA-Za-z0-9]+|\s+", TEXT):
        words[tuple(b2u[b] for b in w.encode("utf-8"))] += 1
    merges = []
    n_merges = n_vocab - 256 - len(SPECIALS)
    vocab_set = set(tokens)
    while len(merges) < n_merges:
        pairs = Counter()
        for w, c in words.items():
            for a, b in zip(w, w[1:]):
                pairs[(a, b)] += c
        if not pairs:
            break
        (a, b), _ = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))
        merges.append(f"{a} {b}")
        if a + b not in vocab_set:
            tokens.append(a + b)
            vocab_set.add(a + b)
        new_words = Counter()
        for w, c in words.items():
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and w[i] == a and w[i + 1] == b:
                    out.append(a + b)
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            new_words[tuple(out)] += c
        words = new_words
        if len(tokens) >= n_vocab - len(SPECIALS):
            break
    while len(tokens) < n_vocab - len(SPECIALS):  # pad (not reached with the text above)
        tokens.append(f"[PAD{len(tokens)}]")
    types = [gguf.TokenType.NORMAL] * len(tokens)
    for s in SPECIALS:
        tokens.append(s)
        types.append(gguf.TokenType.CONTROL)
    assert len(tokens) == n_vocab
    return tokens, types, merges


def write_model(shape, path, mtp=False):
    s = SHAPES[shape]
    arch = s.get("arch", shape)
    rng = np.random.default_rng(s["seed"])
    n_embd, n_layer = s["n_embd"], s["n_layer"]
    n_head, n_kv_head, hd = s["n_head"], s["n_kv_head"], s["head_dim"]
    nk, nv, ds, dconv = s["n_k_head"], s["n_v_head"], s["d_state"], s["d_conv"]
    key_dim, value_dim = nk * ds, nv * ds
    conv_dim = 2 * key_dim + value_dim
    n_vocab = s["n_vocab"]
    moe = arch == "qwen35moe"

    w = gguf.GGUFWriter(path, arch)
    w.add_string("general.name", f"{arch}-tiny")
    w.add_uint32(f"{arch}.block_count", n_layer + (1 if mtp else 0))
    if mtp:
        w.add_uint32(f"{arch}.nextn_predict_layers", 1)
    w.add_uint32(f"{arch}.context_length", 4096)
    w.add_uint32(f"{arch}.embedding_length", n_embd)
    if not moe:
        w.add_uint32(f"{arch}.feed_forward_length", s["n_ff"])
    else:
        w.add_uint32(f"{arch}.expert_count", s["n_expert"])
        w.add_uint32(f"{arch}.expert_used_count", s["n_expert_used"])
        w.add_uint32(f"{arch}.expert_feed_forward_length", s["n_ff_exp"])
        w.add_uint32(f"{arch}.expert_shared_feed_forward_length", s["n_ff_shexp"])
    w.add_uint32(f"{arch}.attention.head_count", n_head)
    w.add_uint32(f"{arch}.attention.head_count_kv", n_kv_head)
    w.add_uint32(f"{arch}.attention.key_length", hd)
    w.add_uint32(f"{arch}.attention.value_length", hd)
    w.add_float32(f"{arch}.attention.layer_norm_rms_epsilon", 1e-6)
    w.add_float32(f"{arch}.rope.freq_base", 1e7)
    w.add_uint32(f"{arch}.rope.dimension_count", N_ROT)
    w.add_array(f"{arch}.rope.dimension_sections", [11, 11, 10, 0])
    w.add_uint32(f"{arch}.ssm.conv_kernel", dconv)
    w.add_uint32(f"{arch}.ssm.state_size", ds)
    w.add_uint32(f"{arch}.ssm.group_count", nk)
    w.add_uint32(f"{arch}.ssm.time_step_rank", nv)
    w.add_uint32(f"{arch}.ssm.inner_size", value_dim)
    w.add_uint32(f"{arch}.full_attention_interval", INTERVAL)
    w.add_uint32("general.file_type", 0)  # ALL_F32

    tokens, types, merges = build_vocab(n_vocab)
    w.add_string("tokenizer.ggml.model", "gpt2")
    w.add_string("tokenizer.ggml.pre", "qwen35")
    w.add_array("tokenizer.ggml.tokens", tokens)
    w.add_array("tokenizer.ggml.token_type", [int(t) for t in types])
    w.add_array("tokenizer.ggml.merges", merges)
    w.add_uint32("tokenizer.ggml.eos_token_id", tokens.index("<|im_end|>"))
    w.add_uint32("tokenizer.ggml.bos_token_id", tokens.index("<|endoftext|>"))
    w.add_uint32("tokenizer.ggml.padding_token_id", tokens.index("<|endoftext|>"))
    w.add_bool("tokenizer.ggml.add_bos_token", False)
    tmpl = os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "testdata", "chat-templates",
                        "Qwen3.5-4B.jinja")
    if os.path.exists(tmpl):
        with open(tmpl) as f:
            w.add_string("tokenizer.chat_template", f.read())

    def mat(n_out, n_in, gain=1.0):
        # numpy [n_out][n_in] = ggml {n_in, n_out}
        return (rng.standard_normal((n_out, n_in)) * (gain / np.sqrt(n_in))).astype(np.float32)

    def norm_w(n):  # GGUF norm weights carry the +1 already
        return (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32)

    tensors = []

    def attn_block(p):
        tensors.append((p + "attn_q.weight", mat(n_head * 2 * hd, n_embd)))
        tensors.append((p + "attn_k.weight", mat(n_kv_head * hd, n_embd)))
        tensors.append((p + "attn_v.weight", mat(n_kv_head * hd, n_embd)))
        tensors.append((p + "attn_q_norm.weight", norm_w(hd)))
        tensors.append((p + "attn_k_norm.weight", norm_w(hd)))
        tensors.append((p + "attn_output.weight", mat(n_embd, n_head * hd)))

    def ffn_block(p):
        if not moe:
            n_ff = s["n_ff"]
            tensors.append((p + "ffn_gate.weight", mat(n_ff, n_embd)))
            tensors.append((p + "ffn_up.weight", mat(n_ff, n_embd)))
            tensors.append((p + "ffn_down.weight", mat(n_embd, n_ff)))
        else:
            E, ffe, ffs = s["n_expert"], s["n_ff_exp"], s["n_ff_shexp"]
            tensors.append((p + "ffn_gate_inp.weight", mat(E, n_embd, 4.0)))
            tensors.append((p + "ffn_gate_exps.weight", np.stack([mat(ffe, n_embd) for _ in range(E)])))
            tensors.append((p + "ffn_up_exps.weight", np.stack([mat(ffe, n_embd) for _ in range(E)])))
            tensors.append((p + "ffn_down_exps.weight", np.stack([mat(n_embd, ffe) for _ in range(E)])))
            tensors.append((p + "ffn_gate_inp_shexp.weight", (rng.standard_normal(n_embd) / np.sqrt(n_embd)).astype(np.float32)))
            tensors.append((p + "ffn_gate_shexp.weight", mat(ffs, n_embd)))
            tensors.append((p + "ffn_up_shexp.weight", mat(ffs, n_embd)))
            tensors.append((p + "ffn_down_shexp.weight", mat(n_embd, ffs)))
    tensors.append(("token_embd.weight", (0.5 * rng.standard_normal((n_vocab, n_embd))).astype(np.float32)))
    tensors.append(("output_norm.weight", norm_w(n_embd)))
    if not s["tied"]:
        tensors.append(("output.weight", mat(n_vocab, n_embd, 8.0)))
    for i in range(n_layer):
        p = f"blk.{i}."
        tensors.append((p + "attn_norm.weight", norm_w(n_embd)))
        tensors.append((p + "post_attention_norm.weight", norm_w(n_embd)))
        if (i + 1) % INTERVAL != 0:  # Gated DeltaNet
            tensors.append((p + "attn_qkv.weight", mat(conv_dim, n_embd, 2.0)))
            tensors.append((p + "attn_gate.weight", mat(value_dim, n_embd)))
            tensors.append((p + "ssm_beta.weight", mat(nv, n_embd)))
            tensors.append((p + "ssm_alpha.weight", mat(nv, n_embd)))
            tensors.append((p + "ssm_conv1d.weight", (0.5 * rng.standard_normal((conv_dim, dconv))).astype(np.float32)))
            tensors.append((p + "ssm_dt.bias", (0.5 * rng.standard_normal(nv)).astype(np.float32)))
            a_log = np.log(rng.uniform(1.0, 16.0, nv))
            tensors.append((p + "ssm_a", (-np.exp(a_log)).astype(np.float32)))
            tensors.append((p + "ssm_norm.weight", (1.0 + 0.1 * rng.standard_normal(ds)).astype(np.float32)))
            tensors.append((p + "ssm_out.weight", mat(n_embd, value_dim)))
        else:  # gated full attention
            attn_block(p)
        ffn_block(p)
    if mtp:  # the MTP block: one full-attention layer + nextn tensors, after the main weights
        p = f"blk.{n_layer}."
        tensors.append((p + "attn_norm.weight", norm_w(n_embd)))
        tensors.append((p + "post_attention_norm.weight", norm_w(n_embd)))
        attn_block(p)
        ffn_block(p)
        tensors.append((p + "nextn.eh_proj.weight", mat(n_embd, 2 * n_embd)))
        tensors.append((p + "nextn.enorm.weight", norm_w(n_embd)))
        tensors.append((p + "nextn.hnorm.weight", norm_w(n_embd)))
        tensors.append((p + "nextn.shared_head_norm.weight", norm_w(n_embd)))
    for name, t in tensors:
        w.add_tensor(name, np.ascontiguousarray(t, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def quantize(src, dst, ftype):
    import llama_cpp
    p = llama_cpp.llama_model_quantize_default_params()
    p.ftype = ftype
    p.nthread = 2
    rc = llama_cpp.llama_model_quantize(src.encode(), dst.encode(), p)
    if rc != 0:
        raise RuntimeError(f"llama_model_quantize({src} -> {dst}) failed: {rc}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out_dir")
    ap.add_argument("--types", default="f32,q8_0,q4_k_m")
    ap.add_argument("--arch", default="qwen35,qwen35moe")
    args = ap.parse_args()
    os.makedirs(args.out_dir, exist_ok=True)
    for arch in args.arch.split(","):
        f32 = os.path.join(args.out_dir, f"{arch}-tiny-f32.gguf")
        write_model(arch, f32)
        if not SHAPES[arch].get("no_mtp"):
            mtp = os.path.join(args.out_dir, f"{arch}-tiny-mtp-f32.gguf")
            write_model(arch, mtp, mtp=True)
            print(mtp)
        for t in args.types.split(","):
            if t == "f32":
                print(f32)
                continue
            import llama_cpp
            ftype = {"q8_0": llama_cpp.LLAMA_FTYPE_MOSTLY_Q8_0, "q4_k_m": llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_K_M}[t]
            dst = os.path.join(args.out_dir, f"{arch}-tiny-{t}.gguf")
            quantize(f32, dst, ftype)
            print(dst)
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Write tiny dense GGUF models (archs llama, qwen2, qwen3) with sane float weights, for oracle tests.

Each model uses the real tensor names and metadata keys llama.cpp expects, and exercises what sets the
family apart: llama (normal RoPE pairing, llama3-style rope_freqs factors, separate output head),
qwen2 (NeoX RoPE, q/k/v biases, tied embeddings), qwen3 (NeoX RoPE, per-head q/k RMSNorm, head_dim * n_head
!= n_embd). Widths are multiples of 256 so every matrix can be a K-quant, except qwen2w's (896). The vocabulary is a small
byte-level BPE (256 byte tokens, merges learned from a fixed text, ChatML specials) that llama.cpp loads.

usage: make_tiny_models.py OUT_DIR [--types f32,q8_0,q4_k_m] [--arch llama,qwen2,qwen3[,qwen2w]]
Writes OUT_DIR/<arch>-tiny-<type>.gguf (quantized variants through llama_cpp.llama_model_quantize) and prints
their paths. Deterministic (fixed seeds).
"""
import argparse
import os
import re
import sys
from collections import Counter

import numpy as np

import gguf

SHAPES = {
    "llama": dict(n_embd=256, n_layer=3, n_ff=512, n_head=4, n_kv_head=2, head_dim=64, n_vocab=384,
                  tied=False, bias=False, qk_norm=False, rope_base=10000.0, rope_freqs=True, seed=11),
    "qwen2": dict(n_embd=256, n_layer=3, n_ff=768, n_head=4, n_kv_head=1, head_dim=64, n_vocab=384,
                  tied=True, bias=True, qk_norm=False, rope_base=1000000.0, rope_freqs=False, seed=22),
    "qwen3": dict(n_embd=256, n_layer=3, n_ff=512, n_head=4, n_kv_head=2, head_dim=128, n_vocab=384,
                  tied=False, bias=False, qk_norm=True, rope_base=1000000.0, rope_freqs=False, seed=33),
    # qwen2 at Qwen2-0.5B's width (896: not a multiple of 256, so a K-quant mix falls back to Q5_0 / Q8_0 for the
    # matrices of 896 columns, as that checkpoint's Q4_K_M file has them); not in the default --arch list
    "qwen2w": dict(arch="qwen2", n_embd=896, n_layer=2, n_ff=768, n_head=14, n_kv_head=2, head_dim=64, n_vocab=384,
                   tied=True, bias=True, qk_norm=False, rope_base=1000000.0, rope_freqs=False, seed=44),
}
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

CORPUS = """In the beginning the engine read a file, mapped it into memory and found every tensor by its name.
Then it walked the layers: a norm, three projections, a rotation of the queries and keys, attention over
the cache, an output projection, and a gated feed-forward block. def add(a, b): return a + b  # simple
The numbers 0 1 2 3 4 5 6 7 8 9 are single tokens here, and so are most of the short words in this text.
Tokens stream out one by one; the sampler picks each from the logits the head produces.
"""


def byte_alphabet():
    """The GPT-2 byte-level alphabet: each byte maps to one printable code point."""
    keep = [b for b in range(256) if (33 <= b <= 126) or (161 <= b <= 172) or (174 <= b <= 255)]
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def make_vocab(n_vocab):
    alpha = byte_alphabet()
    tokens = [alpha[b] for b in range(256)]
    seqs = Counter(tuple(alpha[b] for b in piece.encode())
                   for piece in re.findall(r" ?[A-Za-z]+| ?[0-9]| ?[^\sA-Za-z0-9]+|\s+", CORPUS))
    merges, known = [], set(tokens)
    while len(tokens) < n_vocab - len(SPECIALS):
        pairs = Counter()
        for s, c in seqs.items():
            for p in zip(s, s[1:]):
                pairs[p] += c
        if not pairs:
            break
        best = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))[0]
        merges.append(f"{best[0]} {best[1]}")
        joined = best[0] + best[1]
        if joined not in known:
            tokens.append(joined)
            known.add(joined)
        nxt = Counter()
        for s, c in seqs.items():
            out, i = [], 0
            while i < len(s):
                if i + 1 < len(s) and (s[i], s[i + 1]) == best:
                    out.append(joined)
                    i += 2
                else:
                    out.append(s[i])
                    i += 1
            nxt[tuple(out)] += c
        seqs = nxt
    while len(tokens) < n_vocab - len(SPECIALS):
        tokens.append(f"<unused{len(tokens)}>")
    types = [int(gguf.TokenType.NORMAL)] * len(tokens) + [int(gguf.TokenType.CONTROL)] * len(SPECIALS)
    tokens += SPECIALS
    return tokens, types, merges


def write_model(arch, path, user_tokens=()):
    """user_tokens: extra USER_DEFINED tokens (decoded as their literal text) appended after the specials."""
    s = SHAPES[arch]
    name, arch = arch, s.get("arch", arch)  # (the file's architecture; name: the shape's key)
    rng = np.random.default_rng(s["seed"])
    E, L, F = s["n_embd"], s["n_layer"], s["n_ff"]
    H, KV, D, V = s["n_head"], s["n_kv_head"], s["head_dim"], s["n_vocab"] + len(user_tokens)

    w = gguf.GGUFWriter(path, arch)
    w.add_string("general.name", f"{name}-tiny")
    w.add_uint32(f"{arch}.block_count", L)
    w.add_uint32(f"{arch}.context_length", 2048)
    w.add_uint32(f"{arch}.embedding_length", E)
    w.add_uint32(f"{arch}.feed_forward_length", F)
    w.add_uint32(f"{arch}.attention.head_count", H)
    w.add_uint32(f"{arch}.attention.head_count_kv", KV)
    if D * H != E:
        w.add_uint32(f"{arch}.attention.key_length", D)
        w.add_uint32(f"{arch}.attention.value_length", D)
    w.add_float32(f"{arch}.attention.layer_norm_rms_epsilon", 1e-6 if arch != "llama" else 1e-5)
    w.add_float32(f"{arch}.rope.freq_base", s["rope_base"])
    w.add_uint32(f"{arch}.rope.dimension_count", D)
    if arch == "llama":
        w.add_uint32("llama.vocab_size", V)
    w.add_uint32("general.file_type", 0)

    tokens, types, merges = make_vocab(V - len(user_tokens))
    tokens += list(user_tokens)
    types += [int(gguf.TokenType.USER_DEFINED)] * len(user_tokens)
    w.add_string("tokenizer.ggml.model", "gpt2")
    w.add_string("tokenizer.ggml.pre", "qwen2" if arch != "llama" else "llama-bpe")
    w.add_array("tokenizer.ggml.tokens", tokens)
    w.add_array("tokenizer.ggml.token_type", types)
    w.add_array("tokenizer.ggml.merges", merges)
    w.add_uint32("tokenizer.ggml.bos_token_id", tokens.index("<|endoftext|>"))
    w.add_uint32("tokenizer.ggml.eos_token_id", tokens.index("<|im_end|>"))
    w.add_uint32("tokenizer.ggml.padding_token_id", tokens.index("<|endoftext|>"))
    w.add_bool("tokenizer.ggml.add_bos_token", False)

    def mat(n_out, n_in, gain=1.0):  # rows = outputs; unit-variance outputs for unit-variance inputs
        return (rng.standard_normal((n_out, n_in)) * (gain / np.sqrt(n_in))).astype(np.float32)

    def norm_w(n):
        return (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32)

    def bias(n):
        return (0.2 * rng.standard_normal(n)).astype(np.float32)

    t = [("token_embd.weight", (0.5 * rng.standard_normal((V, E))).astype(np.float32)),
         ("output_norm.weight", norm_w(E))]
    if not s["tied"]:
        t.append(("output.weight", mat(V, E, 6.0)))
    if s["rope_freqs"]:
        # llama3-style: factor 1 for high frequencies, up to 8 for the lowest, smooth between
        f = np.ones(D // 2, dtype=np.float32)
        f[D // 4:] = np.linspace(1.0, 8.0, D // 2 - D // 4, dtype=np.float32)
        t.append(("rope_freqs.weight", f))
    for i in range(L):
        p = f"blk.{i}."
        t += [(p + "attn_norm.weight", norm_w(E)),
              (p + "attn_q.weight", mat(H * D, E, 2.0)),
              (p + "attn_k.weight", mat(KV * D, E, 2.0)),
              (p + "attn_v.weight", mat(KV * D, E)),
              (p + "attn_output.weight", mat(E, H * D, 0.5)),
              (p + "ffn_norm.weight", norm_w(E)),
              (p + "ffn_gate.weight", mat(F, E)),
              (p + "ffn_up.weight", mat(F, E)),
              (p + "ffn_down.weight", mat(E, F, 0.5))]
        if s["bias"]:
            t += [(p + "attn_q.bias", bias(H * D)), (p + "attn_k.bias", bias(KV * D)), (p + "attn_v.bias", bias(KV * D))]
        if s["qk_norm"]:
            t += [(p + "attn_q_norm.weight", norm_w(D)), (p + "attn_k_norm.weight", norm_w(D))]
    for name, a in t:
        w.add_tensor(name, np.ascontiguousarray(a, dtype=np.float32))
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
    ap.add_argument("--arch", default="llama,qwen2,qwen3")
    ap.add_argument("--user-token", action="append", default=[],
                    help="append a USER_DEFINED token with this text (repeatable; the vocabulary grows by one each)")
    args = ap.parse_args()
    os.makedirs(args.out_dir, exist_ok=True)
    for arch in args.arch.split(","):
        f32 = os.path.join(args.out_dir, f"{arch}-tiny-f32.gguf")
        write_model(arch, f32, args.user_token)
        for ty in args.types.split(","):
            if ty == "f32":
                print(f32)
                continue
            import llama_cpp
            ftype = {"q8_0": llama_cpp.LLAMA_FTYPE_MOSTLY_Q8_0, "q4_k_m": llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_K_M}[ty]
            dst = os.path.join(args.out_dir, f"{arch}-tiny-{ty}.gguf")
            quantize(f32, dst, ftype)
            print(dst)
    return 0


if __name__ == "__main__":
    sys.exit(main())

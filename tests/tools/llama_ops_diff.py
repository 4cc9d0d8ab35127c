#!/usr/bin/env python3
"""Op by op: what llama.cpp's CPU backend computes for a qwen2/llama GGUF, against numpy models of the rounding.

usage: llama_ops_diff.py MODEL.gguf [--ids JSON] [--layer L]

Runs llama.cpp (llama-cpp-python, flash attention off, f16 KV cache: the settings test_real_checkpoint.py
uses) twice on the token ids: the whole list as one batch, then all but the last id followed by the last as a
one-token step. An eval callback keeps every tensor of the graph. For layer L (default 0) each op is recomputed
in numpy from llama.cpp's own input to that op, under two models of the arithmetic:
  ggml  the rounding points read from ggml's x86 (AVX2+FMA) kernels, as this build runs them;
  ours  the formulas of vllm.c's CPU reference (cpu_ops_ref.c, dot_impl.h).
and the count of f32 results whose bits differ from llama.cpp's is printed. "-" = not modelled here (Q6_K;
Q4_K is modelled as llama.cpp's one-row kernel on repacked 8x8 weights: its batch kernel sums otherwise).
Activations are quantized the same way in both models (Q8_0 / Q8_K; our quantizers are byte-identical to
ggml's). fma(a, b, c) is modelled in float64 then rounded to f32 (a double rounding that is exact in practice).
"""
import argparse
import ctypes
import json
import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
import numpy as np

f32 = np.float32


def fma(a, b, c):
    return (np.float64(a) * np.float64(b) + np.float64(c)).astype(f32)


def hsum8(a):  # ((a0+a4)+(a2+a6)) + ((a1+a5)+(a3+a7)), the AVX2 horizontal sum (== dot_impl.h's dot_reduce8)
    x = [a[..., i] for i in range(8)]
    s0, s1, s2, s3 = [(x[i] + x[i + 4]).astype(f32) for i in range(4)]
    return ((s0 + s2).astype(f32) + (s1 + s3).astype(f32)).astype(f32)


def ggml_expf(x):  # ggml_v_expf (AVX2), including its |n| > 126 branches
    x = x.astype(f32)
    u32 = lambda v: np.asarray(v, np.uint32)
    r = f32(float.fromhex("0x1.8p23"))
    z = fma(x, f32(float.fromhex("0x1.715476p+0")), r)
    n = (z - r).astype(f32)
    b = fma(-n, f32(float.fromhex("0x1.7f7d1cp-20")), fma(-n, f32(float.fromhex("0x1.62e4p-1")), x))
    e = z.view(np.uint32) << np.uint32(23)
    k = (e + f32(1).view(np.uint32)).view(f32)
    u = (b * b).astype(f32)
    j = fma(fma(fma(f32(float.fromhex("0x1.0e4020p-7")), b, f32(float.fromhex("0x1.573e2ep-5"))), u,
                fma(f32(float.fromhex("0x1.555e66p-3")), b, f32(float.fromhex("0x1.fffdb6p-2")))), u,
            (f32(float.fromhex("0x1.ffffecp-1")) * b).astype(f32))
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        g = np.where(n <= 0, u32(0x82000000), u32(0))
        s1 = (g + u32(0x7f000000)).astype(np.uint32).view(f32)
        s2 = (e - g).astype(np.uint32).view(f32)
        far = np.where(np.abs(n) > 192, (s1 * s1).astype(f32), (fma(s2, j, s2) * s1).astype(f32))
        return np.where(np.abs(n) > 126, far, fma(j, k, k)).astype(f32)


def f16r(x):
    return np.asarray(x, f32).astype(np.float16).astype(f32)


# ---- activation quantizers (ggml's, = ours) ----
def q8_0(x):  # [.., K] -> d [.., K/32], q [.., K/32, 32]
    b = x.reshape(x.shape[:-1] + (-1, 32)).astype(f32)
    amax = np.abs(b).max(-1)
    d = f16r(amax / f32(127))
    with np.errstate(divide="ignore"):
        idv = np.where(amax != 0, f32(127) / amax, f32(0)).astype(f32)
    return d, np.rint((b * idv[..., None]).astype(f32)).astype(np.int64)


def q8_K(x):  # -> d [.., nb], q [.., nb, 256], bsums [.., nb, 16]
    b = x.reshape(x.shape[:-1] + (-1, 256)).astype(f32)
    i = np.abs(b).argmax(-1)
    mx = np.take_along_axis(b, i[..., None], -1)[..., 0]
    with np.errstate(divide="ignore"):
        isc = np.where(mx != 0, f32(-127) / mx, f32(0)).astype(f32)
    q = np.minimum(127, np.rint((b * isc[..., None]).astype(f32))).astype(np.int64)
    with np.errstate(divide="ignore"):
        d = np.where(mx != 0, f32(1) / isc, f32(0)).astype(f32)
    return d, q, q.reshape(q.shape[:-1] + (16, 16)).sum(-1)


# ---- weights ----
def weight_blocks(t):
    name = t.tensor_type.name
    N = int(t.shape[1])
    raw = np.ascontiguousarray(t.data).view(np.uint8).reshape(N, -1)
    if name == "Q8_0":
        b = raw.reshape(N, -1, 34)
        return name, dict(d=b[..., :2].copy().view(np.float16).astype(f32)[..., 0], q=b[..., 2:].view(np.int8).astype(np.int64))
    if name == "Q5_0":
        b = raw.reshape(N, -1, 22)
        qh = b[..., 2:6].copy().view(np.uint32)[..., 0].astype(np.int64)
        qs = b[..., 6:].astype(np.int64)
        j = np.arange(16)
        lo = (qs & 15) | (((qh[..., None] >> j) & 1) << 4)
        hi = (qs >> 4) | (((qh[..., None] >> (j + 16)) & 1) << 4)
        return name, dict(d=b[..., :2].copy().view(np.float16).astype(f32)[..., 0], q=np.concatenate([lo, hi], -1) - 16)
    if name == "Q4_K":
        b = raw.reshape(N, -1, 144)
        sc6 = b[..., 4:16].astype(np.int64)
        sc, mn = np.zeros(b.shape[:2] + (8,), np.int64), np.zeros(b.shape[:2] + (8,), np.int64)
        for j in range(8):
            if j < 4:
                sc[..., j], mn[..., j] = sc6[..., j] & 63, sc6[..., j + 4] & 63
            else:
                sc[..., j] = (sc6[..., j + 4] & 15) | ((sc6[..., j - 4] >> 6) << 4)
                mn[..., j] = (sc6[..., j + 4] >> 4) | ((sc6[..., j] >> 6) << 4)
        qs = b[..., 16:].astype(np.int64).reshape(N, -1, 4, 32)
        q = np.stack([qs & 15, qs >> 4], 3).reshape(N, -1, 256)  # 64-element chunks: low nibbles, then high
        f = lambda o: b[..., o:o + 2].copy().view(np.float16).astype(f32)[..., 0]
        return name, dict(d=f(0), dmin=f(2), q=q, sc=sc, m=mn)
    return name, None


def matmul_q4K(w, x, model):  # Q4_K x Q8_K
    ad, aq, bs = q8_K(x)
    T, N, nb = x.shape[0], w["d"].shape[0], w["d"].shape[1]
    out = np.zeros((T, N), f32)
    for t in range(T):
        acc, accm = np.zeros(N, f32), np.zeros(N, f32)
        for s in range(nb):
            isum = (w["q"][:, s] * aq[t, s] * np.repeat(w["sc"][:, s], 32, -1)).sum(-1)
            msum = (w["m"][:, s] * bs[t, s].reshape(8, 2).sum(-1)).sum(-1)
            dd, dm = (w["d"][:, s] * ad[t, s]).astype(f32), (w["dmin"][:, s] * ad[t, s]).astype(f32)
            if model == "ggml":  # repacked q4_K_8x8 gemv: fma per super-block, mins in their own accumulator
                acc, accm = fma(isum.astype(f32), dd, acc), fma(msum.astype(f32), dm, accm)
            else:  # dot_term_kmin: (dd * isum) - (dm * msum), added in order
                term = ((dd * isum.astype(f32)).astype(f32) - (dm * msum.astype(f32)).astype(f32)).astype(f32)
                acc = (acc + term).astype(f32)
        out[t] = (acc - accm).astype(f32)
    return out


def matmul(typ, w, x, model):
    if w is None:
        return None
    return matmul_q4K(w, x, model) if typ == "Q4_K" else matmul_q0(w, x, model)


def matmul_q0(w, x, model):  # x [T, K]; 32-element block types against Q8_0 activations
    ad, aq = q8_0(x)
    wd, wq = w["d"], w["q"]
    T, N, nb = x.shape[0], wd.shape[0], wd.shape[1]
    out = np.zeros((T, N), f32)
    for t in range(T):
        if model == "ggml":  # 8 lanes of 4 products per block, lane = fma(dw*da, lane sum, lane)
            acc = np.zeros((N, 8), f32)
            for b in range(nb):
                lanes = (wq[:, b, :] * aq[t, b]).reshape(N, 8, 4).sum(-1).astype(f32)
                acc = fma((wd[:, b] * ad[t, b]).astype(f32)[:, None], lanes, acc)
        else:  # block b's term (dw*da)*isum added to partial b % 8
            acc = np.zeros((N, 8), f32)
            for b in range(nb):
                term = ((wd[:, b] * ad[t, b]).astype(f32) * (wq[:, b, :] * aq[t, b]).sum(-1).astype(f32)).astype(f32)
                acc[:, b % 8] = (acc[:, b % 8] + term).astype(f32)
        out[t] = hsum8(acc)
    return out


def rmsnorm(x, eps, model):
    s = (x.astype(f32) * x.astype(f32)).astype(f32).astype(np.float64).sum(-1)  # both: f32 squares, double sum
    n = x.shape[-1]
    if model == "ggml":  # mean rounded to f32, eps added in f32
        scale = f32(1) / np.sqrt((s / n).astype(f32) + f32(eps))
    else:  # eps added to the double mean, then rounded (cpu_rmsnorm_row)
        scale = f32(1) / np.sqrt((s / n + np.float64(f32(eps))).astype(f32))
    return (x * scale.astype(f32)[..., None]).astype(f32)


def rope_neox(x, pos, base, model):  # x [T, H, D]
    D = x.shape[-1]
    libm = ctypes.CDLL("libm.so.6")  # both sides call the C library's powf / cosf / sinf
    for fn in ("powf", "cosf", "sinf"):
        getattr(libm, fn).restype = ctypes.c_float
    libm.powf.argtypes = [ctypes.c_float, ctypes.c_float]
    libm.cosf.argtypes = libm.sinf.argtypes = [ctypes.c_float]
    ts = f32(libm.powf(base, float(f32(-2.0) / f32(D))))
    th = np.zeros((len(pos), D // 2), f32)
    for r, p in enumerate(pos):
        theta = f32(p)
        for i in range(D // 2):
            th[r, i] = theta
            theta = f32(theta * ts)
    c = np.vectorize(lambda v: f32(libm.cosf(float(v))), otypes=[f32])(th)[:, None, :]
    s = np.vectorize(lambda v: f32(libm.sinf(float(v))), otypes=[f32])(th)[:, None, :]
    x0, x1 = x[..., :D // 2], x[..., D // 2:]
    if model == "ggml":  # as GCC contracts x0*c - x1*s and x0*s + x1*c in ggml's rope
        a, b = fma(x0, c, -(x1 * s).astype(f32)), fma(x0, s, (x1 * c).astype(f32))
    else:
        a, b = ((x0 * c).astype(f32) - (x1 * s).astype(f32)).astype(f32), ((x0 * s).astype(f32) + (x1 * c).astype(f32)).astype(f32)
    return np.concatenate([a, b], -1)


def dot_f16(a, b, order):  # a, b [..., n] (f16 values as f32); the three sum orders
    n = a.shape[-1]
    if order == "tinyblas":  # one 8-lane FMA accumulator (ggml batch: llamafile sgemm), hsum
        acc = np.zeros(a.shape[:-1] + (8,), f32)
        for k in range(0, n, 8):
            acc = fma(a[..., k:k + 8], b[..., k:k + 8], acc)
        return hsum8(acc)
    if order == "vec_dot_f16":  # ggml one-token step: 4 accumulators x 8 lanes over 32-element steps
        acc = np.zeros(a.shape[:-1] + (4, 8), f32)
        for k in range(0, n, 32):
            for j in range(4):
                acc[..., j, :] = fma(a[..., k + 8 * j:k + 8 * j + 8], b[..., k + 8 * j:k + 8 * j + 8], acc[..., j, :])
        x = ((acc[..., 0, :] + acc[..., 2, :]).astype(f32) + (acc[..., 1, :] + acc[..., 3, :]).astype(f32)).astype(f32)
        t = (x[..., 4:] + x[..., :4]).astype(f32)
        return ((t[..., 0] + t[..., 1]).astype(f32) + (t[..., 2] + t[..., 3]).astype(f32)).astype(f32)
    # ours (cpu_ops_ref.c dot16): 16 lanes, product rounded then added, folded 8/4/2/1
    acc = np.zeros(a.shape[:-1] + (16,), f32)
    for k in range(n):
        acc[..., k % 16] = (acc[..., k % 16] + (a[..., k] * b[..., k]).astype(f32)).astype(f32)
    for w in (8, 4, 2, 1):
        acc[..., :w] = (acc[..., :w] + acc[..., w:2 * w]).astype(f32)
    return acc[..., 0]


def softmax(s, model):  # s [.., n] scaled scores of the visible positions
    mx = s.max(-1, keepdims=True)
    e = ggml_expf(s - mx) if model == "ggml" else np.exp((s - mx).astype(np.float64)).astype(f32)
    n = s.shape[-1]
    if model == "ggml":  # 8-wide hsum of each chunk in f32, chunks summed in double
        pad = np.zeros(s.shape[:-1] + (-(-n // 8) * 8,), f32)
        pad[..., :n] = e
        tot = sum(hsum8(pad[..., k:k + 8]).astype(np.float64) for k in range(0, pad.shape[-1], 8))
    else:
        tot = e.astype(np.float64).sum(-1)
    return (e * (1.0 / tot).astype(f32)[..., None]).astype(f32)


def kqv_ours(p, v):  # p [n], v [n, D]: out += w * v in position order, product rounded then added
    out = np.zeros(v.shape[1], f32)
    for t in range(len(p)):
        out = (out + (p[t] * v[t]).astype(f32)).astype(f32)
    return out


# ---- llama.cpp dump ----
def dump(model, ids, step):
    import llama_cpp
    from llama_cpp import _internals
    from llama_cpp import llama_cpp as L
    base = ctypes.CDLL(os.path.join(os.path.dirname(llama_cpp.__file__), "lib", "libggml-base.so"))
    for fn, rt in (("ggml_get_name", ctypes.c_char_p), ("ggml_op_desc", ctypes.c_char_p),
                   ("ggml_get_data", ctypes.c_void_p), ("ggml_nbytes", ctypes.c_size_t)):
        getattr(base, fn).restype = rt
        getattr(base, fn).argtypes = [ctypes.c_void_p]
    got = []

    def cb(t, ask, ud):
        if ask:
            return True
        typ = ctypes.c_int32.from_address(t).value  # struct ggml_tensor: type, buffer, ne[4] ...
        ne = list((ctypes.c_int64 * 4).from_address(t + 16))
        data = None
        if typ in (0, 1):
            data = np.frombuffer(bytes((ctypes.c_char * base.ggml_nbytes(t)).from_address(base.ggml_get_data(t))),
                                 dtype=np.float32 if typ == 0 else np.float16)
        got.append(dict(name=base.ggml_get_name(t).decode(), op=base.ggml_op_desc(t).decode(), ne=ne, data=data))
        return True

    cbf = L.ggml_backend_sched_eval_callback(cb)
    m = llama_cpp.Llama(model_path=model, n_ctx=512, n_threads=2, n_threads_batch=2, verbose=False)
    m.context_params.cb_eval = cbf
    m._ctx = _internals.LlamaContext(model=m._model, params=m.context_params, verbose=False)
    m._batch = _internals.LlamaBatch(n_tokens=512, embd=0, n_seq_max=m.context_params.n_ctx, verbose=False)
    m.reset()
    if step:
        m.eval(ids[:-1])
        got.clear()
        m.eval(ids[-1:])
    else:
        m.eval(ids)
    return got


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--ids", default="[151644, 872, 198, 7985, 264, 13027, 729, 151645, 198, 151644, 77091, 198]")
    ap.add_argument("--layer", type=int, default=0)
    a = ap.parse_args()
    from gguf import GGUFReader
    R = GGUFReader(a.model)
    W = {t.name: t for t in R.tensors}
    arch = bytes(R.fields["general.architecture"].parts[-1]).decode()
    kv = lambda k: R.fields[f"{arch}.{k}"].parts[-1][0]
    eps, base = float(kv("attention.layer_norm_rms_epsilon")), float(kv("rope.freq_base"))
    n_head, n_kv = int(kv("attention.head_count")), int(kv("attention.head_count_kv"))
    ids = json.loads(a.ids)
    L = a.layer
    print(f"{a.model}: {arch}, layer {L}, {len(ids)} ids; f32 results whose bits differ from llama.cpp's (of all)")
    print(f"{'op':44s} {'ggml model':>18s} {'ours':>18s}")

    def row(label, ref, g, o):
        ref = np.asarray(ref, f32).ravel()
        f = lambda x: "-" if x is None else f"{int(np.sum(np.asarray(x, f32).ravel().view(np.uint32) != ref.view(np.uint32)))}/{ref.size}"
        print(f"{label:44s} {f(g):>18s} {f(o):>18s}")

    for step in (False, True):
        g = dump(a.model, ids, step)
        T = 1 if step else len(ids)
        pos = [len(ids) - 1] if step else list(range(len(ids)))
        mode = "one-token step" if step else "batch"

        def get(name, op=None, k=0):
            hits = [x for x in g if x["name"] == name and (op is None or x["op"] == op)]
            return hits[k]

        def t(name, op=None, k=0):
            return get(name, op, k)["data"].astype(f32)

        print(f"-- {mode} ({T} row{'s' if T > 1 else ''})")
        inp = t("embd") if L == 0 else t(f"l_out-{L - 1}")
        E = inp.size // T
        inp = inp.reshape(T, E)
        norm = t(f"norm-{L}", k=0).reshape(T, E)
        row("rms_norm", norm, rmsnorm(inp, eps, "ggml"), rmsnorm(inp, eps, "ours"))
        an = t(f"attn_norm-{L}").reshape(T, E)
        for nm, key in (("attn_q", "Qcur"), ("attn_k", "Kcur"), ("attn_v", "Vcur")):
            typ, w = weight_blocks(W[f"blk.{L}.{nm}.weight"])
            ref = t(f"{key}-{L}", "MUL_MAT").reshape(T, -1)
            row(f"{nm} matmul {typ}", ref, matmul(typ, w, an, "ggml"), matmul(typ, w, an, "ours"))
        hd = t(f"Qcur-{L}", "ROPE").size // T // n_head
        qadd = t(f"Qcur-{L}", "ADD").reshape(T, n_head, hd)
        qr = t(f"Qcur-{L}", "ROPE").reshape(T, n_head, hd)
        row("rope (NeoX) of q", qr, rope_neox(qadd, pos, base, "ggml"), rope_neox(qadd, pos, base, "ours"))
        # attention on llama.cpp's own q, cache and probabilities
        kq = get(f"kq-{L}")
        n_kv_pad = kq["ne"][0]
        kq = kq["data"].astype(f32).reshape(n_head, T, n_kv_pad)
        sm = t(f"kq_soft_max-{L}").reshape(n_head, T, n_kv_pad)
        kqv = t(f"kqv-{L}").reshape(n_head, T, hd)
        kc = [x for x in g if x["name"] == f"cache_k_l{L} (view)" and x["op"] == "SET_ROWS"][0]
        K = kc["data"].astype(f32).reshape(-1, n_kv, hd)
        vc = [x for x in g if x["name"] == f"cache_v_l{L} (reshaped) (view)" and x["op"] == "SET_ROWS"][0]
        n_ctx = K.shape[0]
        Vt = vc["data"].astype(f32).reshape(n_kv, hd, n_ctx)
        qh = f16r(qr)
        gk, ok_, vk, gs, os_, gv, ov, refk, refs, refv = [], [], [], [], [], [], [], [], [], []
        for h in range(n_head):
            kh = h // (n_head // n_kv)
            for r in range(T):
                n = pos[r] + 1
                qq = np.broadcast_to(qh[r, h], (n, hd))
                refk.append(kq[h, r, :n])
                gk.append(dot_f16(qq, K[:n, kh], "tinyblas"))
                vk.append(dot_f16(qq, K[:n, kh], "vec_dot_f16"))
                ok_.append(dot_f16(qq, K[:n, kh], "ours"))
                sc = (kq[h, r, :n] * (f32(1) / np.sqrt(f32(hd)))).astype(f32)
                refs.append(sm[h, r, :n])
                gs.append(softmax(sc[None], "ggml")[0])
                os_.append(softmax(sc[None], "ours")[0])
                p = f16r(sm[h, r])
                refv.append(kqv[h, r])
                vt = Vt[kh][:, :n_kv_pad]
                gv.append(dot_f16(np.broadcast_to(p, (hd, n_kv_pad)), vt, "tinyblas" if not step else "vec_dot_f16"))
                ov.append(kqv_ours(p[:n], vt[:, :n].T))
        cat = np.concatenate
        row("q.k, f16 q and K (ggml model: tinyBLAS order)", cat(refk), cat(gk), cat(ok_))
        row("q.k, f16 q and K (ggml model: vec_dot_f16)", cat(refk), cat(vk), None)
        row("softmax (ggml_v_expf, chunked sums)", cat(refs), cat(gs), cat(os_))
        row(f"p.V, f16 p and V ({'vec_dot_f16' if step else 'tinyBLAS'} order)", cat(refv), cat(gv), cat(ov))
        fn = t(f"ffn_norm-{L}").reshape(T, E)
        gate, up = t(f"ffn_gate-{L}").reshape(T, -1), t(f"ffn_up-{L}").reshape(T, -1)
        for nm, ref in (("ffn_gate", gate), ("ffn_up", up)):
            typ, w = weight_blocks(W[f"blk.{L}.{nm}.weight"])
            row(f"{nm} matmul {typ}", ref, matmul(typ, w, fn, "ggml"), matmul(typ, w, fn, "ours"))
        sw = t(f"ffn_swiglu-{L}").reshape(T, -1)
        row("swiglu", sw, ((gate / (f32(1) + ggml_expf(-gate))).astype(f32) * up).astype(f32),
            ((gate / (f32(1) + np.exp(-gate.astype(np.float64)).astype(f32))).astype(f32) * up).astype(f32))
        typ, w = weight_blocks(W[f"blk.{L}.ffn_down.weight"])
        row(f"ffn_down matmul {typ}", t(f"ffn_out-{L}"), matmul(typ, w, sw, "ggml"), matmul(typ, w, sw, "ours"))


if __name__ == "__main__":
    main()

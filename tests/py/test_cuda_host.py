"""The CUDA backend's host side without a GPU: the `make CUDA=1` binary (build/cuda, or VLLMC_CUDA_BUILD) run over the
GPU-less runtime of tests/tools/cuda_stub.c (scripts/cuda-stub.sh). Kernels and graphs do nothing there, so what comes
out is meaningless; what runs for real is the host side: loading and uploading the weights, recording each step, the
passes over its records, graph capture and replay bookkeeping, pipelined steps, the engine. These tests check that all
of it runs through on the tiny hybrid models, and that the tiled FFN pass (VLLMC_CUDA_MEGA2) takes every FFN of a model
of qwen35-4b's residual width, with and without the output projection inside (VLLMC_CUDA_MEGA2_PJ); the GPU machine's
test_cuda_model then checks the bits of what it folds."""
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CUDA_BUILD = Path(os.environ.get("VLLMC_CUDA_BUILD", ROOT / "build" / "cuda"))
VLLMC = CUDA_BUILD / "vllmc"
# the same build with ASan + UBSan on its host code (make cuda-asan), where it exists: the load test runs on both
ASAN_VLLMC = Path(os.environ.get("VLLMC_CUDA_ASAN_BUILD", ROOT / "build" / "cuda-asan")) / "vllmc"
TIMEOUT = 300


@pytest.fixture(scope="module")
def stub_env(tmp_path_factory):
    if not VLLMC.exists():
        pytest.skip(f"{VLLMC} not built (make CUDA=1 BUILD=build/cuda)")
    d = tmp_path_factory.mktemp("cuda_stub")
    r = subprocess.run(["bash", str(ROOT / "scripts" / "cuda-stub.sh"), str(d)], capture_output=True, text=True, timeout=120)
    if r.returncode == 2:
        pytest.skip(r.stdout.strip())
    assert r.returncode == 0, r.stdout + r.stderr
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = str(d) + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    for k in list(env):
        if k.startswith("VLLMC_CUDA_"):
            del env[k]
    # the binary must resolve its CUDA libraries to the stub, not to a real runtime
    ldd = subprocess.run(["ldd", str(VLLMC)], capture_output=True, text=True, env=env).stdout
    assert re.search(r"libcudart\.so\.\S+ => " + re.escape(str(d)), ldd), ldd
    return env


def run(env, *args, extra=None, exe=None):
    e = dict(env)
    e.update(extra or {})
    r = subprocess.run([str(exe or VLLMC), *args], capture_output=True, text=True, errors="replace", env=e, timeout=TIMEOUT)
    assert r.returncode == 0, f"vllmc {' '.join(args)}: rc {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r.stdout + r.stderr


@pytest.fixture(scope="module")
def models(stub_env, tmp_path_factory):
    """Q4_K_M files of the tiny qwen35 and qwen35moe shapes and of qwen35-wide and qwen35moe-wide, quantized by vllmc
    quantize."""
    d = tmp_path_factory.mktemp("cuda_host_models")
    out = {}
    for shape in ("qwen35", "qwen35moe", "qwen35-wide", "qwen35moe-wide"):
        r = subprocess.run([sys.executable, str(ROOT / "tests/tools/make_tiny_qwen35.py"), str(d), "--arch", shape, "--types", "f32"],
                           capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr[-2000:]
        f32, q = d / f"{shape}-tiny-f32.gguf", d / f"{shape}-tiny-q4_k_m.gguf"
        run(stub_env, "quantize", str(f32), str(q), "Q4_K_M")
        f32.unlink()
        out[shape] = str(q)
    return out


def replays(text):
    m = re.search(r"graph replays (\d+), captures (\d+)", text)
    assert m, text[-2000:]
    return int(m.group(1)), int(m.group(2))


@pytest.mark.parametrize("shape", ["qwen35", "qwen35moe", "qwen35-wide", "qwen35moe-wide"])
def test_decode_host_side(stub_env, models, shape):
    """bench's batch-1 decode (recorded, captured, replayed, pipelined) and the eager form run through; its roofline
    fraction is against the device's own DRAM bandwidth (the stub reports an H100's memory clock and bus width)."""
    out = run(stub_env, "bench", "-m", models[shape], "-p", "16", "-g", "24", "-r", "1")
    rep, cap = replays(out)
    assert rep > 0 and cap > 0
    assert re.search(r"GB/s = \d+% of this device's 3\.35 TB/s", out), out
    rep, cap = replays(run(stub_env, "bench", "-m", models[shape], "-p", "16", "-g", "8", "-r", "1", "--enforce-eager"))
    assert (rep, cap) == (0, 0)


def test_bench_profile_keeps_pipelined_runs(stub_env, models):
    """bench --profile times its runs as bench does (pipelined steps, their tokens checked against the step-by-step
    warm-up) and then profiles one eager pass on a backend of its own."""
    out = run(stub_env, "bench", "-m", models["qwen35"], "-p", "16", "-g", "24", "-r", "2", "--profile")
    assert "under the step before: pipelined steps" in out, out[-2000:]
    assert "profile of the decode steps" in out and re.search(r"wall TPOT of the timed runs [0-9.]+ ms", out), out[-2000:]
    out = run(stub_env, "bench", "-m", models["qwen35"], "-p", "16", "-g", "24", "-r", "2", "--profile", "--no-pipeline")
    assert "pipelined steps" not in out and "profile of the decode steps" in out, out[-2000:]


def test_removed_matvec_switches_warn(stub_env, models):
    """VLLMC_CUDA_MS and VLLMC_CUDA_WS named mat-vec forms that were removed (measured slower): a run that sets them says
    they are ignored, and its captured step has the default's launches."""
    args = ("bench", "-m", models["qwen35-wide"], "-p", "16", "-g", "24", "-r", "1")
    log = {"STUB_CUDA_LOG": "1"}
    base = launches(run(stub_env, *args, extra=log))
    assert base, "no graph captured"
    for var, val in (("VLLMC_CUDA_MS", "2,24576"), ("VLLMC_CUDA_WS", "7")):
        out = run(stub_env, *args, extra=dict(log, **{var: val}))
        assert f"{var}={val}: that mat-vec form was removed (measured slower); ignored" in out, out[-1500:]
        assert launches(out) == base, (var, launches(out), base)


def test_attn_pre_split_host_side(stub_env, models):
    """VLLMC_CUDA_ATTN_PRE_SPLIT=1 (off by default) moves the decode attention's q / k norm + RoPE + KV store into its
    split launch: each captured decode step of the tiny qwen35 shapes (one attention layer) has one launch fewer (two
    with the combine in the split launch too), and so does the step of four sequences; any value but 0 / 1 says so and
    keeps the launch."""
    log = {"STUB_CUDA_LOG": "1"}
    for shape in ("qwen35-wide", "qwen35moe-wide"):
        args = ("bench", "-m", models[shape], "-p", "16", "-g", "24", "-r", "1")
        base = launches(run(stub_env, *args, extra=log))
        assert base, "no graph captured"
        on = launches(run(stub_env, *args, extra=dict(log, VLLMC_CUDA_ATTN_PRE_SPLIT="1")))
        assert on == [n - 1 for n in base], (shape, on, base)
        # with the combine in the split launch as well (FUSE_NQ bit 32): one launch an attention layer
        one = launches(run(stub_env, *args, extra=dict(log, VLLMC_CUDA_ATTN_PRE_SPLIT="1", VLLMC_CUDA_FUSE_NQ="96")))
        assert one == [n - 2 for n in base], (shape, one, base)
        out = run(stub_env, *args, extra=dict(log, VLLMC_CUDA_ATTN_PRE_SPLIT="yes"))
        assert "VLLMC_CUDA_ATTN_PRE_SPLIT=yes: not 0 or 1" in out and launches(out) == base, out[-1500:]
        cargs = ("bench", "-m", models[shape], "-p", "16", "-g", "16", "-r", "1", "--concurrency", "4")
        base = launches(run(stub_env, *cargs, extra=log))
        on = launches(run(stub_env, *cargs, extra=dict(log, VLLMC_CUDA_ATTN_PRE_SPLIT="1")))
        # (which smaller steps get captured depends on when requests finish; the step of all four is always there)
        assert base and on and max(on) == max(base) - 1, (shape, on, base)


def test_defer_norm_host_side(stub_env, models):
    """VLLMC_CUDA_DEFER_NORM=1 (off by default) forms the FFN's RMSNorm input in the launch of the mixer's output
    projection (matmul_add_defer, BK_ACT_Q8_KD) and applies the RMS scale in the gate / up mat-vec: each captured
    batch-1 step of qwen35-wide (4 dense layers, D 2,560, Q4_K projections and gate / up) has one launch fewer a layer;
    the MoE shape and steps of several sequences keep their launches; a bad value warns."""
    log = {"STUB_CUDA_LOG": "1"}
    m = models["qwen35-wide"]
    args = ("bench", "-m", m, "-p", "16", "-g", "24", "-r", "1")
    base = launches(run(stub_env, *args, extra=log))
    assert base, "no graph captured"
    on = launches(run(stub_env, *args, extra=dict(log, VLLMC_CUDA_DEFER_NORM="1")))
    assert on == [n - 4 for n in base], (on, base)
    out = run(stub_env, *args, extra=dict(log, VLLMC_CUDA_DEFER_NORM="yes"))
    assert "VLLMC_CUDA_DEFER_NORM=yes: not 0 or 1" in out and launches(out) == base, out[-1500:]
    mo = ("bench", "-m", models["qwen35moe-wide"], "-p", "16", "-g", "24", "-r", "1")
    assert launches(run(stub_env, *mo, extra=dict(log, VLLMC_CUDA_DEFER_NORM="1"))) == launches(run(stub_env, *mo, extra=log))
    cargs = ("bench", "-m", m, "-p", "16", "-g", "16", "-r", "1", "--concurrency", "4")
    base = launches(run(stub_env, *cargs, extra=log))
    on = launches(run(stub_env, *cargs, extra=dict(log, VLLMC_CUDA_DEFER_NORM="1")))
    assert base and on and max(on) == max(base), (on, base)


def test_engine_host_side(stub_env, models):
    """The engine's batched, pipelined steps (bench --concurrency) run through on both hybrid kinds, with the GDN's runs
    side by side (the default) and without them (VLLMC_CUDA_GDN_RUNS=0), on prompts of 16 (every run short) and 40 tokens
    (split lists)."""
    for shape in ("qwen35", "qwen35moe"):
        out = run(stub_env, "bench", "-m", models[shape], "--concurrency", "1,4", "-p", "16", "-g", "8", "-r", "1")
        assert re.search(r"^\| 4 \| 4 \|", out, re.M), out[-2000:]
        for p in ("16", "40"):
            for runs in ("1", "0"):
                out = run(stub_env, "bench", "-m", models[shape], "--concurrency", "4,9", "-p", p, "-g", "8", "-r", "1",
                          extra={"VLLMC_CUDA_GDN_RUNS": runs})
                assert re.search(r"^\| 9 \| 9 \|", out, re.M), out[-2000:]


def folds(text):
    m = re.search(r"tiled persistent launch \(VLLMC_CUDA_MEGA2\): ([0-9.]+) a recorded step, ([0-9.]+) of them with the output", text)
    return (float(m.group(1)), float(m.group(2))) if m else None


def test_mega2_pass_takes_every_ffn(stub_env, models):
    """qwen35-wide: 4 layers (3 Gated DeltaNet, 1 attention), D 2,560, F 1,024, one ffn_down in Q6_K. Off by
    default; with VLLMC_CUDA_MEGA2=4 every FFN of every recorded step is one tiled launch; with _PJ=1 each takes the
    GDN's or the attention's output projection too; eager steps keep the launches; a value the kernel has no
    instance for warns and changes nothing."""
    m = models["qwen35-wide"]
    args = ("bench", "-m", m, "-p", "16", "-g", "24", "-r", "1")
    assert folds(run(stub_env, *args)) is None
    assert folds(run(stub_env, *args, extra={"VLLMC_CUDA_MEGA2": "4"})) == (4.0, 0.0)
    assert folds(run(stub_env, *args, extra={"VLLMC_CUDA_MEGA2": "4", "VLLMC_CUDA_MEGA2_PJ": "1"})) == (4.0, 4.0)
    assert folds(run(stub_env, *args, "--enforce-eager", extra={"VLLMC_CUDA_MEGA2": "4"})) is None
    out = run(stub_env, *args, extra={"VLLMC_CUDA_MEGA2": "5"})
    assert folds(out) is None and "VLLMC_CUDA_MEGA2=5" in out
    # the tiny qwen35 (D 256) has no FFN of that width: nothing folds, nothing fails
    assert folds(run(stub_env, "bench", "-m", models["qwen35"], "-p", "16", "-g", "8", "-r", "1", extra={"VLLMC_CUDA_MEGA2": "4"})) is None


def moe_tiled(text):
    m = re.search(r"MoE ops as the router and one tiled persistent launch \(VLLMC_CUDA_MOE2\): ([0-9.]+) a recorded step", text)
    return float(m.group(1)) if m else None


def launches(text):
    """The kernel launches of each graph the step captured (the stub's count)."""
    return sorted(set(int(n) for n in re.findall(r"captured a graph of (\d+) kernel launches", text)))


def test_moe2_pass_takes_every_moe_op(stub_env, models):
    """qwen35moe-wide: 4 MoE layers (16 experts, top 4, a gated shared expert, D 512, experts 512 wide), two of them
    with Q6_K down rows. Off by default; with VLLMC_CUDA_MOE2=1 every MoE op of every recorded step is the router and
    one tiled launch in place of the router and three (gate + up, down, mix); eager steps keep the launches; the tiny
    qwen35moe (D 256: super-blocks not in pairs) keeps them too; both passes together take what each takes alone."""
    m = models["qwen35moe-wide"]
    args = ("bench", "-m", m, "-p", "16", "-g", "24", "-r", "1")
    log = {"STUB_CUDA_LOG": "1"}
    off = run(stub_env, *args, extra=log)
    on = run(stub_env, *args, extra=dict(log, VLLMC_CUDA_MOE2="1"))
    assert moe_tiled(off) is None and moe_tiled(on) == 4.0
    assert [n + 2 * 4 for n in launches(on)] == launches(off), (launches(on), launches(off))
    assert moe_tiled(run(stub_env, *args, "--enforce-eager", extra={"VLLMC_CUDA_MOE2": "1"})) is None
    out = run(stub_env, *args, extra={"VLLMC_CUDA_MOE2": "yes"})
    assert moe_tiled(out) is None and "VLLMC_CUDA_MOE2=yes" in out
    assert moe_tiled(run(stub_env, "bench", "-m", models["qwen35moe"], "-p", "16", "-g", "8", "-r", "1",
                         extra={"VLLMC_CUDA_MOE2": "1"})) is None
    both = run(stub_env, *args, extra={"VLLMC_CUDA_MOE2": "1", "VLLMC_CUDA_MEGA2": "4"})
    assert moe_tiled(both) == 4.0 and folds(both) is None  # (no dense FFN in a MoE model)
    out = run(stub_env, "bench", "-m", m, "--concurrency", "1,4", "-p", "16", "-g", "8", "-r", "1", extra={"VLLMC_CUDA_MOE2": "1"})
    assert re.search(r"^\| 4 \| 4 \|", out, re.M), out[-2000:]


def test_fuse_nq_unknown_bits_warn(stub_env, models):
    """VLLMC_CUDA_FUSE_NQ with bits no fold has (128 / 256, the MoE norm folds, since removed) says so and takes the
    rest: qwen35moe-wide's captured step has the default's launches."""
    m = models["qwen35moe-wide"]
    args = ("bench", "-m", m, "-p", "16", "-g", "24", "-r", "1")
    log = {"STUB_CUDA_LOG": "1"}
    base = launches(run(stub_env, *args, extra=log))
    assert base, "no graph captured"
    out = run(stub_env, *args, extra=dict(log, VLLMC_CUDA_FUSE_NQ="448"))
    assert "VLLMC_CUDA_FUSE_NQ=448: bits above 127 are not folds; taking 64" in out, out[-1500:]
    assert launches(out) == base, (launches(out), base)
    out = run(stub_env, *args, extra=dict(log, VLLMC_CUDA_FUSE_NQ="64"))
    assert "are not folds" not in out and launches(out) == base, out[-1500:]


SANITIZER = re.compile(r"ERROR: AddressSanitizer|ERROR: LeakSanitizer|runtime error:")


def serve_load(env, exe, model, extra, n=48):
    """`vllmc serve` with a KV pool of 40 blocks for up to 8 requests of up to 512 tokens (so requests are preempted),
    n requests at once: streamed or not, sampled on the device or greedy, some with logprobs or logit_bias (the host
    sampler), some hung up on mid-request. Returns the server's stderr and the metrics text."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    e = dict(env)
    e.update(extra)
    e["ASAN_OPTIONS"] = "detect_leaks=1"
    srv = subprocess.Popen([str(exe), "serve", model, "--served-model-name", "m", "--port", str(port), "-c", "512", "--max-num-seqs", "8",
                            "--num-gpu-blocks-override", "40", "--disable-log-requests"], env=e, stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, text=True, errors="replace")
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(240):
            try:
                if urllib.request.urlopen(base + "/health", timeout=2).status == 200:
                    break
            except OSError:
                time.sleep(0.25)
        errs = []

        def req(i):
            import random
            rnd = random.Random(i)
            words = " ".join(rnd.choice(["a", "b", "the", "cat", "x"]) for _ in range(rnd.randint(1, 300)))
            body = {"model": "m", "prompt": words, "max_tokens": rnd.randint(1, 40), "stream": rnd.random() < 0.5}
            if rnd.random() < 0.5:
                body.update(temperature=0.8, top_p=0.9, top_k=20)
            if rnd.random() < 0.2:
                body.update(logprobs=2)
            if rnd.random() < 0.2:
                body.update(logit_bias={"5": 10})
            data = json.dumps(body).encode()
            if rnd.random() < 0.15:  # hang up mid-request
                with socket.create_connection(("127.0.0.1", port)) as c:
                    c.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                              % len(data) + data)
                    time.sleep(rnd.random() * 0.05)
                return
            try:
                r = urllib.request.urlopen(urllib.request.Request(base + "/v1/completions", data, {"Content-Type": "application/json"}),
                                           timeout=240)
                r.read()
            except Exception as ex:  # noqa: BLE001 (any failure is the finding)
                errs.append((i, repr(ex)))

        ts = [threading.Thread(target=req, args=(i,)) for i in range(n)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        metrics = urllib.request.urlopen(base + "/metrics", timeout=10).read().decode()
        assert not errs, errs[:3]
    finally:
        srv.send_signal(2)
        try:
            _, err = srv.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            srv.kill()
            _, err = srv.communicate()
    assert srv.returncode == 0, err[-3000:]
    return err, metrics


@pytest.mark.parametrize("asan", [False, True])
@pytest.mark.parametrize("shape,extra", [("qwen35moe-wide", {"VLLMC_CUDA_MOE2": "1"}), ("qwen35-wide", {"VLLMC_CUDA_MEGA2": "4"}),
                                         ("qwen35moe", {"VLLMC_CUDA_FUSE_NQ": "63"})])
def test_serve_host_side(stub_env, models, shape, extra, asan):
    """The server over the CUDA backend's host side under load with preemption and hang-ups; with the ASan + UBSan
    build (make cuda-asan) the run must end with no sanitizer report, leaks included."""
    exe = ASAN_VLLMC if asan else VLLMC
    if not exe.exists():
        pytest.skip(f"{exe} not built")
    err, metrics = serve_load(stub_env, exe, models[shape], extra)
    assert not SANITIZER.search(err), err[-4000:]
    m = re.search(r'vllm:request_success_total\{model_name="m",finished_reason="length"\} (\d+)', metrics)
    assert m and int(m.group(1)) > 0, metrics[-2000:]
    assert re.search(r'vllm:num_preemptions_total\{model_name="m"\} [1-9]', metrics), "no request was preempted"

"""Engine on real tiny models: generates tiny dense (qwen2, llama) and hybrid (qwen35, qwen35moe) GGUFs with
tests/tools/make_tiny_models.py / make_tiny_qwen35.py, then runs the C test binary test_engine on them:
greedy tokens identical from a single-sequence loop, the engine alone, many requests batched, and batched
with preemption; prefix caching computes only the suffix (dense) / nothing reused (hybrid) with output
equal to a cold run."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("VLLMC_BUILD", "build"))
if not BUILD.is_absolute():
    BUILD = ROOT / BUILD


def _gen(script, out_dir, arch, types):
    r = subprocess.run([sys.executable, str(ROOT / "tests/tools" / script), str(out_dir), "--arch", arch, "--types", types],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("engine_models")
    quant = "f32"
    try:
        import llama_cpp  # noqa: F401  (quantized variants need llama.cpp's quantizer)
        quant = "f32,q8_0"
    except ImportError:
        pass
    _gen("make_tiny_models.py", d, "qwen2", "f32")
    _gen("make_tiny_models.py", d, "llama", quant)
    _gen("make_tiny_qwen35.py", d, "qwen35", quant)
    _gen("make_tiny_qwen35.py", d, "qwen35moe", "f32")
    # one float and one quantized file of each kind (keeps the run short on 2 cores)
    want = ["qwen2-tiny-f32", "llama-tiny-q8_0", "qwen35-tiny-q8_0", "qwen35moe-tiny-f32"]
    paths = []
    for w in want:
        p = d / f"{w}.gguf"
        if not p.exists():
            p = d / (w.rsplit("-", 1)[0] + "-f32.gguf")
        assert p.exists(), p
        paths.append(str(p))
    return paths


def test_engine_batch_invariance_and_prefix_cache(models):
    exe = BUILD / "tests" / "test_engine"
    if not exe.exists():
        pytest.skip(f"{exe} not built")
    r = subprocess.run([str(exe)] + models, capture_output=True, text=True, errors="replace", timeout=600)
    print(r.stdout[-4000:])
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    assert " 0 failed" in r.stdout
    for p in models:
        assert f"model {p}" in r.stdout

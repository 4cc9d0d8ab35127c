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


def test_chat_hybrid_restarts_when_history_changes(models, tmp_path):
    """`vllmc chat` on a hybrid model: the recurrent state holds only the last position fed, so a turn whose prompt
    does not continue exactly from there (the Qwen3.5 template renders an earlier reply otherwise than it was
    generated) is computed from position 0: turn 2's prefill is its whole prompt, as the template renders it."""
    import json
    import re
    exe = BUILD / "vllmc"
    if not exe.exists():
        pytest.skip(f"{exe} not built")
    hybrid = next(p for p in models if "qwen35-tiny" in p)

    def chat(turns):
        r = subprocess.run([str(exe), "chat", "-m", hybrid, "-n", "12", "--verbose"], input=("".join(t + "\n" for t in turns) + "\n").encode(),
                           capture_output=True, timeout=300)
        return r
    one = chat(["hello there"])
    if b"no tokenizer.chat_template" in one.stderr:
        pytest.skip("the tiny qwen35 has no chat template (../shared/testdata/chat-templates missing)")
    assert one.returncode == 0, one.stderr[-2000:]
    two = chat(["hello there", "and again"])
    assert two.returncode == 0, two.stderr[-2000:]
    assert two.stdout.startswith(one.stdout)  # greedy: the same first turn
    reply1 = one.stdout[:-1].decode("utf-8")  # each reply is followed by a newline
    conv = {"messages": [{"role": "user", "content": "hello there"}, {"role": "assistant", "content": reply1},
                         {"role": "user", "content": "and again"}], "add_generation_prompt": True}
    (tmp_path / "conv.json").write_text(json.dumps(conv))
    text = subprocess.run([str(exe), "template", "-m", hybrid, "-f", str(tmp_path / "conv.json")], capture_output=True, check=True,
                          timeout=60).stdout
    (tmp_path / "t2.txt").write_bytes(text)
    ids = json.loads(subprocess.run([str(exe), "tokenize", "-m", hybrid, "-f", str(tmp_path / "t2.txt"), "--ids"],
                                    capture_output=True, check=True, timeout=60).stdout)
    counts = [int(x) for x in re.findall(rb"prompt: (\d+) tokens", two.stderr)]
    assert len(counts) == 2, two.stderr[-2000:]
    # the Qwen3.5 template renders turn 1's reply in the history otherwise than it was fed, so turn 2 starts again at
    # position 0 (were the history unchanged, chat would go on from the last token fed and compute fewer; the previous
    # form, which rewound to the first differing token, computed 36 of 57 here)
    assert counts[1] == len(ids), f"turn 2 computed {counts[1]} tokens of its {len(ids)}-token prompt"

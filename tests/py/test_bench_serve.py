"""`vllmc bench serve` (the load generator) against `vllmc serve` on a tiny qwen2 model: the numbers it
reports must be consistent with each other and with the server's own counters: every request completes,
output tokens = requests x --output-len (ignore_eos), input tokens = requests x --input-len, one TTFT per
request and exactly (output tokens - 1) inter-token latencies per request, the token count seen chunk by
chunk equals the final usage, throughputs = totals / duration, median <= p99, TTFT <= end-to-end; the
server's generation-token counter grows by the reported output. Chat, text prompts, non-streamed, and
errors (server down, bad flags) too."""
import json
import subprocess

import pytest

from server_util import CHATML, VLLMC, Server, make_tiny_model

IN, OUT = 16, 12


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    if not VLLMC.exists():
        pytest.skip(f"{VLLMC} not built")
    d = tmp_path_factory.mktemp("bench")
    model = make_tiny_model(d)
    tpl = d / "chatml.jinja"
    tpl.write_text(CHATML)
    s = Server(model, "--chat-template", tpl, "--max-model-len", 256, "--max-num-seqs", 8, "-t", 1, log_path=d / "server.log")
    yield s
    assert s.stop() == 0, s.log_text()[-3000:]


def bench(server, tmp_path, *args):
    out = tmp_path / "b.json"
    r = subprocess.run([str(VLLMC), "bench", "serve", "--base-url", server.base, "--json", str(out), *map(str, args)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(out.read_text()), r.stdout


def check_level(lv, n, in_len, out_len, stream=True):
    assert lv["completed"] == n and lv["failed"] == 0 and lv["num_prompts"] == n
    assert lv["total_output_tokens"] == n * out_len
    if in_len:
        assert lv["total_input_tokens"] == n * in_len
    d = lv["duration_s"]
    assert d > 0
    assert lv["request_throughput"] == pytest.approx(n / d, rel=1e-9)
    assert lv["output_throughput"] == pytest.approx(n * out_len / d, rel=1e-9)
    assert lv["total_token_throughput"] == pytest.approx((lv["total_input_tokens"] + n * out_len) / d, rel=1e-9)
    for m in ("e2el",) + (("ttft", "tpot", "itl") if stream else ()):
        assert 0 <= lv[f"median_{m}_ms"] <= lv[f"p99_{m}_ms"] + 1e-9, m
        assert lv[f"mean_{m}_ms"] >= 0
    assert lv["p99_e2el_ms"] <= d * 1e3 + 1
    if stream:
        assert lv["n_ttft"] == n and lv["n_tpot"] == n
        assert lv["n_itl"] == n * (out_len - 1)  # (tokens - 1) per request
        assert lv["count_mismatches"] == 0       # chunk-by-chunk count == usage
        assert lv["mean_ttft_ms"] <= lv["mean_e2el_ms"]
        # tpot = (e2e - ttft) / (n - 1) per request (n equal for all: the means relate the same way); a request's
        # ITLs add up to (last token - first token) <= e2e - ttft (the end of the stream comes after the last token).
        # They may all be 0: a server that sends several tokens in one chunk (the tiny model on one thread can have a
        # request's 4 tokens ready before its first chunk goes out) gives the chunk's later tokens a gap of 0, as
        # vLLM's benchmark counts them; n_itl above says every gap was recorded.
        assert lv["mean_tpot_ms"] == pytest.approx((lv["mean_e2el_ms"] - lv["mean_ttft_ms"]) / (out_len - 1), rel=1e-6, abs=1e-6)
        assert 0 <= lv["mean_itl_ms"] <= lv["mean_tpot_ms"] * (1 + 1e-9) + 1e-9


def test_levels_consistent(server, tmp_path):
    gen0 = server.metric("vllm:generation_tokens_total")
    j, stdout = bench(server, tmp_path, "--concurrency", "1,4", "--num-prompts", 8, "--input-len", IN, "--output-len", OUT,
                      "--id-max", 384, "--warmup", 1)
    assert [lv["concurrency"] for lv in j["levels"]] == [1, 4]
    for lv in j["levels"]:
        check_level(lv, 8, IN, OUT)
    # the server counted the same tokens (plus the warm-up request)
    assert server.metric("vllm:generation_tokens_total") - gen0 == 2 * 8 * OUT + OUT
    assert "conc" in stdout and "itl_p99" in stdout and len([l for l in stdout.splitlines() if l.strip().startswith(("1 ", "4 "))]) == 2


def test_chat_text_and_nonstream(server, tmp_path):
    j, _ = bench(server, tmp_path, "--endpoint", "/v1/chat/completions", "--concurrency", 2, "--num-prompts", 4, "--input-len", 8,
                 "--output-len", 6, "--warmup", 0)
    check_level(j["levels"][0], 4, 0, 6)
    pf = tmp_path / "prompts.txt"
    pf.write_text("In the beginning the engine\n\nThe numbers 0 1 2\n")
    j, _ = bench(server, tmp_path, "--prompts-file", pf, "--concurrency", 3, "--num-prompts", 5, "--output-len", 5,
                 "--base-url", server.base + "/v1")
    check_level(j["levels"][0], 5, 0, 5)
    j, _ = bench(server, tmp_path, "--no-stream", "--concurrency", 2, "--num-prompts", 4, "--input-len", 8, "--output-len", 5,
                 "--id-max", 384)
    check_level(j["levels"][0], 4, 8, 5, stream=False)


def test_errors(server, tmp_path):
    def run(*args):
        return subprocess.run([str(VLLMC), "bench", "serve", *map(str, args)], capture_output=True, text=True, timeout=60)
    r = run("--concurrency", "0")
    assert r.returncode == 2 and "--concurrency" in r.stderr
    r = run("--base-url", "https://x")
    assert r.returncode == 2 and "http://" in r.stderr
    r = run("--frobnicate")
    assert r.returncode == 2
    # nothing listening: the warm-up fails with a clear message
    from server_util import free_port
    r = run("--base-url", f"http://127.0.0.1:{free_port()}", "--num-prompts", 1)
    assert r.returncode == 1 and "connect" in r.stderr
    r = run("--base-url", f"http://127.0.0.1:{free_port()}", "--ready-timeout", "0.5")
    assert r.returncode == 1 and "not ready" in r.stderr
    # ids outside the vocabulary: the server's 400 is reported
    r = run("--base-url", server.base, "--id-max", 100000, "--input-len", 64, "--warmup", 1)
    assert r.returncode == 1 and "HTTP 400" in r.stderr


def test_script(tmp_path):
    """scripts/bench-serve.sh: starts the server, waits for /health, runs the levels, stops the server; a server
    that cannot start fails the script at once."""
    from server_util import BUILD, ROOT, free_port
    if not VLLMC.exists():
        pytest.skip(f"{VLLMC} not built")
    model = make_tiny_model(tmp_path)
    env = {"PATH": "/usr/bin:/bin", "PORT": str(free_port()), "SERVE_LOG": str(tmp_path / "serve.log")}
    out = tmp_path / "s.json"
    r = subprocess.run(["bash", str(ROOT / "scripts/bench-serve.sh"), str(BUILD), str(model), "--concurrency", "1,2",
                        "--num-prompts", "3", "--input-len", "8", "--output-len", "4", "--id-max", "384", "--json", str(out),
                        "--", "--max-model-len", "128", "-t", "1"], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    j = json.loads(out.read_text())
    for lv in j["levels"]:
        check_level(lv, 3, 8, 4)
    r = subprocess.run(["bash", str(ROOT / "scripts/bench-serve.sh"), str(BUILD), str(tmp_path / "missing.gguf")],
                       capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 1 and "exited early" in r.stdout

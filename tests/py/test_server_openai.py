"""`vllmc serve` driven with the official openai Python package on a tiny qwen2 model (random weights,
real byte-level BPE vocabulary with ChatML specials), plus raw HTTP for SSE framing and bad input.

What must hold: streamed text reassembles to the non-streamed greedy text (completions and chat), n > 1
gives n choices, stop strings that span token boundaries cut exactly there, logprobs are consistent
(greedy token = best of the top alternatives, one entry per output token), usage counts match
/tokenize, every error is the right status with an OpenAI error object, the server keeps serving after
each, a client that disconnects mid-stream frees its KV blocks, SIGTERM drains and exits 0.
"""
import http.client
import json
import signal
import threading
import time

import pytest

from server_util import CHATML, CHATML_THINK, VLLMC, Server, make_tiny_model

openai = pytest.importorskip("openai")

KEY = "sk-test-key"
MODEL = "tiny"


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    if not VLLMC.exists():
        pytest.skip(f"{VLLMC} not built")
    return make_tiny_model(tmp_path_factory.mktemp("srv"))


@pytest.fixture(scope="module")
def server(model, tmp_path_factory):
    d = tmp_path_factory.mktemp("srvlog")
    tpl = d / "chatml.jinja"
    tpl.write_text(CHATML)
    s = Server(model, "--chat-template", tpl, "--served-model-name", MODEL, "--api-key", KEY, "--max-model-len", 256,
               "--max-num-seqs", 8, "-t", 1, "--max-request-bytes", 1 << 20, log_path=d / "server.log")
    yield s
    rc = s.stop()
    assert rc == 0, s.log_text()[-3000:]


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.base + "/v1", api_key=KEY, max_retries=0, timeout=60)


def raw(server, method, path, body=None, headers=None, key=KEY):
    c = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    h = {"Content-Type": "application/json"}
    if key:
        h["Authorization"] = f"Bearer {key}"
    h.update(headers or {})
    if isinstance(body, (dict, list)):
        body = json.dumps(body)
    c.request(method, path, body=body, headers=h)
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, r.getheader("Content-Type"), data


def assert_error(status, data, want_status, param=None):
    assert status == want_status, (status, data)
    j = json.loads(data)
    e = j["error"]
    assert set(e) >= {"message", "type", "param", "code"}, j
    assert e["code"] == want_status and isinstance(e["message"], str) and e["message"]
    if param is not None:
        assert e["param"] == param, j


def still_serving(client):
    r = client.completions.create(model=MODEL, prompt="The numbers", max_tokens=2, temperature=0)
    assert r.choices[0].finish_reason in ("stop", "length")


PROMPTS = ["In the beginning the engine", "Tokens stream out one by one", "def add(a, b):"]


def test_models_health_version(server, client):
    ms = client.models.list()
    assert [m.id for m in ms.data] == [MODEL]
    m = ms.data[0].model_dump()
    assert m["root"].endswith(".gguf") and m["max_model_len"] == 256 and m["kv_cache_dtype"] == "fp16"
    assert raw(server, "GET", "/health", key=None)[0] == 200
    st, _, data = raw(server, "GET", "/version", key=None)
    assert st == 200 and "version" in json.loads(data)


@pytest.mark.parametrize("prompt", PROMPTS)
def test_completion_stream_equals_greedy(client, prompt):
    full = client.completions.create(model=MODEL, prompt=prompt, max_tokens=24, temperature=0)
    text = full.choices[0].text
    assert full.choices[0].finish_reason == "length" and full.usage.completion_tokens == 24
    assert full.id.startswith("cmpl-") and full.object == "text_completion"
    parts, ids, finish = [], set(), None
    for ch in client.completions.create(model=MODEL, prompt=prompt, max_tokens=24, temperature=0, stream=True):
        ids.add(ch.id)
        for c in ch.choices:
            parts.append(c.text)
            finish = c.finish_reason or finish
    assert "".join(parts) == text and len(ids) == 1 and finish == "length"
    # the same again: greedy is deterministic (and now served from the prefix cache)
    again = client.completions.create(model=MODEL, prompt=prompt, max_tokens=24, temperature=0)
    assert again.choices[0].text == text


def test_chat_stream_equals_greedy(client):
    msgs = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "The numbers 0 1 2"}]
    full = client.chat.completions.create(model=MODEL, messages=msgs, max_tokens=20, temperature=0)
    m = full.choices[0].message
    assert m.role == "assistant" and full.object == "chat.completion" and full.id.startswith("chatcmpl-")
    parts, roles, ids, usage = [], [], set(), None
    stream = client.chat.completions.create(model=MODEL, messages=msgs, max_tokens=20, temperature=0, stream=True,
                                            stream_options={"include_usage": True})
    for ch in stream:
        ids.add(ch.id)
        if ch.usage:
            usage = ch.usage
        for c in ch.choices:
            if c.delta.role:
                roles.append(c.delta.role)
            if c.delta.content:
                parts.append(c.delta.content)
    assert "".join(parts) == m.content and roles == ["assistant"] and len(ids) == 1
    assert usage.completion_tokens == full.usage.completion_tokens and usage.prompt_tokens == full.usage.prompt_tokens
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens


def test_content_parts_and_roles(client):
    msgs = [{"role": "developer", "content": [{"type": "text", "text": "Be brief."}]},
            {"role": "user", "content": [{"type": "text", "text": "In the "}, {"type": "text", "text": "beginning"}]},
            {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function",
                                                                  "function": {"name": "f", "arguments": "{\"x\": 1}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "42"},
            {"role": "user", "content": "and then"}]
    r = client.chat.completions.create(model=MODEL, messages=msgs, max_tokens=4, temperature=0)
    assert r.choices[0].finish_reason in ("stop", "length")


def test_n_choices(client):
    r = client.completions.create(model=MODEL, prompt=PROMPTS[0], max_tokens=8, temperature=1.0, n=3, seed=7)
    assert sorted(c.index for c in r.choices) == [0, 1, 2]
    assert r.usage.completion_tokens == sum(1 for _ in range(3)) * 8
    r2 = client.completions.create(model=MODEL, prompt=PROMPTS[:2], max_tokens=5, temperature=0, n=2)
    assert sorted(c.index for c in r2.choices) == [0, 1, 2, 3]
    # greedy: both choices of a prompt agree; prompts 0 and 1 give their own greedy text
    g = {c.index: c.text for c in r2.choices}
    assert g[0] == g[1] and g[2] == g[3]
    single = client.completions.create(model=MODEL, prompt=PROMPTS[1], max_tokens=5, temperature=0)
    assert g[2] == single.choices[0].text
    # streamed n > 1: every index ends with a finish reason
    fins = {}
    for ch in client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=6,
                                             n=2, temperature=0.8, stream=True):
        for c in ch.choices:
            if c.finish_reason:
                fins[c.index] = c.finish_reason
    assert fins == {0: "length", 1: "length"}


def test_stop_string_across_tokens(client):
    prompt = PROMPTS[0]
    r = client.completions.create(model=MODEL, prompt=prompt, max_tokens=24, temperature=0, logprobs=0)
    toks = r.choices[0].logprobs.tokens
    text = r.choices[0].text
    assert "".join(toks) == text
    # a stop string made of the end of one token and the start of the next
    k = next(i for i in range(4, len(toks) - 1) if len(toks[i]) >= 1 and len(toks[i + 1]) >= 1)
    stop = toks[k][-2:] + toks[k + 1][:2]
    want = text[:text.find(stop)]
    for stream in (False, True):
        if stream:
            got = "".join(c.choices[0].text for c in client.completions.create(
                model=MODEL, prompt=prompt, max_tokens=24, temperature=0, stop=[stop, "\u00e9never"], stream=True)
                if c.choices)
            assert got == want
        else:
            s = client.completions.create(model=MODEL, prompt=prompt, max_tokens=24, temperature=0, stop=stop)
            assert s.choices[0].text == want and s.choices[0].finish_reason == "stop"


def test_logprobs(client):
    r = client.completions.create(model=MODEL, prompt=PROMPTS[2], max_tokens=10, temperature=0, logprobs=3)
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset) == 10
    for tok, v, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
        assert v <= 0 and 1 <= len(top) <= 3
        assert v >= max(top.values()) - 1e-5  # greedy picks the best
    assert lp.text_offset == sorted(lp.text_offset)
    c = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=6, temperature=0,
                                       logprobs=True, top_logprobs=2)
    content = c.choices[0].logprobs.content
    assert len(content) == c.usage.completion_tokens == 6
    for e in content:
        assert len(e.top_logprobs) == 2 and e.logprob >= e.top_logprobs[0].logprob - 1e-5
        assert bytes(e.bytes).decode("utf-8", "replace") == e.token or "\ufffd" in e.token


def test_usage_matches_tokenize(server, client):
    st, _, data = raw(server, "POST", "/tokenize", {"prompt": PROMPTS[1]})
    assert st == 200
    tk = json.loads(data)
    assert tk["count"] == len(tk["tokens"]) and tk["max_model_len"] == 256
    r = client.completions.create(model=MODEL, prompt=PROMPTS[1], max_tokens=3, temperature=0)
    assert r.usage.prompt_tokens == tk["count"]
    assert r.usage.prompt_tokens_details is not None
    st, _, data = raw(server, "POST", "/detokenize", {"tokens": tk["tokens"]})
    assert st == 200 and json.loads(data)["prompt"] == PROMPTS[1]
    # token-id prompts give the same text as the string prompt
    r2 = client.completions.create(model=MODEL, prompt=tk["tokens"], max_tokens=3, temperature=0)
    assert r2.choices[0].text == r.choices[0].text
    r3 = client.completions.create(model=MODEL, prompt=[tk["tokens"], tk["tokens"]], max_tokens=3, temperature=0)
    assert [c.text for c in r3.choices] == [r.choices[0].text] * 2
    # echo puts the prompt text first, for text and token-id prompts, streamed or not
    for prompt in (PROMPTS[1], tk["tokens"]):
        e = client.completions.create(model=MODEL, prompt=prompt, max_tokens=3, temperature=0, echo=True)
        assert e.choices[0].text == PROMPTS[1] + r.choices[0].text
        es = "".join(c.choices[0].text for c in client.completions.create(
            model=MODEL, prompt=prompt, max_tokens=3, temperature=0, echo=True, stream=True) if c.choices)
        assert es == PROMPTS[1] + r.choices[0].text


def test_prefix_cache_reports_cached_tokens(client):
    long = " ".join(["the engine read a file"] * 12)
    client.completions.create(model=MODEL, prompt=long, max_tokens=2, temperature=0)
    r = client.completions.create(model=MODEL, prompt=long, max_tokens=2, temperature=0)
    assert r.usage.prompt_tokens_details.cached_tokens >= 16


def test_sse_framing_raw(server):
    c = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    body = json.dumps({"model": MODEL, "prompt": PROMPTS[0], "max_tokens": 5, "temperature": 0, "stream": True,
                       "stream_options": {"include_usage": True}})
    c.request("POST", "/v1/completions", body=body, headers={"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"})
    r = c.getresponse()
    assert r.status == 200
    assert r.getheader("Content-Type").startswith("text/event-stream")
    assert r.getheader("Transfer-Encoding") == "chunked"
    data = r.read().decode()
    c.close()
    assert data.endswith("data: [DONE]\n\n")
    events = data.split("\n\n")[:-1]
    assert all(e.startswith("data: ") and "\n" not in e for e in events)
    objs = [json.loads(e[6:]) for e in events[:-1]]
    assert len({o["id"] for o in objs}) == 1 and len({o["created"] for o in objs}) == 1
    assert objs[-1]["choices"] == [] and objs[-1]["usage"]["completion_tokens"] == 5
    assert all(o["usage"] is None for o in objs[:-1])
    assert objs[-2]["choices"][0]["finish_reason"] == "length"


def test_bad_input(server, client):
    p = "/v1/completions"
    assert_error(*raw(server, "POST", p, "{not json")[::2], 400)
    assert_error(*raw(server, "POST", p, "[1, 2]")[::2], 400)
    assert_error(*raw(server, "POST", p, "")[::2], 400)
    assert_error(*raw(server, "POST", p, '{"prompt": "x"} trailing')[::2], 400)
    assert_error(*raw(server, "POST", p, {"prompt": 5})[::2], 400, "prompt")
    assert_error(*raw(server, "POST", p, {"prompt": "x", "max_tokens": "7"})[::2], 400, "max_tokens")
    assert_error(*raw(server, "POST", p, {"prompt": "x", "max_tokens": -1})[::2], 400, "max_tokens")
    assert_error(*raw(server, "POST", p, {"prompt": "x", "temperature": "hot"})[::2], 400, "temperature")
    assert_error(*raw(server, "POST", p, {"prompt": "x", "top_p": 0})[::2], 400, "top_p")
    assert_error(*raw(server, "POST", p, {"prompt": "x", "n": 0})[::2], 400, "n")
    assert_error(*raw(server, "POST", p, {"prompt": "x", "stop": [1]})[::2], 400, "stop")
    assert_error(*raw(server, "POST", p, {"prompt": "x", "logprobs": 99})[::2], 400, "logprobs")
    assert_error(*raw(server, "POST", p, {"prompt": [[1, 2], [3, 1e9]]})[::2], 400, "prompt")
    assert_error(*raw(server, "POST", p, {"prompt": "x", "stream_options": {"include_usage": True}})[::2], 400)
    assert_error(*raw(server, "POST", "/v1/chat/completions", {"messages": "hi"})[::2], 400, "messages")
    assert_error(*raw(server, "POST", "/v1/chat/completions", {"messages": [{"role": "wizard", "content": "x"}]})[::2], 400)
    assert_error(*raw(server, "POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})[::2], 400)
    assert_error(*raw(server, "POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})[::2], 400)
    # unknown fields are ignored
    assert raw(server, "POST", p, {"prompt": "x", "max_tokens": 1, "frobnicate": {"a": [1]}})[0] == 200
    # body over the limit (1 MiB here)
    big = json.dumps({"prompt": "x" * (1 << 20)})
    assert_error(*raw(server, "POST", p, big)[::2], 413)
    # max_tokens beyond the context
    with pytest.raises(openai.BadRequestError) as ei:
        client.completions.create(model=MODEL, prompt="hello", max_tokens=300)
    assert "maximum context length is 256" in str(ei.value)
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model=MODEL, prompt="word " * 300, max_tokens=1)
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model=MODEL, prompt=[[]], max_tokens=1)
    # unknown model
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="gpt-nope", prompt="hi", max_tokens=1)
    # auth
    bad = openai.OpenAI(base_url=server.base + "/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.completions.create(model=MODEL, prompt="hi", max_tokens=1)
    assert_error(*raw(server, "POST", p, {"prompt": "x"}, key=None)[::2], 401)
    assert_error(*raw(server, "GET", "/v1/models", key=None)[::2], 401)
    # routes
    assert_error(*raw(server, "GET", "/v1/nope")[::2], 404)
    assert_error(*raw(server, "GET", "/v1/completions")[::2], 405)
    # a huge header is refused by the HTTP layer, not a crash
    st, _, _ = raw(server, "GET", "/health", headers={"X-Big": "a" * 200000}, key=None)
    assert st in (400, 413, 431)
    still_serving(client)


def test_disconnect_frees_blocks(server, client):
    for _ in range(3):
        c = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
        body = json.dumps({"prompt": PROMPTS[0], "max_tokens": 200, "ignore_eos": True, "stream": True, "temperature": 0})
        c.request("POST", "/v1/completions", body=body, headers={"Authorization": f"Bearer {KEY}"})
        r = c.getresponse()
        assert r.status == 200
        r.fp.readline()  # the first chunk, then hang up
        c.sock.close()
        c.close()
    m = server.wait_idle()
    assert m["vllmc:kv_blocks_free"] == m["vllmc:kv_blocks_total"] > 0
    assert m["vllm:num_requests_running"] == 0
    still_serving(client)


def test_metrics(server, client):
    client.completions.create(model=MODEL, prompt="hi", max_tokens=2, temperature=0)
    st, ctype, data = raw(server, "GET", "/metrics", key=None)
    assert st == 200 and ctype.startswith("text/plain")
    text = data.decode()
    for name, typ in [("vllm:num_requests_running", "gauge"), ("vllm:num_requests_waiting", "gauge"),
                      ("vllm:prompt_tokens_total", "counter"), ("vllm:generation_tokens_total", "counter"),
                      ("vllm:time_to_first_token_seconds", "histogram"), ("vllm:e2e_request_latency_seconds", "histogram"),
                      ("vllm:request_success_total", "counter"), ("vllm:kv_cache_usage_perc", "gauge"),
                      ("vllm:gpu_cache_usage_perc", "gauge"), ("vllm:prefix_cache_queries_total", "counter"),
                      ("vllm:prefix_cache_hits_total", "counter"), ("vllmc:kv_blocks_free", "gauge")]:
        assert f"# TYPE {name} {typ}" in text, name
    assert 'vllm:request_success_total{model_name="tiny",finished_reason="length"}' in text
    assert 'vllm:time_to_first_token_seconds_bucket{model_name="tiny",le="+Inf"}' in text
    m = server.metrics()
    assert m['vllm:generation_tokens_total{model_name="tiny"}'] > 0


def test_429_and_drain(model, tmp_path):
    tpl = tmp_path / "t.jinja"
    tpl.write_text(CHATML)
    s = Server(model, "--chat-template", tpl, "--max-pending-requests", 1, "-t", 1, "--max-model-len", 2048,
               log_path=tmp_path / "log")
    try:
        results = {}
        started = threading.Event()

        def long_stream():
            c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=120)
            c.request("POST", "/v1/completions", body=json.dumps(
                {"prompt": "hi", "max_tokens": 2000, "ignore_eos": True, "stream": True}))
            r = c.getresponse()
            results["status"] = r.status
            first = r.readline()
            started.set()
            results["body"] = first.decode() + r.read().decode()

        t = threading.Thread(target=long_stream)
        t.start()
        assert started.wait(60)
        st, _, data = raw(s, "POST", "/v1/completions", {"prompt": "hi", "max_tokens": 1}, key=None)
        assert_error(st, data, 429)
        # SIGTERM while the stream runs: it finishes, then the server exits 0
        s.proc.send_signal(signal.SIGTERM)
        t.join(120)
        assert results["status"] == 200 and results["body"].endswith("data: [DONE]\n\n")
        assert s.proc.wait(60) == 0
    finally:
        s.stop()


def test_reasoning_split(model, tmp_path):
    tpl = tmp_path / "think.jinja"
    tpl.write_text(CHATML_THINK)
    s = Server(model, "--chat-template", tpl, "-t", 1, "--max-model-len", 256, log_path=tmp_path / "log")
    try:
        cl = openai.OpenAI(base_url=s.base + "/v1", api_key="x", max_retries=0)
        msgs = [{"role": "user", "content": "In the beginning"}]
        r = cl.chat.completions.create(model=s.proc.args[2], messages=msgs, max_tokens=12, temperature=0)
        m = r.choices[0].message.model_dump()
        # the prompt opened <think>: the whole (unterminated) output is reasoning, equal to the raw text
        prompt = "<|im_start|>user\nIn the beginning<|im_end|>\n<|im_start|>assistant\n<think>\n"
        c = cl.completions.create(model=s.proc.args[2], prompt=prompt, max_tokens=12, temperature=0)
        assert m["reasoning_content"] == c.choices[0].text == m["reasoning"] and m["content"] == ""
        parts = {"reasoning_content": "", "content": ""}
        for ch in cl.chat.completions.create(model=s.proc.args[2], messages=msgs, max_tokens=12, temperature=0, stream=True):
            for x in ch.choices:
                d = x.delta.model_dump()
                parts["reasoning_content"] += d.get("reasoning_content") or ""
                parts["content"] += d.get("content") or ""
        assert parts == {"reasoning_content": m["reasoning_content"], "content": ""}
        # thinking off: everything is content
        r2 = cl.chat.completions.create(model=s.proc.args[2], messages=msgs, max_tokens=12, temperature=0,
                                        extra_body={"chat_template_kwargs": {"enable_thinking": False}})
        m2 = r2.choices[0].message.model_dump()
        assert m2["content"] and not m2.get("reasoning_content")
    finally:
        assert s.stop() == 0


@pytest.mark.parametrize("args,msg", [(["--port", "70000"], "--port"), (["--kv-cache-dtype", "fp4"], "--kv-cache-dtype"),
                                      (["--kv-cache-dtype", "fp8_e5m2"], "--kv-cache-dtype"),
                                      (["--max-model-len", "abc"], "--max-model-len"),
                                      (["--gpu-memory-utilization", "1.5"], "--gpu-memory-utilization"),
                                      (["--device", "tpu"], "--device"),
                                      (["--mamba-ssm-cache-dtype", "float16"], "--mamba-ssm-cache-dtype"),
                                      (["--bogus"], "unknown option")])
def test_bad_flags(model, args, msg):
    import subprocess
    r = subprocess.run([str(VLLMC), "serve", str(model), *args], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and msg in r.stderr
    r = subprocess.run([str(VLLMC), "serve", "/nonexistent.gguf"], capture_output=True, text=True, timeout=30)
    assert r.returncode != 0 and "nonexistent" in r.stderr


@pytest.mark.parametrize("dtype,name", [("fp8", "fp8_e4m3"), ("fp8_e4m3", "fp8_e4m3"), ("bf16", "bf16"), ("fp32", "fp32"),
                                        ("auto", "fp16")])
def test_kv_cache_dtype_serves(model, tmp_path, dtype, name):
    """Every --kv-cache-dtype the engine supports starts, builds its KV pool in that type and serves greedy text."""
    s = Server(model, "--kv-cache-dtype", dtype, "-t", 1, "--max-model-len", 256, "--max-num-seqs", 2,
               log_path=tmp_path / "log")
    try:
        st, _, data = raw(s, "GET", "/v1/models", key=None)
        assert st == 200 and json.loads(data)["data"][0]["kv_cache_dtype"] == name
        body = {"prompt": "The quick brown fox", "max_tokens": 8, "temperature": 0, "ignore_eos": True}
        st, _, data = raw(s, "POST", "/v1/completions", body, key=None)
        assert st == 200, data
        r = json.loads(data)
        assert r["usage"]["completion_tokens"] == 8 and r["choices"][0]["finish_reason"] == "length"
        # greedy is deterministic in every cache type
        st, _, data2 = raw(s, "POST", "/v1/completions", body, key=None)
        assert st == 200 and json.loads(data2)["choices"][0]["text"] == r["choices"][0]["text"]
        m = s.wait_idle(timeout=30)
        assert m["vllmc:kv_blocks_free"] == m["vllmc:kv_blocks_total"] > 0
    finally:
        assert s.stop() == 0
    assert name.replace("fp16", "f16").replace("fp32", "f32") in s.log_text(), s.log_text()[-2000:]


def test_nonstream_disconnect_cancels(model, tmp_path):
    """A client that hangs up while its non-streamed request runs cancels it at the next engine output."""
    import socket
    s = Server(model, "-t", 1, "--max-model-len", 4096, log_path=tmp_path / "log")
    try:
        body = json.dumps({"prompt": "hi", "max_tokens": 4000, "ignore_eos": True})
        sock = socket.create_connection(("127.0.0.1", s.port))
        sock.sendall(f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n{body}".encode())
        deadline = time.time() + 30  # until the engine runs it (a fixed wait failed on a slow sanitizer build)
        while s.metric("vllm:num_requests_running") < 1:
            assert time.time() < deadline
            time.sleep(0.01)
        sock.close()
        t0 = time.time()
        m = s.wait_idle(timeout=30)
        assert time.time() - t0 < 2.0, "the request ran on after the client left"
        assert m["vllmc:kv_blocks_free"] == m["vllmc:kv_blocks_total"]
        assert s.metric("vllm:request_success_total", 'finished_reason="abort"') == 1
        assert s.metric("vllm:generation_tokens_total") < 4000
    finally:
        assert s.stop() == 0


def test_waiting_disconnect_cancels(model, tmp_path):
    """A client that hangs up while its request waits in the queue (one sequence at a time, another running)
    cancels it at once, not when it would have started: the watcher thread looks at suspended connections."""
    import socket

    def post(max_tokens, stream):
        body = json.dumps({"prompt": "hi", "max_tokens": max_tokens, "ignore_eos": True, "stream": stream})
        sock = socket.create_connection(("127.0.0.1", s.port))
        sock.sendall(f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n{body}".encode())
        return sock

    s = Server(model, "-t", 1, "--max-model-len", 4096, "--max-num-seqs", 1, log_path=tmp_path / "log")
    try:
        running = post(4000, False)
        deadline = time.time() + 30
        while s.metric("vllm:num_requests_running") < 1:
            assert time.time() < deadline
            time.sleep(0.02)
        for stream in (False, True):
            waiting = post(50, stream)
            while s.metric("vllm:num_requests_waiting") < 1:
                assert time.time() < deadline
                time.sleep(0.02)
            waiting.close()
            t0 = time.time()
            while s.metric("vllm:num_requests_waiting") > 0:
                assert time.time() - t0 < 2.0, "a waiting request ran on after its client left"
                time.sleep(0.02)
            assert s.metric("vllm:num_requests_running") == 1  # the other one was not touched
        assert s.metric("vllm:request_success_total", 'finished_reason="abort"') == 2
        running.close()
        m = s.wait_idle(timeout=30)
        assert m["vllmc:kv_blocks_free"] == m["vllmc:kv_blocks_total"]
        assert s.metric("vllm:request_success_total", 'finished_reason="abort"') == 3
        assert s.metric("vllm:generation_tokens_total") < 4000
    finally:
        assert s.stop() == 0


def test_impossible_plan_is_a_startup_error(model):
    import subprocess
    r = subprocess.run([str(VLLMC), "serve", str(model), "--num-gpu-blocks-override", "1", "--max-model-len", "2048",
                        "--port", "0"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "KV pool" in r.stderr, r.stderr[-500:]
    r = subprocess.run([str(VLLMC), "serve", str(model), "--device", "cpu", "--gpu-memory-utilization", "0.0000001",
                        "--port", "0"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "host memory" in r.stderr, r.stderr[-500:]
    r = subprocess.run([str(VLLMC), "serve", str(model), "--max-num-batched-tokens", "4", "--max-num-seqs", "8"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "--max-num-batched-tokens" in r.stderr


def test_skip_special_tokens(server, client):
    """skip_special_tokens false keeps the text of special tokens the model draws: the text is then the
    concatenation of every output token's piece; with the default it is that without the special ones."""
    st, _, data = raw(server, "POST", "/tokenize", {"prompt": "<|im_start|><|im_end|><|endoftext|>"})
    specials = {"<|im_start|>", "<|im_end|>", "<|endoftext|>"}
    assert json.loads(data)["count"] == 3
    for prompt in PROMPTS + ["<|im_start|>", "<|im_end|><|im_start|>"]:
        kw = dict(model=MODEL, prompt=prompt, max_tokens=48, temperature=0, logprobs=0)
        keep = client.completions.create(**kw, extra_body={"skip_special_tokens": False, "ignore_eos": True}).choices[0]
        skip = client.completions.create(**kw, extra_body={"ignore_eos": True}).choices[0]
        assert keep.logprobs.tokens == skip.logprobs.tokens
        assert keep.text == "".join(keep.logprobs.tokens)
        assert skip.text == "".join(t for t in skip.logprobs.tokens if t not in specials)
        streamed = "".join(c.choices[0].text for c in client.completions.create(
            **kw, stream=True, extra_body={"skip_special_tokens": False, "ignore_eos": True}) if c.choices)
        assert streamed == keep.text

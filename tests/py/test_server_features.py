"""`vllmc serve` features driven with the openai package on tiny qwen2 models (random weights):

logit_bias: -100 bans a token for greedy decoding (the output changes and never contains it), +100 forces
one, for completions and chat, streamed and not; an id outside the vocabulary is a 400.
tool_calls: a tiny model whose vocabulary has whole Hermes <tool_call> blocks as single USER_DEFINED tokens,
forced with logit_bias, so the real generation path produces them: the message gets tool_calls (name,
arguments as a JSON string), content the text outside the blocks (null when empty), finish_reason
"tool_calls"; streamed deltas reassemble to the same calls; malformed blocks stay content; tool_choice
"none" or no tools turns parsing off.
"""
import json
import subprocess
import sys

import pytest

from server_util import CHATML, ROOT, VLLMC, Server, make_tiny_model

openai = pytest.importorskip("openai")
gguf = pytest.importorskip("gguf")

MODEL = "tiny"
sys.path.insert(0, str(ROOT / "tests/tools"))
from make_tiny_models import byte_alphabet  # noqa: E402


def vocab_bytes(path):
    """Token id -> the bytes it decodes to (byte-level BPE; USER_DEFINED/CONTROL tokens are literal)."""
    r = gguf.GGUFReader(str(path))
    f, t = r.fields["tokenizer.ggml.tokens"], r.fields["tokenizer.ggml.token_type"]
    inv = {c: b for b, c in byte_alphabet().items()}
    out = []
    for i, ty in zip(f.data, t.data):
        s = bytes(f.parts[i]).decode()
        kind = int(t.parts[ty][0])
        out.append(s.encode() if kind != int(gguf.TokenType.NORMAL) else bytes(inv[c] for c in s))
    return out


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    if not VLLMC.exists():
        pytest.skip(f"{VLLMC} not built")
    return make_tiny_model(tmp_path_factory.mktemp("feat"))


@pytest.fixture(scope="module")
def server(model, tmp_path_factory):
    d = tmp_path_factory.mktemp("featlog")
    tpl = d / "chatml.jinja"
    tpl.write_text(CHATML)
    s = Server(model, "--chat-template", tpl, "--served-model-name", MODEL, "--max-model-len", 256, "--max-num-seqs", 8,
               "-t", 1, log_path=d / "server.log")
    yield s
    assert s.stop() == 0, s.log_text()[-3000:]


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.base + "/v1", api_key="none", max_retries=0, timeout=60)


@pytest.fixture(scope="module")
def vocab(model):
    return vocab_bytes(model)


def ids_of(pieces, vocab):
    """The ids of logprobs token strings (each piece of the tiny vocabulary is unique)."""
    index = {}
    for i, b in enumerate(vocab):
        index.setdefault(b, i)
    return [index[p] for p in pieces]


PROMPT = "In the beginning the engine"


def completion_ids(client, vocab, **kw):
    r = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=8, temperature=0, logprobs=0, **kw)
    c = r.choices[0]
    # chat-style bytes are not in completions logprobs; the tiny vocabulary is ASCII, so str pieces are exact
    return c.text, ids_of([t.encode() for t in c.logprobs.tokens], vocab)


def test_logit_bias_ban_and_force_completions(client, vocab):
    text, ids = completion_ids(client, vocab)
    assert len(ids) == 8 and b"".join(vocab[i] for i in ids).decode() == text
    # ban every token of the greedy output: the output changes and contains none of them
    ban = {str(i): -100 for i in set(ids)}
    # (and every non-ASCII piece, so completions' str tokens map back to ids exactly)
    ban.update({str(i): -100 for i, b in enumerate(vocab) if not b.isascii()})
    text2, ids2 = completion_ids(client, vocab, logit_bias=ban)
    assert text2 != text and not set(ids2) & set(ids), (ids, ids2)
    # banning only the first greedy token changes the first token
    first = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=1, temperature=0,
                                      logit_bias={str(ids[0]): -100}).choices[0].text
    assert first.encode() != vocab[ids[0]]
    # force a token the greedy output does not use: every output token is it
    forced = next(i for i in range(300, 380) if i not in ids and vocab[i].isascii() and vocab[i].strip())
    text4, ids4 = completion_ids(client, vocab, logit_bias={str(forced): 100})
    assert ids4 == [forced] * 8 and text4 == vocab[forced].decode() * 8
    # streamed: the same text
    parts = [c.text for ch in client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=8, temperature=0,
                                                         logit_bias=ban, stream=True) for c in ch.choices]
    assert "".join(parts) == text2
    # sampling at a temperature: a banned token is never drawn, a forced one always is
    r = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=8, temperature=1.0, seed=3, logprobs=0,
                                  logit_bias={str(forced): 100}, n=2)
    for c in r.choices:
        assert ids_of([t.encode() for t in c.logprobs.tokens], vocab) == [forced] * 8


def test_logit_bias_chat(client, vocab):
    msgs = [{"role": "user", "content": "The numbers 0 1 2"}]

    def run(**kw):
        r = client.chat.completions.create(model=MODEL, messages=msgs, max_tokens=6, temperature=0, logprobs=True,
                                           extra_body={"ignore_eos": True}, **kw)
        c = r.choices[0]
        return c.message.content, ids_of([bytes(e.bytes) for e in c.logprobs.content], vocab)

    text, ids = run()
    ban = {str(i): -100 for i in set(ids)}
    text2, ids2 = run(logit_bias=ban)
    assert not set(ids2) & set(ids) and text2 != text
    parts = []
    for ch in client.chat.completions.create(model=MODEL, messages=msgs, max_tokens=6, temperature=0, stream=True,
                                             logit_bias=ban, extra_body={"ignore_eos": True}):
        for c in ch.choices:
            parts.append(c.delta.content or "")
    assert "".join(parts) == text2
    forced = ids2[0]
    _, ids3 = run(logit_bias={str(forced): 100})
    assert ids3 == [forced] * 6


def test_logit_bias_bad(server, client, vocab):
    for bad in ({"999999": 1}, {str(len(vocab)): 5}, {"1": 101}, {"x": 1}, {"-1": 1}):
        with pytest.raises(openai.BadRequestError) as ei:
            client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=2, logit_bias=bad)
        assert ei.value.body["param"] == "logit_bias" if isinstance(ei.value.body, dict) else True
    # the largest id is fine; the server keeps serving
    r = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=2, logit_bias={str(len(vocab) - 1): -100})
    assert r.choices[0].finish_reason in ("stop", "length")


# ---- tool calls ----

CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}\n</tool_call>'
MIXED = 'Sure, checking.\n<tool_call>\n{"name": "get_time", "arguments": {"tz": "UTC"}}\n</tool_call>'
BROKEN = '<tool_call>\n{"name": "get_weather", "arguments": oops}\n</tool_call>'
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
                                           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}},
         {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}]
MSGS = [{"role": "user", "content": "What is the weather in Paris?"}]


@pytest.fixture(scope="module")
def tool_server(tmp_path_factory):
    """A tiny model whose last three tokens are whole outputs: a call, text + a call, a malformed block."""
    if not VLLMC.exists():
        pytest.skip(f"{VLLMC} not built")
    d = tmp_path_factory.mktemp("tools")
    r = subprocess.run([sys.executable, str(ROOT / "tests/tools/make_tiny_models.py"), str(d), "--types", "f32", "--arch", "qwen2",
                        "--user-token", CALL, "--user-token", MIXED, "--user-token", BROKEN], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    model = d / "qwen2-tiny-f32.gguf"
    tpl = d / "chatml.jinja"
    tpl.write_text(CHATML)
    s = Server(model, "--chat-template", tpl, "--served-model-name", MODEL, "--max-model-len", 256, "-t", 1,
               log_path=d / "server.log")
    v = vocab_bytes(model)
    s.ids = {t: v.index(t.encode()) for t in (CALL, MIXED, BROKEN)}
    yield s
    assert s.stop() == 0, s.log_text()[-3000:]


@pytest.fixture(scope="module")
def tclient(tool_server):
    return openai.OpenAI(base_url=tool_server.base + "/v1", api_key="none", max_retries=0, timeout=60)


def force(server, tok):
    return {str(server.ids[tok]): 100}


def streamed(tclient, **kw):
    """Reassemble a streamed chat: content, tool calls by index, finish reason."""
    content, calls, finish = [], {}, None
    for ch in tclient.chat.completions.create(model=MODEL, messages=MSGS, temperature=0, stream=True, **kw):
        for c in ch.choices:
            d = c.delta
            if d.content:
                content.append(d.content)
            for tc in d.tool_calls or []:
                e = calls.setdefault(tc.index, {"id": None, "type": None, "name": "", "arguments": ""})
                if tc.id:
                    assert e["id"] is None
                    e["id"], e["type"] = tc.id, tc.type
                if tc.function and tc.function.name:
                    e["name"] += tc.function.name
                if tc.function and tc.function.arguments:
                    e["arguments"] += tc.function.arguments
            finish = c.finish_reason or finish
    return "".join(content), [calls[i] for i in sorted(calls)], finish


def test_tool_calls_two(tool_server, tclient):
    r = tclient.chat.completions.create(model=MODEL, messages=MSGS, tools=TOOLS, temperature=0, max_tokens=2,
                                        logit_bias=force(tool_server, CALL))
    c = r.choices[0]
    assert c.finish_reason == "tool_calls" and c.message.content is None and r.usage.completion_tokens == 2
    tcs = c.message.tool_calls
    assert len(tcs) == 2 and len({t.id for t in tcs}) == 2
    for t in tcs:
        assert t.id.startswith("call_") and t.type == "function" and t.function.name == "get_weather"
        assert json.loads(t.function.arguments) == {"city": "Paris", "unit": "celsius"}
    content, calls, finish = streamed(tclient, tools=TOOLS, max_tokens=2, logit_bias=force(tool_server, CALL))
    assert finish == "tool_calls" and content == "" and len(calls) == 2
    for e in calls:
        assert e["id"].startswith("call_") and e["type"] == "function" and e["name"] == "get_weather"
        assert json.loads(e["arguments"]) == {"city": "Paris", "unit": "celsius"}


def test_tool_call_with_text(tool_server, tclient):
    r = tclient.chat.completions.create(model=MODEL, messages=MSGS, tools=TOOLS, tool_choice="auto", temperature=0,
                                        max_tokens=1, logit_bias=force(tool_server, MIXED))
    c = r.choices[0]
    assert c.message.content == "Sure, checking.\n" and c.finish_reason == "tool_calls"
    assert [(t.function.name, json.loads(t.function.arguments)) for t in c.message.tool_calls] == [("get_time", {"tz": "UTC"})]
    content, calls, finish = streamed(tclient, tools=TOOLS, max_tokens=1, logit_bias=force(tool_server, MIXED))
    assert content == "Sure, checking.\n" and finish == "tool_calls"
    assert [(e["name"], json.loads(e["arguments"])) for e in calls] == [("get_time", {"tz": "UTC"})]


def test_tool_calls_off_or_malformed(tool_server, tclient):
    # a malformed block stays content
    r = tclient.chat.completions.create(model=MODEL, messages=MSGS, tools=TOOLS, temperature=0, max_tokens=1,
                                        logit_bias=force(tool_server, BROKEN))
    c = r.choices[0]
    assert c.message.content == BROKEN and not c.message.tool_calls and c.finish_reason == "length"
    content, calls, finish = streamed(tclient, tools=TOOLS, max_tokens=1, logit_bias=force(tool_server, BROKEN))
    assert content == BROKEN and calls == [] and finish == "length"
    # tool_choice "none" and no tools: parsing is off, the block is plain content
    for kw in ({"tools": TOOLS, "tool_choice": "none"}, {}):
        r = tclient.chat.completions.create(model=MODEL, messages=MSGS, temperature=0, max_tokens=1,
                                            logit_bias=force(tool_server, CALL), **kw)
        c = r.choices[0]
        assert c.message.content == CALL and not c.message.tool_calls and c.finish_reason == "length"
        content, calls, finish = streamed(tclient, max_tokens=1, logit_bias=force(tool_server, CALL), **kw)
        assert content == CALL and calls == [] and finish == "length"
    with pytest.raises(openai.BadRequestError):
        tclient.chat.completions.create(model=MODEL, messages=MSGS, tools=TOOLS, tool_choice="sometimes", max_tokens=1)

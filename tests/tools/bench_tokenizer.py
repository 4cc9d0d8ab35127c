#!/usr/bin/env python3
"""Tokenization throughput: `vllmc tokenize --bench` vs llama.cpp (llama-cpp-python, vocab_only) on the same
~1 MB texts and vocabularies. Median of 5 runs each, MB/s of input; also checks both give the same ids.

usage: .venv/bin/python tests/tools/bench_tokenizer.py [BUILD_DIR]      (default build)
       .venv/bin/python tests/tools/bench_tokenizer.py --write-texts DIR  (only write DIR/docs.txt, DIR/multilingual.txt)
Texts: "docs" = the shared reference docs (English technical prose, tables, code) repeated to 1 MB;
"multilingual" = 1 MB of the oracle test's generated corpus (CJK, emoji, marks, whitespace/digit runs, code).
"""
import glob
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "py"))


def texts():
    docs = sorted(glob.glob(os.path.join(os.path.dirname(ROOT), "shared", "docs", "*.md")) or
                  glob.glob("/work/shared/docs/*.md"))
    d = "".join(open(p, encoding="utf-8").read() for p in docs)
    out = {"docs": (d * (1 + 1_000_000 // max(1, len(d.encode()))))}
    import test_tokenizer_oracle as T
    rng = random.Random(1234)
    parts, n = [], 0
    while n < 1_000_000:
        s = T.gen_corpus(rng, 200)
        for x in s:
            if len(x) < 400:
                parts.append(x)
                n += len(x.encode())
    out["multilingual"] = "\n".join(parts)
    res = {}
    for k, v in out.items():
        b = v.encode()[:1_000_000]
        while True:  # cut on a character boundary
            try:
                b.decode()
                break
            except UnicodeDecodeError:
                b = b[:-1]
        res[k] = b
    return res


def main():
    if len(sys.argv) > 2 and sys.argv[1] == "--write-texts":
        os.makedirs(sys.argv[2], exist_ok=True)
        for k, v in texts().items():
            with open(os.path.join(sys.argv[2], k + ".txt"), "wb") as f:
                f.write(v)
        return
    build = sys.argv[1] if len(sys.argv) > 1 else "build"
    vllmc = os.path.join(ROOT, build, "vllmc")
    import llama_cpp
    vocabs = subprocess.run([sys.executable, os.path.join(HERE, "make_vocab_ggufs.py"), "qwen2", "qwen35"],
                            capture_output=True, text=True, check=True).stdout.split()
    vocabs = dict(zip(vocabs[0::2], vocabs[1::2]))
    rows = []
    for tname, data in texts().items():
        with tempfile.NamedTemporaryFile(suffix=".txt", delete=False) as f:
            f.write(data)
            path = f.name
        for vname, vpath in vocabs.items():
            r = subprocess.run([vllmc, "tokenize", "-m", vpath, "-f", path, "--bench", "5", "--no-add-special"],
                               capture_output=True, text=True, check=True)
            ours = json.loads(r.stdout)
            ids = json.loads(subprocess.run([vllmc, "tokenize", "-m", vpath, "-f", path, "--ids", "--no-add-special"],
                                            capture_output=True, text=True, check=True).stdout)
            m = llama_cpp.Llama(model_path=vpath, vocab_only=True, verbose=False)
            ts, ref = [], None
            for _ in range(5):
                t0 = time.perf_counter()
                ref = m.tokenize(data, add_bos=False, special=True)
                ts.append(time.perf_counter() - t0)
            lc = sorted(len(data) / 1e6 / t for t in ts)
            rows.append((tname, vname, len(data), ours["tokens"], ours["mb_per_s_median"], ours["mb_per_s_min"],
                         ours["mb_per_s_max"], statistics.median(lc), lc[0], lc[-1], ids == ref))
        os.unlink(path)
    print("| text | vocab | bytes | tokens | vllmc MB/s median (min..max) | llama.cpp MB/s median (min..max) | speedup | same ids |")
    print("|---|---|---|---|---|---|---|---|")
    for t, v, nb, nt, om, omin, omax, lm, lmin, lmax, same in rows:
        print(f"| {t} | {v} | {nb} | {nt} | {om:.2f} ({omin:.2f}..{omax:.2f}) | {lm:.3f} ({lmin:.3f}..{lmax:.3f}) | "
              f"{om / lm:.0f}x | {'yes' if same else 'NO'} |")


if __name__ == "__main__":
    main()

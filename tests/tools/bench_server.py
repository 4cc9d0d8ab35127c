#!/usr/bin/env python3
"""Throughput and latency of `vllmc serve` over HTTP: N streamed completions at concurrency C, each with a
random prompt of P words and exactly G output tokens (ignore_eos). Prints requests/s, output tokens/s,
TTFT and end-to-end latency percentiles measured by the client. Traffic only to 127.0.0.1.

usage: bench_server.py MODEL.gguf [-n 64] [-c 16] [-p 64] [-g 64] [--threads T] [--build build]
"""
import argparse
import asyncio
import json
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "py"))
import os  # noqa: E402

WORDS = "the engine read a file mapped it into memory and found every tensor by its name tokens stream out".split()


async def one(port, body, out):
    t0 = time.perf_counter()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    data = json.dumps(body).encode()
    writer.write(f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: {len(data)}\r\nConnection: close\r\n\r\n".encode() + data)
    await writer.drain()
    ttft, n = None, 0
    buf = b""
    while True:
        chunk = await reader.read(65536)
        if not chunk:
            break
        buf += chunk
        if ttft is None and b'"text":"' in buf and b'data: {' in buf:
            ttft = time.perf_counter() - t0
        if b"data: [DONE]" in buf:
            break
    writer.close()
    for line in buf.decode(errors="replace").split("\n"):
        if line.startswith("data: {") and '"usage"' in line and '"choices":[]' in line:
            n = json.loads(line[6:])["usage"]["completion_tokens"]
    out.append((ttft or 0.0, time.perf_counter() - t0, n))


async def run(port, args):
    rng = random.Random(1)
    sem = asyncio.Semaphore(args.c)
    out = []

    async def task():
        body = {"prompt": " ".join(rng.choice(WORDS) for _ in range(args.p)), "max_tokens": args.g, "ignore_eos": True,
                "temperature": 0.7, "stream": True, "stream_options": {"include_usage": True}}
        async with sem:
            await one(port, body, out)

    t0 = time.perf_counter()
    await asyncio.gather(*(task() for _ in range(args.n)))
    return out, time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("-n", type=int, default=64)
    ap.add_argument("-c", type=int, default=16)
    ap.add_argument("-p", type=int, default=64)
    ap.add_argument("-g", type=int, default=64)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--build", default=os.environ.get("VLLMC_BUILD", "build"))
    a = ap.parse_args()
    os.environ["VLLMC_BUILD"] = a.build
    from server_util import Server
    s = Server(a.model, "--max-num-seqs", a.c, "--max-model-len", 2048, "--disable-log-requests", "-t", a.threads,
               log_path="/tmp/bench_server.log")
    try:
        out, dt = asyncio.run(run(s.port, a))
    finally:
        s.stop()
    ttft = sorted(x[0] for x in out)
    e2e = sorted(x[1] for x in out)
    toks = sum(x[2] for x in out)
    q = lambda v, p: v[min(len(v) - 1, int(p * len(v)))]  # noqa: E731
    print(f"{a.n} requests, concurrency {a.c}, prompt ~{a.p} words, {a.g} output tokens: {dt:.2f} s, "
          f"{a.n / dt:.2f} req/s, {toks / dt:.1f} output tok/s ({toks} tokens)")
    print(f"TTFT p50 {q(ttft, .5) * 1e3:.0f} ms p90 {q(ttft, .9) * 1e3:.0f} ms; e2e p50 {q(e2e, .5):.2f} s p90 {q(e2e, .9):.2f} s; "
          f"mean e2e {statistics.mean(e2e):.2f} s")


if __name__ == "__main__":
    main()

"""Load test of `vllmc serve` on a tiny model: many requests with random parameters at high concurrency,
10% of streaming clients hanging up mid-stream, a few malformed requests mixed in. Must show zero 5xx,
no crash, every KV block free at the end, nothing left running, and flat memory.

Size: VLLMC_SERVER_LOAD_N requests (default 300 so the suite stays fast on 2 cores; the figures in
docs/BENCHMARKS.md "Server" are from VLLMC_SERVER_LOAD_N=2000) at concurrency VLLMC_SERVER_LOAD_C (64).
Traffic goes only to 127.0.0.1.
"""
import asyncio
import json
import os
import random
import time

import pytest

from server_util import CHATML, VLLMC, Server, make_tiny_model


class Resp:
    """A minimal HTTP/1.1 response over asyncio streams (one request per connection)."""

    def __init__(self, reader, writer):
        self.reader, self.writer = reader, writer

    async def start(self):
        line = await self.reader.readline()
        self.status_code = int(line.split()[1])
        self.headers = {}
        while True:
            h = await self.reader.readline()
            if h in (b"\r\n", b""):
                break
            k, _, v = h.decode().partition(":")
            self.headers[k.strip().lower()] = v.strip()
        return self

    async def chunks(self):
        if "content-length" in self.headers:
            yield await self.reader.readexactly(int(self.headers["content-length"]))
            return
        while True:
            size = int((await self.reader.readline()).strip(), 16)
            if size == 0:
                await self.reader.readline()
                return
            data = await self.reader.readexactly(size)
            await self.reader.readexactly(2)
            yield data

    async def read(self):
        return b"".join([c async for c in self.chunks()])

    async def lines(self):
        buf = b""
        async for c in self.chunks():
            buf += c
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                yield line.decode()

    def close(self):
        self.writer.close()


class Client:
    def __init__(self, port):
        self.port = port

    async def post(self, path, body):
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        writer.write(f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n".encode() + data)
        await writer.drain()
        return await Resp(reader, writer).start()

N = int(os.environ.get("VLLMC_SERVER_LOAD_N", "300"))
CONC = int(os.environ.get("VLLMC_SERVER_LOAD_C", "64"))
WORDS = "the engine read a file mapped it into memory and found every tensor by its name tokens stream out".split()


def random_body(rng):
    chat = rng.random() < 0.5
    body = {"model": "tiny", "max_tokens": rng.randint(1, 32), "temperature": rng.choice([0, 0.3, 0.7, 1.0, 1.5])}
    text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 40)))
    if chat:
        body["messages"] = [{"role": "user", "content": text}]
        if rng.random() < 0.2:
            body["logprobs"], body["top_logprobs"] = True, rng.randint(0, 3)
    else:
        body["prompt"] = text if rng.random() < 0.8 else [text, text[::-1] or "x"]
        if rng.random() < 0.2:
            body["logprobs"] = rng.randint(0, 3)
    if rng.random() < 0.3:
        body["top_p"] = rng.choice([0.5, 0.9, 1.0])
    if rng.random() < 0.3:
        body["top_k"] = rng.choice([-1, 1, 5, 50])
    if rng.random() < 0.2:
        body["min_p"] = 0.05
    if rng.random() < 0.2:
        body["repetition_penalty"], body["presence_penalty"], body["frequency_penalty"] = 1.1, 0.5, 0.2
    if rng.random() < 0.2:
        body["n"] = rng.randint(2, 3)
    if rng.random() < 0.3:
        body["stop"] = rng.choice(["e", "in", [" the", "\n"], "zzz"])
    if rng.random() < 0.3:
        body["seed"] = rng.randint(0, 1 << 30)
    if rng.random() < 0.1:
        body["ignore_eos"] = True
    if rng.random() < 0.2:  # tiny vocabulary: 384 ids
        body["logit_bias"] = {str(rng.randrange(384)): rng.choice([-100, -5, 3, 100]) for _ in range(rng.randint(1, 4))}
    if chat and rng.random() < 0.2:
        body["tools"] = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
        body["tool_choice"] = rng.choice(["auto", "none", "required"])
    body["stream"] = rng.random() < 0.6
    if body["stream"] and rng.random() < 0.5:
        body["stream_options"] = {"include_usage": True, "continuous_usage_stats": rng.random() < 0.5}
    return ("/v1/chat/completions" if chat else "/v1/completions"), body


async def one(client, rng, stats):
    if rng.random() < 0.05:  # malformed
        bad = rng.choice(['{"prompt": ', '{"prompt": 5}', '{"messages": "x"}', '[]', '{"prompt":"x","max_tokens":99999}'])
        r = await client.post("/v1/completions", bad)
        stats[f"{r.status_code // 100}xx"] += 1
        json.loads(await r.read())["error"]
        r.close()
        return
    path, body = random_body(rng)
    hang_up = rng.random() < 0.10  # 10% of clients hang up mid-stream
    if hang_up:
        body["stream"] = True
    if not body["stream"]:
        r = await client.post(path, body)
        stats[f"{r.status_code // 100}xx"] += 1
        j = json.loads(await r.read())
        r.close()
        if r.status_code == 200:
            assert len(j["choices"]) == body.get("n", 1) * (len(body["prompt"]) if isinstance(body.get("prompt"), list) else 1)
            assert j["usage"]["completion_tokens"] <= body["max_tokens"] * len(j["choices"])
        return
    r = await client.post(path, body)
    try:
        stats[f"{r.status_code // 100}xx"] += 1
        if r.status_code != 200:
            await r.read()
            return
        n_events, done = 0, False
        async for line in r.lines():
            if not line:
                continue
            assert line.startswith("data: ")
            if line == "data: [DONE]":
                done = True
                break
            json.loads(line[6:])
            n_events += 1
            if hang_up and n_events >= rng.randint(1, 3):
                stats["hung_up"] += 1
                return  # closing the connection mid-stream
        assert done or hang_up
    finally:
        r.close()


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    if not VLLMC.exists():
        pytest.skip(f"{VLLMC} not built")
    return make_tiny_model(tmp_path_factory.mktemp("load"))


def test_load(model, tmp_path):
    tpl = tmp_path / "t.jinja"
    tpl.write_text(CHATML)
    s = Server(model, "--chat-template", tpl, "--served-model-name", "tiny", "--max-num-seqs", 64, "--max-model-len", 256,
               "--disable-log-requests", "-t", 1, log_path=tmp_path / "server.log")
    seed = int(os.environ.get("VLLMC_TEST_SEED", str(int(time.time()))))
    print(f"load test seed {seed} (VLLMC_TEST_SEED to replay), {N} requests at concurrency {CONC}")
    stats = {k: 0 for k in ("2xx", "4xx", "5xx", "hung_up")}
    rss = []

    async def main():
        client = Client(s.port)
        if True:
            queue = list(range(N))
            rngs = [random.Random(seed * 1000003 + i) for i in range(N)]

            async def worker():
                while queue:
                    i = queue.pop()
                    await one(client, rngs[i], stats)
                    if i % 200 == 0:
                        rss.append(s.metric("process_resident_memory_bytes"))

            await asyncio.gather(*(worker() for _ in range(CONC)))

    try:
        t0 = time.time()
        asyncio.run(main())
        dt = time.time() - t0
        m = s.wait_idle()
        print(f"{N} requests in {dt:.1f} s ({N / dt:.1f} req/s): {stats}; generated {m['vllm:generation_tokens_total']:.0f} "
              f"tokens; RSS samples (MB): {[round(x / 1e6, 1) for x in rss]}")
        assert stats["5xx"] == 0, stats
        assert s.proc.poll() is None, "server died"
        assert m["vllmc:kv_blocks_free"] == m["vllmc:kv_blocks_total"] > 0
        assert m["vllm:num_requests_running"] == 0 and m["vllm:num_requests_waiting"] == 0
        assert m["vllmc:requests_in_flight"] == 0
        # memory flat: after the first samples (allocator warm-up) growth stays small
        if len(rss) >= 3:
            assert rss[-1] - rss[1] < 48e6, rss
    finally:
        rc = s.stop()
    assert rc == 0, s.log_text()[-3000:]

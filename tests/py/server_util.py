"""Helpers for the `vllmc serve` tests: a tiny model, a chat template, and a server on a free loopback port."""
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("VLLMC_BUILD", "build"))
if not BUILD.is_absolute():
    BUILD = ROOT / BUILD
VLLMC = BUILD / "vllmc"

CHATML = ("{%- for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
          "{%- if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
# A thinking template: the generation prompt opens a <think> block unless enable_thinking is false.
CHATML_THINK = ("{%- for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
                "{%- if add_generation_prompt %}<|im_start|>assistant\n"
                "{%- if enable_thinking is defined and not enable_thinking %}\n<think>\n\n</think>\n\n"
                "{%- else %}\n<think>\n{% endif %}{% endif %}")


def make_tiny_model(out_dir, arch="qwen2"):
    path = Path(out_dir) / f"{arch}-tiny-f32.gguf"
    if not path.exists():
        r = subprocess.run([sys.executable, str(ROOT / "tests/tools/make_tiny_models.py"), str(out_dir), "--types", "f32",
                            "--arch", arch], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr[-2000:]
    return path


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, model, *args, log_path=None, wait=True):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        self.log = open(log_path, "wb") if log_path else subprocess.DEVNULL
        self.proc = subprocess.Popen([str(VLLMC), "serve", str(model), "--port", str(self.port), *map(str, args)],
                                     stdout=self.log, stderr=self.log)
        if wait:
            self.wait_ready()

    def wait_ready(self, timeout=60):
        t0 = time.time()
        while time.time() - t0 < timeout:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}: {self.log_text()[-2000:]}")
            try:
                with urllib.request.urlopen(self.base + "/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except Exception:
                pass
            time.sleep(0.05)
        raise RuntimeError("server did not become ready")

    def log_text(self):
        if not self.log_path:
            return ""
        return Path(self.log_path).read_text(errors="replace")

    def metrics(self):
        with urllib.request.urlopen(self.base + "/metrics", timeout=10) as r:
            text = r.read().decode()
        out = {}
        for line in text.splitlines():
            if line.startswith("#") or not line.strip():
                continue
            name, _, val = line.rpartition(" ")
            out[name] = float(val)
        return out

    def metric(self, name, labels=""):
        m = self.metrics()
        for k, v in m.items():
            base = k.split("{")[0]
            if base == name and labels in k:
                return v
        raise KeyError(name)

    def stop(self, sig=signal.SIGTERM, timeout=30):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.log not in (None, subprocess.DEVNULL):
            self.log.close()
        return self.proc.returncode

    def wait_idle(self, timeout=30):
        """Until no request runs or waits and every KV block is free; returns the last metrics."""
        t0 = time.time()
        while True:
            m = self.metrics()
            vals = {k.split("{")[0]: v for k, v in m.items()}
            if (vals["vllm:num_requests_running"] == 0 and vals["vllm:num_requests_waiting"] == 0
                    and vals["vllmc:kv_blocks_free"] == vals["vllmc:kv_blocks_total"]):
                return vals
            if time.time() - t0 > timeout:
                return vals
            time.sleep(0.05)

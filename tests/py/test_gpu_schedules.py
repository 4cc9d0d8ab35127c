"""Host emulations of the GPU kernels' work schedules (no GPU needed): the counting of the norm + quantize done inside a launch
(scripts/nq_fuse_check.py), and the slots, barriers and counters of the tiled persistent launches (scripts/mega2_sim.py,
scripts/moe2_sim.py). Each script asserts its invariants and exits non-zero when one fails."""
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


def run_script(name):
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / name)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def test_nq_fuse_counting():
    assert "counters back at zero" in run_script("nq_fuse_check.py")


def test_mega2_slots():
    assert "200 of 200 runs clean" in run_script("mega2_sim.py")


def test_moe2_protocol():
    assert "100 of 100 runs clean" in run_script("moe2_sim.py")

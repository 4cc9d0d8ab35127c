#!/usr/bin/env python3
"""Per-kernel cost of graph-replayed decode steps from `nsys stats --report cuda_gpu_trace --format csv`.

With programmatic dependent launch a kernel starts before its predecessor ends and waits inside, so its
duration overstates it. The cost charged to a kernel here is how far it moves the end of the timeline:
max(0, end - latest end before it). Steps are delimited by the argmax kernel (one per decode step); the
table covers the second half of the longest stretch of decode steps in the trace.
usage: trace_steps.py TRACE.csv [step-kernel-substring]"""
import csv, re, sys
from collections import defaultdict

path = sys.argv[1]
marker = sys.argv[2] if len(sys.argv) > 2 else "argmax_final"
rows = []
with open(path, newline="") as f:
    r = csv.DictReader(f)
    for d in r:
        name = d.get("Name", "")
        if not name or "[CUDA mem" in name:
            continue
        try:
            s, dur = int(d["Start (ns)"]), int(d["Duration (ns)"])
        except (KeyError, ValueError):
            continue
        gx = d.get("GrdX", "") or ""
        gy = d.get("GrdY", "") or ""
        rows.append((s, s + dur, dur, name, gx, gy))
rows.sort()
# demangle with cu++filt / c++filt when the names are mangled (the CUPTI tracer writes them as linked)
mangled = sorted({r[3] for r in rows if r[3].startswith("_Z")})
if mangled:
    import shutil, subprocess
    tool = shutil.which("cu++filt") or shutil.which("/usr/local/cuda/bin/cu++filt") or shutil.which("c++filt")
    if tool:
        out = subprocess.run([tool], input="\n".join(mangled) + "\n", capture_output=True, text=True).stdout.split("\n")
        if len(out) >= len(mangled):
            dm = dict(zip(mangled, out))
            rows = [(s, e, d, dm.get(n, n), gx, gy) for s, e, d, n, gx, gy in rows]
if not rows:
    sys.exit("no kernels in " + path)


def short(n):
    n = re.sub(r"^void ", "", n)
    base = n.split("(")[0]
    m = re.match(r"([A-Za-z_0-9:]+)(<.*>)?", base)
    b = m.group(1) if m else base
    t = m.group(2) or "" if m else ""
    t = re.sub(r"\s+", "", t)
    return b + (t[:40] if t else "")


ends = [i for i, r in enumerate(rows) if marker in r[3]]
if len(ends) < 8:
    sys.exit("fewer than 8 '%s' kernels: not a decode trace" % marker)
# steps of the last run: consecutive markers whose gap is small (one decode step), from the end backwards
gaps = [rows[ends[k + 1]][1] - rows[ends[k]][1] for k in range(len(ends) - 1)]
gaps_sorted = sorted(gaps)
typical = gaps_sorted[len(gaps_sorted) // 2]
# the longest stretch of markers whose gaps are all one step (the last such on ties): a host hiccup or a graph
# capture inside the run ends a stretch, so taking only the last one could leave a handful of steps
best, first, last, k0 = -1, 0, 0, 0
for k in range(len(gaps) + 1):
    if k == len(gaps) or gaps[k] >= 3 * typical:
        if k - k0 >= best:
            best, first, last = k - k0, k0, k
        k0 = k + 1
first = (first + last) // 2  # second half of the stretch's decode steps
nsteps = last - first
lo, hi = ends[first] + 1, ends[last] + 1
cost = defaultdict(float)
dur = defaultdict(float)
calls = defaultdict(int)
latest = rows[ends[first]][1]
t0 = latest
idle = 0
idle_step = 0  # of it, the gaps after a step's last kernel (the marker): the host between two replays
prev_marker = True
for s, e, d, name, gx, gy in rows[lo:hi]:
    k = "%s grid %s%s" % (short(name), gx, ("x" + gy) if gy not in ("", "1") else "")
    if s > latest:
        idle += s - latest
        if prev_marker:
            idle_step += s - latest
    prev_marker = marker in name
    cost[k] += max(0, e - max(latest, s))
    latest = max(latest, e)
    dur[k] += d
    calls[k] += 1
wall = (latest - t0) / nsteps
print("decode steps analysed: %d; wall per step %.1f us; kernels per step %.1f" % (nsteps, wall / 1e3, (hi - lo) / nsteps))
print("%-70s %7s %9s %9s %6s" % ("kernel grid", "calls", "dur us", "cost us", "share"))
tot = sum(cost.values())
for k in sorted(cost, key=lambda k: -cost[k]):
    print("%-70s %7.1f %9.2f %9.2f %5.1f%%" % (k[:70], calls[k] / nsteps, dur[k] / nsteps / 1e3,
                                             cost[k] / nsteps / 1e3, 100 * cost[k] / tot if tot else 0))
print("sum of cost per step %.1f us; GPU idle between kernels %.1f us, of it %.1f us between steps (after the step's last kernel)"
      % (tot / nsteps / 1e3, idle / nsteps / 1e3, idle_step / nsteps / 1e3))

# the same by kernel family (the first match of the kernel's name)
FAMILIES = [("mat-vec", ("mm_kernel",)), ("MoE mix", ("moe_mix",)), ("MoE route / sort", ("moe_route", "moe_sort")),
            ("MoE experts", ("moe_",)), ("norm + quantize", ("norm_quant", "rmsnorm")), ("attention", ("attn_", "kv_store", "rope")),
            ("GDN", ("gdn_",)), ("LM head argmax", ("argmax",))]
fam_cost, fam_calls = defaultdict(float), defaultdict(int)
for k in cost:
    f = next((name for name, keys in FAMILIES if any(k.startswith(x) for x in keys)), "other")
    fam_cost[f] += cost[k]
    fam_calls[f] += calls[k]
print("%-24s %7s %9s %6s" % ("family", "calls", "cost us", "share"))
for f in sorted(fam_cost, key=lambda f: -fam_cost[f]):
    print("%-24s %7.1f %9.2f %5.1f%%" % (f, fam_calls[f] / nsteps, fam_cost[f] / nsteps / 1e3, 100 * fam_cost[f] / tot if tot else 0))

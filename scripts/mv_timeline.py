#!/usr/bin/env python3
"""Summarize a per-CTA timeline of the tensor-core mat-vec launches (a -DVLLMC_MV_TIMELINE build of the CUDA backend
writes it to $VLLMC_MV_TIMELINE_OUT: one row per CTA of the last launch of each grid size; gemv_q.cu cu_tl_dump).

usage: mv_timeline.py TIMELINE.csv

Times are from the moment the launch's dependency was released (the earliest end of a CTA's dependency wait). CTAs
resident before it are the first round (they loaded their weights meanwhile); the others started as earlier CTAs
exited. Phase durations come from each CTA's clock64 stamps (converted by the SM clock the CTA's own globaltimer span
gives)."""
import csv
import statistics as st
import sys


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    try:
        with open(sys.argv[1]) as f:
            rows = [{k: int(v) for k, v in r.items()} for r in csv.DictReader(f)]
    except (OSError, ValueError, TypeError) as e:
        sys.exit(f"mv_timeline.py: cannot read {sys.argv[1]}: {e}")
    if not rows:
        sys.exit(f"mv_timeline.py: {sys.argv[1]} has no CTA rows (was the vllmc build -DVLLMC_MV_TIMELINE?)")
    for grid in sorted({r["grid"] for r in rows}, reverse=True):
        R = [r for r in rows if r["grid"] == grid]
        ratios = [(r["c_exit"] - r["c_entry"]) / (r["g_exit"] - r["g_entry"]) for r in R if r["g_exit"] > r["g_entry"]]
        ghz = st.median(ratios) if ratios else 1.98
        R = [r for r in R if r["g_wait"]] or R  # (CTAs of Q6_K rows stamp no wait)
        t0 = min(r["g_wait"] for r in R)
        us = lambda t: (t - t0) / 1000.0
        first = [r for r in R if r["g_entry"] <= t0]
        later = [r for r in R if r["g_entry"] > t0]
        print(f"grid {grid}: {len(R)} CTAs (SM clock ~{ghz:.2f} GHz); first start {us(min(r['g_entry'] for r in R)):+.2f} us, "
              f"last exit {us(max(r['g_exit'] for r in R)):.2f} us")
        ph = lambda S, a, b: st.median([(r[b] - r[a]) / ghz / 1000.0 for r in S])
        for name, S in (("first round", first), ("later", later)):
            if S:
                print(f"  {name:11s} {len(S):5d} CTAs: start->wait end {ph(S, 'c_entry', 'c_wait'):5.2f}  wait end->terms "
                      f"{ph(S, 'c_wait', 'c_terms'):5.2f}  terms->exit {ph(S, 'c_terms', 'c_exit'):5.2f} us (medians)")
        dec = lambda a: " ".join(f"{a[min(len(a) - 1, len(a) * q // 10)]:.2f}" for q in range(11))
        print(f"  starts, deciles (us): {dec(sorted(us(r['g_entry']) for r in R))}")
        print(f"  exits,  deciles (us): {dec(sorted(us(r['g_exit']) for r in R))}")
        by_sm = {}
        for r in R:
            by_sm.setdefault(r["smid"], []).append(r)
        conc = []
        for S in by_sm.values():
            c = m = 0
            for _, d in sorted([(r["g_entry"], 1) for r in S] + [(r["g_exit"], -1) for r in S]):
                c += d
                m = max(m, c)
            conc.append(m)
        print(f"  SMs {len(by_sm)}; CTAs an SM {st.median([len(v) for v in by_sm.values()])}, resident at once {st.median(conc)} (medians)")


if __name__ == "__main__":
    main()

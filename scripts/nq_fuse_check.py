#!/usr/bin/env python3
# Host emulation of the norm + quantize inside a launch (norm_quant.h nq_fuse_finish, and the pieces each kernel
# passes it: mm_kernel_cols, gdn_rule_kernel, moe_mix_kernel; the MoE mix in the down launch,
# moe_mix_tail, and the row's norm after it): for the decode shapes, with CTAs
# finishing in random orders, every unit of every activation-row group is completed exactly once, by the CTA whose
# add reaches its total, after every CTA writing its columns has counted, and every counter is back at zero. Keep it
# in step with the kernels.
import random

RMS, SWI, GATED = 1, 2, 3

def uw_of(mode, n): return n if mode == RMS else 256

def finish(cnt, mode, n, n_feed, pcs, grp, na, done_log, written, cta):
    """One CTA's counting (thread 0 of nq_fuse_finish): pcs = column runs (c0, cnt)."""
    uw = uw_of(mode, n); nu = (n + uw - 1) // uw
    done = []
    for c0, k in pcs:
        c1 = c0 + k
        u = c0 // uw
        while u * uw < c1 and u < nu:
            lo = max(c0, u * uw); ue = min((u + 1) * uw, n); hi = min(c1, ue)
            add = (hi - lo) * na; tgt = n_feed * (ue - u * uw) * na
            idx = grp * nu + u
            if add:
                cnt[idx] += add
                assert cnt[idx] <= tgt, (idx, cnt[idx], tgt)
                if cnt[idx] == tgt:
                    cnt[idx] = 0
                    done.append(u)
            u += 1
    assert len(done) <= 8, done
    for u in done:
        key = (grp, u)
        assert key not in done_log, ("unit completed twice", key)
        done_log[key] = cta
        # every column of the unit was written by every feeding source before this CTA counted
        lo, hi = u * uw, min(n, (u + 1) * uw)
        assert all(written.get((grp, c), 0) == n_feed for c in range(lo, hi)), ("unit done early", key)

def run(ctas, mode, n, n_feed, groups, counters):
    """ctas: list of (grp, na, pcs); the launch's CTAs in a random order."""
    cnt = [0] * counters
    for rep in range(3):  # the counters are reused by the next launch (graph replays)
        order = list(range(len(ctas)))
        random.shuffle(order)
        done, written = {}, {}
        for i in order:
            grp, na, pcs = ctas[i]
            for c0, k in pcs:
                for c in range(c0, c0 + k): written[(grp, c)] = written.get((grp, c), 0) + 1
            finish(cnt, mode, n, n_feed, pcs, grp, na, done, written, i)
        uw = uw_of(mode, n); nu = (n + uw - 1) // uw
        assert len(done) == nu * groups, (len(done), nu, groups)
        assert not any(cnt), "a counter is not back at zero"

def counters(mode, n, n_act):  # cu_nq_fuse_counters
    uw = uw_of(mode, n)
    return (n + uw - 1) // uw * (1 if n_act == 1 else (n_act + 7) // 8)

def cols(segs, feed, mode, n, n_act, n_sb):
    """mm_kernel_cols: segment rows in CTAs of rpc rows, activation rows in groups of 8 (NA 8) or one (NA 1)."""
    sbw = 2 if n_sb <= 16 else 4
    for U in (2, 4):
        rpc = 8 // sbw * U
        groups = 1 if n_act == 1 else (n_act + 7) // 8
        ctas = []
        for si, rows in enumerate(segs):
            for r0 in range(0, rows, rpc):
                for g in range(groups):
                    na = 1 if n_act == 1 else min(8, n_act - 8 * g)
                    pcs = [(r0, min(rpc, rows - r0))] if feed >> si & 1 else []
                    ctas.append((g, na, pcs))
        run(ctas, mode, n, bin(feed).count('1'), groups, counters(mode, n, n_act))

def rule(n_v_head, d_v, T):
    """gdn_rule_kernel: grid (n_v_head, d_v / 32), columns m d_v + 32 y, every token of the step."""
    n = n_v_head * d_v
    ctas = [(0, T, [(m * d_v + 32 * y, 32)]) for m in range(n_v_head) for y in range(d_v // 32)]
    run(ctas, GATED, n, 1, 1, counters(GATED, n, 1))

def mix(n, T):
    """moe_mix_kernel: grid (ceil(n / 256), T), a counter per row."""
    ctas = [(t, 1, [(x * 256, min(256, n - x * 256))]) for x in range((n + 255) // 256) for t in range(T)]
    run(ctas, RMS, n, 1, T, T)

def mixdown(n, T, k, shared, rpc):
    """moe_cols_kernel<DOWN> with the mix (moe_mix_tail): entries (routed t k + j, shared t) x row blocks of rpc rows;
    a unit (token, 256 columns) is mixed by the CTA that completes it, which then counts its columns toward the row's
    RMSNorm (nq_fuse_finish, grp t)."""
    nu = (n + 255) // 256; per = k + shared
    ctas = [(e // k, r0) for e in range(T * k) for r0 in range(0, n, rpc)]
    ctas += [(t, r0) for t in range(shared * T) for r0 in range(0, n, rpc)]
    mcnt = [0] * (T * nu); ncnt = [0] * T
    for rep in range(3):
        random.shuffle(ctas)
        mixed, done, written, ydone = {}, {}, {}, {}
        for i, (t, r0) in enumerate(ctas):
            rows = min(rpc, n - r0)
            for c in range(r0, r0 + rows): ydone[(t, c)] = ydone.get((t, c), 0) + 1
            pcs = []
            u = r0 // 256
            while u * 256 < r0 + rows and u < nu:
                ue = min(n, (u + 1) * 256); lo = max(r0, u * 256); hi = min(r0 + rows, ue)
                add = hi - lo; tgt = per * (ue - u * 256)
                if add:
                    mcnt[t * nu + u] += add
                    assert mcnt[t * nu + u] <= tgt
                    if mcnt[t * nu + u] == tgt:
                        mcnt[t * nu + u] = 0
                        assert (t, u) not in mixed; mixed[(t, u)] = i
                        assert all(ydone.get((t, c), 0) == per for c in range(u * 256, ue)), "mixed early"
                        pcs.append((u * 256, ue - u * 256))
                u += 1
            assert len(pcs) <= 2
            for c0, kk in pcs:
                for c in range(c0, c0 + kk): written[(t, c)] = written.get((t, c), 0) + 1
            if pcs: finish(ncnt, RMS, n, 1, pcs, t, 1, done, written, i)
        assert len(mixed) == T * nu and len(done) == T, (len(mixed), len(done))
        assert not any(mcnt) and not any(ncnt)

random.seed(1)
for n_act in (1, 3, 8, 11, 64):
    for E, F in ((2560, 9216), (2048, 6144), (256, 768), (1024, 2816)):
        cols([E], 1, RMS, E, n_act, E // 256)            # o-proj / down with the fused add: RMSNORM of the residual
        cols([F, F], 3, SWI, F, n_act, E // 256)         # gate / up
        cols([E, 37], 1, RMS, E, n_act, E // 256)        # a second segment that does not feed
for nv, dv in ((32, 128), (16, 128), (4, 64), (2, 64)):
    for T in (1, 3):
        rule(nv, dv, T)
for n in (2048, 256, 300):
    mix(n, 1); mix(n, 3)
for n in (2048, 512, 300):
    for T in (1, 3):
        for k, sh in ((8, 1), (4, 0), (2, 1)):
            for rpc in (16, 32, 64):
                mixdown(n, T, k, sh, rpc)
print("nq_fuse_check: every unit completed once, after all its columns, counters back at zero")

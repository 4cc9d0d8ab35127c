#!/usr/bin/env python3
"""The synchronization and task dealing of cu_moe2 (src/backend/cuda/gemv_q.cu, moe2_kernel) run as a model on the host.

Per CTA: a producer warp (it issues the shared expert's gate / up tasks before its dependency wait, then waits for the
router launch, routes, arrives on `routed`, then issues the rest), nc consumer warps, ns slots with `full` / `empty`
mbarriers (mega2_sim.Barrier: the PTX parity rule), bulk copies completing in any order. Consumers: the gate / up tasks
they own (slot s is warp s % nc's), a CTA barrier, the grid-wide counter cnt[0], the routed wait, the down tasks, each
followed by its row group's counter (the entry that completes a row group mixes it), a CTA barrier and cnt[1], whose
last add zeroes every counter. Several launches run back to back on the same counters (the decode's MoE layers), each
starting when the one before has ended (the launches between them wait for it). The scheduler runs one random ready
actor at a time. Checked: moe2_task deals every (entry, tile) and (entry, row group) task exactly once; a slot is read
only while it holds the wanted task and refilled only after its reader released it; the producer reads the routing only
after it made it; each row group is mixed exactly once, after all its entries' rows were written, by a warp that has
passed the routed wait; no wait sees a counter left over from the launch before; every run ends.

usage: moe2_sim.py [runs]
"""
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mega2_sim import Barrier  # noqa: E402


def moe2_task(G, cta, i, nA, Fs, F, k, D):
    """gemv_q.cu moe2_task: (op, entry, tile or row group) of the CTA's task i."""
    Ts, T1, RG = Fs // 8, F // 8, D // 16
    if i < nA:
        t = cta + G * i
        if t < Ts:
            return 0, k, t
        return 0, (t - Ts) // T1, (t - Ts) % T1
    t = cta + G * (i - nA)
    return 1, t // RG, t % RG


def run(seed, G, nc, ns, D, F, Fs, k, launches):
    rnd = random.Random(seed)
    errors = []
    RG = D // 16
    ne = k + (1 if Fs else 0)
    TA, TB = Fs // 8 + k * (F // 8), ne * RG
    cnt = [0] * (2 + RG)
    for launch in range(launches):
        if any(cnt):
            errors.append(f'seed {seed}: launch {launch} starts with counters {cnt[:4]}...')
            return errors
        dealt = {}
        ctas = []
        for c in range(G):
            nA = (TA - c + G - 1) // G if c < TA else 0
            nB = (TB - c + G - 1) // G if c < TB else 0
            for i in range(nA + nB):
                key = moe2_task(G, c, i, nA, Fs, F, k, D)
                if key in dealt:
                    errors.append(f'seed {seed}: task {key} dealt to CTA {dealt[key]} and CTA {c}')
                dealt[key] = c
            ctas.append(dict(nA=nA, nB=nB, full=[Barrier() for _ in range(ns)], empty=[Barrier() for _ in range(ns)],
                             slot=[None] * ns, k_issue=0, inflight=[], routed=False, released=False, prod='pre',
                             consumers=[dict(pc='a_tasks', i=0, routed_seen=False) for _ in range(nc)],
                             bar_wait=0, bar_gen=0))
        want = {(0, j, q) for j in range(k) for q in range(F // 8)} | {(0, k, q) for q in range(Fs // 8)} | \
               {(1, j, r) for j in range(ne) for r in range(RG)}
        if set(dealt) != want:
            errors.append(f'seed {seed}: dealt {len(dealt)} tasks, want {len(want)} (missing {sorted(want - set(dealt))[:3]})')
            return errors
        y_written = set()
        mixed = {}
        router_done = False
        steps = 0
        while True:
            acts = []
            if not router_done:
                acts.append(('router',))
            for ci, C in enumerate(ctas):
                if C['prod'] != 'end':
                    acts.append(('prod', ci))
                if C['inflight']:
                    acts.append(('copy', ci))
                for cw in range(nc):
                    if C['consumers'][cw]['pc'] != 'end':
                        acts.append(('cons', ci, cw))
            if not acts:
                break
            rnd.shuffle(acts)
            progressed = False
            for a in acts:
                if a[0] == 'router':  # the router launch ends: its dependents' waits are released
                    router_done = True
                    progressed = True
                    break
                C = ctas[a[1]]
                if a[0] == 'copy':
                    i, s = C['inflight'].pop(rnd.randrange(len(C['inflight'])))
                    C['slot'][s] = (i, 'full')
                    C['full'][s].tx -= 1
                    C['full'][s]._maybe_complete()
                    progressed = True
                    break
                if a[0] == 'prod':
                    i = C['k_issue']
                    if C['prod'] == 'pre':  # the shared expert's gate / up tasks, before the wait
                        if i < C['nA'] and a[1] + G * i < Fs // 8:
                            pass
                        else:
                            C['prod'] = 'wait'
                            progressed = True
                            break
                    elif C['prod'] == 'wait':
                        if not router_done:
                            continue
                        if not router_done:  # (what the wait above ensures: the logits are the router's)
                            errors.append(f'seed {seed}: CTA {a[1]} routes before the router launch ended')
                        C['routed'] = True  # moe_route_warp, then the arrive on `routed`
                        C['prod'] = 'issue'
                        progressed = True
                        break
                    if i >= C['nA'] + C['nB']:
                        C['prod'] = 'end'
                        progressed = True
                        break
                    s = i % ns
                    if i >= ns and not C['empty'][s].done(((i // ns) - 1) & 1):
                        continue
                    op, j, q = moe2_task(G, a[1], i, C['nA'], Fs, F, k, D)
                    if j < k and not C['routed']:
                        errors.append(f'seed {seed}: CTA {a[1]} issues routed task {i} before routing')
                        return errors
                    if C['slot'][s] is not None and C['slot'][s][1] != 'released':
                        errors.append(f'seed {seed}: CTA {a[1]} refills slot {s} before task {C["slot"][s][0]} was released')
                        return errors
                    C['full'][s].tx += 1
                    C['full'][s].arrive()
                    C['slot'][s] = (i, 'loading')
                    C['inflight'].append((i, s))
                    C['k_issue'] += 1
                    progressed = True
                    break
                cw = a[2]
                W = C['consumers'][cw]
                nA, nB = C['nA'], C['nB']

                def take(i):  # wait full, read, release; None: not ready
                    s = i % ns
                    if not C['full'][s].done((i // ns) & 1):
                        return None
                    if C['slot'][s] is None or C['slot'][s] != (i, 'full'):
                        errors.append(f'seed {seed}: CTA {a[1]} warp {cw} reads slot {s} for task {i} holding {C["slot"][s]}')
                        return False
                    C['slot'][s] = (i, 'released')
                    C['empty'][s].arrive()
                    return True

                if W['pc'] in ('bar1', 'bar2'):  # mg2_cbar, then thread 0 adds to cnt[0] / cnt[1]
                    if W.get('gen') is None:
                        W['gen'] = C['bar_gen']
                        C['bar_wait'] += 1
                        if C['bar_wait'] == nc:
                            C['bar_wait'] = 0
                            C['bar_gen'] += 1
                            if W['pc'] == 'bar1':
                                cnt[0] += 1
                            else:
                                old = cnt[1]
                                cnt[1] += 1
                                if old == G - 1:
                                    for c in range(len(cnt)):
                                        cnt[c] = 0
                    if C['bar_gen'] == W['gen']:
                        continue
                    W['gen'] = None
                    W['pc'] = 'cnt0' if W['pc'] == 'bar1' else 'end'
                    progressed = True
                    break
                if W['pc'] == 'cnt0':  # every CTA's hidden values, then this CTA's Q8_K of them, the routed wait
                    if cnt[0] < G:
                        continue
                    W['pc'] = 'routed_wait'
                    progressed = True
                    break
                if W['pc'] == 'routed_wait':
                    if not C['routed']:
                        continue
                    W['routed_seen'] = True
                    W['pc'] = 'b_tasks'
                    W['i'] = nA
                    progressed = True
                    break
                if W['pc'] in ('a_tasks', 'b_tasks'):  # the tasks this warp owns (slot s is warp s % nc's), in order
                    gate_up = W['pc'] == 'a_tasks'
                    if gate_up and not router_done:  # (the PDL wait and the act copy come first)
                        continue
                    end = nA if gate_up else nA + nB
                    while W['i'] < end and (W['i'] % ns) % nc != cw:
                        W['i'] += 1
                    if W['i'] >= end:
                        W['pc'] = 'bar1' if gate_up else 'bar2'
                        progressed = True
                        break
                    got = take(W['i'])
                    if got is None:
                        continue
                    if got is False:
                        return errors
                    if not gate_up:  # the row group's counter; the entry that completes it mixes it
                        op, j, r = moe2_task(G, a[1], W['i'], nA, Fs, F, k, D)
                        y_written.add((j, r))
                        old = cnt[2 + r]
                        cnt[2 + r] += 1
                        if old == ne - 1:  # this warp mixes row group r
                            if r in mixed:
                                errors.append(f'seed {seed}: row group {r} mixed twice')
                            if any((jj, r) not in y_written for jj in range(ne)):
                                errors.append(f'seed {seed}: row group {r} mixed before all its entries were written')
                            if not W['routed_seen']:
                                errors.append(f'seed {seed}: row group {r} mixed before the routed wait')
                            mixed[r] = (a[1], cw)
                    W['i'] += 1
                    progressed = True
                    break
            steps += 1
            if not progressed:
                states = [(ci, C['prod'], C['k_issue'], [W['pc'] for W in C['consumers']]) for ci, C in enumerate(ctas)]
                errors.append(f'seed {seed}: launch {launch}: deadlock after {steps} steps: {states[:3]} ...')
                return errors
        if len(mixed) != RG:
            errors.append(f'seed {seed}: {len(mixed)} of {RG} row groups mixed')
    return errors


def main():
    runs = int(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1].isdigit() else 100
    rnd = random.Random(2)
    bad = 0
    for r in range(runs):
        G = rnd.choice([2, 3, 5, 7])
        nc = rnd.choice([1, 2, 3, 4])
        ns = nc * rnd.choice([1, 2, 3])
        k = rnd.choice([1, 2, 4, 8])
        D = 16 * rnd.choice([1, 2, 3, 5, 8])          # row groups
        F = 8 * rnd.choice([1, 2, 4, 7])              # gate / up tiles an expert
        Fs = 8 * rnd.choice([0, 1, 2, 4])             # the shared expert's (0: none)
        errs = run(r, G, nc, ns, D, F, Fs, k, rnd.choice([1, 2, 3]))
        if errs:
            bad += 1
            if bad <= 3:
                print('\n'.join(errs[:2]))
    print(f'moe2_sim: {runs - bad} of {runs} runs clean')
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main())

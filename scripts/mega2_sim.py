#!/usr/bin/env python3
"""The synchronization of cu_mega2 (src/backend/cuda/gemv_q.cu, mega2_kernel) run as a model on the host.

Each CTA has a producer (warp 0 lane 0) and nc consumer warps; ns slots, each with a `full` and an `empty` mbarrier of
arrival count 1, waited on by parity as the PTX defines it (try_wait.parity(p) succeeds when the barrier's current
phase has the other parity: the phase of parity p is taken as complete). Bulk copies complete after random delays, in
any order. Between ops the consumer warps meet at a CTA barrier, add to the op's counter and wait for every CTA's add.
The scheduler runs one random ready actor at a time. Checked: every consumer reads a slot only while it holds the task
it wants, each task is read once, no slot is refilled before its reader released it, and every run ends (no deadlock).

usage: mega2_sim.py [runs] [--shared]   (--shared: the first form, every consumer warp taking any slot, which fails)
"""
import random
import sys


class Barrier:
    def __init__(self):
        self.phase = 0      # current (incomplete) phase
        self.pending = 1    # arrivals left in it
        self.tx = 0

    def done(self, parity):  # mbarrier.try_wait.parity
        return (self.phase & 1) != parity

    def arrive(self):
        self.pending -= 1
        self._maybe_complete()

    def _maybe_complete(self):
        if self.pending == 0 and self.tx == 0:
            self.phase += 1
            self.pending = 1


def run(seed, G, nc, ns, n0s, n1s, layers, shared):
    rnd = random.Random(seed)
    ctas = []
    for c in range(G):
        n0, n1 = n0s[c], n1s[c]
        ctas.append(dict(n0=n0, n1=n1, total=layers * (n0 + n1), full=[Barrier() for _ in range(ns)],
                         empty=[Barrier() for _ in range(ns)], slot=[None] * ns, k_issue=0, inflight=[],
                         consumers=[dict(pc='op_start', li=0, op=0, kb=0, i=0) for _ in range(nc)], bar_wait=0, bar_gen=0))
    cnt = [0] * (2 * layers)
    read = set()
    errors = []

    def owner_ok(s, cw):
        return True if shared else s % nc == cw

    def actors():
        out = []
        for ci, C in enumerate(ctas):
            if C['k_issue'] < C['total']:
                out.append(('prod', ci))
            if C['inflight']:
                out.append(('copy', ci))
            for cw in range(nc):
                if C['consumers'][cw]['pc'] != 'end':
                    out.append(('cons', ci, cw))
        return out

    steps = 0
    while True:
        acts = actors()
        if not acts:
            break
        progressed = False
        rnd.shuffle(acts)
        for a in acts:
            C = ctas[a[1]]
            if a[0] == 'prod':
                k = C['k_issue']
                s = k % ns
                if k >= ns and not C['empty'][s].done(((k // ns) - 1) & 1):
                    continue
                if C['slot'][s] is not None and C['slot'][s][1] != 'released':
                    errors.append(f'seed {seed}: CTA {a[1]} refills slot {s} with task {k} before task {C["slot"][s][0]} was released')
                C['full'][s].tx += 1          # expect_tx, then the arrival
                C['full'][s].arrive()
                C['slot'][s] = (k, 'loading')
                C['inflight'].append((k, s))
                C['k_issue'] += 1
                progressed = True
                break
            if a[0] == 'copy':
                k, s = C['inflight'].pop(rnd.randrange(len(C['inflight'])))  # any order
                C['slot'][s] = (k, 'full')
                C['full'][s].tx -= 1
                C['full'][s]._maybe_complete()
                progressed = True
                break
            # a consumer warp: one step of mega2_kernel's loop
            cw = a[2]
            W = C['consumers'][cw]
            n0, n1 = C['n0'], C['n1']
            if W['pc'] == 'op_start':
                o = 2 * W['li'] + W['op']
                if o > 0:
                    W['pc'] = 'bar_in'
                else:
                    W['pc'] = 'tasks'
                    W['i'] = 0
                progressed = True
                break
            if W['pc'] == 'bar_in':  # mg2_cbar at the end of the previous op, then the counter add (ct == 0)
                if W.get('gen') is None:
                    W['gen'] = C['bar_gen']
                    C['bar_wait'] += 1
                    if C['bar_wait'] == nc:
                        C['bar_wait'] = 0
                        C['bar_gen'] += 1
                        o = 2 * W['li'] + W['op']
                        cnt[o - 1] += 1
                if C['bar_gen'] == W['gen']:
                    continue
                W['gen'] = None
                W['pc'] = 'cnt_wait'
                progressed = True
                break
            if W['pc'] == 'cnt_wait':
                o = 2 * W['li'] + W['op']
                if cnt[o - 1] < G:
                    continue
                W['pc'] = 'tasks'
                W['i'] = 0
                progressed = True
                break
            if W['pc'] == 'tasks':
                nt = n0 if W['op'] == 0 else n1
                while W['i'] < nt and not owner_ok((W['kb'] + W['i']) % ns, cw):
                    W['i'] += 1
                if W['i'] >= nt or (shared and W['i'] % nc != cw):
                    if shared and W['i'] < nt:
                        W['i'] += 1
                        progressed = True
                        break
                    W['kb'] += nt
                    if W['op'] == 0:
                        W['op'] = 1
                    else:
                        W['op'] = 0
                        W['li'] += 1
                    if W['li'] == layers:
                        W['pc'] = 'last_bar'
                    else:
                        W['pc'] = 'op_start'
                    progressed = True
                    break
                k = W['kb'] + W['i']
                s = k % ns
                if not C['full'][s].done((k // ns) & 1):
                    continue
                if C['slot'][s] is None or C['slot'][s][0] != k or C['slot'][s][1] != 'full':
                    errors.append(f'seed {seed}: CTA {a[1]} warp {cw} reads slot {s} for task {k} while it holds {C["slot"][s]}')
                    return errors
                if (a[1], k) in read:
                    errors.append(f'seed {seed}: task {k} of CTA {a[1]} read twice')
                read.add((a[1], k))
                C['slot'][s] = (k, 'released')
                C['empty'][s].arrive()
                W['i'] += 1
                progressed = True
                break
            if W['pc'] == 'last_bar':  # the last op's barrier and add; nothing waits on it
                W['pc'] = 'end'
                progressed = True
                break
        steps += 1
        if not progressed:
            states = [(ci, C['k_issue'], [W['pc'] for W in C['consumers']]) for ci, C in enumerate(ctas)]
            errors.append(f'seed {seed}: deadlock after {steps} steps: {states[:3]} ...')
            return errors
    want = sum(C['total'] for C in ctas)
    if len(read) != want:
        errors.append(f'seed {seed}: {len(read)} of {want} tasks read')
    return errors


def main():
    runs = int(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1].isdigit() else 200
    shared = '--shared' in sys.argv
    bad = 0
    rnd = random.Random(1)
    for r in range(runs):
        G = rnd.choice([2, 3, 5])
        nc = rnd.choice([1, 2, 3, 4])
        ns = nc * rnd.choice([1, 2, 3]) if not shared else rnd.choice([2, 3, 5])
        if shared:
            nc = rnd.choice([4, 7, 9])
        T0, T1 = rnd.randint(G, 6 * G), rnd.randint(G, 4 * G)  # tasks an op, dealt t -> CTA t mod G as the kernel does
        n0s = [(T0 - c + G - 1) // G for c in range(G)]
        n1s = [(T1 - c + G - 1) // G for c in range(G)]
        errs = run(r, G, nc, ns, n0s, n1s, rnd.choice([1, 2, 3]), shared)
        if errs:
            bad += 1
            if bad <= 3:
                print('\n'.join(errs[:2]))
    print(f'mega2_sim: {runs - bad} of {runs} runs clean ({"shared slots" if shared else "slots owned by a warp"})')
    return 1 if bad and not shared else 0


if __name__ == '__main__':
    sys.exit(main())

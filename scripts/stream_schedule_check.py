#!/usr/bin/env python3
# Host emulation of mm_kernel_stream's row schedule (gemv_q.cu: mm_launch_stream picks the shape, the kernel walks
# chunks with ms_next): for the real decode shapes and several pipeline shapes, every row is computed once, every
# loop ends, every chunk fits its stage and every partial sum its row run. Keep it in step with the kernel.
import math
def stride(t, n):
    nsb = n // 256
    p16 = lambda v: (v + 15) // 16 * 16
    return 128*nsb + p16(12*nsb) + p16(4*nsb) if t == 'q4' else 208*nsb + p16(2*nsb)
def sim(segs, n, cps=2, sbytes=24576, sms=132, NS=4):
    rows = [r for _, r in segs]
    row0 = [sum(rows[:i]) for i in range(len(rows))]
    total = sum(rows)
    st = max(stride(t, n) for t, _ in segs)
    nsb = n // 256; sbw = 2 if nsb <= 16 else 4; w = -(-nsb // sbw); rw = 8 // sbw
    sr = (sbytes // st) // rw * rw; sr = max(rw, min(sr, 64))
    stage = sr * st
    rpc = -(-total // (sms * cps)); rpc = min(256, max(rpc, rw))
    ctas = -(-total // rpc)
    smem = NS * stage + 4 * w * rpc
    assert smem <= 200 * 1024, smem
    def nxt(g, end, sr):
        si = 0
        for i in range(1, len(segs)):
            if g >= row0[i]: si = i
        return si, g - row0[si], min(sr, min(end, row0[si] + rows[si]) - g)
    seen = [0] * total
    for b in range(ctas):
        R0 = b * rpc; R1 = min(total, R0 + rpc)
        gi = R0; issued = []
        for s in range(NS - 1):
            if gi < R1:
                k = nxt(gi, R1, sr); assert k[2] > 0; issued.append(k); gi += k[2]
        gc = R0; it = 0
        while gc < R1:
            k = nxt(gc, R1, sr); assert k[2] > 0 and k[2] * stride(segs[k[0]][0], n) <= stage
            assert issued[it] == k
            if gi < R1:
                kn = nxt(gi, R1, sr); issued.append(kn); gi += kn[2]
            for r in range(k[2]):
                idx = (gc - R0) + r; assert idx < rpc
                seen[row0[k[0]] + k[1] + r] += 1
            gc += k[2]; it += 1
            assert it < 10000
    assert all(v == 1 for v in seen)
    return dict(total=total, ctas=ctas, rpc=rpc, sr=sr, stage=stage, smem=smem, w=w)
cases = {
 'gate+up 4b': ([('q4', 9216), ('q4', 9216)], 2560),
 'qkv+z 4b q6': ([('q6', 8192), ('q4', 4096)], 2560),
 'down q6 4b': ([('q6', 2560)], 9216),
 'down q4 4b': ([('q4', 2560)], 9216),
 'gdn out': ([('q4', 2560)], 4096),
 'attn qkv': ([('q4', 8192), ('q4', 1024), ('q6', 1024)], 2560),
 'lm head': ([('q6', 248320)], 2560),
 'tiny': ([('q4', 37), ('q6', 64)], 256),
 'test': ([('q4', 2088), ('q6', 37), ('q4', 301)], 9216),
}
for name, (segs, n) in cases.items():
    for cps, sb in [(2, 24576), (1, 49152), (1, 4096), (3, 16384)]:
        r = sim(segs, n, cps, sb)
    print(name, r)

/* The persistent FFN chain's task tiles (gemv_q.cu mega2_kernel, cu_mega2_pack, the device packer): the layout, as
 * plain C shared by the host packer, the device packer, the kernel's reads and tests/test_mega2_tile.c.
 *
 * A tile holds 16 repacked Q4_K rows (cu_weight_row_stride's layout: the quants, 128 bytes a super-block, at 0; the 12
 * scale bytes a super-block at 128 n_sb; d / dmin, 4 bytes a super-block, at that plus 12 n_sb rounded up to 16) over a
 * run of super-blocks. Each super-block takes MG2_SB_BYTES: the quants of tile rows 0-7 (the MMA's rows g) as two
 * 512-byte halves in lane order (lane (g, c) at 16 lane: bytes 0-15, then 16-31 of its chunk c), the same for rows
 * 8-15, then 16 bytes a row (its 12 scale bytes, then d / dmin). A quarter warp's 16-byte loads then read 128
 * consecutive bytes, and lane (g, c) gets exactly the words the tensor-core mat-vec loads from the rows (k4s_load:
 * bytes 32c .. 32c + 31 of the super-block's quants and word c of the 16 bytes {scales, d / dmin}). */
#ifndef VLLMC_MEGA2_TILE_H
#define VLLMC_MEGA2_TILE_H

#include <stdint.h>
#include <string.h>

#if defined(__CUDACC__) || defined(__HIPCC__)
#define MG2_HD __host__ __device__
#else
#define MG2_HD
#endif

#define MG2_SB_BYTES 2304u
#define MG2_PIECES 144 /* a super-block's pieces: 128 of 16 quant bytes, then 16 of a row's scale word set */

/* offsets in a repacked Q4_K row of n_sb super-blocks */
static inline MG2_HD uint64_t mg2_sc_off(int n_sb) { return 128 * (uint64_t)n_sb; }
static inline MG2_HD uint64_t mg2_dm_off(int n_sb) { return mg2_sc_off(n_sb) + ((12 * (uint64_t)n_sb + 15) & ~(uint64_t)15); }

/* The reader's side: where lane (g = lane / 4, c = lane % 4) finds, in a super-block of a tile, half p (0: bytes 0-15,
 * 1: 16-31) of its chunk of row g (hi 0) or g + 8 (hi 1), and word c of row r's scale word set. */
static inline MG2_HD uint32_t mg2_q_off(int hi, int p, int lane) { return (uint32_t)((2 * hi + p) * 512 + 16 * lane); }
static inline MG2_HD uint32_t mg2_sw_off(int r, int c) { return (uint32_t)(2048 + 16 * r + 4 * c); }

/* The writer's side: piece k (0 .. MG2_PIECES - 1) of super-block sb: tile row *row, bytes *src of that row (16 bytes;
 * for the scale pieces 12 bytes at *src, then 4 at *src2) to byte *dst of the super-block. */
static inline MG2_HD void mg2_piece(int k, int sb, int n_sb, int *row, uint64_t *src, uint64_t *src2, uint32_t *dst) {
    if (k < 128) {
        const int hi = k >> 6, p = (k >> 5) & 1, lane = k & 31, g = lane >> 2, c = lane & 3;
        *row = 8 * hi + g;
        *src = 128 * (uint64_t)sb + 32 * (uint64_t)c + 16 * (uint64_t)p;
        *src2 = 0;
        *dst = mg2_q_off(hi, p, lane);
    } else {
        const int r = k - 128;
        *row = r;
        *src = mg2_sc_off(n_sb) + 12 * (uint64_t)sb;
        *src2 = mg2_dm_off(n_sb) + 4 * (uint64_t)sb;
        *dst = mg2_sw_off(r, 0);
    }
}

/* Host packer: tile rows rows[0..15] (repacked, n_sb super-blocks each), super-blocks s0 .. s0 + nsb - 1, into dst
 * (MG2_SB_BYTES a super-block). */
static inline void mg2_pack_host(const uint8_t *const rows[16], int n_sb, int s0, int nsb, uint8_t *dst) {
    for (int s = 0; s < nsb; s++)
        for (int k = 0; k < MG2_PIECES; k++) {
            int row;
            uint64_t src, src2;
            uint32_t d;
            mg2_piece(k, s0 + s, n_sb, &row, &src, &src2, &d);
            uint8_t *o = dst + (uint64_t)s * MG2_SB_BYTES + d;
            if (k < 128) {
                memcpy(o, rows[row] + src, 16);
            } else {
                memcpy(o, rows[row] + src, 12);
                memcpy(o + 12, rows[row] + src2, 4);
            }
        }
}

/* ---- Q6_K down tiles ----
 * 16 repacked Q6_K rows (cu_weight_row_stride's layout: ql, 128 bytes a super-block, at 0; qh, 64 bytes, at 128 n_sb; the
 * 16 scale bytes at 192 n_sb; d, 2 bytes, at 208 n_sb). A super-block takes MG2_Q6_SB_BYTES (16 x 210): the ql bytes of
 * tile rows 0-7, then 8-15, as two 512-byte halves in lane order (lane (g, c), (h, k) = (c / 2, c % 2): bytes 16p ..
 * 16p + 15 of ql bytes 64h + 32k .. 64h + 32k + 31, the bytes the tensor-core mat-vec's q6_load reads); then the qh
 * bytes, 32 for each (row, h) (rows 0-7 then 8-15, entry 2g + h: the two lanes of an h read the same bytes); then the
 * rows' 16 scale bytes; then their d. */
#define MG2_Q6_SB_BYTES 3360u
#define MG2_Q6_PIECES 224 /* 128 ql pieces, 64 qh pieces, 16 scale pieces of 16 bytes; 16 d pieces of 2 */

static inline MG2_HD uint32_t mg2_q6_ql_off(int hi, int p, int lane) { return (uint32_t)((2 * hi + p) * 512 + 16 * lane); }
static inline MG2_HD uint32_t mg2_q6_qh_off(int hi, int g, int h) { return (uint32_t)(2048 + hi * 512 + (2 * g + h) * 32); }
static inline MG2_HD uint32_t mg2_q6_sc_off(int r) { return (uint32_t)(3072 + 16 * r); }
static inline MG2_HD uint32_t mg2_q6_d_off(int r) { return (uint32_t)(3328 + 2 * r); }

/* Piece k (0 .. MG2_Q6_PIECES - 1) of super-block sb: tile row *row, *len bytes (16 or 2) at *src of that row, to byte
 * *dst of the super-block. */
static inline MG2_HD void mg2_q6_piece(int k, int sb, int n_sb, int *row, uint64_t *src, int *len, uint32_t *dst) {
    *len = 16;
    if (k < 128) {
        const int hi = k >> 6, p = (k >> 5) & 1, lane = k & 31, g = lane >> 2, c = lane & 3, h = c >> 1, kk = c & 1;
        *row = 8 * hi + g;
        *src = 128 * (uint64_t)sb + 64 * (uint64_t)h + 32 * (uint64_t)kk + 16 * (uint64_t)p;
        *dst = mg2_q6_ql_off(hi, p, lane);
    } else if (k < 192) {
        const int e = k - 128, hi = e >> 5, g = (e >> 2) & 7, h = (e >> 1) & 1, half = e & 1;
        *row = 8 * hi + g;
        *src = 128 * (uint64_t)n_sb + 64 * (uint64_t)sb + 32 * (uint64_t)h + 16 * (uint64_t)half;
        *dst = mg2_q6_qh_off(hi, g, h) + 16 * (uint32_t)half;
    } else if (k < 208) {
        const int r = k - 192;
        *row = r;
        *src = 192 * (uint64_t)n_sb + 16 * (uint64_t)sb;
        *dst = mg2_q6_sc_off(r);
    } else {
        const int r = k - 208;
        *row = r;
        *src = 208 * (uint64_t)n_sb + 2 * (uint64_t)sb;
        *len = 2;
        *dst = mg2_q6_d_off(r);
    }
}

static inline void mg2_q6_pack_host(const uint8_t *const rows[16], int n_sb, int s0, int nsb, uint8_t *dst) {
    for (int s = 0; s < nsb; s++)
        for (int k = 0; k < MG2_Q6_PIECES; k++) {
            int row, len;
            uint64_t src;
            uint32_t d;
            mg2_q6_piece(k, s0 + s, n_sb, &row, &src, &len, &d);
            memcpy(dst + (uint64_t)s * MG2_Q6_SB_BYTES + d, rows[row] + src, (size_t)len);
        }
}

/* The tiles of a layer: gate / up task j (0 .. F / 8 - 1) holds gate rows 8j .. 8j + 7 (tile rows 0-7) and up rows
 * 8j .. 8j + 7 (tile rows 8-15) over all of the D / 256 super-blocks; down task t = r (F / 256 / ps) + q holds rows
 * 16r .. 16r + 15, super-blocks q ps .. q ps + ps - 1. The row of a tile row, as an index into gate (0) / up (1) or
 * down rows. */
static inline MG2_HD int64_t mg2_gu_row(int64_t j, int r, int *up) { *up = r >= 8; return 8 * j + (r & 7); }
static inline MG2_HD int64_t mg2_dn_row(int64_t t, int nparts, int r) { return 16 * (t / nparts) + r; }

/* One piece of a layer's tiles, as the device packer copies it (the packer's whole index logic, so the host test runs
 * the same): task t, super-block s of the task (nsb_task of them: n_sb for gate / up, ps for down), piece k; gate / up
 * tiles (down 0; Q4_K rows of n_sb super-blocks) or down tiles (down 1; Q4_K or, q6, Q6_K rows of n_sb super-blocks,
 * ps a task). Out: which rows (*which: 0 gate, 1 up, 2 down), the row index *r, the source spans (*src, *len) and
 * (*src2, *len2) of that row (*len2 0: none), and the destination byte *dst from the start of the tiles. False: no such
 * piece (k past the type's pieces). */
static inline MG2_HD int mg2_task_piece(int down, int q6, int64_t t, int s, int k, int n_sb, int ps, int *which, int64_t *r,
                                        uint64_t *src, int *len, uint64_t *src2, int *len2, uint64_t *dst) {
    if (k >= (q6 ? MG2_Q6_PIECES : MG2_PIECES)) return 0;
    const int nsb_task = down ? ps : n_sb, nparts = down ? n_sb / ps : 1, sb = down ? (int)(t % nparts) * ps + s : s;
    int row;
    uint32_t d;
    *len = 16; *src2 = 0; *len2 = 0;
    if (q6) {
        mg2_q6_piece(k, sb, n_sb, &row, src, len, &d);
    } else {
        mg2_piece(k, sb, n_sb, &row, src, src2, &d);
        if (k >= 128) { *len = 12; *len2 = 4; }
    }
    if (down) {
        *which = 2;
        *r = mg2_dn_row(t, nparts, row);
    } else {
        int up = 0;
        *r = mg2_gu_row(t, row, &up);
        *which = up;
    }
    *dst = ((uint64_t)t * nsb_task + s) * (q6 ? MG2_Q6_SB_BYTES : MG2_SB_BYTES) + d;
    return 1;
}

/* A MoE layer's expert tiles (cu_mega2_pack_gu_exps / _dn_exps, moe2_kernel): the experts' tiles one after another,
 * expert e's gate / up task q (F / 8 of D / 256 super-blocks an expert) and down task r (row group r of D / 16, all of
 * the F / 256 super-blocks) at these byte offsets. The packer puts expert e at e times the offset of expert 1. */
static inline MG2_HD uint64_t mg2_exp_gu_off(int64_t e, int64_t q, int64_t F, int n_sb_d) {
    return ((uint64_t)e * (uint64_t)(F / 8) + (uint64_t)q) * (uint64_t)n_sb_d * MG2_SB_BYTES;
}
static inline MG2_HD uint64_t mg2_exp_dn_off(int64_t e, int64_t r, int64_t D, int n_sb_f, int q6) {
    return ((uint64_t)e * (uint64_t)(D / 16) + (uint64_t)r) * (uint64_t)n_sb_f * (q6 ? MG2_Q6_SB_BYTES : MG2_SB_BYTES);
}

#endif

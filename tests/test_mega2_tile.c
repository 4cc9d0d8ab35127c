/* The persistent FFN chain's task tiles (src/backend/cuda/mega2_tile.h), on the host: packed from random repacked Q4_K
 * rows, every lane of the tensor-core mat-vec must read from a tile exactly the bytes it reads from the rows
 * (k4s_load: bytes 32c .. 32c + 31 of a super-block's quants of rows g and g + 8, and word c of each row's {12 scale
 * bytes, d / dmin}); the device packer's task and row mapping (mg2_gu_row, mg2_dn_row, the super-blocks of a down task)
 * must give the tiles the host packer gives for the rows the kernel's tasks name. */
#include <stdlib.h>
#include <string.h>
#include "backend/cuda/mega2_tile.h"
#include "test.h"

static uint64_t stride_q4k(int n_sb) { return 128 * (uint64_t)n_sb + ((12 * (uint64_t)n_sb + 15) & ~15ull) + ((4 * (uint64_t)n_sb + 15) & ~15ull); }

static void fill(uint8_t *p, size_t n) {
    for (size_t i = 0; i < n; i++) p[i] = (uint8_t)test_rand_u64();
}

/* What lane (g, c) loads from repacked row `row` for super-block sb, as k4s_load forms it: q (32 bytes), sw (4 bytes). */
static void k4s_view(const uint8_t *row, int n_sb, int sb, int c, uint8_t q[32], uint8_t sw[4]) {
    memcpy(q, row + 128 * (size_t)sb + 32 * (size_t)c, 32);
    const uint64_t off = c < 3 ? mg2_sc_off(n_sb) + 12 * (uint64_t)sb + 4 * (uint64_t)c : mg2_dm_off(n_sb) + 4 * (uint64_t)sb;
    memcpy(sw, row + off, 4);
}

/* The same lane's loads from a packed super-block (mg2_terms): rows g (hi 0) and g + 8 (hi 1). */
static void tile_view(const uint8_t *blk, int hi, int lane, uint8_t q[32], uint8_t sw[4]) {
    const int g = lane >> 2, c = lane & 3;
    memcpy(q, blk + mg2_q_off(hi, 0, lane), 16);
    memcpy(q + 16, blk + mg2_q_off(hi, 1, lane), 16);
    memcpy(sw, blk + mg2_sw_off(g + 8 * hi, c), 4);
}

static uint64_t stride_q6k(int n_sb) { return 208 * (uint64_t)n_sb + ((2 * (uint64_t)n_sb + 15) & ~15ull); }

/* What lane (g, c) loads from repacked Q6_K row `row` for super-block sb, as q6_load forms it ((h, k) = (c / 2, c % 2)):
 * 32 ql bytes, 32 qh bytes, the scale bytes 8h + 2k, + 1 and 8h + 2k + 4, + 5, and d. */
static void q6_view(const uint8_t *row, int n_sb, int sb, int c, uint8_t v[70]) {
    const int h = c >> 1, k = c & 1;
    memcpy(v, row + 128 * (size_t)sb + 64 * h + 32 * k, 32);
    memcpy(v + 32, row + 128 * (size_t)n_sb + 64 * (size_t)sb + 32 * h, 32);
    memcpy(v + 64, row + 192 * (size_t)n_sb + 16 * (size_t)sb + 8 * h + 2 * k, 2);
    memcpy(v + 66, row + 192 * (size_t)n_sb + 16 * (size_t)sb + 8 * h + 2 * k + 4, 2);
    memcpy(v + 68, row + 208 * (size_t)n_sb + 2 * (size_t)sb, 2);
}
/* The same lane's loads from a packed Q6_K super-block (mg2_terms6): row g (hi 0) or g + 8 (hi 1). */
static void q6_tile_view(const uint8_t *blk, int hi, int lane, uint8_t v[70]) {
    const int g = lane >> 2, c = lane & 3, h = c >> 1, k = c & 1, r = g + 8 * hi;
    memcpy(v, blk + mg2_q6_ql_off(hi, 0, lane), 16);
    memcpy(v + 16, blk + mg2_q6_ql_off(hi, 1, lane), 16);
    memcpy(v + 32, blk + mg2_q6_qh_off(hi, g, h), 32);
    memcpy(v + 64, blk + mg2_q6_sc_off(r) + 8 * h + 2 * k, 2);
    memcpy(v + 66, blk + mg2_q6_sc_off(r) + 8 * h + 2 * k + 4, 2);
    memcpy(v + 68, blk + mg2_q6_d_off(r), 2);
}

/* the device packer (mega2_pack_kernel) on the host: its grid (task, super-block of the task, piece) over mg2_task_piece */
static void pack_like_device(const uint8_t *gate, const uint8_t *up, const uint8_t *dn, int q6, uint64_t stride, int n_sb, int ps,
                             int64_t n_tasks, uint8_t *dst) {
    const int nsb_task = dn ? ps : n_sb;
    for (int64_t t = 0; t < n_tasks; t++)
        for (int s = 0; s < nsb_task; s++)
            for (int k = 0; k < 256; k++) { /* (the packer's CTAs are wider than the pieces) */
                int which, len, len2;
                int64_t r;
                uint64_t src, src2, d;
                if (!mg2_task_piece(dn != NULL, q6, t, s, k, n_sb, ps, &which, &r, &src, &len, &src2, &len2, &d)) continue;
                const uint8_t *rp = (which == 2 ? dn : which ? up : gate) + (uint64_t)r * stride;
                memcpy(dst + d, rp + src, (size_t)len);
                if (len2) memcpy(dst + d + len, rp + src2, (size_t)len2);
            }
}

/* A layer's down tiles (Q4_K or, q6, Q6_K rows of n_sb super-blocks, ps a task): the device packer's mapping against
 * the host packer on the rows the kernel's tasks name (task r nparts + q: rows 16r .. 16r + 15, super-blocks q ps ..). */
static void down_tiles_match(const uint8_t *dn, int q6, uint64_t stride, int64_t D, int n_sb, int ps) {
    const int np = n_sb / ps;
    const uint32_t sbb = q6 ? MG2_Q6_SB_BYTES : MG2_SB_BYTES;
    const size_t bytes = (size_t)(D / 16) * np * ps * sbb;
    uint8_t *a = malloc(bytes), *b = malloc(bytes);
    pack_like_device(NULL, NULL, dn, q6, stride, n_sb, ps, (D / 16) * np, a);
    for (int64_t r = 0; r < D / 16; r++)
        for (int q = 0; q < np; q++) {
            const uint8_t *rp[16];
            for (int i = 0; i < 16; i++) rp[i] = dn + (16 * r + i) * stride;
            uint8_t *o = b + (size_t)(r * np + q) * ps * sbb;
            if (q6) mg2_q6_pack_host(rp, n_sb, q * ps, ps, o);
            else mg2_pack_host(rp, n_sb, q * ps, ps, o);
        }
    CHECK_MSG(memcmp(a, b, bytes) == 0, "%s down tiles (ps %d): the device packer's mapping differs from the host's", q6 ? "Q6_K" : "Q4_K", ps);
    free(a); free(b);
}

int main(void) {
    test_seed_auto("test_mega2_tile");
    /* every lane's view, for a few row lengths */
    const int nsbs[3] = {1, 10, 36};
    for (int ti = 0; ti < 3; ti++) {
        const int n_sb = nsbs[ti];
        const uint64_t st = stride_q4k(n_sb);
        uint8_t *rows = malloc(16 * st), *tile = malloc((size_t)n_sb * MG2_SB_BYTES);
        fill(rows, 16 * st);
        fill(tile, (size_t)n_sb * MG2_SB_BYTES); /* every byte must be written */
        const uint8_t *rp[16];
        for (int i = 0; i < 16; i++) rp[i] = rows + i * st;
        mg2_pack_host(rp, n_sb, 0, n_sb, tile);
        int bad = 0;
        for (int sb = 0; sb < n_sb; sb++)
            for (int lane = 0; lane < 32; lane++)
                for (int hi = 0; hi < 2; hi++) {
                    uint8_t q0[32], w0[4], q1[32], w1[4];
                    k4s_view(rp[(lane >> 2) + 8 * hi], n_sb, sb, lane & 3, q0, w0);
                    tile_view(tile + (size_t)sb * MG2_SB_BYTES, hi, lane, q1, w1);
                    bad += memcmp(q0, q1, 32) != 0 || memcmp(w0, w1, 4) != 0;
                }
        CHECK_MSG(bad == 0, "%d super-blocks: %d lane views differ between the tile and the rows", n_sb, bad);
        /* every byte of a tile is written: packed over other bytes, the same tile */
        uint8_t *again = malloc((size_t)n_sb * MG2_SB_BYTES);
        memset(again, 0xA5, (size_t)n_sb * MG2_SB_BYTES);
        mg2_pack_host(rp, n_sb, 0, n_sb, again);
        CHECK_MSG(memcmp(again, tile, (size_t)n_sb * MG2_SB_BYTES) == 0, "%d super-blocks: bytes of the tile left unwritten", n_sb);
        free(again);
        /* a run of super-blocks (a down task's): the same as the whole row's tile from s0 */
        if (n_sb >= 12) {
            uint8_t *part = malloc(4 * MG2_SB_BYTES);
            mg2_pack_host(rp, n_sb, 8, 4, part);
            CHECK(memcmp(part, tile + 8 * (size_t)MG2_SB_BYTES, 4 * MG2_SB_BYTES) == 0);
            free(part);
        }
        free(rows);
        free(tile);
    }
    /* Q6_K tiles: every lane's view of rows g and g + 8, every byte written, a run of super-blocks */
    for (int ti = 0; ti < 3; ti++) {
        const int n_sb = nsbs[ti];
        const uint64_t st = stride_q6k(n_sb);
        const size_t tb = (size_t)n_sb * MG2_Q6_SB_BYTES;
        uint8_t *rows = malloc(16 * st), *tile = malloc(tb), *again = malloc(tb);
        fill(rows, 16 * st);
        fill(tile, tb);
        memset(again, 0x5A, tb);
        const uint8_t *rp[16];
        for (int i = 0; i < 16; i++) rp[i] = rows + i * st;
        mg2_q6_pack_host(rp, n_sb, 0, n_sb, tile);
        mg2_q6_pack_host(rp, n_sb, 0, n_sb, again);
        int bad = 0;
        for (int sb = 0; sb < n_sb; sb++)
            for (int lane = 0; lane < 32; lane++)
                for (int hi = 0; hi < 2; hi++) {
                    uint8_t a[70], b[70];
                    q6_view(rp[(lane >> 2) + 8 * hi], n_sb, sb, lane & 3, a);
                    q6_tile_view(tile + (size_t)sb * MG2_Q6_SB_BYTES, hi, lane, b);
                    bad += memcmp(a, b, 70) != 0;
                }
        CHECK_MSG(bad == 0, "Q6_K, %d super-blocks: %d lane views differ between the tile and the rows", n_sb, bad);
        CHECK_MSG(memcmp(again, tile, tb) == 0, "Q6_K, %d super-blocks: bytes of the tile left unwritten", n_sb);
        if (n_sb >= 12) {
            uint8_t *part = malloc(4 * MG2_Q6_SB_BYTES);
            mg2_q6_pack_host(rp, n_sb, 8, 4, part);
            CHECK(memcmp(part, tile + 8 * (size_t)MG2_Q6_SB_BYTES, 4 * MG2_Q6_SB_BYTES) == 0);
            free(part);
        }
        free(rows); free(tile); free(again);
    }
    /* a layer's tiles: the device packer's mapping against the host packer on the rows the kernel's tasks name (gate /
     * up task j: gate rows 8j .. 8j + 7, then up rows; down task t of nparts a row group: rows 16 (t / nparts) ..,
     * super-blocks (t % nparts) ps ..) */
    {
        const int64_t D = 512, F = 3072; /* 2 super-blocks in, 12 out */
        const int nb1 = (int)(D / 256), nb2 = (int)(F / 256);
        const uint64_t s1 = stride_q4k(nb1), s2 = stride_q4k(nb2);
        uint8_t *gate = malloc(F * s1), *up = malloc(F * s1), *dn = malloc(D * s2);
        fill(gate, F * s1); fill(up, F * s1); fill(dn, D * s2);
        const size_t gu_bytes = (size_t)(F / 8) * nb1 * MG2_SB_BYTES;
        uint8_t *a = malloc(gu_bytes), *b = malloc(gu_bytes);
        pack_like_device(gate, up, NULL, 0, s1, nb1, nb1, F / 8, a);
        for (int64_t j = 0; j < F / 8; j++) {
            const uint8_t *rp[16];
            for (int i = 0; i < 8; i++) { rp[i] = gate + (8 * j + i) * s1; rp[8 + i] = up + (8 * j + i) * s1; }
            mg2_pack_host(rp, nb1, 0, nb1, b + (size_t)j * nb1 * MG2_SB_BYTES);
        }
        CHECK_MSG(memcmp(a, b, gu_bytes) == 0, "gate / up tiles: the device packer's mapping differs from the host's");
        free(a); free(b);
        const int pss[3] = {4, 6, 12};
        for (int pi = 0; pi < 3; pi++) {
            const int ps = pss[pi];
            down_tiles_match(dn, 0, s2, D, nb2, ps);
            const uint64_t s6 = stride_q6k(nb2);
            uint8_t *dn6 = malloc(D * s6);
            fill(dn6, D * s6);
            down_tiles_match(dn6, 1, s6, D, nb2, ps);
            free(dn6);
        }
        free(gate); free(up); free(dn);
    }
    /* a MoE layer's expert tiles: the device packer over E experts (its grid's z: the rows e * exp_bytes on, the tiles
     * at mg2_exp_*_off(e, 0, ..)) against each expert packed alone, at the offsets moe2_kernel reads (mg2_exp_*_off) */
    {
        const int64_t D = 512, F = 512, E = 5; /* D / 256 = 2 super-blocks in, F / 256 = 2 out */
        const int nb1 = (int)(D / 256), nb2 = (int)(F / 256);
        const uint64_t s1 = stride_q4k(nb1), eg = F * s1;
        uint8_t *gate = malloc(E * eg), *up = malloc(E * eg);
        fill(gate, E * eg); fill(up, E * eg);
        const uint64_t gu_e = mg2_exp_gu_off(1, 0, F, nb1);
        CHECK(gu_e == (uint64_t)(F / 8) * nb1 * MG2_SB_BYTES);
        uint8_t *all = malloc(E * gu_e), *one = malloc(gu_e);
        for (int64_t e = 0; e < E; e++) /* the packer's CTAs of expert e */
            pack_like_device(gate + e * eg, up + e * eg, NULL, 0, s1, nb1, nb1, F / 8, all + mg2_exp_gu_off(e, 0, F, nb1));
        int bad = 0;
        for (int64_t e = 0; e < E; e++) {
            for (int64_t j = 0; j < F / 8; j++) {
                const uint8_t *rp[16];
                for (int i = 0; i < 8; i++) { rp[i] = gate + e * eg + (8 * j + i) * s1; rp[8 + i] = up + e * eg + (8 * j + i) * s1; }
                mg2_pack_host(rp, nb1, 0, nb1, one);
                bad += memcmp(all + mg2_exp_gu_off(e, j, F, nb1), one, (size_t)nb1 * MG2_SB_BYTES) != 0;
            }
        }
        CHECK_MSG(bad == 0, "expert gate / up tiles: %d tasks differ from the expert's rows packed alone", bad);
        free(all); free(one); free(gate); free(up);
        for (int q6 = 0; q6 < 2; q6++) {
            const uint64_t s2 = q6 ? stride_q6k(nb2) : stride_q4k(nb2), ed = D * s2;
            const uint32_t sbb = q6 ? MG2_Q6_SB_BYTES : MG2_SB_BYTES;
            uint8_t *dn = malloc(E * ed);
            fill(dn, E * ed);
            const uint64_t dn_e = mg2_exp_dn_off(1, 0, D, nb2, q6);
            CHECK(dn_e == (uint64_t)(D / 16) * nb2 * sbb);
            uint8_t *dall = malloc(E * dn_e), *done = malloc((size_t)nb2 * sbb);
            for (int64_t e = 0; e < E; e++)
                pack_like_device(NULL, NULL, dn + e * ed, q6, s2, nb2, nb2, D / 16, dall + mg2_exp_dn_off(e, 0, D, nb2, q6));
            bad = 0;
            for (int64_t e = 0; e < E; e++)
                for (int64_t r = 0; r < D / 16; r++) {
                    const uint8_t *rp[16];
                    for (int i = 0; i < 16; i++) rp[i] = dn + e * ed + (16 * r + i) * s2;
                    if (q6) mg2_q6_pack_host(rp, nb2, 0, nb2, done);
                    else mg2_pack_host(rp, nb2, 0, nb2, done);
                    bad += memcmp(dall + mg2_exp_dn_off(e, r, D, nb2, q6), done, (size_t)nb2 * sbb) != 0;
                }
            CHECK_MSG(bad == 0, "expert %s down tiles: %d tasks differ from the expert's rows packed alone", q6 ? "Q6_K" : "Q4_K", bad);
            free(dall); free(done); free(dn);
        }
    }
    return test_finish("test_mega2_tile");
}

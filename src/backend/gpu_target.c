/* GPU target descriptions and the launch-shape / kernel-variant choices of the GPU kernels (see gpu_target.h). */
#include "backend/gpu_target.h"

#include <string.h>

#include "quant/blocks.h"
#include "quant/quant.h"

/* Reference boards: H200 SXM; RX 7900 XTX (Navi 31); RX 9060 XT 16 GB (Navi 44); RX 6800 XT (Navi 21);
 * MI210 (Aldebaran, wave64: the one wave64 entry, for the reduction-width checks). */
static const struct gpu_target gpu_targets[] = {
    {"sm_90", "NVIDIA H200", GPU_VENDOR_NVIDIA, 32, 232448, 132, 4800.0, 141.0 * 1e9 / (1024.0 * 1024 * 1024),
     GPU_DOT4_DP4A, GPU_MATRIX_MMA, false, false, GPU_MM_PREFILL_ACT},
    {"gfx1100", "AMD Radeon RX 7900 XTX", GPU_VENDOR_AMD, 32, 65536, 96, 960.0, 24.0, GPU_DOT4_SUDOT4,
     GPU_MATRIX_WMMA_GFX11, true, false, 4},
    {"gfx1200", "AMD Radeon RX 9060 XT", GPU_VENDOR_AMD, 32, 65536, 32, 320.0, 16.0, GPU_DOT4_SUDOT4,
     GPU_MATRIX_WMMA_GFX12, false, false, GPU_MM_PREFILL_ACT},
    {"gfx1030", "AMD Radeon RX 6800 XT", GPU_VENDOR_AMD, 32, 65536, 72, 512.0, 16.0, GPU_DOT4_SDOT4, GPU_MATRIX_NONE,
     true, true, GPU_MM_PREFILL_ACT},
    {"gfx90a", "AMD Instinct MI210", GPU_VENDOR_AMD, 64, 65536, 104, 1638.4, 64.0, GPU_DOT4_SDOT4, GPU_MATRIX_MFMA,
     true, true, GPU_MM_PREFILL_ACT},
};

int gpu_target_count(void) { return (int)(sizeof(gpu_targets) / sizeof(gpu_targets[0])); }

const struct gpu_target *gpu_target_at(int i) {
    return i >= 0 && i < gpu_target_count() ? &gpu_targets[i] : NULL;
}

const struct gpu_target *gpu_target_find(const char *name) {
    if (!name) return NULL;
    for (int i = 0; i < gpu_target_count(); i++)
        if (!strcmp(gpu_targets[i].name, name)) return &gpu_targets[i];
    return NULL;
}

int gpu_groups_per_wave(const struct gpu_target *t) { return t->warp_size / GPU_GROUP_LANES; }

int gpu_group_reduce_max_offset(const struct gpu_target *t) {
    (void)t; /* the same on every target: reductions stay inside the 32-lane group */
    return GPU_GROUP_LANES / 2;
}

static int gpu_ceil_div(int a, int b) { return (a + b - 1) / b; }

bool gpu_mm_plan_make(const struct gpu_target *t, const int *seg_rows, const uint32_t *seg_types, int n_seg,
                      int n_act, int resident, struct gpu_mm_plan *out) {
    memset(out, 0, sizeof(*out));
    if (!t || !seg_rows || n_seg < 1 || n_seg > 4 || n_act < 1 || resident < 1 || t->mm_prefill_act < 1) return false;
    for (int i = 0; i < n_seg; i++) {
        if (seg_rows[i] < 1 || seg_rows[i] > (1 << 24)) return false;
        out->total_rows += seg_rows[i];
        out->total_tiles += gpu_ceil_div(seg_rows[i], GPU_MM_TILE_ROWS);
        out->n_ctas_rows += gpu_ceil_div(seg_rows[i], GPU_MM_GROUPS_PER_CTA);
    }
    bool tiles_ok = true;
    for (int i = 0; seg_types && i < n_seg; i++)
        if (seg_types[i] != GGML_TYPE_Q4_K && seg_types[i] != GGML_TYPE_Q6_K && seg_types[i] != GGML_TYPE_Q8_0 &&
            seg_types[i] != GGML_TYPE_F32)
            tiles_ok = false;
    out->threads = GPU_GROUP_LANES * GPU_MM_GROUPS_PER_CTA;
    out->waves_per_cta = gpu_ceil_div(out->threads, t->warp_size);
    if (n_act == 1) {
        out->act_per_group = 1;
        if (out->total_rows >= GPU_MM_TILE_MIN_ROWS && tiles_ok) {
            out->kernel = GPU_MM_TILES;
            out->rows_per_group = GPU_MM_TILE_ROWS;
            const int need = gpu_ceil_div(out->total_tiles, GPU_MM_GROUPS_PER_CTA);
            out->ctas = need < resident ? need : resident;
        } else {
            out->kernel = GPU_MM_ROWS;
            out->rows_per_group = 1;
            out->ctas = out->n_ctas_rows < resident ? out->n_ctas_rows : resident;
        }
    } else {
        out->kernel = GPU_MM_PREFILL;
        out->rows_per_group = 1;
        out->act_per_group = t->mm_prefill_act;
        out->ctas = out->n_ctas_rows * gpu_ceil_div(n_act, t->mm_prefill_act);
    }
    return true;
}

/* Units of one row and units (lanes' worth) per group step, per type. */
static bool gpu_mm_geometry(uint32_t type, int64_t n_cols, int *units_per_row, int *units_per_step) {
    if (n_cols <= 0 || n_cols > (1 << 26)) return false;
    switch (type) {
    case GGML_TYPE_Q4_K:
    case GGML_TYPE_Q6_K:
        if (n_cols % QK_K) return false;
        *units_per_row = (int)(n_cols / QK_K); /* super-blocks; 4 lanes share one, 8 per step */
        *units_per_step = GPU_GROUP_LANES / 4;
        return true;
    case GGML_TYPE_Q8_0:
    case GGML_TYPE_Q4_0:
    case GGML_TYPE_Q5_0:
        if (n_cols % 32) return false;
        *units_per_row = (int)(n_cols / 32);
        *units_per_step = GPU_GROUP_LANES;
        return true;
    default: return false;
    }
}

int gpu_mm_steps(uint32_t type, int64_t n_cols, int rows) {
    int upr, ups;
    if (rows < 1 || !gpu_mm_geometry(type, n_cols, &upr, &ups)) return 0;
    return gpu_ceil_div(rows * upr, ups);
}

bool gpu_mm_lane_unit(uint32_t type, int64_t n_cols, int rows, int step, int lane, struct gpu_mm_unit *u) {
    memset(u, 0, sizeof(*u));
    int upr, ups;
    if (rows < 1 || step < 0 || lane < 0 || lane >= GPU_GROUP_LANES || !gpu_mm_geometry(type, n_cols, &upr, &ups))
        return false;
    /* the flat unit index f is dealt row-major over the tile: f = ups * step + (lane's slot) */
    const bool kq = type == GGML_TYPE_Q4_K || type == GGML_TYPE_Q6_K;
    const int slot = kq ? lane >> 2 : lane;
    const int f = ups * step + slot;
    if (f >= rows * upr) return true; /* idle lane */
    u->valid = true;
    u->row = f / upr;
    u->block = f - u->row * upr;
    if (type == GGML_TYPE_Q4_K) {
        /* lane (g, c): 32 bytes of qs = chunk c: low nibbles are elements 64c .. 64c+31, high 64c+32 .. +63 */
        const int c = lane & 3, base = u->block * QK_K;
        u->n_runs = 2; u->run = 32;
        u->elem0[0] = base + 64 * c;
        u->elem0[1] = base + 64 * c + 32;
    } else if (type == GGML_TYPE_Q6_K) {
        /* lane (g, h, k): ql bytes 64h + 32k .. +31; low nibbles elements 128h + 32k .., high 128h + 64 + 32k .. */
        const int h = (lane >> 1) & 1, k = lane & 1, base = u->block * QK_K;
        u->n_runs = 2; u->run = 32;
        u->elem0[0] = base + 128 * h + 32 * k;
        u->elem0[1] = base + 128 * h + 64 + 32 * k;
    } else {
        u->n_runs = 1; u->run = 32;
        u->elem0[0] = u->block * 32;
    }
    return true;
}

void gpu_nq_shape(const struct gpu_target *t, int64_t n_cols, int64_t n_rows, int *ctas_x, int *ctas_y, int *threads) {
    (void)t; /* 32-lane groups on every target: 8 groups = 4 waves (wave64) or 8 (wave32) */
    const int64_t units = (n_cols + 255) / 256;
    *ctas_x = (int)((units + GPU_NQ_GROUPS_PER_CTA - 1) / GPU_NQ_GROUPS_PER_CTA);
    *ctas_y = (int)n_rows;
    *threads = GPU_GROUP_LANES * GPU_NQ_GROUPS_PER_CTA;
}

double gpu_roofline_tok_s(const struct gpu_target *t, double bytes_per_token) {
    if (!t || !(bytes_per_token > 0)) return 0.0;
    return t->mem_bw_gbs * 1e9 / bytes_per_token;
}

const char *gpu_dot4_name(enum gpu_dot4 d) {
    switch (d) {
    case GPU_DOT4_DP4A: return "dp4a";
    case GPU_DOT4_SDOT4: return "v_dot4_i32_i8 (sdot4)";
    case GPU_DOT4_SUDOT4: return "v_dot4_i32_iu8 (sudot4)";
    default: return "scalar";
    }
}

const char *gpu_matrix_name(enum gpu_matrix m) {
    switch (m) {
    case GPU_MATRIX_MMA: return "tensor-core mma";
    case GPU_MATRIX_WMMA_GFX11: return "WMMA (gfx11)";
    case GPU_MATRIX_WMMA_GFX12: return "WMMA (gfx12)";
    case GPU_MATRIX_MFMA: return "MFMA";
    default: return "none";
    }
}

const char *gpu_mm_kernel_name(enum gpu_mm_kernel k) {
    switch (k) {
    case GPU_MM_ROWS: return "rows";
    case GPU_MM_TILES: return "tiles";
    default: return "prefill";
    }
}

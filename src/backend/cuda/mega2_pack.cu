/* The tiled FFN chain's device packer (mega2_tile.h's layout; cu_mega2_pack_gu / cu_mega2_pack_dn in cuda_internal.h).
 * Its own translation unit: added to gemv_q.cu, this kernel changed the code the compiler made for an unrelated kernel
 * there (mm_kernel_mmrs), and the decode kernels keep the SASS they were measured with. */
#include <stdint.h>
#include "backend/cuda/cuda_internal.h"
#include "backend/cuda/mega2_tile.h"
#include "quant/blocks.h"
#include "quant/quant.h"

/* The device packer: CTA (task, super-block of the task), thread k its piece k. gate / up (dn == NULL): task j of all
 * n_sb super-blocks from Q4_K rows of gate and up; down: task t of ps super-blocks from the rows of dn (Q6_K if q6). */
static __global__ void mega2_pack_kernel(const uint8_t *gate, const uint8_t *up, const uint8_t *dn, bool q6, uint64_t stride, int n_sb,
                                         int ps, uint8_t *dst, uint64_t exp_src, uint64_t exp_dst) {
    int which, len, len2;
    /* blockIdx.z: the expert (exp_src / exp_dst bytes apart in the rows and in the tiles) */
    const uint64_t ez = blockIdx.z;
    if (gate) gate += ez * exp_src;
    if (up) up += ez * exp_src;
    if (dn) dn += ez * exp_src;
    dst += ez * exp_dst;
    int64_t r;
    uint64_t src, src2, d;
    if (!mg2_task_piece(dn != NULL, q6, blockIdx.x, (int)blockIdx.y, (int)threadIdx.x, n_sb, ps, &which, &r, &src, &len, &src2, &len2, &d))
        return;
    const uint8_t *rp = (which == 2 ? dn : which ? up : gate) + (uint64_t)r * stride;
    uint8_t *o = dst + d;
    if (len == 2) {
        *(uint16_t *)o = *(const uint16_t *)(rp + src);
    } else if (len == 16) {
        *(uint4 *)o = *(const uint4 *)(rp + src);
    } else { /* a Q4_K row's 12 scale bytes and d / dmin */
        uint32_t w[4];
        for (int i = 0; i < 3; i++) w[i] = *(const uint32_t *)(rp + src + 4 * i);
        w[3] = *(const uint32_t *)(rp + src2);
        *(uint4 *)o = make_uint4(w[0], w[1], w[2], w[3]);
    }
}
bool cu_mega2_pack_gu_exps(const uint8_t *gate, const uint8_t *up, uint64_t exp_bytes, int n_exp, int64_t D, int64_t F, uint8_t *dst,
                           gpuStream_t s) {
    if (D % QK_K || F % 8 || F / 8 > INT32_MAX || n_exp < 1 || n_exp > 65535 || exp_bytes % 16 || (uintptr_t)gate % 16 || (uintptr_t)up % 16 ||
        (uintptr_t)dst % 16)
        return false;
    const int n_sb = (int)(D / QK_K);
    mega2_pack_kernel<<<dim3((unsigned)(F / 8), (unsigned)n_sb, (unsigned)n_exp), dim3(MG2_PIECES), 0, s>>>(
        gate, up, NULL, false, cu_weight_row_stride(GGML_TYPE_Q4_K, D), n_sb, n_sb, dst, exp_bytes, mg2_exp_gu_off(1, 0, F, n_sb));
    return gpuGetLastError() == gpuSuccess;
}
bool cu_mega2_pack_gu(const uint8_t *gate, const uint8_t *up, int64_t D, int64_t F, uint8_t *dst, gpuStream_t s) {
    return cu_mega2_pack_gu_exps(gate, up, 0, 1, D, F, dst, s);
}
bool cu_mega2_pack_dn_exps(const uint8_t *dn, uint64_t exp_bytes, int n_exp, uint32_t type, int64_t D, int64_t F, int ps, uint8_t *dst,
                           gpuStream_t s) {
    const int n_sb = (int)(F / QK_K);
    const bool q6 = type == GGML_TYPE_Q6_K;
    if ((!q6 && type != GGML_TYPE_Q4_K) || F % QK_K || D % 16 || ps < 1 || n_sb % ps || n_exp < 1 || n_exp > 65535 || exp_bytes % 16 ||
        (uintptr_t)dn % 16 || (uintptr_t)dst % 16)
        return false;
    mega2_pack_kernel<<<dim3((unsigned)(D / 16 * (n_sb / ps)), (unsigned)ps, (unsigned)n_exp), dim3(q6 ? MG2_Q6_PIECES : MG2_PIECES), 0, s>>>(
        NULL, NULL, dn, q6, cu_weight_row_stride(type, F), n_sb, ps, dst, exp_bytes, mg2_exp_dn_off(1, 0, D, n_sb, q6));
    return gpuGetLastError() == gpuSuccess;
}
bool cu_mega2_pack_dn(const uint8_t *dn, uint32_t type, int64_t D, int64_t F, int ps, uint8_t *dst, gpuStream_t s) {
    return cu_mega2_pack_dn_exps(dn, 0, 1, type, D, F, ps, dst, s);
}

/* Quantized matrix-vector products for decode (m = 1 .. a few rows) on the GPU, and the activation
 * quantizers that feed them. Activations use the same integer values as the CPU path (Q8_K for the
 * K-quants, Q8_0 for Q8_0/Q4_0/Q5_0/IQ4_NL), stored split for aligned loads:
 *   q8k: qs int8[n] | d float[n/256] | bsums int16[n/16]      (n a multiple of 256)
 *   q8_0: qs int8[n] | d fp16 bits[n/32]                      (n a multiple of 32)
 * so every integer partial sum equals the CPU's bit for bit; only the float reduction order differs. */
#ifndef VLLMC_CUDA_GEMV_Q_H
#define VLLMC_CUDA_GEMV_Q_H

#include <stddef.h>
#include <stdint.h>
#include "vllmc.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A quantized activation vector on the device (pointers into one buffer). */
struct gpu_qact {
    int8_t *qs;        /* [n] */
    float *d_k;        /* [n/256]  Q8_K scales (fp32) */
    int16_t *bsums;    /* [n/16]   Q8_K partial sums */
    uint16_t *d_0;     /* [n/32]   Q8_0 scales (fp16 bits) */
    int64_t n;
};

/* Bytes a gpu_qact of n elements needs (both layouts share qs; each quantizer fills its scales). */
size_t gpu_qact_bytes(int64_t n);
/* Lay out a gpu_qact over a device buffer of gpu_qact_bytes(n) bytes. */
void gpu_qact_init(struct gpu_qact *a, void *buf, int64_t n);

/* x: f32 [n] on the device. stream: a cudaStream_t / hipStream_t. */
vllmc_status gpu_quantize_q8_K(const float *x, struct gpu_qact *a, void *stream);
vllmc_status gpu_quantize_q8_0(const float *x, struct gpu_qact *a, void *stream);

/* out[r] = dot(weight row r, activation) for r in [0, n_rows). w: n_rows rows of row_bytes each,
 * of ggml type wtype (Q4_K, Q6_K with q8k activations; Q8_0 with q8_0 activations). */
vllmc_status gpu_gemv_q(uint32_t wtype, const void *w, size_t row_bytes, int64_t n_cols, int64_t n_rows,
                        const struct gpu_qact *a, float *out, void *stream);

#ifdef __cplusplus
}
#endif
#endif

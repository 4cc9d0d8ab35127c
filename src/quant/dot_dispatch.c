/* Run-time choice of the dot-product kernels: AVX-512 (BW/VL/VNNI), AVX2+FMA+F16C, or scalar.
 * Chosen once from the CPU's features (__builtin_cpu_supports) and $VLLMC_SIMD; every ISA gives the
 * same bits as the scalar reference, so the choice changes speed only. */
#include <pthread.h>
#include <string.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#include "dot_impl.h"
#include "gemv.h"

static const char *const g_isa_names[QUANT_ISA_COUNT] = {"scalar", "avx2", "avx512vnni"};
static pthread_once_t g_isa_once = PTHREAD_ONCE_INIT;
static int g_isa_active;

#if defined(__x86_64__) || defined(__i386__)
/* F16C (CPUID.1:ECX[29]) and BMI2 (CPUID.7.0:EBX[8]); not every compiler's __builtin_cpu_supports knows them.
 * Read once: CPUID traps to the hypervisor in a VM (tens of microseconds), and the kernel getters that ask
 * quant_isa_supported run on every matmul and activation row. */
static pthread_once_t g_cpuid_once = PTHREAD_ONCE_INIT;
static bool g_cpu_f16c_bmi2;

static void dot_cpuid_init(void) {
    unsigned a, b, c, d;
    g_cpu_f16c_bmi2 = __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29)) && __get_cpuid_count(7, 0, &a, &b, &c, &d) &&
                      (b & (1u << 8));
}

static bool dot_cpu_f16c_bmi2(void) {
    pthread_once(&g_cpuid_once, dot_cpuid_init);
    return g_cpu_f16c_bmi2;
}
#endif

bool quant_isa_supported(int isa) {
    switch (isa) {
    case QUANT_ISA_SCALAR: return true;
#if defined(__x86_64__) || defined(__i386__)
    case QUANT_ISA_AVX2:
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && dot_cpu_f16c_bmi2();
    case QUANT_ISA_AVX512:
        return quant_isa_supported(QUANT_ISA_AVX2) && __builtin_cpu_supports("avx512f") &&
               __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
               __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vnni");
#endif
    default: return false;
    }
}

static void dot_isa_init(void) {
    int best = QUANT_ISA_SCALAR;
    for (int isa = QUANT_ISA_COUNT - 1; isa > 0; isa--) {
        if (quant_isa_supported(isa)) {
            best = isa;
            break;
        }
    }
    const char *env = getenv("VLLMC_SIMD");
    if (env && *env) {
        int want = -1;
        if (!strcmp(env, "scalar")) want = QUANT_ISA_SCALAR;
        else if (!strcmp(env, "avx2")) want = QUANT_ISA_AVX2;
        else if (!strcmp(env, "avx512") || !strcmp(env, "avx512vnni")) want = QUANT_ISA_AVX512;
        if (want < 0) LOG_WARN("VLLMC_SIMD=%s is not one of scalar|avx2|avx512; using %s", env, g_isa_names[best]);
        else if (!quant_isa_supported(want)) LOG_WARN("VLLMC_SIMD=%s is not supported by this CPU; using %s", env, g_isa_names[best]);
        else best = want;
    }
    g_isa_active = best;
}

int quant_isa_active(void) {
    pthread_once(&g_isa_once, dot_isa_init);
    return g_isa_active;
}

const char *quant_simd_name(void) {
    return g_isa_names[quant_isa_active()];
}

vec_dot_fn quant_get_vec_dot_isa(uint32_t wtype, int isa) {
    vec_dot_fn ref = dot_ref_get(wtype);
    if (!ref || !quant_isa_supported(isa)) return NULL;
    vec_dot_fn f = NULL;
#if defined(__x86_64__) || defined(__i386__)
    if (isa == QUANT_ISA_AVX512) f = dot_avx512_get(wtype);
    if (isa == QUANT_ISA_AVX2 || (isa == QUANT_ISA_AVX512 && !f)) f = dot_avx2_get(wtype);
#endif
    return f ? f : ref;
}

vec_dot_fn quant_get_vec_dot(uint32_t wtype) {
    return quant_get_vec_dot_isa(wtype, quant_isa_active());
}

vec_dot_multi_fn dot_get_multi(uint32_t wtype) {
#if defined(__x86_64__) || defined(__i386__)
    if (quant_isa_active() == QUANT_ISA_AVX512) return dot_avx512_get_multi(wtype);
#endif
    (void)wtype;
    return NULL;
}

quant_act_fn quant_get_act_quantizer_isa(uint32_t act_type, int isa) {
    quantize_row_fn ref = act_quant_ref_get(act_type);
    if (!ref || !quant_isa_supported(isa)) return NULL;
    quantize_row_fn f = NULL;
#if defined(__x86_64__) || defined(__i386__)
    if (isa == QUANT_ISA_AVX512) f = dot_avx512_get_quantizer(act_type);
#endif
    return f ? f : ref;
}

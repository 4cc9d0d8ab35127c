/* Tiny test harness: CHECK(cond), CHECK_NEAR(a, b, tol), TEST(name) registration by hand.
 * Each test binary prints one line per failed check and ends with "N passed, N failed". */
#ifndef VLLMC_TEST_H
#define VLLMC_TEST_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static int test_n_pass, test_n_fail;

#define CHECK(cond) do { if (cond) test_n_pass++; else { test_n_fail++; \
    fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond); } } while (0)
#define CHECK_MSG(cond, ...) do { if (cond) test_n_pass++; else { test_n_fail++; \
    fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); fprintf(stderr, __VA_ARGS__); \
    fputc('\n', stderr); } } while (0)
#define CHECK_NEAR(a, b, tol) do { double a_ = (a), b_ = (b); \
    if (fabs(a_ - b_) <= (tol)) test_n_pass++; else { test_n_fail++; \
    fprintf(stderr, "FAIL %s:%d: %s = %g, %s = %g (tol %g)\n", __FILE__, __LINE__, #a, a_, #b, b_, (double)(tol)); } } while (0)

static inline int test_finish(const char *name) {
    printf("%s: %d checks passed, %d failed\n", name, test_n_pass, test_n_fail);
    return test_n_fail ? 1 : 0;
}

/* xorshift64* for fresh random inputs; seeded from VLLMC_TEST_SEED or the clock. */
static unsigned long long test_rng_state;
static inline void test_seed(unsigned long long s) { test_rng_state = s ? s : 0x9E3779B97F4A7C15ull; }
static inline unsigned long long test_rand_u64(void) {
    unsigned long long x = test_rng_state;
    x ^= x >> 12; x ^= x << 25; x ^= x >> 27; test_rng_state = x;
    return x * 0x2545F4914F6CDD1Dull;
}
/* Seed from $VLLMC_TEST_SEED if set, else from the clock; the seed is printed so a failure can be replayed. */
#include <time.h>
static inline void test_seed_auto(const char *name) {
    const char *e = getenv("VLLMC_TEST_SEED");
    unsigned long long s = e ? strtoull(e, NULL, 0) : (unsigned long long)time(NULL) * 2654435761ull;
    test_seed(s);
    printf("%s: seed %llu (VLLMC_TEST_SEED to replay)\n", name, s);
}
static inline float test_rand_uniform(void) { return (float)((test_rand_u64() >> 40) * (1.0 / 16777216.0)); }
static inline float test_rand_normal(void) {
    float u1 = test_rand_uniform() + 1e-7f, u2 = test_rand_uniform();
    return sqrtf(-2.0f * logf(u1)) * cosf(6.2831853f * u2);
}
#endif

/* GELU and its derivative on a CPU, exact (the error function's, not tanh's) to float32 rounding
 * (trainer/native.py builds and loads it; trainer/activation.py calls it).
 *
 * gelu(x) = x Phi(x), and its derivative Phi(x) + x phi(x), with Phi and phi
 * the standard normal's distribution and density. PyTorch computes erf with
 * a division and an exponential, and the derivative with a second
 * exponential: on one core that made the MLP's GELU, forward and backward,
 * about a sixteenth of a small model's step, more than all its norms.
 *
 * Here, with z = x / sqrt(2) and u = z^2, both are one polynomial in u where
 * |z| < 1 (|x| < 1.41, nearly every pre-activation of a trained model):
 *
 *     gelu(x)  = x (1/2 + z T(u))       T(u) = erf(z) / 2z
 *     gelu'(x) = 1/2 + z S(u)           S(u) = T(u) + e^-u / sqrt(pi)
 *
 * A lane beyond takes the far way: Phi from a polynomial for erfc(|z|) on
 * [1, 4] (0 or 1 beyond, where float32 rounds it so), phi from an
 * exponential. On AVX-512 the training forward gathers those lanes, sixteen
 * at a time, and scatters their results back, so a vector with one far lane
 * no longer pays the far way for sixteen; where far lanes are too many for
 * that to pay (forward_grad_block), it takes whole vectors. The coefficients are least-squares fits
 * on Chebyshev points against 40-digit values (`python3 bench/gelu_kernel.py
 * --fit` refits them). Evaluated in float32, gelu is off by at most 1.5e-7
 * and its derivative by 1.5e-7, absolute below 1 and relative above
 * (PyTorch's: 1.1e-6 and 2.7e-7; `python3 bench/gelu_kernel.py`).
 *
 * A training forward writes the derivative beside the output (lb_gelu_forward_grad), so the
 * backward is one multiply, g * gelu'(x), that PyTorch does (trainer/activation.py): the far
 * lanes' Phi is computed once for both, not once forward and again backward, and the backward
 * reads the derivative where it read the pre-activation, so nothing more is kept for it.
 * Arrays are contiguous.
 * Every lane is computed alone, so the same binary gives the same bits.
 */
#include <string.h>

#ifdef __AVX512F__
#include <immintrin.h>
#endif

#include "vec.h"

/* T(u), S(u): near (|z| < 1); erfc(|z|) as a polynomial in (|z| - 2.5) / 1.5: far (1 <= |z| <= 4). */
static const float NEAR_T[] = {
    0.5641895532608032f, -0.18806302547454834f, 0.05641712620854378f, -0.013424216769635677f,
    0.0025897426530718803f, -0.0003970119869336486f, 3.820300116785802e-05f};
static const float NEAR_S[] = {
    1.1283791065216064f, -0.7522526383399963f, 0.338512122631073f, -0.10745438188314438f,
    0.026084885001182556f, -0.005060864146798849f, 0.0007668669568374753f, -7.099604408722371e-05f};
static const float FAR_ERFC[] = {
    0.0004069206479471177f, -0.003266968997195363f, 0.01225590892136097f, -0.02819584682583809f,
    0.04360218718647957f, -0.046322062611579895f, 0.03216436877846718f, -0.00981080811470747f,
    -0.007483717519789934f, 0.010797679424285889f, -0.0034260102547705173f, -0.001851575099863112f,
    0.0011299855541437864f};
#define N_T (sizeof NEAR_T / sizeof *NEAR_T)
#define N_S (sizeof NEAR_S / sizeof *NEAR_S)
#define N_ERFC (sizeof FAR_ERFC / sizeof *FAR_ERFC)

static inline vf poly(const float *c, int n, vf x) {
    vf p = splat(c[n - 1]);
    for (int k = n - 2; k >= 0; k--) p = p * x + c[k];
    return p;
}

/* Whether any lane has u >= 1: one mask test on AVX-512, a loop over the lanes elsewhere. */
static inline int any_far(vf u) {
#ifdef __AVX512F__
    return _mm512_cmp_ps_mask((__m512)u, _mm512_set1_ps(1.0f), _CMP_GE_OQ) != 0;
#else
    int any = 0;
    for (int l = 0; l < W; l++) any |= u[l] >= 1.0f;
    return any;
#endif
}

/* Phi(x) for lanes with |z| >= 1. */
static inline vf cdf_far(vf z) {
    const vi negative = (vi)(z < 0);
    vf az = sel(negative, -z, z);
    const vi beyond = (vi)(az > 4.0f);
    const vf erfc = sel(beyond, splat(0.0f), poly(FAR_ERFC, N_ERFC, (az - 2.5f) * (1.0f / 1.5f)));
    return sel(negative, 0.5f * erfc, 1.0f - 0.5f * erfc);
}

static inline vf gelu(vf x) {
    const vf z = x * 0.70710678118654752f, u = z * z;
    vf y = x * (0.5f + z * poly(NEAR_T, N_T, u));
    if (any_far(u)) y = sel((vi)(u >= 1.0f), x * cdf_far(z), y);
    return y;
}

/* gelu(x) and gelu'(x) by the near polynomials, right for the lanes with u = z^2 < 1. */
static inline void near_lanes(vf x, vf z, vf u, vf *y, vf *d) {
    *y = x * (0.5f + z * poly(NEAR_T, N_T, u));
    *d = 0.5f + z * poly(NEAR_S, N_S, u);
}

/* gelu(x) and gelu'(x) the far way, right for the lanes with u >= 1: the far lanes' Phi, computed once,
   serves both. */
static inline void far_lanes(vf x, vf z, vf u, vf *y, vf *d) {
    /* x phi(x), taken as nought beyond u = 40 (|x| > 8.9), where it is below 2e-17, and e^-u not
       computed there at all: closer to e^-87, the products are subnormal floats (and so is a gradient
       multiplied by them), which the CPU computes many times slower than normal ones: on pre-activations
       drawn with sd 20 (a few beyond 13) the derivative took 13 times as long. */
    const vi tiny = (vi)(u > 40.0f);
    const vf cdf = cdf_far(z);
    *y = x * cdf;
    *d = cdf + sel(tiny, splat(0.0f), x * (vexp(-sel(tiny, splat(40.0f), u)) * 0.39894228040143268f));
}

/* gelu(x) into *y and gelu'(x) into *d, each lane the near or the far way. */
static inline void gelu_and_grad(vf x, vf *y, vf *d) {
    const vf z = x * 0.70710678118654752f, u = z * z;
    near_lanes(x, z, u, y, d);
    if (any_far(u)) {
        const vi far = (vi)(u >= 1.0f);
        vf fy, fd;
        far_lanes(x, z, u, &fy, &fd);
        *y = sel(far, fy, *y), *d = sel(far, fd, *d);
    }
}

#ifdef __AVX512F__
#define BLOCK 1024 /* elements a block: its far lanes gathered on the stack */

/* Whether a tensor's far lanes are few enough to be gathered: a far lane taken alone costs about three
   times its share of a vector taken whole (the gathering, and the scattering back), so where far lanes
   fill more than a third of the vectors that hold any (pre-activations grown wide), a vector at a time
   costs less. Judged on the first BLOCK elements: a layer's pre-activations are alike throughout. */
static int few_far(const float *x, int64_t n) {
    int lanes = 0, vectors = 0;
    for (int64_t i = 0; i + W <= n && i < BLOCK; i += W) {
        const vf z = *(const vfu *)(x + i) * 0.70710678118654752f;
        const int k = __builtin_popcount(_mm512_cmp_ps_mask((__m512)(z * z), _mm512_set1_ps(1.0f), _CMP_GE_OQ));
        lanes += k, vectors += k > 0;
    }
    return 3 * lanes < W * vectors;
}

/* A whole number of vectors, BLOCK floats at most: every lane the near way, then only the far lanes the
   far way, gathered W at a time. Once a model has trained, most vectors hold a far lane or two (a tenth
   of the lanes or fewer): taken a vector at a time, each such vector paid the far way for all its lanes. */
static void forward_grad_block(const float *x, float *y, float *d, int64_t n) {
    float fx[BLOCK + W];
    int32_t fi[BLOCK + W];
    int nf = 0;
    for (int64_t i = 0; i < n; i += W) {
        const vf v = *(const vfu *)(x + i), z = v * 0.70710678118654752f, u = z * z;
        vf a, b;
        near_lanes(v, z, u, &a, &b);
        *(vfu *)(y + i) = a, *(vfu *)(d + i) = b;
        const __mmask16 far = _mm512_cmp_ps_mask((__m512)u, _mm512_set1_ps(1.0f), _CMP_GE_OQ);
        if (far) {
            _mm512_mask_compressstoreu_ps(fx + nf, far, (__m512)v);
            _mm512_mask_compressstoreu_epi32(fi + nf, far, (__m512i)(LANE + (int32_t)i));
            nf += __builtin_popcount(far);
        }
    }
    for (int f = 0; f < nf; f += W) {
        const __mmask16 m = nf - f >= W ? 0xFFFF : (__mmask16)((1u << (nf - f)) - 1);
        const vf v = (vf)_mm512_maskz_loadu_ps(m, fx + f), z = v * 0.70710678118654752f, u = z * z;
        const __m512i at = _mm512_maskz_loadu_epi32(m, fi + f);
        vf a, b;
        far_lanes(v, z, u, &a, &b);
        _mm512_mask_i32scatter_ps(y, m, at, (__m512)a, 4);
        _mm512_mask_i32scatter_ps(d, m, at, (__m512)b, 4);
    }
}
#endif

void lb_gelu_forward(const float *x, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + W <= n; i += W) *(vfu *)(y + i) = gelu(*(const vfu *)(x + i));
    if (i < n) { /* the last few, through a vector's worth of zeros */
        vf v = {};
        memcpy(&v, x + i, (size_t)(n - i) * sizeof(float));
        const vf r = gelu(v);
        memcpy(y + i, &r, (size_t)(n - i) * sizeof(float));
    }
}

void lb_gelu_forward_grad(const float *x, float *y, float *d, int64_t n) {
    int64_t i = 0;
    vf a, b;
#ifdef __AVX512F__
    const int gather = few_far(x, n);
    for (; gather && i + W <= n; i += BLOCK) {
        const int64_t m = n - i < BLOCK ? (n - i) / W * W : BLOCK;
        forward_grad_block(x + i, y + i, d + i, m);
        if (m < BLOCK) {
            i += m;
            break;
        }
    }
#endif
    for (; i + W <= n; i += W) {
        gelu_and_grad(*(const vfu *)(x + i), &a, &b);
        *(vfu *)(y + i) = a, *(vfu *)(d + i) = b;
    }
    if (i < n) {
        vf v = {};
        memcpy(&v, x + i, (size_t)(n - i) * sizeof(float));
        gelu_and_grad(v, &a, &b);
        memcpy(y + i, &a, (size_t)(n - i) * sizeof(float));
        memcpy(d + i, &b, (size_t)(n - i) * sizeof(float));
    }
}

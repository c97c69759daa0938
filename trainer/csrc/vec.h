/* The vector type and helpers the C kernels share (trainer/native.py compiles them with this header).
 *
 * Written with the compiler's vector types (GCC and Clang): W floats a
 * vector, which -march=native maps onto the CPU's widest registers (one
 * AVX-512 register, two AVX2 ones, four NEON ones).
 */
#ifndef LB_VEC_H
#define LB_VEC_H

#include <stdint.h>

#define W 16 /* floats in a vector */

typedef float vf __attribute__((vector_size(4 * W)));
typedef float vfu __attribute__((vector_size(4 * W), aligned(4))); /* the same, at any float's address */
typedef int32_t vi __attribute__((vector_size(4 * W)));

static inline vf splat(float x) { return (vf){} + x; }
static inline vf sel(vi m, vf a, vf b) { return (vf)(((vi)a & m) | ((vi)b & ~m)); }

/* e^x, to about 1 ulp for x in [-87, 0] (the only arguments the kernels have: a logit minus its row's
   maximum or log-sum-exp, minus half a square); smaller x give e^-87. Cephes' range reduction and polynomial. */
static inline vf vexp(vf x) {
    x = sel(x < splat(-87.0f), splat(-87.0f), x);
    const vf t = x * 1.44269504088896341f + 12582912.0f; /* 1.5 * 2^23: x / ln 2 rounded, in t's low bits */
    const vf n = t - 12582912.0f;
    const vi two_n = ((vi)t - 0x4B400000 + 127) << 23;
    vf r = x - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    const vf p = (((((1.9875691500E-4f * r + 1.3981999507E-3f) * r + 8.3334519073E-3f) * r + 4.1665795894E-2f) * r +
                   1.6666665459E-1f) * r + 5.0000001201E-1f) * (r * r) + r + 1.0f;
    return p * (vf)two_n;
}

#endif

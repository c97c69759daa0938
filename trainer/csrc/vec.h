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

/* Each lane's index: a mask of the lanes before some count, or a vector's offsets. */
static const vi LANE = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};

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


/* Whole-vector lane moves (GCC 12 and later, Clang): a vector's lanes indexed one by one are read back
   through the stack. Elsewhere the same arithmetic runs lane by lane. */
#if defined(__clang__) || (defined(__GNUC__) && __GNUC__ >= 12)
#define LB_SHUFFLE 1
/* Lanes w .. 2w-1 of a in lanes 0 .. w-1 (the others: whatever). */
#define LB_DOWN8(a) __builtin_shufflevector(a, a, 8, 9, 10, 11, 12, 13, 14, 15, 8, 9, 10, 11, 12, 13, 14, 15)
#define LB_DOWN4(a) __builtin_shufflevector(a, a, 4, 5, 6, 7, 4, 5, 6, 7, 4, 5, 6, 7, 4, 5, 6, 7)
#define LB_DOWN2(a) __builtin_shufflevector(a, a, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3)
#define LB_DOWN1(a) __builtin_shufflevector(a, a, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1)
#endif

/* The sum of a's lanes, halved as a tree: lane l + lane l + 8, then + 4, + 2, + 1 (the same order either way). */
static inline float hsum(vf a) {
#ifdef LB_SHUFFLE
    a += LB_DOWN8(a), a += LB_DOWN4(a), a += LB_DOWN2(a), a += LB_DOWN1(a);
#else
    for (int w = W / 2; w > 0; w /= 2)
        for (int l = 0; l < w; l++) a[l] += a[l + w];
#endif
    return a[0];
}

/* The largest of a's lanes. */
static inline float hmax(vf a) {
#ifdef LB_SHUFFLE
    vf d;
    d = LB_DOWN8(a), a = sel(d > a, d, a);
    d = LB_DOWN4(a), a = sel(d > a, d, a);
    d = LB_DOWN2(a), a = sel(d > a, d, a);
    d = LB_DOWN1(a), a = sel(d > a, d, a);
    return a[0];
#else
    float m = a[0];
    for (int l = 1; l < W; l++) m = a[l] > m ? a[l] : m;
    return m;
#endif
}

#ifdef LB_SHUFFLE
/* One stage of a 16 x 16 transpose: rows i and i + s swap their off-diagonal s x s blocks. */
#define LB_LO(s, j) (((j) & (s)) ? 16 + (j) - (s) : (j))
#define LB_HI(s, j) (((j) & (s)) ? 16 + (j) : (j) + (s))
#define LB_LANES(F, s) F(s, 0), F(s, 1), F(s, 2), F(s, 3), F(s, 4), F(s, 5), F(s, 6), F(s, 7), F(s, 8), F(s, 9), \
        F(s, 10), F(s, 11), F(s, 12), F(s, 13), F(s, 14), F(s, 15)
#define LB_STAGE(v, s)                                                                   \
    for (int i = 0; i < W; i++)                                                          \
        if (!(i & (s))) {                                                                \
            const vf lo = __builtin_shufflevector(v[i], v[i + (s)], LB_LANES(LB_LO, s)); \
            const vf hi = __builtin_shufflevector(v[i], v[i + (s)], LB_LANES(LB_HI, s)); \
            v[i] = lo, v[i + (s)] = hi;                                                  \
        }

/* v[i][j] becomes v[j][i]: a W x W block of floats transposed in registers. */
static inline void transpose(vf v[W]) {
    LB_STAGE(v, 8)
    LB_STAGE(v, 4)
    LB_STAGE(v, 2)
    LB_STAGE(v, 1)
}
#endif

#endif

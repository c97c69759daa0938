/* One RMSNorm row forward and backward, shared by rms_norm.c and attention.c (its fused QK-norm).
 *
 * On vec.h's vectors, W floats at a time, with a scalar tail for a row that is
 * not a whole number of them. A sum runs over W partial sums (lane l takes
 * elements l, l + W, ...), halved in a tree at the end, in a fixed order, so
 * the same binary gives the same bits on every call. (As loops over arrays
 * left to the compiler, a row of a head's 32 floats was done in half-width
 * vectors and the tree went through the stack: a fifth of the fused
 * attention's backward.)
 */
#ifndef LB_NORM_H
#define LB_NORM_H

#include <math.h>
#include <stdint.h>

#include "vec.h"

/* W/2 doubles (one register's worth: W of them, GCC keeps the pair on the stack, and every sum into
   the gains' gradient waited on a store to it), and W/2 floats at any float's address. */
typedef double vd __attribute__((vector_size(4 * W)));
typedef double vdu __attribute__((vector_size(4 * W), aligned(8)));
typedef float vhu __attribute__((vector_size(2 * W), aligned(4)));

static inline __attribute__((always_inline)) float dot(const float *a, const float *b, const int64_t d) {
    vf acc = {};
    const int64_t whole = d - d % W;
    for (int64_t j = 0; j < whole; j += W) acc += *(const vfu *)(a + j) * *(const vfu *)(b + j);
    float s = hsum(acc);
    for (int64_t j = whole; j < d; j++) s += a[j] * b[j];
    return s;
}

/* One row forward; inlined with d known at compile time for the common widths, so its loops unroll. */
static inline __attribute__((always_inline)) float forward_row(const float *xr, const float *wr, float *yr,
                                                               const int64_t d, const float eps) {
    const float s = 1.0f / sqrtf(dot(xr, xr, d) / (float)d + eps);
    int64_t c = 0;
    for (; c + W <= d; c += W) *(vfu *)(yr + c) = *(const vfu *)(xr + c) * s * *(const vfu *)(wr + c);
    for (; c < d; c++) yr[c] = xr[c] * s * wr[c];
    return s;
}

/* One row backward: dx = s * (g*w - x * s^2 * mean(g*w*x)); the gain's gradient g * x * s added to acc. */
static inline __attribute__((always_inline)) void backward_row(const float *gr, const float *xr, const float *wr,
                                                               const float s, float *dxr, double *acc, float *gw,
                                                               const int64_t d) {
    int64_t c = 0;
    for (; c + W <= d; c += W) *(vfu *)(gw + c) = *(const vfu *)(gr + c) * *(const vfu *)(wr + c);
    for (; c < d; c++) gw[c] = gr[c] * wr[c];
    const float coef = dot(gw, xr, d) * s * s / (float)d;
    for (c = 0; c + W <= d; c += W) *(vfu *)(dxr + c) = s * (*(const vfu *)(gw + c) - *(const vfu *)(xr + c) * coef);
    for (; c < d; c++) dxr[c] = s * (gw[c] - xr[c] * coef);
    if (!acc) return;
    for (c = 0; c + W / 2 <= d; c += W / 2)
        *(vdu *)(acc + c) += __builtin_convertvector(*(const vhu *)(gr + c) * *(const vhu *)(xr + c) * s, vd);
    for (; c < d; c++) acc[c] += (double)(gr[c] * xr[c] * s);
}

#endif

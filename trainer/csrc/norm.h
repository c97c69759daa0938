/* One RMSNorm row forward and backward, shared by rms_norm.c and attention.c (its fused QK-norm).
 *
 * Sums run over LANES independent partial sums, added in a fixed order: the
 * compiler vectorises them without reordering floating-point additions, so
 * the same binary gives the same bits on every call.
 */
#ifndef LB_NORM_H
#define LB_NORM_H

#include <math.h>
#include <stdint.h>

#define LANES 16

static inline float dot(const float *a, const float *b, int64_t d) {
    float acc[LANES] = {0};
    const int64_t whole = d - d % LANES;
    for (int64_t j = 0; j < whole; j += LANES)
        for (int l = 0; l < LANES; l++) acc[l] += a[j + l] * b[j + l];
    /* Halve the partial sums in a tree, not one chain of adds: a chain's latency, not the
       arithmetic, would bound a row only a head wide. */
    for (int width = LANES / 2; width > 0; width /= 2)
        for (int l = 0; l < width; l++) acc[l] += acc[l + width];
    float s = acc[0];
    for (int64_t j = whole; j < d; j++) s += a[j] * b[j];
    return s;
}

/* One row forward; inlined with d known at compile time for the common widths, so its loops unroll. */
static inline __attribute__((always_inline)) float forward_row(const float *xr, const float *wr, float *yr,
                                                               const int64_t d, const float eps) {
    const float s = 1.0f / sqrtf(dot(xr, xr, d) / (float)d + eps);
    for (int64_t c = 0; c < d; c++) yr[c] = xr[c] * s * wr[c];
    return s;
}

/* One row backward: dx = s * (g*w - x * s^2 * mean(g*w*x)); the gain's gradient g * x * s added to acc. */
static inline __attribute__((always_inline)) void backward_row(const float *gr, const float *xr, const float *wr,
                                                               const float s, float *dxr, double *acc, float *gw,
                                                               const int64_t d) {
    for (int64_t c = 0; c < d; c++) gw[c] = gr[c] * wr[c];
    const float coef = dot(gw, xr, d) * s * s / (float)d;
    for (int64_t c = 0; c < d; c++) dxr[c] = s * (gw[c] - xr[c] * coef);
    if (acc)
        for (int64_t c = 0; c < d; c++) acc[c] += (double)(gr[c] * xr[c] * s);
}

#endif

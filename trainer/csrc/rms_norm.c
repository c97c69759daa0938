/* RMSNorm forward and backward on a CPU, one pass over each row (trainer/native.py builds and loads it).
 *
 * A tensor is a set of rows of d contiguous floats: row (i, j, k) starts at
 * base + i*s0 + j*s1 + k*s2, so a strided view (the query and key heads
 * inside the fused QKV projection, a gradient that arrives transposed from
 * attention) is read where it lies, without a copy. It may come in two
 * parts: heads k >= split lie in a second tensor (the keys' output or
 * gradient beside the queries'). The gain of row (i, j, k) is w + k*w_s2: one
 * gain for every row (w_s2 = 0) or one per head.
 *
 * One row's arithmetic is in norm.h, which the attention kernel shares for
 * its fused QK-norm. The gain's gradient is summed in double, row by row, in order.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "norm.h"

typedef struct {
    float *base;
    int64_t s0, s1, s2;
} part_t;

typedef struct {
    part_t part[2];
    int64_t split; /* heads k >= split are in part[1], as its head k - split */
} rows_t;

typedef struct {
    int64_t n0, n1, n2, d;
} shape_t;

static inline float *row(const rows_t *t, int64_t i, int64_t j, int64_t k) {
    const int second = k >= t->split;
    const part_t *p = &t->part[second];
    return p->base + i * p->s0 + j * p->s1 + (second ? k - t->split : k) * p->s2;
}

#define FORWARD_ROWS(D)                                                                 \
    for (int64_t i = 0; i < n->n0; i++)                                                 \
        for (int64_t j = 0; j < n->n1; j++)                                             \
            for (int64_t k = 0; k < n->n2; k++)                                         \
                *r++ = forward_row(row(x, i, j, k), w + k * w_s2, row(y, i, j, k), D, eps);

/* y = x * rstd * w, with rstd = 1 / sqrt(mean(x^2) + eps) kept per row for the backward. */
void lb_rms_norm_forward(const rows_t *x, const float *w, int64_t w_s2, const rows_t *y, float *rstd,
                         const shape_t *n, float eps) {
    float *r = rstd;
    switch (n->d) {
    case 32: FORWARD_ROWS(32) break;
    case 64: FORWARD_ROWS(64) break;
    case 128: FORWARD_ROWS(128) break;
    default: FORWARD_ROWS(n->d)
    }
}

#define BACKWARD_ROWS(D)                                                                          \
    for (int64_t i = 0; i < n->n0; i++)                                                           \
        for (int64_t j = 0; j < n->n1; j++)                                                       \
            for (int64_t k = 0; k < n->n2; k++)                                                   \
                backward_row(row(g, i, j, k), row(x, i, j, k), w + k * w_s2, *r++, row(dx, i, j, k), \
                             acc ? acc + (w_s2 ? k : 0) * D : NULL, gw, D);

/* The input's gradient into dx; the gain's into dw unless it is NULL. 0 on success, -1 without memory. */
int lb_rms_norm_backward(const rows_t *g, const rows_t *x, const float *w, int64_t w_s2, const float *rstd,
                         const rows_t *dx, float *dw, const shape_t *n) {
    const int64_t d = n->d, gains = w_s2 ? n->n2 : 1;
    float *gw = malloc((size_t)d * sizeof(float));
    double *acc = dw ? calloc((size_t)(gains * d), sizeof(double)) : NULL;
    if (!gw || (dw && !acc)) {
        free(gw);
        free(acc);
        return -1;
    }
    const float *r = rstd;
    switch (d) {
    case 32: BACKWARD_ROWS(32) break;
    case 64: BACKWARD_ROWS(64) break;
    case 128: BACKWARD_ROWS(128) break;
    default: BACKWARD_ROWS(d)
    }
    if (acc)
        for (int64_t c = 0; c < gains * d; c++) dw[c] = (float)acc[c];
    free(acc);
    free(gw);
    return 0;
}

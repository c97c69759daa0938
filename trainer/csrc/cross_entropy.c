/* Cross-entropy with z-loss over float32 logits on a CPU, forward and backward (trainer/native.py builds and
 * loads it; trainer/loss.py calls it).
 *
 * A row's log-partition L = m + log(sum e^(x - m)), m its largest logit,
 * serves both terms: the cross-entropy L - x[target] and the z-loss's L^2.
 * The forward reads the row twice (its maximum, then its exponentials,
 * written out as they are summed) and scales what it wrote into the
 * softmax, which the backward needs and now need not compute: there each
 * row is p * (g_ce + 2 coef g_z L) / n, minus g_ce / n at the target. Under
 * inductor the same took three times as long, at the peer benchmark's shape
 * (2048 rows of 256): its log-softmax and its backward each went over the
 * logits twice and computed the exponentials again.
 *
 * The sums over rows are kept in double, in row order, so the same binary
 * gives the same bits. A vocabulary that is not a whole number of vectors
 * ends in one vector padded past the row (the maximum's padding is -inf, the
 * sum's 0). Rows are contiguous; targets are int64. Returns 0, or 1 when a
 * target lies outside [0, V) (nothing else is then written to sums).
 */
#include <math.h>
#include <string.h>

#include "vec.h"

/* The last rem (< W) floats of a row, padded with fill. */
static inline vf tail(const float *at, int64_t rem, float fill) {
    vf v = splat(fill);
    memcpy(&v, at, (size_t)rem * sizeof(float));
    return v;
}

int lb_cross_entropy_forward(const float *x, const int64_t *targets, int64_t n, int64_t V, float *p, float *lse,
                             double *sums) {
    for (int64_t i = 0; i < n; i++)
        if (targets[i] < 0 || targets[i] >= V) return 1;
    const int64_t whole = V - V % W, rem = V % W;
    double ce = 0.0, zz = 0.0;
    for (int64_t i = 0; i < n; i++) {
        const float *xr = x + i * V;
        float *pr = p + i * V;
        vf mx = splat(-INFINITY);
        for (int64_t c = 0; c < whole; c += W) {
            const vf a = *(const vfu *)(xr + c);
            mx = sel(a > mx, a, mx);
        }
        if (rem) {
            const vf a = tail(xr + whole, rem, -INFINITY);
            mx = sel(a > mx, a, mx);
        }
        const float m = hmax(mx);
        vf s = {};
        for (int64_t c = 0; c < whole; c += W) {
            const vf e = vexp(*(const vfu *)(xr + c) - m);
            *(vfu *)(pr + c) = e;
            s += e;
        }
        if (rem) {
            const vf e = sel(LANE < (int32_t)rem, vexp(tail(xr + whole, rem, 0.0f) - m), splat(0.0f));
            memcpy(pr + whole, &e, (size_t)rem * sizeof(float));
            s += e;
        }
        const float l = hsum(s), inv = 1.0f / l, L = m + logf(l);
        for (int64_t c = 0; c < whole; c += W) *(vfu *)(pr + c) *= inv;
        for (int64_t c = whole; c < V; c++) pr[c] *= inv;
        lse[i] = L;
        ce += (double)(L - xr[targets[i]]);
        zz += (double)L * (double)L;
    }
    sums[0] = ce, sums[1] = zz;
    return 0;
}

/* grad = p * (g_ce + g_zc * L) / n per row, minus g_ce / n at the target; g_zc is 2 coef g_z. */
void lb_cross_entropy_backward(const float *p, const int64_t *targets, const float *lse, int64_t n, int64_t V,
                               float g_ce, float g_zc, float *grad) {
    const int64_t whole = V - V % W;
    const float inv_n = 1.0f / (float)n;
    for (int64_t i = 0; i < n; i++) {
        const float *pr = p + i * V;
        float *gr = grad + i * V;
        const float row = (g_ce + g_zc * lse[i]) * inv_n;
        for (int64_t c = 0; c < whole; c += W) *(vfu *)(gr + c) = *(const vfu *)(pr + c) * row;
        for (int64_t c = whole; c < V; c++) gr[c] = pr[c] * row;
        gr[targets[i]] -= g_ce * inv_n;
    }
}

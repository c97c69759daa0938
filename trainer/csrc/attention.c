/* Causal attention forward and backward on a CPU, a few query rows at a time (trainer/native.py builds and loads it).
 *
 * A tensor is [B, H, T, hd] with its last dimension contiguous: row (b, h, i)
 * starts at base + b*s0 + h*s1 + i*s2, so the heads are read where they lie
 * inside the QKV projection's output and written where the output projection
 * reads them, without a transpose. hd is a multiple of W (16 floats).
 *
 * The work of one head is small (at T = 128, hd = 32 its keys and values are
 * 16 KB each), so each head is done whole while it sits in the cache: the
 * keys (and, backward, the values) are first laid out as columns, then a
 * few query rows at a time (eight at hd <= 32, else four) are multiplied
 * against a few column chunks at once, 16 independent sums that keep the
 * multiply-add units busy and reuse every load. Softmax is exact (one pass
 * for the row maximum, one for the exponentials), with the log-sum-exp kept
 * for backward, which computes the probabilities again instead of storing
 * them, as FlashAttention does (kept, at the peer benchmark's shape, the
 * 4 MB a layer made the whole step slower: other work lost the cache).
 * Backward goes over a head three times: four query rows at a time it
 * computes their probabilities and their scores' gradients and keeps them
 * for the head (T x T floats each, still in the cache); then the queries'
 * gradients, eight rows at a time where forward takes eight; then four keys
 * at a time it sums their gradients and their values' over the query rows
 * that see them. Every gradient is summed in registers and
 * written once (summed into memory block after block, the keys' and values'
 * gradients took a tenth more time).
 *
 * With per-head gains (QK-norm fused), the queries and keys handed in are
 * the projection's, before their norm: each head's are normalised into the
 * scratch (norm.h's rows, as rms_norm.c computes them) before its attention,
 * and backward computes them again, then takes the norm's backward of the
 * head's query and key gradients, writing the projection's gradients where
 * they lie. The normalised heads never go to memory, and no gradient needs
 * a second pass or a concatenation. The forward can also give each head's
 * largest logit (what QK-clip watches), a by-product of its softmax.
 *
 * Written with the compiler's vector types (vec.h); every sum runs
 * in a fixed order, so the same binary gives the same bits on every call.
 * Returns 0, or 1 when its scratch memory could not be had.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "norm.h"
#include "vec.h"

#define R 8  /* the most query rows at a time (rows_at_once) */
#define G 4  /* the most column chunks at a time */
#define RB 4 /* query rows at a time backward */
#define RK 4 /* key rows at a time (backward_keys: two sums of hd floats each) */

/* Query rows at a time for a head hd wide: their outputs' sums, R * hd / W vectors, all kept in registers
   (at hd = 32, four rows left the multiply-adds of p . v waiting on each other half the time). */
static inline __attribute__((always_inline)) int rows_at_once(const int64_t hd) { return hd <= 32 ? 8 : 4; }

typedef struct {
    float *base;
    int64_t s0, s1, s2;
} heads_t;

/* The fused QK-norm of one call: gains [2H, hd] (the queries' heads, then the keys'), and its scratch. */
typedef struct {
    const float *gains;
    float eps;
    int64_t H;
    float *Qn, *Kn, *DQ, *DK, *rs, *gw; /* H*T x hd each (DQ, DK backward only), 2*H*T, hd */
    double *acc;                        /* the gains' gradient, summed in double as rms_norm.c sums it */
} qkn_t;

static inline float *row(const heads_t *t, int64_t b, int64_t h, int64_t i) {
    return t->base + b * t->s0 + h * t->s1 + i * t->s2;
}

/* cols[d][j] = element d of row j of one head: its rows as columns, Tp (T rounded up to W) wide, zero-padded.
   W rows at a time, so that every store fills a whole cache line (a row at a time, each store would
   land on a line of its own: a fifth of the backward's time). */
static void as_columns(const heads_t *t, int64_t b, int64_t h, int64_t T, int64_t hd, int64_t Tp, float *cols) {
    for (int64_t j0 = 0; j0 < Tp; j0 += W) {
        const float *r[W];
        for (int l = 0; l < W; l++) r[l] = j0 + l < T ? row(t, b, h, j0 + l) : NULL;
#ifdef LB_SHUFFLE
        for (int64_t d0 = 0; d0 < hd; d0 += W) { /* a W x W block at a time, transposed in registers */
            vf blk[W];
            for (int l = 0; l < W; l++) blk[l] = r[l] ? *(const vfu *)(r[l] + d0) : (vf){};
            transpose(blk);
            for (int l = 0; l < W; l++) *(vf *)(cols + (d0 + l) * Tp + j0) = blk[l];
        }
#else
        for (int64_t d = 0; d < hd; d++) {
            float *out = cols + d * Tp + j0;
            for (int l = 0; l < W; l++) out[l] = r[l] ? r[l][d] : 0.0f;
        }
#endif
    }
}

/* out[r][c] = scale * (x_r . column chunk c), for rows r < nr (R at most) and chunks c < nch. */
static inline __attribute__((always_inline)) void rows_times_columns(const float *const *x, const int nr,
                                                                     const float *cols, int64_t Tp, const int64_t hd,
                                                                     int64_t nch, float scale, vf (*out)[Tp / W]) {
    const int ng = nr > R / 2 ? 2 : G; /* 16 sums at a time */
    int64_t c = 0;
    for (; c + ng <= nch; c += ng) {
        vf acc[R][G];
        for (int r = 0; r < nr; r++)
            for (int g = 0; g < ng; g++) acc[r][g] = (vf){};
        for (int64_t d = 0; d < hd; d++) {
            vf col[G];
            for (int g = 0; g < ng; g++) col[g] = *(const vf *)(cols + d * Tp + (c + g) * W);
            for (int r = 0; r < nr; r++)
                for (int g = 0; g < ng; g++) acc[r][g] += x[r][d] * col[g];
        }
        for (int r = 0; r < nr; r++)
            for (int g = 0; g < ng; g++) out[r][c + g] = acc[r][g] * scale;
    }
    /* The last one to G-1 chunks: two, then one, at a time (one at a time, R sums are too few to
       hide the multiply-add's latency). */
    for (; c + 2 <= nch; c += 2) {
        vf acc[R][2] = {};
        for (int64_t d = 0; d < hd; d++) {
            const vf c0 = *(const vf *)(cols + d * Tp + c * W), c1 = *(const vf *)(cols + d * Tp + (c + 1) * W);
            for (int r = 0; r < nr; r++) acc[r][0] += x[r][d] * c0, acc[r][1] += x[r][d] * c1;
        }
        for (int r = 0; r < nr; r++) out[r][c] = acc[r][0] * scale, out[r][c + 1] = acc[r][1] * scale;
    }
    for (; c < nch; c++) {
        vf acc[R] = {};
        for (int64_t d = 0; d < hd; d++) {
            const vf col = *(const vf *)(cols + d * Tp + c * W);
            for (int r = 0; r < nr; r++) acc[r] += x[r][d] * col;
        }
        for (int r = 0; r < nr; r++) out[r][c] = acc[r] * scale;
    }
}

/* Zero the scores of row i (in place: `fill` for the logits, 0 for probabilities) past column i. */
static inline vf causal(vf s, int64_t c, int64_t i, vf fill) {
    return sel(LANE + (int32_t)(c * W) <= (int32_t)i, s, fill);
}

/* Query rows i0 .. i0+nr-1 of one head: their outputs and log-sum-exps. */
static inline __attribute__((always_inline)) void forward_rows(const heads_t *q, const heads_t *v, const heads_t *o,
                                                               float *lse, int64_t b, int64_t h, int64_t i0,
                                                               const int nr, int64_t Tp, const int64_t hd, float scale,
                                                               const float *KT, vf (*S)[Tp / W], float *rowmax,
                                                               float *head_max) {
    const int64_t last = i0 + nr - 1, nch = last / W + 1;
    const float *x[R];
    for (int r = 0; r < nr; r++) x[r] = row(q, b, h, i0 + r);
    rows_times_columns(x, nr, KT, Tp, hd, nch, scale, S);
    float inv[R];
    for (int r = 0; r < nr; r++) {
        const int64_t i = i0 + r, n = i / W + 1;
        S[r][n - 1] = causal(S[r][n - 1], n - 1, i, splat(-INFINITY));
        vf mx = S[r][0];
        for (int64_t c = 1; c < n; c++) mx = sel(S[r][c] > mx, S[r][c], mx);
        const float m = hmax(mx);
        if (head_max && m > *head_max) *head_max = m;
        vf sum = {};
        for (int64_t c = 0; c < n; c++) {
            const vf p = causal(vexp(S[r][c] - m), c, i, splat(0.0f));
            S[r][c] = p;
            sum += p;
        }
        for (int64_t c = n; c < nch; c++) S[r][c] = (vf){};
        const float l = hsum(sum);
        inv[r] = 1.0f / l;
        lse[i] = l, rowmax[i] = m; /* its logarithm later, for the whole head (forward_head) */
    }
    vf acc[R][hd / W];
    for (int r = 0; r < nr; r++)
        for (int64_t a = 0; a < hd / W; a++) acc[r][a] = (vf){};
    for (int64_t j = 0; j <= last; j++) {
        const float *vj = row(v, b, h, j);
        for (int64_t a = 0; a < hd / W; a++) {
            const vf va = *(const vfu *)(vj + a * W);
            for (int r = 0; r < nr; r++) acc[r][a] += ((const float *)S[r])[j] * va;
        }
    }
    for (int r = 0; r < nr; r++) {
        float *out = row(o, b, h, i0 + r);
        for (int64_t a = 0; a < hd / W; a++) *(vfu *)(out + a * W) = acc[r][a] * inv[r];
    }
}

/* Batch element b's queries and keys normalised into n->Qn and n->Kn (head after head, T rows of hd each)
   and their rstd into n->rs, read in memory order (a token's heads lie side by side): head by head, each
   row would be a stride apart, and the prefetcher, which stops at a page's end, would not keep up. */
static inline __attribute__((always_inline)) void normalise_batch(const heads_t *q, const heads_t *k, int64_t b,
                                                                  int64_t T, const int64_t hd, const qkn_t *n) {
    const int64_t H = n->H;
    for (int64_t i = 0; i < T; i++) {
        for (int64_t h = 0; h < H; h++)
            n->rs[h * T + i] = forward_row(row(q, b, h, i), n->gains + h * hd, n->Qn + (h * T + i) * hd, hd, n->eps);
        for (int64_t h = 0; h < H; h++)
            n->rs[(H + h) * T + i] =
                forward_row(row(k, b, h, i), n->gains + (H + h) * hd, n->Kn + (h * T + i) * hd, hd, n->eps);
    }
}

/* Head h of a batch element kept in the scratch at `base`: T rows of hd floats (whatever b and h). */
static inline heads_t scratch_head(float *base, int64_t h, int64_t T, int64_t hd) {
    return (heads_t){base + h * T * hd, 0, 0, hd};
}

static inline __attribute__((always_inline)) void forward_head(const heads_t *q, const heads_t *k, const heads_t *v,
                                                               const heads_t *o, float *lse, int64_t b, int64_t h,
                                                               int64_t T, const int64_t hd, float scale, float *KT,
                                                               float *scores, float *head_max) {
    const int64_t Tp = (T + W - 1) / W * W;
    vf(*S)[Tp / W] = (vf(*)[Tp / W])scores;
    as_columns(k, b, h, T, hd, Tp, KT);
    const int nr = rows_at_once(hd);
    int64_t i = 0;
    float *rowmax = scores + R * Tp;
    for (; i + nr <= T; i += nr) forward_rows(q, v, o, lse, b, h, i, nr, Tp, hd, scale, KT, S, rowmax, head_max);
    for (; i < T; i++) forward_rows(q, v, o, lse, b, h, i, 1, Tp, hd, scale, KT, S, rowmax, head_max);
    /* The log-sum-exps, out of the rows' loop: a call to logf there had every vector register that loop
       keeps live saved and loaded again around it, a tenth of the forward's time. */
    for (i = 0; i < T; i++) lse[i] = rowmax[i] + logf(lse[i]);
}

/* Every head of batch element b, its queries and keys normalised first where n is given. */
static inline __attribute__((always_inline)) void forward_batch(const heads_t *q, const heads_t *k, const heads_t *v,
                                                                const heads_t *o, float *lse, float *head_max,
                                                                int64_t b, int64_t H, int64_t T, const int64_t hd,
                                                                float scale, float *KT, float *scores,
                                                                const qkn_t *n) {
    if (n) normalise_batch(q, k, b, T, hd, n);
    for (int64_t h = 0; h < H; h++) {
        float *m = head_max ? head_max + b * H + h : NULL;
        if (m) *m = -INFINITY;
        const heads_t qn = n ? scratch_head(n->Qn, h, T, hd) : *q, kn = n ? scratch_head(n->Kn, h, T, hd) : *k;
        forward_head(&qn, &kn, v, o, lse + (b * H + h) * T, b, h, T, hd, scale, KT, scores, m);
    }
}

/* H*T*hd floats for each normalised head set: queries and keys, and backward their gradients too. */
static int64_t qkn_sets(int backward) { return backward ? 4 : 2; }

/* The fused QK-norm's scratch after `at` (qkn_floats of it), and backward its gains' sums. */
static int qkn_init(qkn_t *n, const float *gains, float eps, int64_t H, int64_t T, int64_t hd, float *at,
                    int backward) {
    *n = (qkn_t){.gains = gains, .eps = eps, .H = H};
    if (!gains) return 0;
    const int64_t one = H * T * hd;
    n->Qn = at, n->Kn = at + one;
    if (backward) n->DQ = at + 2 * one, n->DK = at + 3 * one;
    n->rs = at + qkn_sets(backward) * one, n->gw = n->rs + 2 * H * T;
    if (backward && !(n->acc = calloc((size_t)(2 * H * hd), sizeof(double)))) return 1;
    return 0;
}

static size_t qkn_floats(const float *gains, int64_t H, int64_t T, int64_t hd, int backward) {
    return gains ? (size_t)(qkn_sets(backward) * H * T * hd + 2 * H * T + hd) : 0;
}

/* gains: NULL, or the fused QK-norm's [2H, hd]. head_max: NULL, or [B, H] for each head's largest logit. */
int lb_attention_forward(const heads_t *q, const heads_t *k, const heads_t *v, const heads_t *o, float *lse,
                         int64_t B, int64_t H, int64_t T, int64_t hd, float scale, const float *gains, float eps,
                         float *head_max) {
    const int64_t Tp = (T + W - 1) / W * W;
    const size_t floats = (size_t)((hd + R + 1) * Tp) + qkn_floats(gains, H, T, hd, 0);
    float *KT = aligned_alloc(64, (floats + 15) / 16 * 16 * sizeof(float));
    if (!KT) return 1;
    float *scores = KT + hd * Tp;
    qkn_t norm;
    qkn_init(&norm, gains, eps, H, T, hd, scores + (R + 1) * Tp, 0);
    const qkn_t *n = gains ? &norm : NULL;
    for (int64_t b = 0; b < B; b++)
        switch (hd) { /* the common widths with hd known at compile time, so their loops unroll */
        case 32: forward_batch(q, k, v, o, lse, head_max, b, H, T, 32, scale, KT, scores, n); break;
        case 64: forward_batch(q, k, v, o, lse, head_max, b, H, T, 64, scale, KT, scores, n); break;
        default: forward_batch(q, k, v, o, lse, head_max, b, H, T, hd, scale, KT, scores, n);
        }
    free(KT);
    return 0;
}

typedef struct {
    float *KT, *VT, *P, *DS;
    float *D; /* per head of the batch element, per row: the output's gradient . the output */
} scratch_t;

/* D for every head of batch element b, read in memory order (a token's heads side by side), as
   normalise_batch reads: head by head, each row a stride apart, these reads waited on memory. */
static inline __attribute__((always_inline)) void output_dots(const heads_t *o, const heads_t *g, int64_t b,
                                                              int64_t H, int64_t T, const int64_t hd, float *D) {
    for (int64_t i = 0; i < T; i++)
        for (int64_t h = 0; h < H; h++) {
            const float *gr = row(g, b, h, i), *orow = row(o, b, h, i);
            vf dot = {};
            for (int64_t a = 0; a < hd / W; a++) dot += *(const vfu *)(gr + a * W) * *(const vfu *)(orow + a * W);
            D[h * T + i] = hsum(dot);
        }
}

/* Query rows i0 .. i0+nr-1 of one head: their probabilities and score gradients (kept whole for the keys'
   pass), and their queries' gradients. */
static inline __attribute__((always_inline)) void backward_rows(const heads_t *q, const heads_t *k, const heads_t *g,
                                                                const float *lse, const heads_t *dq, int64_t b,
                                                                int64_t h, int64_t i0, const int nr, int64_t T,
                                                                int64_t Tp, const int64_t hd, float scale,
                                                                const scratch_t *s) {
    const int64_t last = i0 + nr - 1, nch = last / W + 1;
    vf(*P)[Tp / W] = (vf(*)[Tp / W])(s->P + i0 * Tp);
    vf(*DS)[Tp / W] = (vf(*)[Tp / W])(s->DS + i0 * Tp);
    const float *x[R], *gr[R];
    for (int r = 0; r < nr; r++) x[r] = row(q, b, h, i0 + r), gr[r] = row(g, b, h, i0 + r);
    rows_times_columns(x, nr, s->KT, Tp, hd, nch, scale, P);
    rows_times_columns(gr, nr, s->VT, Tp, hd, nch, 1.0f, DS);
    for (int r = 0; r < nr; r++) {
        const int64_t i = i0 + r;
        const float D = s->D[h * T + i];
        for (int64_t c = 0; c < nch; c++) {
            const vf p = causal(vexp(P[r][c] - lse[i]), c, i, splat(0.0f));
            P[r][c] = p;
            DS[r][c] = p * (DS[r][c] - D) * scale;
        }
    }
}

/* Query rows i0 .. i0+nr-1 of one head: their gradients, from their score gradients (backward_rows'). */
static inline __attribute__((always_inline)) void backward_queries(const heads_t *k, const heads_t *dq, int64_t b,
                                                                   int64_t h, int64_t i0, const int nr, int64_t Tp,
                                                                   const int64_t hd, const scratch_t *s) {
    const int64_t last = i0 + nr - 1;
    const float *DS = s->DS + i0 * Tp;
    vf acc[R][hd / W];
    for (int r = 0; r < nr; r++)
        for (int64_t a = 0; a < hd / W; a++) acc[r][a] = (vf){};
    for (int64_t j = 0; j <= last; j++) {
        const float *kj = row(k, b, h, j);
        for (int64_t a = 0; a < hd / W; a++) {
            const vf ka = *(const vfu *)(kj + a * W);
            for (int r = 0; r < nr; r++) acc[r][a] += DS[r * Tp + j] * ka;
        }
    }
    for (int r = 0; r < nr; r++) {
        float *out = row(dq, b, h, i0 + r);
        for (int64_t a = 0; a < hd / W; a++) *(vfu *)(out + a * W) = acc[r][a];
    }
}

/* Key rows j0 .. j0+nj-1 of one head: their gradients and their values', summed over the query rows that see
   them (i >= j0; a row's entries past its own column are zero). */
static inline __attribute__((always_inline)) void backward_keys(const heads_t *q, const heads_t *g, const heads_t *dk,
                                                                const heads_t *dv, int64_t b, int64_t h, int64_t j0,
                                                                const int nj, int64_t T, int64_t Tp, const int64_t hd,
                                                                const scratch_t *s) {
    vf ak[RK][hd / W], av[RK][hd / W];
    for (int r = 0; r < nj; r++)
        for (int64_t a = 0; a < hd / W; a++) ak[r][a] = av[r][a] = (vf){};
    for (int64_t i = j0; i < T; i++) {
        const float *qi = row(q, b, h, i), *gi = row(g, b, h, i);
        const float *ds = s->DS + i * Tp + j0, *p = s->P + i * Tp + j0;
        for (int64_t a = 0; a < hd / W; a++) {
            const vf qa = *(const vfu *)(qi + a * W), ga = *(const vfu *)(gi + a * W);
            for (int r = 0; r < nj; r++) ak[r][a] += ds[r] * qa, av[r][a] += p[r] * ga;
        }
    }
    for (int r = 0; r < nj; r++) {
        float *dkr = row(dk, b, h, j0 + r), *dvr = row(dv, b, h, j0 + r);
        for (int64_t a = 0; a < hd / W; a++) *(vfu *)(dkr + a * W) = ak[r][a], *(vfu *)(dvr + a * W) = av[r][a];
    }
}

static inline __attribute__((always_inline)) void backward_head(const heads_t *q, const heads_t *k, const heads_t *v,
                                                                const heads_t *g, const float *lse,
                                                                const heads_t *dq, const heads_t *dk,
                                                                const heads_t *dv, int64_t b, int64_t h, int64_t T,
                                                                const int64_t hd, float scale, const scratch_t *s) {
    const int64_t Tp = (T + W - 1) / W * W;
    as_columns(k, b, h, T, hd, Tp, s->KT);
    as_columns(v, b, h, T, hd, Tp, s->VT);
    int64_t i = 0;
    for (; i + RB <= T; i += RB) backward_rows(q, k, g, lse, dq, b, h, i, RB, T, Tp, hd, scale, s);
    for (; i < T; i++) backward_rows(q, k, g, lse, dq, b, h, i, 1, T, Tp, hd, scale, s);
    const int nq = rows_at_once(hd);
    for (i = 0; i + nq <= T; i += nq) backward_queries(k, dq, b, h, i, nq, Tp, hd, s);
    for (; i < T; i++) backward_queries(k, dq, b, h, i, 1, Tp, hd, s);
    int64_t j = 0;
    for (; j + RK <= T; j += RK) backward_keys(q, g, dk, dv, b, h, j, RK, T, Tp, hd, s);
    for (; j < T; j++) backward_keys(q, g, dk, dv, b, h, j, 1, T, Tp, hd, s);
}

/* Every head of batch element b. With n: attention on the normalised heads, its query and key gradients
   into the scratch, then the norm's backward, token by token in memory order as normalise_batch reads. */
static inline __attribute__((always_inline)) void backward_batch(const heads_t *q, const heads_t *k, const heads_t *v,
                                                                 const heads_t *o, const heads_t *g, const float *lse,
                                                                 const heads_t *dq, const heads_t *dk,
                                                                 const heads_t *dv, int64_t b, int64_t H, int64_t T,
                                                                 const int64_t hd, float scale, const scratch_t *s,
                                                                 const qkn_t *n) {
    if (n) normalise_batch(q, k, b, T, hd, n);
    output_dots(o, g, b, H, T, hd, s->D);
    for (int64_t h = 0; h < H; h++) {
        const float *l = lse + (b * H + h) * T;
        if (!n) {
            backward_head(q, k, v, g, l, dq, dk, dv, b, h, T, hd, scale, s);
            continue;
        }
        const heads_t qn = scratch_head(n->Qn, h, T, hd), kn = scratch_head(n->Kn, h, T, hd);
        const heads_t dqn = scratch_head(n->DQ, h, T, hd), dkn = scratch_head(n->DK, h, T, hd);
        backward_head(&qn, &kn, v, g, l, &dqn, &dkn, dv, b, h, T, hd, scale, s);
    }
    if (!n) return;
    for (int64_t i = 0; i < T; i++) {
        for (int64_t h = 0; h < H; h++)
            backward_row(n->DQ + (h * T + i) * hd, row(q, b, h, i), n->gains + h * hd, n->rs[h * T + i],
                         row(dq, b, h, i), n->acc + h * hd, n->gw, hd);
        for (int64_t h = 0; h < H; h++)
            backward_row(n->DK + (h * T + i) * hd, row(k, b, h, i), n->gains + (H + h) * hd, n->rs[(H + h) * T + i],
                         row(dk, b, h, i), n->acc + (H + h) * hd, n->gw, hd);
    }
}

/* gains: NULL, or the fused QK-norm's [2H, hd], whose gradient then goes to dgains (NULL: not wanted). */
int lb_attention_backward(const heads_t *q, const heads_t *k, const heads_t *v, const heads_t *o, const heads_t *g,
                          const float *lse, const heads_t *dq, const heads_t *dk, const heads_t *dv, int64_t B,
                          int64_t H, int64_t T, int64_t hd, float scale, const float *gains, float eps,
                          float *dgains) {
    const int64_t Tp = (T + W - 1) / W * W;
    const size_t floats = (size_t)((2 * hd + 2 * Tp) * Tp + H * T) + qkn_floats(gains, H, T, hd, 1);
    float *buf = aligned_alloc(64, (floats + 15) / 16 * 16 * sizeof(float));
    if (!buf) return 1;
    float *D = buf + (2 * hd + 2 * Tp) * Tp;
    scratch_t s = {buf, buf + hd * Tp, buf + 2 * hd * Tp, buf + (2 * hd + Tp) * Tp, D};
    qkn_t norm;
    if (qkn_init(&norm, gains, eps, H, T, hd, D + H * T, 1)) {
        free(buf);
        return 1;
    }
    const qkn_t *n = gains ? &norm : NULL;
    for (int64_t b = 0; b < B; b++)
        switch (hd) {
        case 32: backward_batch(q, k, v, o, g, lse, dq, dk, dv, b, H, T, 32, scale, &s, n); break;
        case 64: backward_batch(q, k, v, o, g, lse, dq, dk, dv, b, H, T, 64, scale, &s, n); break;
        default: backward_batch(q, k, v, o, g, lse, dq, dk, dv, b, H, T, hd, scale, &s, n);
        }
    if (n && dgains)
        for (int64_t c = 0; c < 2 * H * hd; c++) dgains[c] = (float)norm.acc[c];
    free(norm.acc);
    free(buf);
    return 0;
}

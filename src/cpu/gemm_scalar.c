// gemm_scalar.c: the plain C twins of the repacked matrix kernels (gemm.h) and
// of the activation quantizer: the fallback on CPUs without AVX2 and the oracle
// the SIMD kernels are tested against. Integer block sums are exactly those of
// the SIMD kernels; only the float accumulation may round differently.
#include <math.h>

#include "cpu/gemm.h"
#include "format/quant_impl.h"
#include "util.h"

// Quantizes one 32-element block: q = x·127/amax rounded to nearest even,
// clamped to ±127 (NaN → −127, so no conversion is undefined), amax the
// largest |x| of the block or of its super-block (gemm_act_span); d and s from
// gemm_act_scales. The SIMD quantizers compute the very same values.
static void quantize_block(const float *x, int8_t *q, struct gemm_act *a, size_t ib, int32_t *bias,
                           int bias_n, int32_t mul, float amax) {
    const float id = amax > 0 ? 127.0f / amax : 0.0f;
    int sum[2] = {0, 0};
    for (int i = 0; i < GEMM_QK; i++) {
        const float v = fminf(fmaxf(x[i] * id, -127.0f), 127.0f);
        q[i] = (int8_t)nearbyintf(v);
        sum[i / 16] += q[i];
    }
    gemm_act_scales(a, ib, amax, sum[0] + sum[1]);
    if (a->qsum) a->qsum[ib] = (int16_t)(sum[0] + sum[1]); // |Σq| ≤ 32·127
    if (bias_n == 1)
        bias[0] = mul * (sum[0] + sum[1]);
    else if (bias_n == 2)
        bias[0] = mul * sum[0], bias[1] = mul * sum[1];
}

void gemm_quantize_scalar(const float *x, struct gemm_act *a, int t0, int t1) {
    const int64_t nb = a->cols / GEMM_QK, span = gemm_act_span(a);
    float amax = 0;
    for (int t = t0; t < t1; t++)
        for (int64_t b = 0; b < nb; b++) {
            const float *xb = x + (size_t)t * a->cols + b * GEMM_QK;
            if (b % span == 0) { // max|x| (NaN ignored, as fmaxf does) over the blocks sharing a scale
                const int64_t k = nb - b < span ? nb - b : span;
                amax = 0;
                for (int64_t i = 0; i < k * GEMM_QK; i++) amax = fmaxf(amax, fabsf(xb[i]));
            }
            const size_t i = (size_t)t * (size_t)nb + (size_t)b;
            quantize_block(xb, a->qs + (size_t)t * a->cols + b * GEMM_QK, a, i,
                           a->bias ? &a->bias[(size_t)a->bias_n * i] : NULL, a->bias_n, a->bias_mul, amax);
        }
}

// One 32-element block of one row of a repacked weight, as the kernels see it:
// the unsigned quants, the scale of each 16-element half (one for the block
// except Q6_K) and the min (0 where it is folded into the activation's bias).
struct row_block {
    uint8_t u[32];
    float dw[2], mw;
};

static void get_block(const struct gemm_weight *w, int64_t g, int64_t b, int lane, struct row_block *o) {
    const uint8_t *gp = w->data + (size_t)g * w->group_bytes;
    const int64_t nb = w->cols / GEMM_QK;
    o->mw = 0;
    switch (w->gt) {
    case GEMM_Q4_0:
    case GEMM_Q4_1: {
        const struct gemm_q4_qs *q = (const struct gemm_q4_qs *)(gp + w->scale_bytes) + b;
        for (int i = 0; i < 16; i++) {
            const uint8_t byte = q->qs[i / 4][lane][i % 4];
            o->u[i] = byte & 0xF;
            o->u[i + 16] = byte >> 4;
        }
        const uint16_t *sc = (const uint16_t *)gp;
        if (w->gt == GEMM_Q4_0) {
            o->dw[0] = st_fp16_to_f32(sc[b * GEMM_R + lane]); // min −8·dw: in the bias
        } else {
            o->dw[0] = st_fp16_to_f32(sc[b * 2 * GEMM_R + lane]);
            o->mw = st_fp16_to_f32(sc[b * 2 * GEMM_R + GEMM_R + lane]);
        }
        break;
    }
    case GEMM_Q8_0: {
        const struct gemm_q8_qs *q = (const struct gemm_q8_qs *)(gp + w->scale_bytes) + b;
        for (int i = 0; i < 32; i++) o->u[i] = q->qs[i / 4][lane][i % 4];
        o->dw[0] = st_fp16_to_f32(((const uint16_t *)gp)[b * GEMM_R + lane]); // min −128·dw: in the bias
        break;
    }
    case GEMM_Q4_K: {
        const struct gemm_q4_K *s = (const struct gemm_q4_K *)gp + b / 8;
        const int j = (int)(b % 8);
        for (int i = 0; i < 16; i++) {
            const uint8_t byte = s->qs[j][i / 4][lane][i % 4];
            o->u[i] = byte & 0xF;
            o->u[i + 16] = byte >> 4;
        }
        o->dw[0] = st_fp16_to_f32(s->d[lane]) * (float)s->sc[j][lane];
        o->mw = -(st_fp16_to_f32(s->dmin[lane]) * (float)s->m[j][lane]);
        break;
    }
    case GEMM_Q6_K: {
        const struct gemm_q6_K *s = (const struct gemm_q6_K *)gp + b / 8;
        const int bb = (int)(b % 8);
        for (int e = 0; e < 32; e++) {
            const int jj = e / 4, i = e % 4; // word jj of the block, byte i
            const uint8_t lo = s->ql[bb][jj % 4][lane][i];
            const uint8_t nib = jj < 4 ? lo & 0xF : lo >> 4;
            const uint8_t hi = (uint8_t)((s->qh[bb][jj / 4][lane][i] >> (2 * (jj % 4))) & 3);
            o->u[e] = (uint8_t)(nib | hi << 4);
        }
        o->dw[0] = s->d[lane] * (float)s->sc[2 * bb][lane];
        o->dw[1] = s->d[lane] * (float)s->sc[2 * bb + 1][lane]; // min −32·dw per half: in the bias
        break;
    }
    default:
        ST_ASSERT(0);
    }
    (void)nb;
}

static void kernel_scalar(const struct gemm_weight *w, const struct gemm_act *a, int t0, int nt, int64_t g0,
                          int64_t g1, float *y, int64_t ldy) {
    const int64_t nb = w->cols / GEMM_QK;
    for (int64_t g = g0; g < g1; g++) {
        const int64_t rows = w->rows - g * GEMM_R < GEMM_R ? w->rows - g * GEMM_R : GEMM_R;
        for (int lane = 0; lane < rows; lane++)
            for (int t = t0; t < t0 + nt; t++) {
                const int8_t *q = a->qs + (size_t)t * (size_t)a->cols;
                float acc = 0;
                for (int64_t b = 0; b < nb; b++) {
                    struct row_block rb;
                    get_block(w, g, b, lane, &rb);
                    const size_t ib = (size_t)t * (size_t)nb + (size_t)b;
                    int32_t sum[2] = {0, 0};
                    if (a->bias_n == 2)
                        sum[0] = a->bias[2 * ib], sum[1] = a->bias[2 * ib + 1];
                    else if (a->bias_n == 1)
                        sum[0] = a->bias[ib];
                    for (int i = 0; i < 32; i++) sum[i / 16] += (int32_t)rb.u[i] * (int32_t)q[b * 32 + i];
                    if (a->bias_n == 2) {
                        acc += (float)sum[0] * (rb.dw[0] * a->d[ib]);
                        acc += (float)sum[1] * (rb.dw[1] * a->d[ib]);
                    } else {
                        acc += (float)(sum[0] + sum[1]) * (rb.dw[0] * a->d[ib]);
                        if (rb.mw != 0) acc += rb.mw * a->s[ib];
                    }
                }
                y[(size_t)t * (size_t)ldy + (size_t)(g * GEMM_R + lane)] = acc;
            }
    }
}

const gemm_kernel_fn gemm_kernels_scalar[GEMM_N_TYPES] = {kernel_scalar, kernel_scalar, kernel_scalar,
                                                          kernel_scalar, kernel_scalar};

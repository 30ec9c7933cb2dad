// synth_kquant.c: plain quantizers to Q4_K and Q6_K for synthetic models (the
// quant table has none: Strata reads these types, it does not make them). One
// pass each, no search: sub-block scales from the sub-block's range, the
// super-block scale from the largest sub-block scale, every value rounded to the
// nearest level. Good enough for random benchmark weights; the blocks are valid
// GGUF for any reader.
#include <math.h>
#include <string.h>

#include "format/quant_impl.h"
#include "model/synth.h"
#include "util.h"

static int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

// x = d·sc_j·q − dmin·m_j per 32-element sub-block j, q in [0, 15], sc and m 6 bits.
void synth_quantize_row_q4_K(const float *src, void *dst, int64_t n) {
    struct block_q4_K *b = dst;
    for (int64_t i = 0; i < n / QK_K; i++, src += QK_K) {
        float scale[8], mins[8], max_scale = 0, max_min = 0;
        for (int j = 0; j < 8; j++) {
            float lo = 0, hi = 0; // the range always holds 0: mins are subtracted, never added
            for (int l = 0; l < 32; l++) lo = fminf(lo, src[32 * j + l]), hi = fmaxf(hi, src[32 * j + l]);
            scale[j] = (hi - lo) / 15;
            mins[j] = -lo;
            max_scale = fmaxf(max_scale, scale[j]);
            max_min = fmaxf(max_min, mins[j]);
        }
        const float d = max_scale / 63, dmin = max_min / 63;
        b[i].d = st_f32_to_fp16(d);
        b[i].dmin = st_f32_to_fp16(dmin);
        const float d16 = st_fp16_to_f32(b[i].d), dmin16 = st_fp16_to_f32(b[i].dmin);
        uint8_t sc[8], m[8], q[QK_K];
        for (int j = 0; j < 8; j++) {
            sc[j] = (uint8_t)clampi(d16 > 0 ? (int)lrintf(scale[j] / d16) : 0, 0, 63);
            m[j] = (uint8_t)clampi(dmin16 > 0 ? (int)lrintf(mins[j] / dmin16) : 0, 0, 63);
            const float ds = d16 * sc[j], dm = dmin16 * m[j];
            for (int l = 0; l < 32; l++)
                q[32 * j + l] = (uint8_t)clampi(ds > 0 ? (int)lrintf((src[32 * j + l] + dm) / ds) : 0, 0, 15);
        }
        // 6-bit packing, the inverse of quant_k4_scale_min
        memset(b[i].scales, 0, sizeof b[i].scales);
        for (int j = 0; j < 4; j++) {
            b[i].scales[j] = (uint8_t)(sc[j] | (sc[j + 4] >> 4) << 6);
            b[i].scales[j + 4] = (uint8_t)(m[j] | (m[j + 4] >> 4) << 6);
            b[i].scales[j + 8] = (uint8_t)((sc[j + 4] & 0xF) | (m[j + 4] & 0xF) << 4);
        }
        for (int k = 0; k < 4; k++)
            for (int l = 0; l < 32; l++)
                b[i].qs[32 * k + l] = (uint8_t)(q[64 * k + l] | q[64 * k + 32 + l] << 4);
    }
}

// x = d·sc_i·(q − 32) per 16-element sub-block i, q in [0, 63], sc a signed byte.
void synth_quantize_row_q6_K(const float *src, void *dst, int64_t n) {
    struct block_q6_K *b = dst;
    for (int64_t i = 0; i < n / QK_K; i++, src += QK_K) {
        float scale[16], max_scale = 0;
        for (int s = 0; s < 16; s++) {
            float amax = 0;
            for (int l = 0; l < 16; l++) amax = fmaxf(amax, fabsf(src[16 * s + l]));
            scale[s] = amax / 31;
            max_scale = fmaxf(max_scale, scale[s]);
        }
        const float d = max_scale / 127;
        b[i].d = st_f32_to_fp16(d);
        const float d16 = st_fp16_to_f32(b[i].d);
        uint8_t q[QK_K];
        for (int s = 0; s < 16; s++) {
            const int sc = clampi(d16 > 0 ? (int)lrintf(scale[s] / d16) : 0, 0, 127);
            b[i].scales[s] = (int8_t)sc;
            const float ds = d16 * (float)sc;
            for (int l = 0; l < 16; l++)
                q[16 * s + l] = (uint8_t)clampi(ds > 0 ? (int)lrintf(src[16 * s + l] / ds) + 32 : 32, 0, 63);
        }
        // the inverse of the ql/qh layout the reference dequantizer reads
        for (int half = 0; half < 2; half++) {
            uint8_t *ql = b[i].ql + 64 * half, *qh = b[i].qh + 32 * half;
            const uint8_t *o = q + 128 * half;
            for (int l = 0; l < 32; l++) {
                ql[l] = (uint8_t)((o[l] & 0xF) | (o[l + 64] & 0xF) << 4);
                ql[l + 32] = (uint8_t)((o[l + 32] & 0xF) | (o[l + 96] & 0xF) << 4);
                qh[l] = (uint8_t)((o[l] >> 4) | (o[l + 32] >> 4) << 2 | (o[l + 64] >> 4) << 4 |
                                  (o[l + 96] >> 4) << 6);
            }
        }
    }
}

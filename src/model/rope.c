// rope.c: see rope.h.
#include "model/rope.h"

#include <math.h>

#include "util.h"

// YaRN's correction range: the pair index at which a frequency turns n_rot
// times over n_ctx_orig positions, for n_rot = beta_fast and beta_slow
// (ggml_rope_yarn_corr_dims: floor of the first, ceil of the second, clamped).
static void yarn_corr_dims(const struct rope_params *rp, double dims[2]) {
    const double two_pi = 6.283185307179586;
    const double lb = 2 * log((double)rp->base);
    const double lo = floor(rp->n_dims * log(rp->n_ctx_orig / (rp->beta_fast * two_pi)) / lb);
    const double hi = ceil(rp->n_dims * log(rp->n_ctx_orig / (rp->beta_slow * two_pi)) / lb);
    dims[0] = lo > 0 ? lo : 0;
    dims[1] = hi < rp->n_dims - 1 ? hi : rp->n_dims - 1;
}

void rope_cos_sin(int pos, int i, const struct rope_params *rp, double *c, double *s) {
    double theta = (double)pos * pow((double)rp->base, -2.0 * i / rp->n_dims);
    if (rp->freq_factors) theta /= rp->freq_factors[i];
    const double interp = rp->freq_scale * theta;
    double mscale = rp->attn_factor;
    double th = interp;
    if (rp->ext_factor != 0) {
        double dims[2];
        yarn_corr_dims(rp, dims);
        double y = (i - dims[0]) / fmax(0.001, dims[1] - dims[0]);
        y = y < 0 ? 0 : (y > 1 ? 1 : y);
        const double mix = (1 - y) * rp->ext_factor;
        th = interp * (1 - mix) + theta * mix;
        mscale *= 1 + 0.1 * log(1.0 / rp->freq_scale);
    }
    *c = cos(th) * mscale;
    *s = sin(th) * mscale;
}

int rope_check(const struct rope_params *rp, int head_dim) {
    if (rp->n_dims < 2 || rp->n_dims % 2 || rp->n_dims > head_dim)
        return st_fail("RoPE: %d rotated dimensions do not fit a head of %d (even, 2 .. head_dim)",
                       rp->n_dims, head_dim);
    if (!(rp->base > 0) || !isfinite(rp->base))
        return st_fail("RoPE: base %g must be a positive number", rp->base);
    if (!(rp->freq_scale > 0) || !isfinite(rp->freq_scale))
        return st_fail("RoPE: frequency scale %g must be a positive number", rp->freq_scale);
    if (!isfinite(rp->attn_factor) || !isfinite(rp->ext_factor))
        return st_fail("RoPE: attention factor %g / extrapolation factor %g must be finite", rp->attn_factor,
                       rp->ext_factor);
    if (rp->ext_factor != 0 && (rp->n_ctx_orig < 1 || !(rp->beta_fast > 0) || !(rp->beta_slow > 0)))
        return st_fail("RoPE: YaRN needs an original context ≥ 1 (%d) and positive betas (%g, %g)",
                       rp->n_ctx_orig, rp->beta_fast, rp->beta_slow);
    for (int i = 0; rp->freq_factors && i < rp->n_dims / 2; i++)
        if (!(rp->freq_factors[i] > 0) || !isfinite(rp->freq_factors[i]))
            return st_fail("RoPE: frequency factor %d = %g must be a positive number", i,
                           rp->freq_factors[i]);
    return 0;
}

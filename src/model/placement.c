// placement.c: the plan of a model over several GPUs (placement.h).
#include "model/placement.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

static double gib(uint64_t b) { return (double)b / 1073741824.0; }

int placement_parse_mode(const char *s, enum split_mode *m) {
    if (!strcmp(s, "none")) {
        *m = SPLIT_MODE_NONE;
    } else if (!strcmp(s, "layer")) {
        *m = SPLIT_MODE_LAYER;
    } else if (!strcmp(s, "row")) {
        *m = SPLIT_MODE_ROW;
    } else {
        return st_fail("split mode '%s': use none, layer or row", s);
    }
    return 0;
}

int placement_parse_split(const char *s, float split[PLACEMENT_MAX_DEV], int *n) {
    *n = 0;
    bool any = false;
    const char *p = s;
    for (;;) {
        if (*n == PLACEMENT_MAX_DEV)
            return st_fail("tensor split '%s': more than %d proportions", s, PLACEMENT_MAX_DEV);
        char *end;
        errno = 0;
        const double v = strtod(p, &end);
        if (end == p || (*end != ',' && *end != 0) || errno || !isfinite(v) || v < 0)
            return st_fail("tensor split '%s': entry %d is not a number ≥ 0 (use proportions such as 3,1)", s,
                           *n + 1);
        split[(*n)++] = (float)v;
        any |= v > 0;
        if (*end == 0) break;
        p = end + 1;
    }
    if (!any) return st_fail("tensor split '%s': every proportion is 0; give at least one device a share", s);
    return 0;
}

static int add_bytes(void *user, const struct weight *w) {
    *(uint64_t *)user += (uint64_t)(w->n_expert > 1 ? w->n_expert : 1) * (uint64_t)w->rows * w->row_bytes;
    return 0;
}

struct placement_model placement_model_of(const struct model *m, int n_ctx, enum ggml_type kv_type,
                                          uint64_t scratch, uint64_t *layer_weights) {
    struct placement_model pm = {.n_layer = m->hp.n_layer,
                                 .layer_weights = layer_weights,
                                 .layer_kv = model_kv_bytes(m, n_ctx, kv_type) / (uint64_t)m->hp.n_layer,
                                 .scratch = scratch,
                                 .n_head_kv = m->hp.n_head_kv,
                                 .n_ctx = n_ctx};
    uint64_t in_layers = 0;
    for (int l = 0; l < m->hp.n_layer; l++) {
        layer_weights[l] = 0;
        model_for_each_layer_weight(m, l, add_bytes, &layer_weights[l]);
        in_layers += layer_weights[l];
    }
    pm.other_weights = m->weight_bytes > in_layers ? m->weight_bytes - in_layers : 0;
    add_bytes(&pm.embd_weights, &m->tok_embd);
    const struct weight *out[] = {&m->output_norm, &m->output, &m->output_b};
    for (size_t i = 0; i < sizeof out / sizeof *out; i++)
        if (weight_present(out[i])) add_bytes(&pm.out_weights, out[i]);
    return pm;
}

// The shares split[i] (or avail[i] without a split), normalised into p->share.
static int shares(const struct placement_devices *d, const float *split, int n_split, struct placement *p) {
    double sum = 0;
    for (int i = 0; i < d->n; i++) {
        p->share[i] = n_split ? (i < n_split ? split[i] : 0.0) : (double)d->avail[i];
        sum += p->share[i];
    }
    if (!(sum > 0)) return st_fail("no GPU has memory free to place the model on");
    for (int i = 0; i < d->n; i++) p->share[i] /= sum;
    return 0;
}

// Row mode: whole KV heads by largest remainder of share · n_head_kv.
static void split_heads(int n_head_kv, int n_dev, struct placement *p) {
    int given = 0;
    double rem[PLACEMENT_MAX_DEV];
    for (int i = 0; i < n_dev; i++) {
        const double want = p->share[i] * n_head_kv;
        p->heads[i] = (int)floor(want);
        rem[i] = want - p->heads[i];
        given += p->heads[i];
    }
    for (; given < n_head_kv; given++) { // the largest remainders, the lower device first on ties
        int best = 0;
        for (int i = 1; i < n_dev; i++)
            if (rem[i] > rem[best]) best = i;
        p->heads[best]++;
        rem[best] = -1;
    }
}

// The weights device i holds beside its blocks (or heads): the other
// weights on the main device; in layer mode the embedding on the first
// device with blocks and the output layer on the last (all of them where
// those are one device); *what (if not NULL) names them.
static uint64_t fixed_weights(const struct placement_model *m, const struct placement *p, int i,
                              const char **what) {
    int first = p->main_dev, last = p->main_dev;
    if (p->mode == SPLIT_MODE_LAYER) {
        first = last = -1;
        for (int k = 0; k < p->n_dev; k++)
            if (p->layer_n[k] > 0) {
                if (first < 0) first = k;
                last = k;
            }
    }
    if (what) *what = i != first ? "output layer" : i != last ? "embedding" : "embedding and output";
    if (first == last) return i == first ? m->other_weights : 0;
    return (i == first ? m->embd_weights : 0) + (i == last ? m->out_weights : 0);
}

// Why device i falls short, and what would fit: a --tensor-split by what each
// device has beyond its fixed part (scratch; the other weights on the main
// one), or, when the whole does not fit, a smaller model or context.
static int shortfall(const struct placement_model *m, const struct placement_devices *d,
                     const struct placement *p, int i, uint64_t weights, uint64_t kv) {
    // everything, with scratch on every device, against all they have
    uint64_t total = m->layer_kv * (uint64_t)m->n_layer, avail = 0;
    for (int l = 0; l < m->n_layer; l++) total += m->layer_weights[l];
    double room[PLACEMENT_MAX_DEV], room_sum = 0;
    for (int k = 0; k < d->n; k++) {
        const uint64_t own = m->scratch + fixed_weights(m, p, k, NULL);
        total += fixed_weights(m, p, k, NULL);
        room[k] = d->avail[k] > own ? (double)(d->avail[k] - own) : 0.0;
        room_sum += room[k];
        avail += d->avail[k];
        total += m->scratch;
    }
    char what[384], other[64] = "";
    const char *fixed_what;
    const uint64_t fixed = fixed_weights(m, p, i, &fixed_what);
    if (fixed) snprintf(other, sizeof other, ", %s %.2f GiB", fixed_what, gib(fixed));
    snprintf(
        what, sizeof what,
        "GPU %d needs %.2f GiB (%s weights %.2f GiB, KV cache for %d positions %.2f GiB, scratch %.2f GiB%s) "
        "but has %.2f GiB free beyond its reserve",
        i, gib(p->need[i]), p->mode == SPLIT_MODE_ROW ? "its share of the blocks'" : "its blocks'",
        gib(weights), m->n_ctx, gib(kv), gib(m->scratch), other, gib(d->avail[i]));
    if (d->n == 1 || total > avail || room_sum <= 0)
        return st_fail(
            "%s; %s: use a smaller quantization of the model or a smaller context (-c), or the CPU "
            "(--backend cpu)",
            what,
            d->n == 1 ? "there is no other GPU to share it" : "the model does not fit these GPUs together");
    if (p->mode == SPLIT_MODE_NONE)
        return st_fail(
            "%s: divide the model over the %d GPUs (--split-mode layer), or use a smaller context (-c)", what,
            d->n);
    char split[128] = "";
    for (int k = 0; k < d->n; k++)
        snprintf(split + strlen(split), sizeof split - strlen(split), "%s%d", k ? "," : "",
                 (int)lround(100.0 * room[k] / room_sum));
    return st_fail(
        "%s: give it a smaller share, e.g. --tensor-split %s (by what each GPU has free), or use a "
        "smaller context (-c)",
        what, split);
}

int placement_plan(const struct placement_model *m, const struct placement_devices *d, enum split_mode mode,
                   const float *split, int n_split, int main_dev, struct placement *p) {
    memset(p, 0, sizeof *p);
    if (d->n < 1 || d->n > PLACEMENT_MAX_DEV)
        return st_fail("%d GPUs: there must be 1 to %d", d->n, PLACEMENT_MAX_DEV);
    if (m->n_layer < 1) return st_fail("the model has no blocks to place");
    if (main_dev < 0 || main_dev >= d->n)
        return st_fail("--main-gpu %d: there %s %d GPU%s (0 .. %d)", main_dev, d->n == 1 ? "is" : "are", d->n,
                       d->n == 1 ? "" : "s", d->n - 1);
    if (n_split > d->n)
        return st_fail("--tensor-split names %d GPUs but %d %s visible", n_split, d->n,
                       d->n == 1 ? "is" : "are");
    if (mode == SPLIT_MODE_NONE && n_split)
        return st_fail(
            "--tensor-split divides a model over GPUs, but --split-mode none runs it on --main-gpu "
            "alone: use --split-mode layer or row");
    if (mode == SPLIT_MODE_ROW && m->n_head_kv < 1)
        return st_fail("row split: the model has no KV heads to divide");
    p->mode = mode;
    p->n_dev = d->n;
    p->main_dev = main_dev;
    if (mode == SPLIT_MODE_NONE) {
        p->share[main_dev] = 1.0;
    } else if (shares(d, split, n_split, p)) {
        return -1;
    }
    uint64_t weights[PLACEMENT_MAX_DEV] = {0}, kv[PLACEMENT_MAX_DEV] = {0};
    if (mode == SPLIT_MODE_ROW) {
        split_heads(m->n_head_kv, d->n, p);
        uint64_t all = 0;
        for (int l = 0; l < m->n_layer; l++) all += m->layer_weights[l];
        for (int i = 0; i < d->n; i++) {
            const double f = (double)p->heads[i] / m->n_head_kv;
            weights[i] = (uint64_t)ceil((double)all * f);
            kv[i] = (uint64_t)ceil((double)m->layer_kv * m->n_layer * f);
        }
    } else {
        double cum = 0;
        int first = 0;
        for (int i = 0; i < d->n; i++) {
            cum += p->share[i];
            int end = (int)lround(cum * m->n_layer);
            if (end > m->n_layer || i == d->n - 1) end = m->n_layer;
            if (end < first) end = first;
            p->layer_first[i] = first;
            p->layer_n[i] = end - first;
            for (int l = first; l < end; l++) weights[i] += m->layer_weights[l];
            kv[i] = m->layer_kv * (uint64_t)p->layer_n[i];
            first = end;
        }
    }
    for (int i = 0; i < d->n; i++) {
        const bool used = mode == SPLIT_MODE_LAYER ? p->layer_n[i] > 0 : i == main_dev || p->heads[i] > 0;
        if (!used) continue;
        p->n_used++;
        p->need[i] = weights[i] + kv[i] + m->scratch + fixed_weights(m, p, i, NULL);
    }
    for (int i = 0; i < d->n; i++)
        if (p->need[i] > d->avail[i]) return shortfall(m, d, p, i, weights[i], kv[i]);
    return 0;
}

void placement_describe(const struct placement *p, char *buf, size_t cap) {
    if (cap) buf[0] = 0;
    size_t n = 0;
    for (int i = 0; i < p->n_dev && n + 1 < cap; i++) {
        if (!p->need[i]) continue;
        char part[96];
        if (p->mode == SPLIT_MODE_ROW)
            snprintf(part, sizeof part, "%d KV heads", p->heads[i]);
        else
            snprintf(part, sizeof part, "blocks %d-%d", p->layer_first[i],
                     p->layer_first[i] + p->layer_n[i] - 1);
        const int w =
            snprintf(buf + n, cap - n, "%sGPU %d%s: %s, %.2f GiB", n ? "; " : "", i,
                     i == p->main_dev && p->mode != SPLIT_MODE_LAYER ? " (main)" : "", part, gib(p->need[i]));
        n = w < 0 || (size_t)w >= cap - n ? cap - 1 : n + (size_t)w; // cut at cap
    }
}

// session.c: see session.h.
#include "model/session.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "text/tokenizer.h"
#include "util.h"

void session_opts_default(struct session_opts *o) {
    memset(o, 0, sizeof *o);
    o->n_batch = SESSION_DEFAULT_BATCH;
    o->n_seq = 1;
    o->backend = "auto";
}

// --split-mode and --tensor-split: plans the model over the GPUs the built
// GPU backend sees (placement.h) into *p. A plan over several GPUs is taken
// in layer mode (a backend a GPU, in device order); row mode over several is
// not built and is refused with what to ask for instead. Returns 0, or -1
// with a message (a bad request, what does not fit).
static int plan_split(const struct session_opts *o, const struct model *m, int n_ctx, struct placement *p) {
    const char *mode = o->split_mode == SPLIT_MODE_ROW     ? "--split-mode row"
                       : o->split_mode == SPLIT_MODE_LAYER ? "--split-mode layer"
                                                           : "--tensor-split";
    const struct backend_desc *named = backend_find(o->backend);
    if (named && !(named->caps & BACKEND_CAP_GPU))
        return st_fail(
            "%s divides a model over GPUs, and the %s backend runs on the host: drop it or use a GPU "
            "backend",
            mode, named->name);
    uint64_t avail[PLACEMENT_MAX_DEV];
    const int n = backend_gpu_devices(avail, PLACEMENT_MAX_DEV);
    if (n < 0) {
        char why[256];
        snprintf(why, sizeof why, "%s", st_last_error());
        return st_fail("%s: %s", mode, why);
    }
    enum ggml_type kt = GGML_TYPE_F32; // the GPU backends' default
    if (o->cache_type && backend_parse_kv_type(o->cache_type, &kt)) return -1;
    const int n_batch = o->n_batch < n_ctx ? o->n_batch : n_ctx;
    uint64_t *lw = st_xcalloc((size_t)m->hp.n_layer, sizeof *lw);
    const struct placement_model pm =
        placement_model_of(m, n_ctx * (o->n_seq ? o->n_seq : 1), kt, context_scratch_bytes(m, n_batch), lw);
    struct placement_devices d = {.n = n};
    memcpy(d.avail, avail, sizeof(uint64_t) * (size_t)n);
    const int rc = placement_plan(&pm, &d, o->split_mode, o->tensor_split, o->n_tensor_split, o->device, p);
    free(lw);
    if (rc) return -1;
    if (p->n_used > 1 && p->mode == SPLIT_MODE_ROW) {
        char where[512];
        placement_describe(p, where, sizeof where);
        return st_fail("%s places the model over %d GPUs (%s), but the row split runs on one GPU only in "
                       "this build: use --split-mode layer to divide the blocks over them",
                       mode, p->n_used, where);
    }
    return 0;
}

// Opens the backend for GPU (or, without a split, the --main-gpu) device
// with the options every backend of a session shares.
static struct backend *open_backend(const struct session_opts *o, int device) {
    const struct backend_opts bo = {.n_threads = o->n_threads, .device = device};
    struct backend *be = backend_open(o->backend, &bo);
    if (be && o->cache_type) {
        enum ggml_type kt;
        if (backend_parse_kv_type(o->cache_type, &kt) || backend_set_kv_type(be, kt)) {
            be->free(be);
            return NULL;
        }
    }
    return be;
}

// The sequences of s->ctx, n_seq in all (itself the first). 0, or -1 with a
// message and s closed.
static int open_sequences(struct session *s, int n_seq) {
    s->seq = st_xcalloc((size_t)n_seq, sizeof *s->seq);
    s->seq[0] = s->ctx;
    s->n_seq = 1;
    for (; s->n_seq < n_seq; s->n_seq++)
        if (context_init_seq(s->ctx, &s->seq[s->n_seq])) {
            session_close(s);
            return -1;
        }
    return 0;
}

int session_open(const struct session_opts *o, struct session *s) {
    memset(s, 0, sizeof *s);
    if (!o->model) return st_fail("no model given: use -m FILE (see --help)");
    if (o->n_ctx < 0 || o->n_batch < 1)
        return st_fail("context %d and batch %d: the context must be ≥ 0 and the batch ≥ 1", o->n_ctx,
                       o->n_batch);
    if (o->n_seq < 0) return st_fail("%d sequences: there must be at least one", o->n_seq);
    if (model_load(o->model, &s->model)) return -1;
    if (o->progress) session_prefault(s->model);
    const struct model_hparams *hp = &s->model->hp;
    int n_ctx = o->n_ctx;
    if (n_ctx == 0) n_ctx = hp->n_ctx_train < SESSION_DEFAULT_CTX ? hp->n_ctx_train : SESSION_DEFAULT_CTX;
    if (n_ctx > hp->n_ctx_train)
        fprintf(stderr,
                "strata: warning: context %d is longer than the %d tokens the model was trained "
                "on; quality may drop past that\n",
                n_ctx, hp->n_ctx_train);
    const int n_batch = o->n_batch < n_ctx ? o->n_batch : n_ctx;
    const int max_seq = INT32_MAX / n_ctx; // positions over all sequences fit an int
    if (o->n_seq > max_seq) {
        st_fail("%d parallel sequences (-np) of %d positions are more than 2^31 positions in all: use -np "
                "%d or less, or a smaller -c",
                o->n_seq, n_ctx, max_seq);
        goto fail;
    }
    struct placement p = {0}; // n_used 0: no split asked for
    if ((o->split_mode != SPLIT_MODE_NONE || o->n_tensor_split) && plan_split(o, s->model, n_ctx, &p))
        goto fail;
    if (p.n_used > 1) { // a layer split: a backend and a stage of the context for each GPU with blocks
        int layer_end[PLACEMENT_MAX_DEV];
        for (int i = 0; i < p.n_dev; i++) {
            if (!p.layer_n[i]) continue;
            if (!(s->stage_be[s->n_stage] = open_backend(o, i))) goto fail;
            layer_end[s->n_stage++] = p.layer_first[i] + p.layer_n[i];
        }
        s->be = s->stage_be[0];
        char where[512];
        placement_describe(&p, where, sizeof where);
        fprintf(stderr, "strata: layer split over %d GPUs: %s\n", s->n_stage, where);
        const int n_seq = o->n_seq ? o->n_seq : 1; // the plan's
        if (context_init_split(s->model, s->stage_be, layer_end, s->n_stage, n_ctx, n_batch, n_seq, &s->ctx))
            goto fail;
        return open_sequences(s, n_seq);
    }
    int device = o->device;
    for (int i = 0; i < p.n_dev && p.n_used; i++)
        if (p.need[i]) device = i; // the one GPU of a plan
    if (!(s->be = s->stage_be[0] = open_backend(o, device))) goto fail;
    s->n_stage = 1;
    const uint64_t kv = model_kv_bytes(s->model, n_ctx, s->be->kv_type),
                   scratch = context_scratch_bytes(s->model, n_batch);
    // the most sequences, up to the number asked for (or SESSION_AUTO_SEQ), that fit
    int want = o->n_seq ? o->n_seq : SESSION_AUTO_SEQ;
    if (want > max_seq) want = max_seq; // only the automatic count: a larger -np was refused above
    int n_seq = want;
    while (n_seq > 1 &&
           s->be->check_memory(s->be, s->model->weight_bytes, kv * (uint64_t)n_seq, scratch, n_ctx * n_seq))
        n_seq--;
    if (s->be->check_memory(s->be, s->model->weight_bytes, kv, scratch, n_ctx)) goto fail; // says why
    if (o->n_seq && n_seq < want) {
        st_fail("%d parallel sequences (-np) of %d positions need %.2f GiB of KV cache (%.2f GiB each), "
                "more than %s has: use -np %d or less, or a smaller -c",
                want, n_ctx, (double)kv * want / 1073741824.0, kv / 1073741824.0, s->be->name, n_seq);
        goto fail;
    }
    if (context_init(s->model, s->be, n_ctx, n_batch, n_seq, &s->ctx)) goto fail;
    return open_sequences(s, n_seq);
fail:
    session_close(s);
    return -1;
}

static void draw_bar(const char *name, uint64_t done, uint64_t total) {
    const int width = 30, fill = (int)((double)done / (double)total * width);
    char bar[32];
    for (int i = 0; i < width; i++) bar[i] = i < fill ? '#' : '.';
    bar[width] = 0;
    fprintf(stderr, "\rstrata: loading %.40s [%s] %3d%% %llu/%llu MiB", name, bar,
            (int)(100.0 * (double)done / (double)total), (unsigned long long)(done >> 20),
            (unsigned long long)(total >> 20));
    fflush(stderr);
}

void session_prefault(const struct model *m) {
    const struct gguf_file *f = m->gguf;
    const uint8_t *map = f->map;
    const uint64_t size = f->size;
    const uint64_t chunk = (uint64_t)8 << 20, page = (uint64_t)sysconf(_SC_PAGESIZE);
    const bool tty = isatty(STDERR_FILENO), forced = st_env_switch("STRATA_LOAD_PROGRESS", false);
    const char *name = strrchr(f->path, '/') ? strrchr(f->path, '/') + 1 : f->path;
    const double t0 = st_time_s();
    double t_drawn = 0;
    bool drawing = false;
    volatile uint8_t sink = 0;
    for (uint64_t off = 0; off < size; off += chunk) {
        const uint64_t n = size - off < chunk ? size - off : chunk;
        // the mapping starts page-aligned; ask for the chunk ahead, then touch each page
        madvise((void *)(map + off), n, MADV_WILLNEED);
        for (uint64_t p = 0; p < n; p += page) sink ^= map[off + p];
        const double now = st_time_s();
        if (tty && !drawing && (forced || now - t0 > 0.25)) drawing = true;
        if (drawing && (now - t_drawn > 0.1 || off + n == size)) {
            draw_bar(name, off + n, size);
            t_drawn = now;
        }
    }
    (void)sink;
    if (drawing) fprintf(stderr, "\n");
}

void session_close(struct session *s) {
    for (int i = s->n_seq - 1; i > 0; i--) context_free(s->seq[i]);
    free(s->seq);
    context_free(s->ctx);
    for (int i = 0; i < s->n_stage; i++) s->stage_be[i]->free(s->stage_be[i]);
    model_free(s->model);
    memset(s, 0, sizeof *s);
}

int session_chat_format(const struct model *m, const char *template_name, struct chat_format *fmt) {
    if (template_name) {
        if (chat_format_by_name(template_name, fmt)) return -1;
    } else {
        if (!m->chat_template)
            return st_fail("the model has no chat template (tokenizer.chat_template); name a "
                           "template family with --template");
        if (chat_detect(m->chat_template, strlen(m->chat_template), fmt)) return -1;
    }
    int32_t bos = tokenizer_bos(m->tok);
    const char *bos_text = bos >= 0 ? tokenizer_token_text(m->tok, bos) : NULL;
    if (bos_text) snprintf(fmt->bos, sizeof fmt->bos, "%s", bos_text);
    return 0;
}

int session_chat_no_think(struct chat_format *fmt, bool no_think) {
    if (!no_think) return 0;
    if (!chat_has_thinking(fmt->kind))
        return st_fail("--no-think: the %s template has no thinking switch (qwen3 templates have "
                       "one); leave the option out",
                       chat_template_name(fmt->kind));
    fmt->enable_thinking = false;
    return 0;
}

int session_text_tokens(const struct model *m, const char *text, int32_t **ids) {
    int n = tokenizer_encode(m->tok, text, strlen(text), true, true, ids);
    if (n < 0) return -1;
    // text that starts with the BOS token's text plus a vocabulary that adds one: keep one
    int32_t bos = tokenizer_bos(m->tok);
    if (n >= 2 && bos >= 0 && (*ids)[0] == bos && (*ids)[1] == bos) {
        memmove(*ids, *ids + 1, sizeof(int32_t) * (size_t)(n - 1));
        n--;
    }
    return n;
}

int session_chat_tokens(const struct model *m, const struct chat_format *fmt, const struct chat_message *msgs,
                        int n, bool add_generation_prompt, int32_t **ids) {
    char *text = chat_render(fmt, msgs, n, add_generation_prompt);
    if (!text) return -1;
    int n_ids = session_text_tokens(m, text, ids);
    free(text);
    return n_ids;
}

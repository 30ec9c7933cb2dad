// test_placement.c: the plan of a model over several GPUs (model/placement.h)
// and its messages, on made-up devices: no GPU needed.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/model.h"
#include "model/placement.h"
#include "model/synth.h"
#include "test.h"
#include "util.h"

#define GIB (1ull << 30)

// A model of 32 blocks of 100 MiB with 8 KV heads, 1 GiB of embedding and
// output (512 MiB each, not tied), a KV cache of 16 MiB a block for 4096
// positions, 256 MiB of scratch.
static uint64_t blocks[32];
static struct placement_model model32(void) {
    for (int l = 0; l < 32; l++) blocks[l] = 100ull << 20;
    return (struct placement_model){.n_layer = 32,
                                    .layer_weights = blocks,
                                    .layer_kv = 16ull << 20,
                                    .other_weights = GIB,
                                    .embd_weights = GIB / 2,
                                    .out_weights = GIB / 2,
                                    .scratch = 256ull << 20,
                                    .n_head_kv = 8,
                                    .n_ctx = 4096};
}

static struct placement_devices devs(int n, const double *gib_each) {
    struct placement_devices d = {.n = n};
    for (int i = 0; i < n; i++) d.avail[i] = (uint64_t)(gib_each[i] * (double)GIB);
    return d;
}

static bool has(const char *s) { return strstr(st_last_error(), s) != NULL; }

static void test_parse(void) {
    enum split_mode m;
    CHECK(!placement_parse_mode("none", &m) && m == SPLIT_MODE_NONE, "none");
    CHECK(!placement_parse_mode("layer", &m) && m == SPLIT_MODE_LAYER, "layer");
    CHECK(!placement_parse_mode("row", &m) && m == SPLIT_MODE_ROW, "row");
    CHECK(placement_parse_mode("Layer", &m) && has("none, layer or row"), "%s", st_last_error());
    CHECK(placement_parse_mode("", &m), "empty mode accepted");
    float s[PLACEMENT_MAX_DEV];
    int n;
    CHECK(!placement_parse_split("3,1", s, &n) && n == 2 && s[0] == 3 && s[1] == 1, "3,1");
    CHECK(!placement_parse_split("0,1e3,0.5", s, &n) && n == 3 && s[1] == 1000 && s[2] == 0.5f, "0,1e3,0.5");
    static const char *bad[] = {"", ",", "1,", ",1", "1,,2", "-1,2", "1,2x", "nan", "inf,1", "0,0", "0"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        CHECK(placement_parse_split(bad[i], s, &n) && has("tensor split"), "'%s' accepted", bad[i]);
    char many[128] = "1";
    for (int i = 1; i <= PLACEMENT_MAX_DEV; i++) strcat(many, ",1");
    CHECK(placement_parse_split(many, s, &n) && has("more than 16"), "%s", st_last_error());
}

static void test_none(void) {
    const struct placement_model m = model32();
    const struct placement_devices d = devs(2, (const double[]){8, 8});
    struct placement p;
    CHECK(!placement_plan(&m, &d, SPLIT_MODE_NONE, NULL, 0, 1, &p), "%s", st_last_error());
    // 32·100 MiB + 32·16 MiB + 256 MiB + 1 GiB
    CHECK(p.need[1] == 32 * (116ull << 20) + (256ull << 20) + GIB && p.need[0] == 0, "need %llu",
          (unsigned long long)p.need[1]);
    CHECK(p.n_used == 1 && p.layer_first[1] == 0 && p.layer_n[1] == 32, "used %d", p.n_used);
    char buf[256];
    placement_describe(&p, buf, sizeof buf);
    CHECK(!strcmp(buf, "GPU 1 (main): blocks 0-31, 4.88 GiB"), "%s", buf);
    // too small: on one GPU nothing else can take it; on two, divide it
    const struct placement_devices one = devs(1, (const double[]){4});
    CHECK(placement_plan(&m, &one, SPLIT_MODE_NONE, NULL, 0, 0, &p) && has("GPU 0 needs 4.88 GiB") &&
              has("has 4.00 GiB") && has("no other GPU") && has("-c"),
          "%s", st_last_error());
    const struct placement_devices two = devs(2, (const double[]){4, 4});
    CHECK(placement_plan(&m, &two, SPLIT_MODE_NONE, NULL, 0, 0, &p) && has("--split-mode layer"), "%s",
          st_last_error());
}

static void test_layer(void) {
    const struct placement_model m = model32();
    struct placement p;
    char buf[256];
    const struct placement_devices d = devs(2, (const double[]){8, 8});
    CHECK(!placement_plan(&m, &d, SPLIT_MODE_LAYER, (const float[]){1, 1}, 2, 0, &p), "%s", st_last_error());
    CHECK(p.layer_first[0] == 0 && p.layer_n[0] == 16 && p.layer_first[1] == 16 && p.layer_n[1] == 16,
          "%d+%d, %d+%d", p.layer_first[0], p.layer_n[0], p.layer_first[1], p.layer_n[1]);
    // the embedding on the first, the output layer on the last
    CHECK(p.need[0] == 16 * (116ull << 20) + (256ull << 20) + GIB / 2 &&
              p.need[1] == 16 * (116ull << 20) + (256ull << 20) + GIB / 2,
          "need %llu %llu", (unsigned long long)p.need[0], (unsigned long long)p.need[1]);
    placement_describe(&p, buf, sizeof buf);
    CHECK(!strcmp(buf, "GPU 0: blocks 0-15, 2.56 GiB; GPU 1: blocks 16-31, 2.56 GiB"), "%s", buf);
    // 3:1, and by free memory when no split is given (6 and 2 GiB: the same 3:1)
    CHECK(!placement_plan(&m, &d, SPLIT_MODE_LAYER, (const float[]){3, 1}, 2, 0, &p) && p.layer_n[0] == 24 &&
              p.layer_n[1] == 8,
          "3:1 gave %d, %d", p.layer_n[0], p.layer_n[1]);
    const struct placement_devices by_free = devs(2, (const double[]){6, 2});
    CHECK(!placement_plan(&m, &by_free, SPLIT_MODE_LAYER, NULL, 0, 0, &p) && p.layer_n[0] == 24 &&
              p.layer_n[1] == 8,
          "by free memory gave %d, %d: %s", p.layer_n[0], p.layer_n[1], st_last_error());
    // every block on GPU 1: the embedding and output go with them (the main GPU holds nothing)
    CHECK(!placement_plan(&m, &d, SPLIT_MODE_LAYER, (const float[]){0, 1}, 2, 0, &p) && p.layer_n[0] == 0 &&
              p.layer_n[1] == 32 && p.n_used == 1 && p.need[0] == 0 &&
              p.need[1] == 32 * (116ull << 20) + (256ull << 20) + GIB,
          "0,1 gave %d, %d", p.layer_n[0], p.layer_n[1]);
    placement_describe(&p, buf, sizeof buf);
    CHECK(!strcmp(buf, "GPU 1: blocks 0-31, 4.88 GiB"), "%s", buf);
    // a split that leaves the last GPU nothing: fewer devices used
    const struct placement_devices three = devs(3, (const double[]){8, 8, 8});
    CHECK(!placement_plan(&m, &three, SPLIT_MODE_LAYER, (const float[]){1, 1}, 2, 0, &p) &&
              p.layer_n[2] == 0 && p.need[2] == 0 && p.n_used == 2,
          "two of three: %d used", p.n_used);
    // rounding: 3 ways over 32 blocks
    CHECK(!placement_plan(&m, &three, SPLIT_MODE_LAYER, (const float[]){1, 1, 1}, 3, 0, &p) &&
              p.layer_n[0] + p.layer_n[1] + p.layer_n[2] == 32 && p.layer_n[0] == 11 && p.layer_n[1] == 10,
          "thirds gave %d, %d, %d", p.layer_n[0], p.layer_n[1], p.layer_n[2]);
    // GPU 1 too small for half: named, with a split by what each has that fits
    const struct placement_devices small1 = devs(2, (const double[]){8, 1.5});
    CHECK(placement_plan(&m, &small1, SPLIT_MODE_LAYER, (const float[]){1, 1}, 2, 0, &p) &&
              has("GPU 1 needs 2.56 GiB") && has("has 1.50 GiB") && has("output layer 0.50 GiB") &&
              has("--tensor-split 91,9"),
          "%s", st_last_error());
    // (room beyond the fixed parts: 8 - 0.75 and 1.5 - 0.75 GiB) and that split fits
    CHECK(!placement_plan(&m, &small1, SPLIT_MODE_LAYER, (const float[]){91, 9}, 2, 0, &p) &&
              p.layer_n[1] == 3,
          "91,9: %s", st_last_error());
    // the two together are too small
    const struct placement_devices small = devs(2, (const double[]){2, 2});
    CHECK(placement_plan(&m, &small, SPLIT_MODE_LAYER, NULL, 0, 0, &p) &&
              has("does not fit these GPUs together") && has("embedding 0.50 GiB"),
          "%s", st_last_error());
}

static void test_row(void) {
    const struct placement_model m = model32();
    const struct placement_devices d = devs(3, (const double[]){8, 8, 8});
    struct placement p;
    CHECK(!placement_plan(&m, &d, SPLIT_MODE_ROW, (const float[]){1, 1}, 2, 0, &p) && p.heads[0] == 4 &&
              p.heads[1] == 4 && p.heads[2] == 0 && p.n_used == 2,
          "1:1 gave %d, %d, %d", p.heads[0], p.heads[1], p.heads[2]);
    CHECK(p.need[1] == 16 * (116ull << 20) + (256ull << 20), "need %llu", (unsigned long long)p.need[1]);
    CHECK(!placement_plan(&m, &d, SPLIT_MODE_ROW, (const float[]){3, 1}, 2, 0, &p) && p.heads[0] == 6 &&
              p.heads[1] == 2,
          "3:1 gave %d, %d", p.heads[0], p.heads[1]);
    // 8 heads three ways: 3, 3, 2 (largest remainders, the lower device first)
    CHECK(!placement_plan(&m, &d, SPLIT_MODE_ROW, NULL, 0, 2, &p) && p.heads[0] == 3 && p.heads[1] == 3 &&
              p.heads[2] == 2,
          "thirds gave %d, %d, %d", p.heads[0], p.heads[1], p.heads[2]);
    char buf[256];
    placement_describe(&p, buf, sizeof buf);
    CHECK(strstr(buf, "GPU 2 (main): 2 KV heads"), "%s", buf);
    struct placement_model no_heads = m;
    no_heads.n_head_kv = 0;
    CHECK(placement_plan(&no_heads, &d, SPLIT_MODE_ROW, NULL, 0, 0, &p) && has("no KV heads"), "%s",
          st_last_error());
}

static void test_bad_requests(void) {
    const struct placement_model m = model32();
    const struct placement_devices d = devs(2, (const double[]){8, 8});
    struct placement p;
    CHECK(placement_plan(&m, &d, SPLIT_MODE_LAYER, NULL, 0, 2, &p) && has("--main-gpu 2") && has("(0 .. 1)"),
          "%s", st_last_error());
    CHECK(placement_plan(&m, &d, SPLIT_MODE_LAYER, (const float[]){1, 1, 1}, 3, 0, &p) &&
              has("names 3 GPUs but 2 are visible"),
          "%s", st_last_error());
    CHECK(placement_plan(&m, &d, SPLIT_MODE_NONE, (const float[]){1, 1}, 2, 0, &p) &&
              has("--split-mode none"),
          "%s", st_last_error());
    const struct placement_devices empty = devs(2, (const double[]){0, 0});
    CHECK(placement_plan(&m, &empty, SPLIT_MODE_LAYER, NULL, 0, 0, &p) && has("no GPU has memory"), "%s",
          st_last_error());
    const struct placement_devices none = {.n = 0};
    CHECK(placement_plan(&m, &none, SPLIT_MODE_LAYER, NULL, 0, 0, &p), "no devices accepted");
}

// A real (synthetic) model's sizes: the blocks and the rest add up to its weight bytes.
static void test_model_sizes(void) {
    char path[] = "/tmp/strata_test_placement_XXXXXX";
    const int fd = mkstemp(path);
    CHECK(fd >= 0, "mkstemp");
    if (fd < 0) return;
    close(fd);
    struct synth_params sp = synth_default_params();
    sp.n_layer = 3;
    struct model *m = NULL;
    CHECK(!synth_write(&sp, path) && !model_load(path, &m), "%s", st_last_error());
    if (m) {
        uint64_t lw[3];
        const struct placement_model pm = placement_model_of(m, 256, GGML_TYPE_F16, 1000, lw);
        CHECK(pm.n_layer == 3 && lw[0] > 0 && lw[0] == lw[1] && lw[1] == lw[2], "blocks %llu %llu %llu",
              (unsigned long long)lw[0], (unsigned long long)lw[1], (unsigned long long)lw[2]);
        CHECK(lw[0] + lw[1] + lw[2] + pm.other_weights == m->weight_bytes && pm.other_weights > 0,
              "%llu + %llu != %llu", (unsigned long long)(lw[0] + lw[1] + lw[2]),
              (unsigned long long)pm.other_weights, (unsigned long long)m->weight_bytes);
        CHECK(pm.embd_weights > 0 && pm.out_weights > 0 &&
                  pm.embd_weights + pm.out_weights ==
                      pm.other_weights + (m->tied_output ? pm.embd_weights : 0),
              "embedding %llu, output %llu, other %llu", (unsigned long long)pm.embd_weights,
              (unsigned long long)pm.out_weights, (unsigned long long)pm.other_weights);
        CHECK(pm.layer_kv * 3 == model_kv_bytes(m, 256, GGML_TYPE_F16) && pm.n_head_kv == m->hp.n_head_kv,
              "kv %llu", (unsigned long long)pm.layer_kv);
        model_free(m);
    }
    unlink(path);
}

int main(void) {
    RUN(test_parse);
    RUN(test_none);
    RUN(test_layer);
    RUN(test_row);
    RUN(test_bad_requests);
    RUN(test_model_sizes);
    TEST_END();
}

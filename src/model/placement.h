// placement.h: where the parts of a model go when it is divided over several
// GPUs (llama.cpp's --split-mode, --tensor-split and --main-gpu): the plan
// and its memory check, with the message that says what does not fit and
// what to do. Pure arithmetic over sizes: no device is touched here.
#ifndef STRATA_PLACEMENT_H
#define STRATA_PLACEMENT_H

#include <stddef.h>
#include <stdint.h>

#include "format/quant.h"
#include "model/model.h"

#define PLACEMENT_MAX_DEV 16

enum split_mode {
    SPLIT_MODE_NONE,  // the whole model on the main device
    SPLIT_MODE_LAYER, // consecutive blocks per device, the activations handed on
    SPLIT_MODE_ROW,   // every block's heads and feed-forward rows divided
};

// "none", "layer" or "row" into *m: 0, or -1 with a message naming the modes.
int placement_parse_mode(const char *s, enum split_mode *m);
// A --tensor-split list "a,b,..." (one non-negative proportion a device, at
// least one above 0, at most PLACEMENT_MAX_DEV) into split[0..*n): 0, or -1
// with a message naming what is wrong.
int placement_parse_split(const char *s, float split[PLACEMENT_MAX_DEV], int *n);

// What the planner places, in bytes.
struct placement_model {
    int n_layer;
    const uint64_t *layer_weights; // [n_layer] each block's weights
    uint64_t layer_kv;             // one block's KV cache (all positions and sequences)
    uint64_t other_weights;        // the embedding, the output and its norm: on the main device (on the
                                   // one device of a layer split that runs every block)
    uint64_t embd_weights;         // layer split over several devices: the embedding, on the first
    uint64_t out_weights;          //   and the output layer (a tied one a copy of the embedding), on the last
    uint64_t scratch;              // the activations' scratch, on every device used
    int n_head_kv;                 // row split: devices take whole KV heads
    int n_ctx;                     // positions of the KV cache (for messages)
};

// The devices, as the backend reports them.
struct placement_devices {
    int n;                             // 1 .. PLACEMENT_MAX_DEV
    uint64_t avail[PLACEMENT_MAX_DEV]; // bytes each may take (free, less its reserve)
};

struct placement {
    enum split_mode mode;
    int n_dev;                          // devices considered (those reported)
    int main_dev;                       // holds the other weights (but in layer mode: see placement_plan)
    double share[PLACEMENT_MAX_DEV];    // the proportions used, summing to 1
    int layer_first[PLACEMENT_MAX_DEV]; // layer mode: the device's blocks first .. first + n - 1
    int layer_n[PLACEMENT_MAX_DEV];     //   (none: all on main_dev)
    int heads[PLACEMENT_MAX_DEV];       // row mode: the KV heads (and their query heads) it takes
    uint64_t need[PLACEMENT_MAX_DEV];   // bytes planned on each
    int n_used;                         // devices with anything on them
};

// The model's sizes for a KV cache of n_ctx positions (all sequences) in
// kv_type and scratch bytes a device; layer_weights (n_layer entries) is the
// caller's array, filled here.
struct placement_model placement_model_of(const struct model *m, int n_ctx, enum ggml_type kv_type,
                                          uint64_t scratch, uint64_t *layer_weights);

// Plans m over d: mode; split[0..n_split) the proportions (n_split 0: by
// each device's avail); main_dev the device of the other weights (and the
// only one in mode none). Layer mode gives device i the blocks from
// round(C(i-1)·n_layer) to round(C(i)·n_layer) - 1, C the running sum of the
// shares, and the embedding to the first device with blocks and the output
// layer to the last (the order a pass runs them in; main_dev then only has to
// exist); row mode gives it round-to-largest-remainder shares of the KV
// heads. Then every device used must hold what it was given. Returns 0 and
// fills *p, or -1 with a message: a bad request (a split naming more devices
// than there are, a main device that is not there, a split with mode none),
// or the device that falls short, by how much and what would fit.
int placement_plan(const struct placement_model *m, const struct placement_devices *d, enum split_mode mode,
                   const float *split, int n_split, int main_dev, struct placement *p);

// One line saying where p puts what ("GPU 0: blocks 0-15, 4.10 GiB; GPU 1: ...").
void placement_describe(const struct placement *p, char *buf, size_t cap);

#endif

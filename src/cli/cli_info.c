// cli_info.c: `strata info MODEL`, a readable dump of a GGUF file's header,
// metadata and tensor table, with long strings and arrays abbreviated.
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#ifdef STRATA_GPU
#include "gpu/gpu.h"
#endif
#include "format/gguf.h"
#include "format/quant.h"
#include "util.h"

#define INFO_STR_MAX 64      // bytes of a string value shown before "..."
#define INFO_ITEM_STR_MAX 24 // the same for strings inside arrays
#define INFO_ARR_MAX 8       // array elements shown before "... (N total)"
#define INFO_NAME_COL_MAX 48 // widest key/name column

static const char info_usage[] =
    "usage: strata info [--help] MODEL\n"
    "       strata info --devices\n"
    "\n"
    "Prints what a GGUF model file holds: its version, counts and alignment; every\n"
    "metadata key with its type and value (long strings and arrays abbreviated,\n"
    "newlines shown as \\n); every tensor with its type, shape (fastest dimension\n"
    "first) and size in bytes; then the total bytes, the parameter count and the\n"
    "number of tensors of each type. The file is fully validated first: a corrupt\n"
    "or truncated file is reported with the field at fault.\n"
    "\n"
    "options:\n"
    "  --devices    list the GPUs this build can use, each with its architecture,\n"
    "               class (validated, unvalidated, unsupported) and what to do\n"
    "  -h, --help   show this help\n";

struct info_opts {
    const char *model;
    bool devices;
};

// Returns 0 to go on, or the exit status to return now (0 after --help, 2 on bad arguments).
static int info_parse_args(int argc, char **argv, struct info_opts *o, int *status) {
    memset(o, 0, sizeof *o);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            fputs(info_usage, stdout);
            *status = 0;
            return 1;
        }
        if (strcmp(a, "--devices") == 0) {
            o->devices = true;
            continue;
        }
        if (a[0] == '-' && a[1] != 0) {
            fprintf(stderr, "strata info: unknown option '%s'; see strata info --help\n", a);
            *status = 2;
            return 1;
        }
        if (o->model) {
            fprintf(stderr, "strata info: one model at a time ('%s' and '%s'); see strata info --help\n",
                    o->model, a);
            *status = 2;
            return 1;
        }
        o->model = a;
    }
    if (o->devices && o->model) {
        fprintf(stderr, "strata info: --devices takes no model; see strata info --help\n");
        *status = 2;
        return 1;
    }
    if (!o->model && !o->devices) {
        fprintf(stderr, "strata info: no model given; usage: strata info [--help] MODEL\n");
        *status = 2;
        return 1;
    }
    return 0;
}

// Lists the GPUs (builds with a GPU backend) and their classes.
static int print_devices(void) {
#ifdef STRATA_GPU
    int n = gpu_device_count();
    printf("GPU backend: %s\n", gpu_platform_name());
    if (n <= 0) {
        printf("no devices: %s\n", st_last_error());
        return 0;
    }
    for (int i = 0; i < n; i++) {
        struct gpu_device_info d;
        if (gpu_device_query(i, &d)) {
            printf("device %d: %s\n", i, st_last_error());
            continue;
        }
        printf("device %d: %s | %s | warp %d | %d SMs | %.1f GiB free of %.1f GiB | code %s | "
               "tensor cores %s | overlapped launches %s | int8 dot %s | %s\n",
               i, d.name, d.arch, d.warp_size, d.n_sm, d.free_bytes / 1073741824.0,
               d.total_bytes / 1073741824.0, d.has_code ? "yes" : "no", d.has_mma ? "yes" : "no",
               d.has_pdl ? "yes" : "no", d.has_dp4a ? "dp4a" : "swar", gpu_policy_name(d.policy));
        if (d.note[0]) printf("  %s\n", d.note);
    }
#else
    printf("GPU backend: none in this build (the CPU backend is always there); build one with "
           "`make GPU=cuda`, `make GPU=hip` or `make GPU=spirv` (docs/BACKENDS.md)\n");
#endif
    return 0;
}

// --- values -----------------------------------------------------------------------

// Prints len bytes of s with C escapes, cut after max bytes on a UTF-8
// character boundary; returns the number of bytes printed.
static uint64_t print_escaped(FILE *out, const char *s, uint64_t len, uint64_t max) {
    uint64_t n = len < max ? len : max;
    if (n < len)
        while (n > 0 && ((unsigned char)s[n] & 0xc0) == 0x80) n--; // don't split a character
    for (uint64_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        switch (c) {
        case '\n':
            fputs("\\n", out);
            break;
        case '\r':
            fputs("\\r", out);
            break;
        case '\t':
            fputs("\\t", out);
            break;
        case '"':
            fputs("\\\"", out);
            break;
        case '\\':
            fputs("\\\\", out);
            break;
        default:
            if (c < 0x20 || c == 0x7f)
                fprintf(out, "\\x%02x", c);
            else
                fputc(c, out);
        }
    }
    return n;
}

static void print_str(FILE *out, const struct gguf_str *s, uint64_t max) {
    fputc('"', out);
    uint64_t shown = print_escaped(out, s->data, s->len, max);
    fputc('"', out);
    if (shown < s->len) fprintf(out, "... (%" PRIu64 " bytes)", s->len);
}

// The shortest of %.{lo..17}g that reads back as x (as a float when is_f32).
static void print_float(FILE *out, double x, int is_f32) {
    char buf[40];
    for (int prec = is_f32 ? 6 : 15; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, x);
        double back = strtod(buf, NULL);
        if (is_f32 ? (float)back == (float)x : back == x) break;
    }
    fputs(buf, out);
}

static void type_name(char *buf, size_t cap, const struct gguf_value *v) {
    if (v->type == GGUF_VTYPE_ARRAY)
        snprintf(buf, cap, "array[%s]", gguf_vtype_name(v->v.arr.type));
    else
        snprintf(buf, cap, "%s", gguf_vtype_name(v->type));
}

static void print_value(FILE *out, const struct gguf_value *v, int depth);

static void print_array(FILE *out, const struct gguf_array *a, int depth) {
    if (depth >= 2 && a->count > 0) { // deeper levels only by size, so output stays small
        fprintf(out, "[%" PRIu64 " x %s]", a->count, gguf_vtype_name(a->type));
        return;
    }
    fputc('[', out);
    uint64_t shown = a->count < INFO_ARR_MAX ? a->count : INFO_ARR_MAX;
    for (uint64_t i = 0; i < shown; i++) {
        if (i) fputs(", ", out);
        if (a->items) {
            if (a->type == GGUF_VTYPE_STRING)
                print_str(out, &a->items[i].v.str, INFO_ITEM_STR_MAX);
            else
                print_value(out, &a->items[i], depth + 1);
        } else if (a->type == GGUF_VTYPE_BOOL) {
            fputs(gguf_array_int(a, i) ? "true" : "false", out);
        } else if (a->type == GGUF_VTYPE_FLOAT32 || a->type == GGUF_VTYPE_FLOAT64) {
            print_float(out, gguf_array_float(a, i), a->type == GGUF_VTYPE_FLOAT32);
        } else if (a->type == GGUF_VTYPE_UINT64) {
            fprintf(out, "%" PRIu64, (uint64_t)gguf_array_int(a, i));
        } else {
            fprintf(out, "%" PRId64, gguf_array_int(a, i));
        }
    }
    if (shown < a->count) fprintf(out, ", ... (%" PRIu64 " total)", a->count);
    fputc(']', out);
}

static void print_value(FILE *out, const struct gguf_value *v, int depth) {
    switch (v->type) {
    case GGUF_VTYPE_UINT8:
    case GGUF_VTYPE_UINT16:
    case GGUF_VTYPE_UINT32:
    case GGUF_VTYPE_UINT64:
        fprintf(out, "%" PRIu64, v->v.u64);
        break;
    case GGUF_VTYPE_INT8:
    case GGUF_VTYPE_INT16:
    case GGUF_VTYPE_INT32:
    case GGUF_VTYPE_INT64:
        fprintf(out, "%" PRId64, v->v.i64);
        break;
    case GGUF_VTYPE_FLOAT32:
    case GGUF_VTYPE_FLOAT64:
        print_float(out, v->v.f64, v->type == GGUF_VTYPE_FLOAT32);
        break;
    case GGUF_VTYPE_BOOL:
        fputs(v->v.u64 ? "true" : "false", out);
        break;
    case GGUF_VTYPE_STRING:
        print_str(out, &v->v.str, INFO_STR_MAX);
        break;
    case GGUF_VTYPE_ARRAY:
        print_array(out, &v->v.arr, depth);
        break;
    case GGUF_VTYPE_COUNT:
        ST_ASSERT(!"the reader admits only defined types");
    }
}

// Prints a key or tensor name escaped and padded to width columns.
static void print_name(FILE *out, const struct gguf_str *s, int width) {
    uint64_t shown = print_escaped(out, s->data, s->len, 256);
    for (uint64_t i = shown; i < (uint64_t)width; i++) fputc(' ', out);
}

static int name_width(const struct gguf_str *s) {
    return s->len > INFO_NAME_COL_MAX ? INFO_NAME_COL_MAX : (int)s->len;
}

// --- the report --------------------------------------------------------------------

static void print_metadata(FILE *out, const struct gguf_file *f) {
    int kw = 0, tw = 0;
    char tname[32];
    for (uint64_t i = 0; i < f->n_kv; i++) {
        int w = name_width(&f->kv[i].key);
        kw = w > kw ? w : kw;
        type_name(tname, sizeof tname, &f->kv[i].value);
        tw = (int)strlen(tname) > tw ? (int)strlen(tname) : tw;
    }
    fprintf(out, "\nmetadata (%" PRIu64 " keys):\n", f->n_kv);
    for (uint64_t i = 0; i < f->n_kv; i++) {
        const struct gguf_kv *kv = &f->kv[i];
        fputs("  ", out);
        print_name(out, &kv->key, kw);
        type_name(tname, sizeof tname, &kv->value);
        fprintf(out, "  %-*s  ", tw, tname);
        print_value(out, &kv->value, 0);
        fputc('\n', out);
    }
}

static void print_tensors(FILE *out, const struct gguf_file *f) {
    int nw = 4;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        int w = name_width(&f->tensors[i].name);
        nw = w > nw ? w : nw;
    }
    char shapes[96];
    fprintf(out, "\ntensors (%" PRIu64 "):\n  %-*s  %-7s  %-24s  %s\n", f->n_tensors, nw, "name", "type",
            "shape", "bytes");
    uint64_t total_bytes = 0, total_params = 0;
    uint64_t count_by_type[GGML_TYPE_COUNT] = {0}, bytes_by_type[GGML_TYPE_COUNT] = {0};
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const struct gguf_tensor *t = &f->tensors[i];
        int n = snprintf(shapes, sizeof shapes, "[");
        for (uint32_t j = 0; j < t->n_dims; j++)
            n += snprintf(shapes + n, sizeof shapes - (size_t)n, "%s%" PRId64, j ? ", " : "", t->ne[j]);
        snprintf(shapes + n, sizeof shapes - (size_t)n, "]");
        fputs("  ", out);
        print_name(out, &t->name, nw);
        fprintf(out, "  %-7s  %-24s  %" PRIu64 "\n", quant_name(t->type), shapes, t->nbytes);
        // the reader bounds every tensor inside the file, so neither sum overflows
        total_bytes += t->nbytes;
        total_params += (uint64_t)(t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]);
        count_by_type[t->type]++;
        bytes_by_type[t->type] += t->nbytes;
    }
    fprintf(out,
            "\ntotal: %" PRIu64 " tensors, %" PRIu64 " bytes (%.2f MiB), %" PRIu64 " parameters (%.2f M)\n",
            f->n_tensors, total_bytes, (double)total_bytes / (1024.0 * 1024.0), total_params,
            (double)total_params / 1e6);
    fputs("by type:\n", out);
    for (;;) { // most common first
        int best = -1;
        for (int t = 0; t < GGML_TYPE_COUNT; t++)
            if (count_by_type[t] && (best < 0 || count_by_type[t] > count_by_type[best])) best = t;
        if (best < 0) break;
        fprintf(out, "  %-7s  %6" PRIu64 " tensor%s  %" PRIu64 " bytes\n", quant_name((enum ggml_type)best),
                count_by_type[best], count_by_type[best] == 1 ? " " : "s", bytes_by_type[best]);
        count_by_type[best] = 0;
    }
}

int cli_info(int argc, char **argv) {
    struct info_opts o;
    int status;
    if (info_parse_args(argc, argv, &o, &status)) return status;
    if (o.devices) return print_devices();
    struct gguf_file *f;
    if (gguf_open(o.model, &f)) {
        fprintf(stderr, "strata info: %s\n", st_last_error());
        return 1;
    }
    FILE *out = stdout;
    fprintf(out, "file:        %s\n", f->path);
    fprintf(out, "size:        %" PRIu64 " bytes\n", f->size);
    fprintf(out, "version:     %u\n", f->version);
    fprintf(out, "tensors:     %" PRIu64 "\n", f->n_tensors);
    fprintf(out, "kv pairs:    %" PRIu64 "\n", f->n_kv);
    fprintf(out, "alignment:   %" PRIu64 "\n", f->alignment);
    fprintf(out, "data offset: %" PRIu64 "\n", f->data_offset);
    print_metadata(out, f);
    print_tensors(out, f);
    gguf_close(f);
    return fflush(out) == 0 ? 0 : 1;
}

// gpu.h: the GPU backend and device layer, for host C. Plain C: it includes no
// GPU header, so any file may include it; the functions exist only in builds
// with a GPU backend (mk/gpu.mk, which defines STRATA_GPU for host code).
//
// One source serves CUDA, HIP on AMD and HIP on SPIR-V; a build targets one of
// them (gpu_platform_name). Errors are st_fail messages (util.h).
#ifndef STRATA_GPU_H
#define STRATA_GPU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"

// --- device layer --------------------------------------------------------------------

enum gpu_vendor { GPU_VENDOR_NVIDIA, GPU_VENDOR_AMD, GPU_VENDOR_SPIRV };

// validated: run-verified by this project; unvalidated: builds, runs with a
// warning; unsupported: refused (note says what to change).
enum gpu_policy { GPU_POLICY_VALIDATED, GPU_POLICY_UNVALIDATED, GPU_POLICY_UNSUPPORTED };

struct gpu_device_info {
    int index;
    char name[256];
    enum gpu_vendor vendor;
    char arch[64]; // "sm_90", "gfx1100", "spirv64"
    int warp_size; // as the device reports it
    int n_sm;      // multiprocessors / compute units
    size_t l2_bytes;
    uint64_t total_bytes, free_bytes;
    bool has_code; // this binary holds kernels the device runs, of its warp size
    bool has_mma;  // and they multiply half-precision tiles on tensor cores (ST_HAS_MMA)
    bool has_pdl;  // and wait for the kernel before them, so launches may overlap (ST_HAS_PDL)
    bool has_dp4a; // and compute dp4a in one instruction (ST_HAS_DP4A); else matrix x vector
                   // products take the SWAR dot product (mmvq.h)
    enum gpu_policy policy;
    char note[320]; // why the policy is what it is, and what to do
};

// "cuda", "hip" or "spirv": the platform this build's kernels target.
const char *gpu_platform_name(void);
// "validated", "unvalidated", "unsupported".
const char *gpu_policy_name(enum gpu_policy p);

// Number of devices this build's runtime sees: ≥ 0, 0 with a message when there
// is no device or no driver (st_last_error says which).
int gpu_device_count(void);

// Describes device index, classifying it and checking (with a probe launch)
// that this binary runs on it. Returns 0, or -1 with a message.
int gpu_device_query(int index, struct gpu_device_info *out);

// The bytes device may take: its free memory less the reserve kept back for
// the runtime, the backend's own scratch and other users (gpu_memory_plan's).
// Returns 0, or -1 with a message.
int gpu_device_avail(int device, uint64_t *avail, uint64_t *reserve);

// Checks, before anything is allocated, that weights, a KV cache of n_ctx
// positions (kv_bytes in all) and scratch fit in device's free memory minus a
// reserve. Returns 0, or -1 with a message naming the bytes needed and free
// and the largest context that fits, or that the weights alone do not.
int gpu_memory_plan(int device, uint64_t weight_bytes, uint64_t kv_bytes, int n_ctx, uint64_t scratch_bytes);

// --- backend -------------------------------------------------------------------------

// Opens device as a backend (struct backend, backend.h) named after the
// platform. Refuses an unsupported device with its note. For an unvalidated
// device it succeeds and writes a warning for the caller to print into warn
// (cap bytes; warn[0] = 0 otherwise; warn may be NULL). Returns NULL with a
// message on failure. One GPU backend per host thread.
struct backend *backend_gpu_init(int device, char *warn, size_t warn_cap);

// Whether decode passes are recorded and replayed as graphs (backend.h's
// graph_begin; on by default, off with STRATA_GPU_GRAPHS=0 in the environment
// or where the runtime cannot record). Forgets the recordings made so far.
void gpu_backend_set_graphs(struct backend *be, bool on);
// How many recorded passes this backend has replayed.
uint64_t gpu_backend_graph_replays(struct backend *be);

// Threads per weight row of the single-token products (matrix × vector): 16,
// 32, 64, 128 or 256, or 0 for the backend's choice per matrix (the default).
// Returns 0, or -1 with a message for another value.
int gpu_backend_set_matvec_split(struct backend *be, int threads_per_row);
// Rows each 32 threads take in the products of 2 to GPU_MATVEC_MAX_BATCH
// tokens: 1, 2 or 4, or 0 for the backend's choice per matrix (the default).
// Set (not 0) while the threads per row are the backend's choice, it also
// puts one-token products of the dp4a form in that form (the rows form).
// Returns 0, or -1 with a message for another value.
int gpu_backend_set_matvec_rows(struct backend *be, int rows_per_warp);
// Tokens a group in the products of 2 to GPU_MATVEC_MAX_BATCH tokens, each
// group reading the weights again with its own blocks: 2, 4 or 8, or 0 for
// the backend's choice per matrix (the default: smaller groups where a matrix
// has too few rows to fill the device). Returns 0, or -1 with a message for
// another value.
int gpu_backend_set_matvec_tokens(struct backend *be, int tokens_per_group);

// Products of more tokens than this run as tiles (mmq.cu); up to it (a
// decode step of many sequences), as one matrix × vector launch (mmvq.cu)
// whose groups of at most 8 tokens each read the weights again, and is still
// the faster at this size.
#define GPU_MATVEC_MAX_BATCH 32

// The form of the quantized products of more than GPU_MATVEC_MAX_BATCH tokens
// (prompt batches) and of prompt runs' attention: 1 the tensor-core tiles (on
// a device without them, their slow twin: for tests), 0 the dp4a tiles and the
// float attention tiles, -1 the backend's choice (the default: tensor cores
// where the device has them, unless STRATA_GPU_TENSOR_CORES=0 in the
// environment). Returns 0, or -1 with a message for another value.
int gpu_backend_set_tensor_cores(struct backend *be, int mode);

// Whether the attention of a run of run_rows rows of one sequence (a prompt
// chunk) with this head_dim takes the tensor-core form now (attention.h's
// gpu_attention_run with mma: queries, softmax weights and a float cache's
// keys and values rounded to halves): under the mode above, with head_dim a
// multiple of 16 and at most 128, and runs long enough for the tiles.
bool gpu_backend_attention_mma(struct backend *be, int run_rows, int head_dim);

// Rows and tokens a block of the tensor-core tiles takes: each 128, 64, or 0
// the backend's choice (the default: the largest tile, 128 × 128 first, that
// leaves no multiprocessor without a block); types whose steps are 128
// columns wide take 64 × 64 whatever is set. Returns 0, or -1 with a message
// for another value.
int gpu_backend_set_tile(struct backend *be, int rows, int tokens);

// The dot product of one-token quantized products: 1 the SWAR form (the same
// results as dp4a, two products a 32-bit multiply; rows wider than the
// shared memory takes still use dp4a), 0 dp4a, -1 the backend's choice (the
// default: SWAR where the device has no dp4a instruction). Returns 0, or -1
// with a message for another value.
int gpu_backend_set_matvec_swar(struct backend *be, int mode);

// *out (a backend buffer of one int32) = argmax of x[0..n) (backend buffer):
// the lowest index of the largest value. Enqueued like the other ops.
void gpu_backend_argmax(struct backend *be, const float *x, int n, int32_t *out);

// --- benchmarks (device events, median of reps after a warm-up) -----------------------

// Read bandwidth (GB/s, 1e9 bytes) of a streaming-read kernel with 16-byte
// loads over a buffer of `bytes`. Returns 0, or -1 with a message.
int gpu_bench_read_bw(struct backend *be, size_t bytes, int reps, double *gbps);

// Half-precision tile products a second (1e12 operations, a multiply and an
// add each) from registers: the prompt products' ceiling (tensor cores where the device
// has them, else the compat layer's twin). Returns 0, or -1 with a message.
int gpu_bench_mma(struct backend *be, int reps, double *tops);

// Seconds of one product y = x · wᵀ (x: n tokens, a backend buffer; weights
// prepared by be, all with the same cols), the core kernel alone (activations
// quantized once beforehand): each timed rep runs ws[0..n_ws) back to back, so
// several copies of a matrix rotate through the cache; launched one by one on
// the stream, or (graph) captured once as a graph and replayed, which shrinks
// the gaps between kernels as a decode step run as a graph would. Returns 0, or -1.
int gpu_bench_matmul(struct backend *be, struct weight *const *ws, int n_ws, const float *x, int n, int reps,
                     bool graph, double *seconds);

#endif

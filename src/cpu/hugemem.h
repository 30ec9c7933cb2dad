// hugemem.h: memory that weights stream from, in 2 MiB pages where the OS
// gives them. Private to src/cpu/.
//
// A matrix × vector product reads its weight once, front to back, at the
// memory's full speed only if the core keeps enough loads in flight. With 4 KiB
// pages every 4 KiB of a stream needs its own address translation, and the
// hardware prefetcher stops at every page boundary; with 2 MiB pages a decode
// step streams its weights markedly faster (docs/PERF.md has the figures).
//
// An arena hands out zeroed, 64-byte aligned blocks from slabs of at least
// HUGEMEM_SLAB bytes, each mapped at a 2 MiB boundary and marked for
// transparent huge pages (Linux's madvise(MADV_HUGEPAGE); a no-op where THP is
// off, and plain aligned memory elsewhere). Blocks are never reused: a slab is
// returned to the OS when its last block is freed, so an arena suits weights,
// which live as long as the model.
#ifndef STRATA_HUGEMEM_H
#define STRATA_HUGEMEM_H

#include <stddef.h>

#define HUGEMEM_SLAB ((size_t)32 << 20)

struct hugemem;

struct hugemem *hugemem_init(void);
// Frees every slab (blocks still handed out become invalid), then the arena.
void hugemem_free_all(struct hugemem *h);
// A zeroed block of bytes (> 0), 64-byte aligned; NULL with a message when the
// memory cannot be mapped.
void *hugemem_alloc(struct hugemem *h, size_t bytes);
// Gives block p (from hugemem_alloc of this arena; NULL is ignored) back.
void hugemem_free(struct hugemem *h, void *p);
// Bytes the arena's slabs map now (0 once every block is freed).
size_t hugemem_mapped(const struct hugemem *h);

// A buffer of bytes for free(): 64-byte aligned, and from HUGEMEM_MIN bytes on
// 2 MiB aligned, marked for huge pages (the KV cache, which attention streams
// like a weight) and faulted in before it is returned, so that its first use
// does not pay for the pages. NULL with a message when there is no memory.
#define HUGEMEM_MIN ((size_t)2 << 20)
void *hugemem_buffer(size_t bytes);

#endif

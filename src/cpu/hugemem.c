// hugemem.c: see hugemem.h.
#include "cpu/hugemem.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "util.h"

#define HUGE_PAGE ((size_t)2 << 20)

struct slab {
    uint8_t *base;
    size_t size, used; // bytes mapped, bytes handed out (bump pointer)
    size_t live;       // blocks handed out and not yet freed
};

struct hugemem {
    struct slab *slabs; // the last one takes new blocks
    size_t n, cap;
};

static size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

// Asks for huge pages over [p, p + size) (p and size multiples of HUGE_PAGE):
// advice only, without THP the pages stay small.
static void advise_huge(void *p, size_t size) {
#ifdef MADV_HUGEPAGE
    madvise(p, size, MADV_HUGEPAGE);
#else
    (void)p, (void)size;
#endif
}

// Faults [p, p + size) in, writable. A buffer's first touch in the middle of a
// request cost a server's first requests up to 1.5 s: the kernel clears
// each page, and for huge pages may first compact memory to find them
// (docs/PERF.md). MADV_POPULATE_WRITE (Linux 5.14) does it without writing;
// elsewhere the pages are written.
static void prefault(void *p, size_t size) {
#ifdef MADV_POPULATE_WRITE
    if (madvise(p, size, MADV_POPULATE_WRITE) == 0) return;
#endif
    memset(p, 0, size);
}

struct hugemem *hugemem_init(void) {
    return st_xcalloc(1, sizeof(struct hugemem));
}

// Maps size bytes (a multiple of HUGE_PAGE) at a HUGE_PAGE boundary: a larger
// mapping trimmed at both ends.
static void *map_aligned(size_t size) {
    const size_t len = size + HUGE_PAGE;
    uint8_t *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
    const size_t head = round_up((uintptr_t)p, HUGE_PAGE) - (uintptr_t)p;
    if (head) munmap(p, head);
    if (HUGE_PAGE - head) munmap(p + head + size, HUGE_PAGE - head);
    p += head;
    advise_huge(p, size);
    return p;
}

void *hugemem_alloc(struct hugemem *h, size_t bytes) {
    ST_ASSERT(bytes > 0);
    if (bytes > SIZE_MAX / 2) {
        st_fail("cannot map %zu bytes for weights", bytes);
        return NULL;
    }
    bytes = round_up(bytes, 64);
    struct slab *s = h->n ? &h->slabs[h->n - 1] : NULL;
    if (!s || s->size - s->used < bytes) {
        const size_t size = round_up(bytes > HUGEMEM_SLAB ? bytes : HUGEMEM_SLAB, HUGE_PAGE);
        uint8_t *base = map_aligned(size);
        if (!base) {
            st_fail("cannot map %zu bytes for weights: %s", size, strerror(errno));
            return NULL;
        }
        if (h->n == h->cap) {
            h->cap = h->cap ? 2 * h->cap : 16;
            struct slab *grown = realloc(h->slabs, h->cap * sizeof *grown);
            ST_ASSERT(grown); // a few slabs per model
            h->slabs = grown;
        }
        s = &h->slabs[h->n++];
        *s = (struct slab){base, size, 0, 0};
    }
    void *p = s->base + s->used;
    s->used += bytes;
    s->live++;
    return p;
}

void hugemem_free(struct hugemem *h, void *p) {
    if (!p) return;
    for (size_t i = 0; i < h->n; i++) {
        struct slab *s = &h->slabs[i];
        if ((uint8_t *)p < s->base || (uint8_t *)p >= s->base + s->used) continue;
        ST_ASSERT(s->live > 0);
        if (--s->live == 0) {
            munmap(s->base, s->size);
            // in order: the last slab is the one that takes new blocks
            memmove(&h->slabs[i], &h->slabs[i + 1], (h->n - i - 1) * sizeof *h->slabs);
            h->n--;
        }
        return;
    }
    ST_ASSERT(!"hugemem_free: a block of another arena");
}

size_t hugemem_mapped(const struct hugemem *h) {
    size_t n = 0;
    for (size_t i = 0; i < h->n; i++) n += h->slabs[i].size;
    return n;
}

void hugemem_free_all(struct hugemem *h) {
    if (!h) return;
    for (size_t i = 0; i < h->n; i++) munmap(h->slabs[i].base, h->slabs[i].size);
    free(h->slabs);
    free(h);
}

void *hugemem_buffer(size_t bytes) {
    const size_t align = bytes >= HUGEMEM_MIN ? HUGE_PAGE : 64;
    void *p = NULL;
    if (bytes > SIZE_MAX / 2 || posix_memalign(&p, align, bytes ? round_up(bytes, align) : 64)) {
        st_fail("cannot allocate %zu bytes of host memory", bytes);
        return NULL;
    }
    if (align == HUGE_PAGE) {
        const size_t n = round_up(bytes, align);
        advise_huge(p, n);
        // The heap may hand back memory a freed chunk left backed by small
        // pages, which stay small: dropped, the first touch faults huge pages.
        madvise(p, n, MADV_DONTNEED);
        prefault(p, n);
    }
    return p;
}

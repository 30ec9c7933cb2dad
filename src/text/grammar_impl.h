// grammar_impl.h: the compiled form of a grammar, shared by the GBNF parser
// (grammar_gbnf.c) and the matcher (grammar.c); not for other modules.
//
// Each rule is a flat array of elements, its alternatives one after another,
// each ended by G_END_ALT; the rule ends with G_END_RULE. An element is a byte
// set (G_BYTES) or a reference to a rule (G_REF). Character classes become
// helper rules whose alternatives are the UTF-8 byte sequences of their code
// points.
#ifndef STRATA_GRAMMAR_IMPL_H
#define STRATA_GRAMMAR_IMPL_H

#include <stdbool.h>
#include <stdint.h>

enum { G_BYTES, G_REF, G_END_ALT, G_END_RULE };

struct gelem {
    int kind;
    int arg; // G_BYTES: set index; G_REF: rule index
};

struct bset {
    uint64_t w[4];
};

static inline bool bset_has(const struct bset *s, unsigned b) { return (s->w[b >> 6] >> (b & 63)) & 1; }
static inline void bset_add_range(struct bset *s, unsigned lo, unsigned hi) {
    for (unsigned b = lo; b <= hi; b++) s->w[b >> 6] |= 1ull << (b & 63);
}

struct grule {
    char *name;
    struct gelem *e; // flat: alternatives, each ended by G_END_ALT, then G_END_RULE
    int n, cap;
    bool defined;
};

struct grammar {
    struct grule *rules;
    int n_rules, cap_rules;
    struct bset *sets;
    int n_sets, cap_sets;
    int root;
};

#endif

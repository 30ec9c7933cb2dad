// grammar_gbnf.c: GBNF text parsed into the compiled form (grammar_impl.h):
// literals become byte sequences, character classes helper rules of UTF-8
// sequences, repetitions helper rules; then undefined rules, a missing root
// and left recursion are refused.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/grammar.h"
#include "text/grammar_impl.h"
#include "util.h"

// --- building ----------------------------------------------------------------

static void rule_push(struct grule *r, int kind, int arg) {
    if (r->n == r->cap) {
        r->cap = r->cap ? 2 * r->cap : 8;
        r->e = realloc(r->e, sizeof *r->e * (size_t)r->cap);
        ST_ASSERT(r->e);
    }
    r->e[r->n++] = (struct gelem){kind, arg};
}

static int rule_add(struct grammar *g, const char *name, size_t len) {
    if (g->n_rules == g->cap_rules) {
        g->cap_rules = g->cap_rules ? 2 * g->cap_rules : 16;
        g->rules = realloc(g->rules, sizeof *g->rules * (size_t)g->cap_rules);
        ST_ASSERT(g->rules);
    }
    struct grule *r = &g->rules[g->n_rules];
    memset(r, 0, sizeof *r);
    r->name = st_xmalloc(len + 1);
    memcpy(r->name, name, len);
    r->name[len] = 0;
    return g->n_rules++;
}

static int rule_find(struct grammar *g, const char *name, size_t len, bool create) {
    for (int i = 0; i < g->n_rules; i++)
        if (strlen(g->rules[i].name) == len && !memcmp(g->rules[i].name, name, len)) return i;
    return create ? rule_add(g, name, len) : -1;
}

// A fresh helper rule named after its parent.
static int rule_helper(struct grammar *g, const char *parent) {
    char name[96];
    snprintf(name, sizeof name, "%.60s-%d", parent, g->n_rules);
    int r = rule_add(g, name, strlen(name));
    g->rules[r].defined = true;
    return r;
}

static int set_add(struct grammar *g, const struct bset *s) {
    for (int i = 0; i < g->n_sets; i++)
        if (!memcmp(&g->sets[i], s, sizeof *s)) return i;
    if (g->n_sets == g->cap_sets) {
        g->cap_sets = g->cap_sets ? 2 * g->cap_sets : 16;
        g->sets = realloc(g->sets, sizeof *g->sets * (size_t)g->cap_sets);
        ST_ASSERT(g->sets);
    }
    g->sets[g->n_sets] = *s;
    return g->n_sets++;
}

static int set_byte(struct grammar *g, unsigned b) {
    struct bset s = {{0}};
    bset_add_range(&s, b, b);
    return set_add(g, &s);
}

void grammar_free(struct grammar *g) {
    if (!g) return;
    for (int i = 0; i < g->n_rules; i++) {
        free(g->rules[i].name);
        free(g->rules[i].e);
    }
    free(g->rules);
    free(g->sets);
    free(g);
}

// --- code points to UTF-8 byte sequences ----------------------------------------

struct cp_range {
    uint32_t lo, hi;
};

static int utf8_encode(uint32_t c, unsigned char *b) {
    if (c < 0x80) return b[0] = (unsigned char)c, 1;
    if (c < 0x800) {
        b[0] = (unsigned char)(0xC0 | (c >> 6));
        b[1] = (unsigned char)(0x80 | (c & 0x3F));
        return 2;
    }
    if (c < 0x10000) {
        b[0] = (unsigned char)(0xE0 | (c >> 12));
        b[1] = (unsigned char)(0x80 | ((c >> 6) & 0x3F));
        b[2] = (unsigned char)(0x80 | (c & 0x3F));
        return 3;
    }
    b[0] = (unsigned char)(0xF0 | (c >> 18));
    b[1] = (unsigned char)(0x80 | ((c >> 12) & 0x3F));
    b[2] = (unsigned char)(0x80 | ((c >> 6) & 0x3F));
    b[3] = (unsigned char)(0x80 | (c & 0x3F));
    return 4;
}

// Adds to rule r one alternative per run of byte ranges that encodes exactly
// the code points lo..hi (no surrogates inside; same encoded length), splitting
// until every byte position is a plain range (the method of RE2 and Rust's
// regex-syntax). One-byte ranges are gathered in *ascii instead.
static void utf8_split(struct grammar *g, int r, uint32_t lo, uint32_t hi, struct bset *ascii) {
    static const uint32_t bounds[] = {0x7F, 0x7FF, 0xFFFF};
    for (int k = 0; k < 3; k++) {
        if (lo <= bounds[k] && hi > bounds[k]) {
            utf8_split(g, r, lo, bounds[k], ascii);
            utf8_split(g, r, bounds[k] + 1, hi, ascii);
            return;
        }
    }
    if (hi < 0x80) {
        bset_add_range(ascii, lo, hi);
        return;
    }
    unsigned char a[4], b[4];
    int n = utf8_encode(lo, a);
    for (int i = 1; i < n; i++) {
        uint32_t m = (1u << (6 * i)) - 1;
        if ((lo & ~m) != (hi & ~m)) {
            if (lo & m) {
                utf8_split(g, r, lo, lo | m, ascii);
                utf8_split(g, r, (lo | m) + 1, hi, ascii);
                return;
            }
            if ((hi & m) != m) {
                utf8_split(g, r, lo, (hi & ~m) - 1, ascii);
                utf8_split(g, r, hi & ~m, hi, ascii);
                return;
            }
        }
    }
    utf8_encode(hi, b);
    struct grule *rule = &g->rules[r];
    for (int i = 0; i < n; i++) {
        struct bset s = {{0}};
        bset_add_range(&s, a[i], b[i]);
        rule_push(rule, G_BYTES, set_add(g, &s));
        rule = &g->rules[r]; // set_add does not move rules, but keep it plain
    }
    rule_push(&g->rules[r], G_END_ALT, 0);
}

static int cp_cmp(const void *a, const void *b) {
    const struct cp_range *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

// A helper rule matching one code point of the ranges (negated: any other).
static int class_rule(struct grammar *g, const char *parent, struct cp_range *rg, int n, bool negate) {
    qsort(rg, (size_t)n, sizeof *rg, cp_cmp);
    struct cp_range merged[n + 2], out[2 * n + 4];
    int m = 0, k = 0;
    for (int i = 0; i < n; i++) {
        if (m && rg[i].lo <= merged[m - 1].hi + 1) {
            if (rg[i].hi > merged[m - 1].hi) merged[m - 1].hi = rg[i].hi;
        } else {
            merged[m++] = rg[i];
        }
    }
    if (negate) {
        uint32_t next = 0;
        for (int i = 0; i < m; i++) {
            if (merged[i].lo > next) out[k++] = (struct cp_range){next, merged[i].lo - 1};
            next = merged[i].hi + 1;
        }
        if (next <= 0x10FFFF) out[k++] = (struct cp_range){next, 0x10FFFF};
    } else {
        memcpy(out, merged, sizeof *out * (size_t)m);
        k = m;
    }
    int r = rule_helper(g, parent);
    struct bset ascii = {{0}};
    for (int i = 0; i < k; i++) { // without the surrogates, which UTF-8 cannot hold
        uint32_t lo = out[i].lo, hi = out[i].hi > 0x10FFFF ? 0x10FFFF : out[i].hi;
        if (lo <= 0xD7FF) utf8_split(g, r, lo, hi < 0xD7FF ? hi : 0xD7FF, &ascii);
        if (hi >= 0xE000) utf8_split(g, r, lo > 0xE000 ? lo : 0xE000, hi, &ascii);
    }
    if (ascii.w[0] | ascii.w[1]) {
        rule_push(&g->rules[r], G_BYTES, set_add(g, &ascii));
        rule_push(&g->rules[r], G_END_ALT, 0);
    }
    if (g->rules[r].n == 0) return -1; // an empty class matches nothing
    rule_push(&g->rules[r], G_END_RULE, 0);
    return r;
}

// --- the GBNF parser ------------------------------------------------------------

struct parser {
    struct grammar *g;
    const char *src, *p;
    char err[200];
};

static int perr(struct parser *ps, const char *what) {
    if (ps->err[0]) return -1;
    int line = 1;
    for (const char *q = ps->src; q < ps->p && *q; q++) line += *q == '\n';
    snprintf(ps->err, sizeof ps->err, "grammar line %d: %s", line, what);
    return -1;
}

// Skips spaces and comments; newlines too when nl.
static void skip_space(struct parser *ps, bool nl) {
    for (;;) {
        char c = *ps->p;
        if (c == ' ' || c == '\t' || c == '\r' || (nl && c == '\n')) {
            ps->p++;
        } else if (c == '#') {
            while (*ps->p && *ps->p != '\n') ps->p++;
        } else {
            return;
        }
    }
}

static bool is_name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

static int hex_value(struct parser *ps, int digits, uint32_t *out) {
    uint32_t v = 0;
    for (int i = 0; i < digits; i++) {
        char c = *ps->p++;
        int d = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (d < 0) return perr(ps, "a \\x, \\u or \\U escape needs hexadecimal digits");
        v = v * 16 + (uint32_t)d;
    }
    *out = v;
    return 0;
}

// One character of a literal or class (escapes decoded) as a code point.
static int parse_char(struct parser *ps, uint32_t *out) {
    const unsigned char *u = (const unsigned char *)ps->p;
    if (!*u) return perr(ps, "unexpected end of the grammar inside a literal or class");
    if (*u == '\\') {
        ps->p++;
        char c = *ps->p++;
        switch (c) {
        case 'n':
            *out = '\n';
            return 0;
        case 'r':
            *out = '\r';
            return 0;
        case 't':
            *out = '\t';
            return 0;
        case '\\':
        case '"':
        case '[':
        case ']':
        case '-':
        case '^':
            *out = (uint32_t)c;
            return 0;
        case 'x':
            return hex_value(ps, 2, out);
        case 'u':
            return hex_value(ps, 4, out);
        case 'U':
            return hex_value(ps, 8, out);
        default:
            ps->p--;
            return perr(ps, "unknown escape in a literal or class");
        }
    }
    int n = *u < 0x80 ? 1 : *u >= 0xF0 ? 4 : *u >= 0xE0 ? 3 : *u >= 0xC0 ? 2 : 0;
    if (!n) return perr(ps, "the grammar text is not valid UTF-8");
    uint32_t v = n == 1 ? *u : *u & (0xFF >> (n + 1));
    for (int i = 1; i < n; i++) {
        if ((u[i] & 0xC0) != 0x80) return perr(ps, "the grammar text is not valid UTF-8");
        v = (v << 6) | (u[i] & 0x3F);
    }
    ps->p += n;
    *out = v;
    return 0;
}

static int parse_alternates(struct parser *ps, int rule, const char *name, bool nested);

// Appends e (count times) to rule r.
static void push_elem(struct grammar *g, int r, struct gelem e) { rule_push(&g->rules[r], e.kind, e.arg); }

// A rule `h ::= x h-rest | ε`-style helper for x{min,max} (max < 0: unbounded),
// returned as the element to use in place of x repeated.
static struct gelem repeat(struct grammar *g, const char *name, struct gelem x, int min, int max) {
    int r = rule_helper(g, name);
    for (int i = 0; i < min; i++) push_elem(g, r, x);
    if (max < 0) { // then x*: star ::= x star | ε
        int star = rule_helper(g, name);
        push_elem(g, star, x);
        push_elem(g, star, (struct gelem){G_REF, star});
        rule_push(&g->rules[star], G_END_ALT, 0);
        rule_push(&g->rules[star], G_END_ALT, 0);
        rule_push(&g->rules[star], G_END_RULE, 0);
        push_elem(g, r, (struct gelem){G_REF, star});
    } else if (max > min) { // then (x (x ...)?)? nested max - min deep
        int inner = -1;
        for (int k = 0; k < max - min; k++) {
            int opt = rule_helper(g, name);
            push_elem(g, opt, x);
            if (inner >= 0) push_elem(g, opt, (struct gelem){G_REF, inner});
            rule_push(&g->rules[opt], G_END_ALT, 0);
            rule_push(&g->rules[opt], G_END_ALT, 0);
            rule_push(&g->rules[opt], G_END_RULE, 0);
            inner = opt;
        }
        push_elem(g, r, (struct gelem){G_REF, inner});
    }
    rule_push(&g->rules[r], G_END_ALT, 0);
    rule_push(&g->rules[r], G_END_RULE, 0);
    return (struct gelem){G_REF, r};
}

static int parse_int(struct parser *ps, int *out) {
    if (*ps->p < '0' || *ps->p > '9') return perr(ps, "a number is expected in {m,n}");
    long v = 0;
    while (*ps->p >= '0' && *ps->p <= '9') {
        v = v * 10 + (*ps->p++ - '0');
        if (v > 10000) return perr(ps, "a repetition count above 10000");
    }
    *out = (int)v;
    return 0;
}

// One sequence of items into rule r (the alternative is left open).
static int parse_sequence(struct parser *ps, int r, const char *name, bool nested) {
    struct grammar *g = ps->g;
    int last_start = -1; // index in rule r where the last item's elements begin
    for (;;) {
        skip_space(ps, nested);
        const char c = *ps->p;
        int start = g->rules[r].n;
        if (c == '"') {
            ps->p++;
            while (*ps->p != '"') {
                uint32_t cp;
                if (parse_char(ps, &cp)) return -1;
                unsigned char b[4];
                int n = utf8_encode(cp, b);
                for (int i = 0; i < n; i++) rule_push(&g->rules[r], G_BYTES, set_byte(g, b[i]));
            }
            ps->p++;
            // a literal of several bytes repeats as a whole: wrap it
            if (g->rules[r].n - start > 1) {
                int h = rule_helper(g, name);
                for (int i = start; i < g->rules[r].n; i++) push_elem(g, h, g->rules[r].e[i]);
                rule_push(&g->rules[h], G_END_ALT, 0);
                rule_push(&g->rules[h], G_END_RULE, 0);
                g->rules[r].n = start;
                rule_push(&g->rules[r], G_REF, h);
            } else if (g->rules[r].n == start) { // "": nothing to match
                last_start = -1;
                continue;
            }
        } else if (c == '[' || c == '.') {
            struct cp_range rg[256];
            int n = 0;
            bool negate = false;
            if (c == '.') {
                ps->p++;
                rg[n++] = (struct cp_range){0, 0x10FFFF};
            } else {
                ps->p++;
                if (*ps->p == '^') negate = true, ps->p++;
                while (*ps->p != ']') {
                    if (n == 256) return perr(ps, "a character class with more than 256 ranges");
                    uint32_t lo, hi;
                    if (parse_char(ps, &lo)) return -1;
                    hi = lo;
                    if (ps->p[0] == '-' && ps->p[1] != ']') {
                        ps->p++;
                        if (parse_char(ps, &hi)) return -1;
                        if (hi < lo) return perr(ps, "a character range whose end is below its start");
                    }
                    if (hi > 0x10FFFF) return perr(ps, "a code point above U+10FFFF");
                    rg[n++] = (struct cp_range){lo, hi};
                }
                ps->p++;
            }
            int h = class_rule(g, name, rg, n, negate);
            if (h < 0) return perr(ps, "a character class that matches no character");
            // a class of single bytes is one element
            const struct grule *hr = &g->rules[h];
            if (hr->n == 3 && hr->e[0].kind == G_BYTES)
                rule_push(&g->rules[r], G_BYTES, hr->e[0].arg);
            else
                rule_push(&g->rules[r], G_REF, h);
        } else if (c == '(') {
            ps->p++;
            int h = rule_helper(g, name);
            if (parse_alternates(ps, h, name, true)) return -1;
            skip_space(ps, true);
            if (*ps->p != ')') return perr(ps, "a '(' without its ')'");
            ps->p++;
            rule_push(&g->rules[r], G_REF, h);
        } else if (is_name_char(c)) {
            const char *s = ps->p;
            while (is_name_char(*ps->p)) ps->p++;
            const char *e = ps->p;
            skip_space(ps, nested);
            if (ps->p[0] == ':' && ps->p[1] == ':' && ps->p[2] == '=') { // the next rule
                ps->p = s;
                return 0;
            }
            ps->p = e;
            const int ref = rule_find(g, s, (size_t)(e - s), true); // may move g->rules
            rule_push(&g->rules[r], G_REF, ref);
        } else if (c == '*' || c == '+' || c == '?' || c == '{') {
            if (last_start < 0 || g->rules[r].n - last_start != 1)
                return perr(ps, "a repetition operator with nothing before it");
            struct gelem x = g->rules[r].e[last_start];
            int min = 0, max = -1;
            ps->p++;
            if (c == '+')
                min = 1;
            else if (c == '?')
                max = 1;
            else if (c == '{') {
                skip_space(ps, false);
                if (parse_int(ps, &min)) return -1;
                skip_space(ps, false);
                if (*ps->p == '}') {
                    max = min;
                } else {
                    if (*ps->p != ',') return perr(ps, "'{m,n}' needs a ',' or '}'");
                    ps->p++;
                    skip_space(ps, false);
                    if (*ps->p != '}' && parse_int(ps, &max)) return -1;
                    if (max >= 0 && max < min) return perr(ps, "'{m,n}' with n below m");
                    skip_space(ps, false);
                }
                if (*ps->p != '}') return perr(ps, "'{m,n}' needs its '}'");
                ps->p++;
            }
            g->rules[r].n = last_start;
            const int rep = repeat(g, name, x, min, max).arg; // adds rules: g->rules may move
            rule_push(&g->rules[r], G_REF, rep);
            last_start = -1;
            continue;
        } else {
            return 0; // '|', ')', a newline or the end
        }
        last_start = start;
    }
}

static int parse_alternates(struct parser *ps, int r, const char *name, bool nested) {
    for (;;) {
        if (parse_sequence(ps, r, name, nested)) return -1;
        rule_push(&ps->g->rules[r], G_END_ALT, 0);
        skip_space(ps, nested);
        if (*ps->p != '|') break;
        ps->p++;
        skip_space(ps, true);
    }
    rule_push(&ps->g->rules[r], G_END_RULE, 0);
    return 0;
}

// Marks the rules that can match the empty text.
static void nullable_rules(const struct grammar *g, bool *nullable) {
    memset(nullable, 0, sizeof *nullable * (size_t)g->n_rules);
    for (bool changed = true; changed;) {
        changed = false;
        for (int r = 0; r < g->n_rules; r++) {
            if (nullable[r]) continue;
            bool alt_ok = true;
            for (const struct gelem *e = g->rules[r].e; e->kind != G_END_RULE; e++) {
                if (e->kind == G_END_ALT) {
                    if (alt_ok) {
                        nullable[r] = changed = true;
                        break;
                    }
                    alt_ok = true;
                } else if (e->kind == G_BYTES || !nullable[e->arg]) {
                    alt_ok = false;
                }
            }
        }
    }
}

// Finds left recursion: a rule that can reach itself without matching a byte.
static int left_recursion(const struct grammar *g, const bool *nullable, int r, int *mark, int *cycle) {
    if (mark[r] == 1) return *cycle = r, 1;
    if (mark[r] == 2) return 0;
    mark[r] = 1;
    bool at_start = true;
    for (const struct gelem *e = g->rules[r].e; e->kind != G_END_RULE; e++) {
        if (e->kind == G_END_ALT) {
            at_start = true;
        } else if (at_start) {
            if (e->kind == G_REF && left_recursion(g, nullable, e->arg, mark, cycle)) return 1;
            at_start = e->kind == G_REF && nullable[e->arg];
        }
    }
    mark[r] = 2;
    return 0;
}

int grammar_parse(const char *text, struct grammar **out) {
    *out = NULL;
    if (!text) return st_fail("grammar: no text");
    struct grammar *g = st_xcalloc(1, sizeof *g);
    struct parser ps = {.g = g, .src = text, .p = text};
    for (;;) {
        skip_space(&ps, true);
        if (!*ps.p) break;
        const char *s = ps.p;
        while (is_name_char(*ps.p)) ps.p++;
        if (ps.p == s) {
            perr(&ps, "a rule name is expected at the start of a rule");
            break;
        }
        char name[96];
        snprintf(name, sizeof name, "%.*s", (int)(ps.p - s), s);
        int r = rule_find(g, s, (size_t)(ps.p - s), true);
        if (g->rules[r].defined) {
            perr(&ps, "a rule is defined twice");
            break;
        }
        g->rules[r].defined = true;
        skip_space(&ps, false);
        if (strncmp(ps.p, "::=", 3)) {
            perr(&ps, "'::=' is expected after the rule name");
            break;
        }
        ps.p += 3;
        if (parse_alternates(&ps, r, name, false)) break;
        skip_space(&ps, false);
        if (*ps.p && *ps.p != '\n') {
            perr(&ps, *ps.p == ')' ? "a ')' without its '('" : "unexpected text after a rule");
            break;
        }
    }
    if (!ps.err[0]) {
        for (int r = 0; r < g->n_rules; r++) {
            if (!g->rules[r].defined) {
                snprintf(ps.err, sizeof ps.err, "grammar: the rule '%.60s' is used but not defined",
                         g->rules[r].name);
                break;
            }
        }
    }
    g->root = rule_find(g, "root", 4, false);
    if (!ps.err[0] && g->root < 0) snprintf(ps.err, sizeof ps.err, "grammar: there is no 'root' rule");
    if (!ps.err[0]) {
        bool *nullable = st_xcalloc((size_t)g->n_rules, sizeof *nullable);
        int *mark = st_xcalloc((size_t)g->n_rules, sizeof *mark), cycle = -1;
        nullable_rules(g, nullable);
        for (int r = 0; r < g->n_rules && cycle < 0; r++)
            if (left_recursion(g, nullable, r, mark, &cycle)) break;
        if (cycle >= 0)
            snprintf(ps.err, sizeof ps.err,
                     "grammar: the rule '%.60s' is left-recursive (it can reach itself before "
                     "matching a character); rewrite it with repetition",
                     g->rules[cycle].name);
        free(nullable);
        free(mark);
    }
    if (ps.err[0]) {
        grammar_free(g);
        return st_fail("%s", ps.err);
    }
    *out = g;
    return 0;
}

// cli_chat.c: `strata chat` — an interactive chat in the terminal.
//
// The whole conversation is rendered with the model's chat template at every
// turn; context_eval keeps the longest prefix the cache already holds, so a
// follow-up only reads the new turn. On a terminal the prompt is libedit's
// line editor (emacs keys, history with the arrows); Ctrl-C there clears the
// line (the editor takes it as a key: the terminal's signal character is off
// while editing), Ctrl-D on an empty line or /quit leaves. Ctrl-C during an
// answer (SIGINT) stops it before the next token is written. /set changes the
// sampling options between answers. With stdin not a terminal, each line is a
// message and only answers are written to stdout.
//
// SIGINT is blocked except while an answer is generated and while waiting for
// piped input inside ppoll, which unblocks it atomically: a Ctrl-C can then
// never fall between a check of the flag and a blocking read. It is blocked
// before the backend starts its threads, so they inherit the block and the
// signal always comes to this thread.
#include <errno.h>
#include <histedit.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "text/chat.h"
#include "cli/cli_args.h"
#include "cli/commands.h"
#include "model/forward.h"
#include "model/generate.h"
#include "model/model.h"
#include "server/server_text.h"
#include "util.h"

static const char chat_help[] =
    "usage: strata chat -m MODEL [options]\n"
    "\n"
    "Talks with the model in the terminal. The conversation is kept, so a follow-up\n"
    "only costs its own tokens. Type a message and press Enter; answers stream out.\n"
    "\n"
    "  /reset                 start a new conversation (the system message stays)\n"
    "  /set                   show the sampling options; /set NAME VALUE changes one:\n"
    "                         temp, top-k, top-p, min-p, repeat-penalty, repeat-last-n,\n"
    "                         seed, n-predict (e.g. /set temp 0.7)\n"
    "  /quit                  leave (so does Ctrl-D on an empty line)\n"
    "  Ctrl-C                 at the prompt: clear the line; during an answer: stop it\n"
    "  Up, Down               earlier lines (history); the usual emacs editing keys\n"
    "  //TEXT                 send a message that starts with '/'\n"
    "\n"
    "      --system TEXT      a system message at the start of the conversation\n"
    "      --template NAME    use this template family instead of the model's\n"
    "                         (chatml, qwen2.5, qwen3, phi3, phi4, llama2, llama3, llama3.1,\n"
    "                         gemma2, gemma3, mistral-legacy, mistral-v1, mistral-v3,\n"
    "                         mistral-v3-tekken, mistral-v7-tekken)\n"
    "      --no-think         ask a thinking template (qwen3) to answer without thinking\n"
    "                         (enable_thinking=false); thinking is its default\n"
    "  -n, --n-predict N      most tokens per answer; -1 = until the model stops (default: -1)\n"
    "  -h, --help             this help\n"
    "\n"
    "When the conversation outgrows the context, its oldest turns are dropped.\n"
    "Statistics of each answer go to stderr.\n"
    "\n"
    "Model options:\n";

static volatile sig_atomic_t interrupted;

// Drops a SIGINT that came while it was blocked, between answers: a Ctrl-C
// typed as the prompt appears, before the line editor has taken the terminal,
// is a signal rather than the editor's clear-line key (the terminal has
// already dropped the typed line). Left pending it would stop the next answer
// before its first token, or end the program when /quit restores the handler.
static void drop_pending_sigint(const sigset_t *sigint) {
    const struct timespec zero = {0, 0};
    while (sigtimedwait(sigint, NULL, &zero) > 0) {}
}

static void on_sigint(int sig) {
    (void)sig;
    interrupted = 1;
}

// Lines from stdin, read with read(2) so that the wait for input can be a ppoll.
struct line_reader {
    char buf[4096];
    size_t start, end; // buf[start..end) is read but not yet returned
    bool eof;
};

// Reads the next line (without its newline) into out. Returns 1 for a line, 0
// at the end of input, -1 when SIGINT came while waiting (wait_mask is the
// signal mask to wait with: SIGINT unblocked).
static int read_line(struct line_reader *r, struct sbuf *out, const sigset_t *wait_mask) {
    out->len = 0;
    sbuf_append(out, "", 0);
    for (;;) {
        const char *p = r->buf + r->start;
        const char *nl = memchr(p, '\n', r->end - r->start);
        if (nl) {
            sbuf_append(out, p, (size_t)(nl - p));
            r->start += (size_t)(nl - p) + 1;
            return 1;
        }
        sbuf_append(out, p, r->end - r->start);
        r->start = r->end = 0;
        if (r->eof) return out->len ? 1 : 0;
        struct pollfd pfd = {.fd = STDIN_FILENO, .events = POLLIN};
        interrupted = 0;
        if (ppoll(&pfd, 1, NULL, wait_mask) < 0) {
            if (errno != EINTR) return 0;
            if (interrupted) return -1;
            continue;
        }
        ssize_t n = read(STDIN_FILENO, r->buf, sizeof r->buf);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0)
            r->eof = true;
        else
            r->end = (size_t)n;
    }
}

struct conversation {
    struct chat_message *msgs; // [n] contents malloc'd (roles are literals)
    int n, cap;
};

static void conv_push(struct conversation *c, const char *role, const char *content, size_t len) {
    if (c->n == c->cap) {
        c->cap = c->cap ? 2 * c->cap : 16;
        c->msgs = realloc(c->msgs, sizeof *c->msgs * (size_t)c->cap);
        ST_ASSERT(c->msgs);
    }
    char *copy = st_xmalloc(len + 1);
    memcpy(copy, content, len);
    copy[len] = 0;
    c->msgs[c->n++] = (struct chat_message){role, copy};
}

// Removes messages [from, from + count).
static void conv_remove(struct conversation *c, int from, int count) {
    if (count == 0) return; // msgs may still be NULL, and NULL + 0 is undefined in C
    for (int i = from; i < from + count; i++) free((char *)c->msgs[i].content);
    memmove(c->msgs + from, c->msgs + from + count, sizeof *c->msgs * (size_t)(c->n - from - count));
    c->n -= count;
}

static void conv_free(struct conversation *c) {
    conv_remove(c, 0, c->n);
    free(c->msgs);
}

// Streams a piece of the answer to stdout and keeps it (user: struct sbuf).
static int on_token(void *user, int32_t id, const char *piece, size_t len) {
    (void)id;
    if (interrupted) return 1; // Ctrl-C came during the forward pass: not one more token
    fwrite(piece, 1, len, stdout);
    fflush(stdout);
    sbuf_append(user, piece, len);
    return interrupted;
}

// Tokenizes the conversation so that it leaves `reserve` positions for the
// answer, dropping the oldest exchanges (after a system message) while it does
// not. Returns the number of tokens (*ids malloc'd), or -1 with a message
// when even the latest message alone does not fit.
static int fit_conversation(const struct model *m, const struct chat_format *fmt, struct conversation *c,
                            int first, int n_ctx, int reserve, int32_t **ids) {
    bool dropped = false;
    for (;;) {
        int n = session_chat_tokens(m, fmt, c->msgs, c->n, true, ids);
        if (n < 0) return -1;
        if (n + reserve <= n_ctx || (n < n_ctx && c->n - first <= 1)) {
            if (dropped) fprintf(stderr, "[the conversation outgrew the context: older turns dropped]\n");
            return n;
        }
        free(*ids);
        *ids = NULL;
        if (c->n - first <= 1)
            return st_fail("the message has %d tokens with the template but the context holds "
                           "%d; shorten it or use a larger -c",
                           n, n_ctx);
        conv_remove(c, first, c->n - first >= 3 ? 2 : 1); // the oldest user + assistant pair
        dropped = true;
    }
}

// --- the line editor (libedit) -------------------------------------------------------

static char *editor_prompt(EditLine *e) {
    (void)e;
    return (char *)"> ";
}

struct editor {
    EditLine *el;
    History *hist;
};

static int editor_open(struct editor *ed, const char *prog) {
    HistEvent ev;
    if (!(ed->el = el_init(prog, stdin, stdout, stderr))) return st_fail("cannot start the line editor");
    ed->hist = history_init();
    history(ed->hist, &ev, H_SETSIZE, 1000);
    history(ed->hist, &ev, H_SETUNIQUE, 1);
    el_set(ed->el, EL_EDITOR, "emacs");
    el_set(ed->el, EL_PROMPT, editor_prompt);
    el_set(ed->el, EL_HIST, history, ed->hist);
    el_set(ed->el, EL_SIGNAL, 1); // the terminal is restored if a signal ends the program
    // Ctrl-C at the prompt clears the line: libedit's own em-kill-line (a
    // function added with EL_ADDFN would leak its name and help in el_end)
    el_set(ed->el, EL_BIND, "^C", "em-kill-line", NULL);
    const char *setty[] = {"setty", "-d", "-isig", NULL}; // ^C is a key while editing
    el_parse(ed->el, 3, setty);
    return 0;
}

static void editor_close(struct editor *ed) {
    if (ed->el) el_end(ed->el);
    if (ed->hist) history_end(ed->hist);
}

// Reads a line into out (no newline). Returns 1, or 0 at EOF (Ctrl-D).
static int editor_line(struct editor *ed, struct sbuf *out) {
    int n = 0;
    const char *line = el_gets(ed->el, &n);
    if (!line || n <= 0) return 0;
    out->len = 0;
    sbuf_append(out, line, (size_t)n);
    while (out->len && (out->p[out->len - 1] == '\n' || out->p[out->len - 1] == '\r')) out->p[--out->len] = 0;
    if (out->len) {
        HistEvent ev;
        history(ed->hist, &ev, H_ENTER, out->p);
    }
    return 1;
}

// /set NAME VALUE (or /set alone: the current values). Returns 1 when the
// sampler must be made again.
static int chat_set(const char *args, struct sampler_params *sp, long long *n_predict) {
    char name[32] = "", value[64] = "";
    int got = sscanf(args, "%31s %63s", name, value);
    if (got <= 0) {
        fprintf(stderr,
                "[temp %g, top-k %d, top-p %g, min-p %g, repeat-penalty %g, repeat-last-n %d, "
                "seed %llu, n-predict %lld]\n",
                (double)sp->temperature, sp->top_k, (double)sp->top_p, (double)sp->min_p,
                (double)sp->repeat_penalty, sp->repeat_last_n, (unsigned long long)sp->seed, *n_predict);
        return 0;
    }
    struct sampler_params p = *sp;
    double f;
    long long n;
    int rc = 0;
    if (got < 2)
        rc = st_fail("/set %s needs a value", name);
    else if (!strcmp(name, "temp") || !strcmp(name, "temperature"))
        rc = cli_parse_float(name, value, 0, 1e6, &f) ? -1 : (p.temperature = (float)f, 0);
    else if (!strcmp(name, "top-k"))
        rc = cli_parse_int(name, value, 0, 1 << 30, &n) ? -1 : (p.top_k = (int)n, 0);
    else if (!strcmp(name, "top-p"))
        rc = cli_parse_float(name, value, 1e-9, 1, &f) ? -1 : (p.top_p = (float)f, 0);
    else if (!strcmp(name, "min-p"))
        rc = cli_parse_float(name, value, 0, 1, &f) ? -1 : (p.min_p = (float)f, 0);
    else if (!strcmp(name, "repeat-penalty"))
        rc = cli_parse_float(name, value, 1e-3, 1e3, &f) ? -1 : (p.repeat_penalty = (float)f, 0);
    else if (!strcmp(name, "repeat-last-n"))
        rc = cli_parse_int(name, value, 0, 1 << 24, &n) ? -1 : (p.repeat_last_n = (int)n, 0);
    else if (!strcmp(name, "seed"))
        rc = cli_parse_int(name, value, -1, (long long)1 << 62, &n) ? -1
             : n == -1 ? (p.seed = sampler_default_params().seed, 0) // -1: from the clock
                       : (p.seed = (uint64_t)n, 0);
    else if (!strcmp(name, "n-predict")) {
        rc = cli_parse_int(name, value, -1, 1 << 30, &n);
        if (!rc && n == 0) rc = st_fail("n-predict 0 would give empty answers; use -1 or a count");
        if (!rc) *n_predict = n;
    } else
        rc = st_fail("/set: unknown option '%s' (temp, top-k, top-p, min-p, repeat-penalty, "
                     "repeat-last-n, seed, n-predict)",
                     name);
    if (rc || sampler_params_check(&p)) {
        fprintf(stderr, "[%s]\n", st_last_error());
        return 0;
    }
    *sp = p;
    fprintf(stderr, "[%s = %s]\n", name, value);
    return 1;
}

int cli_chat(int argc, char **argv) {
    struct cli_model_opts o;
    cli_model_opts_default(&o);
    o.s.progress = true; // a bar on a terminal while a large model is read in
    const char *system = NULL, *template_name = NULL;
    long long n_predict = -1;
    bool no_think = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int rc = cli_model_opt(&o, argc, argv, &i);
        if (rc < 0) goto usage_error;
        if (rc > 0) continue;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            printf("%s%s", chat_help, cli_model_opts_help);
            return 0;
        } else if (!strcmp(a, "--system")) {
            if (!(system = cli_value(argc, argv, &i))) goto usage_error;
        } else if (!strcmp(a, "--template")) {
            if (!(template_name = cli_value(argc, argv, &i))) goto usage_error;
        } else if (!strcmp(a, "--no-think")) {
            no_think = true;
        } else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) {
            const char *v = cli_value(argc, argv, &i);
            if (!v || cli_parse_int(a, v, -1, 1 << 30, &n_predict)) goto usage_error;
            if (n_predict == 0) {
                st_fail("%s: 0 would give empty answers; use -1 or a positive count", a);
                goto usage_error;
            }
        } else {
            st_fail("unknown option '%s'", a);
            goto usage_error;
        }
    }
    if (!o.s.model) {
        st_fail("no model given: use -m FILE");
        goto usage_error;
    }
    if (sampler_params_check(&o.sp)) goto usage_error;

    int status = 1;
    struct session ss = {0};
    struct model *m = NULL;
    struct context *ctx = NULL;
    struct sampler *smp = NULL;
    struct conversation conv = {0};
    struct chat_format fmt;
    struct line_reader reader = {0};
    struct sbuf line_buf = {0};
    struct editor ed = {0};
    sigset_t sigint, wait_mask, old_mask;
    sigemptyset(&sigint);
    sigaddset(&sigint, SIGINT);
    pthread_sigmask(SIG_BLOCK, &sigint, &old_mask);
    pthread_sigmask(SIG_BLOCK, NULL, &wait_mask);
    sigdelset(&wait_mask, SIGINT);
    struct sigaction sa = {.sa_handler = on_sigint, .sa_flags = SA_RESTART}, old_sa;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_sa);
    if (session_open(&o.s, &ss)) goto fail;
    m = ss.model;
    ctx = ss.ctx;
    if (session_chat_format(m, template_name, &fmt) || session_chat_no_think(&fmt, no_think)) goto fail;
    if (!(smp = sampler_init(&o.sp, m->hp.n_vocab))) goto fail;
    const bool tty = isatty(STDIN_FILENO) && isatty(STDOUT_FILENO);
    if (tty && editor_open(&ed, argv[0])) goto fail;
    const int first = system ? 1 : 0; // messages before `first` are never dropped
    if (system) conv_push(&conv, "system", system, strlen(system));
    const int n_ctx = ctx->n_ctx;

    if (tty)
        fprintf(stderr,
                "strata chat: %s, context %d, template %s. /reset starts over, /set changes "
                "sampling, /quit or Ctrl-D leaves, Ctrl-C stops an answer.\n",
                o.s.model, n_ctx, chat_template_name(fmt.kind));
    for (;;) {
        int got = tty ? editor_line(&ed, &line_buf) : read_line(&reader, &line_buf, &wait_mask);
        if (tty) drop_pending_sigint(&sigint);
        if (got <= 0) { // EOF (or Ctrl-C while piped input was awaited)
            if (tty) fputs("\n", stdout);
            break;
        }
        char *line = line_buf.p;
        size_t len = line_buf.len;
        while (len > 0 && line[len - 1] == '\r') line[--len] = 0;
        size_t start = strspn(line, " \t");
        if (line[start] == 0) continue;
        const char *text = line;
        if (line[0] == '/' && line[1] != '/') {
            if (!strcmp(line, "/quit") || !strcmp(line, "/exit")) break;
            if (!strcmp(line, "/reset")) {
                conv_remove(&conv, first, conv.n - first);
                fprintf(stderr, "[new conversation]\n");
            } else if (!strcmp(line, "/set") || !strncmp(line, "/set ", 5)) {
                if (chat_set(line + 4, &o.sp, &n_predict)) {
                    sampler_free(smp);
                    if (!(smp = sampler_init(&o.sp, m->hp.n_vocab))) goto fail;
                }
            } else {
                fprintf(stderr, "[unknown command '%s': /reset, /set, /quit; //TEXT sends /TEXT]\n", line);
            }
            continue;
        }
        if (line[0] == '/') text = line + 1, len--;
        conv_push(&conv, "user", text, len);
        int32_t *ids = NULL;
        const int reserve = n_predict > 0 && n_predict < n_ctx / 2 ? (int)n_predict : n_ctx / 4;
        int n = fit_conversation(m, &fmt, &conv, first, n_ctx, reserve, &ids);
        if (n < 0) {
            fprintf(stderr, "[%s]\n", st_last_error());
            conv_remove(&conv, conv.n - 1, 1);
            continue;
        }
        struct sbuf answer = {0};
        struct gen_stats st;
        interrupted = 0;
        pthread_sigmask(SIG_UNBLOCK, &sigint, NULL); // Ctrl-C now stops the answer
        int rc = generate(ctx, smp, ids, n, (int)n_predict, on_token, &answer, &st);
        pthread_sigmask(SIG_BLOCK, &sigint, NULL);
        free(ids);
        if (rc) {
            fprintf(stderr, "\n[%s]\n", st_last_error());
            ctx->n_past = 0; // the cache may hold anything now
            conv_remove(&conv, conv.n - 1, 1);
            sbuf_free(&answer);
            continue;
        }
        fputs("\n", stdout);
        fflush(stdout);
        if (answer.len)
            conv_push(&conv, "assistant", answer.p, answer.len);
        else
            conv_remove(&conv, conv.n - 1, 1); // stopped before a word: forget the question
        sbuf_free(&answer);
        fprintf(stderr, "[%s%d tokens, %.1f tok/s | prompt %d tokens, %d from cache]\n",
                st.stop_reason == GEN_STOP_CALLER    ? "stopped, "
                : st.stop_reason == GEN_STOP_CONTEXT ? "context full, "
                : st.stop_reason == GEN_STOP_LENGTH  ? "length limit, "
                                                     : "",
                st.n_gen, st.t_gen > 0 ? st.n_gen / st.t_gen : 0.0, st.n_prompt, st.n_reused);
    }
    status = 0;
fail:
    if (status) fprintf(stderr, "strata chat: %s\n", st_last_error());
    editor_close(&ed);
    sbuf_free(&line_buf);
    conv_free(&conv);
    sampler_free(smp);
    session_close(&ss);
    sigaction(SIGINT, &old_sa, NULL);
    pthread_sigmask(SIG_SETMASK, &old_mask, NULL);
    return status;
usage_error:
    fprintf(stderr, "strata chat: %s\nTry 'strata chat --help'.\n", st_last_error());
    return 2;
}

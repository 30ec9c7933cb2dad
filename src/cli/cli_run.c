// cli_run.c: `strata run` — generate a continuation of a prompt (or a chat reply).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/chat.h"
#include "cli/cli_args.h"
#include "cli/commands.h"
#include "model/forward.h"
#include "model/generate.h"
#include "model/model.h"
#include "text/tokenizer.h"
#include "util.h"

static const char run_help[] =
    "usage: strata run -m MODEL (-p PROMPT | -f FILE) [options]\n"
    "\n"
    "Generates text after PROMPT and streams it to stdout; timings go to stderr.\n"
    "\n"
    "  -p, --prompt TEXT      the prompt\n"
    "  -f, --file FILE        read the prompt from FILE ('-' for stdin)\n"
    "  -n, --n-predict N      tokens to generate; -1 = until the model stops (default: 256)\n"
    "      --chat             wrap the prompt in the model's chat template as a user message\n"
    "      --system TEXT      with --chat: a system message before the user's\n"
    "      --template NAME    with --chat: use this template family instead of the model's\n"
    "                         (chatml, qwen2.5, qwen3, phi3, phi4, llama2, llama3, llama3.1,\n"
    "                         gemma2, gemma3, mistral-legacy, mistral-v1, mistral-v3,\n"
    "                         mistral-v3-tekken, mistral-v7-tekken)\n"
    "      --no-think         with --chat: ask a thinking template (qwen3) to answer without\n"
    "                         thinking (enable_thinking=false); thinking is its default\n"
    "  -h, --help             this help\n"
    "\n"
    "Model options:\n";

// Reads a whole file (or stdin for "-") into a malloc'd NUL-terminated string.
static char *read_file(const char *path) {
    FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    if (!f) {
        st_fail("cannot open prompt file '%s'", path);
        return NULL;
    }
    size_t cap = 4096, len = 0;
    char *buf = st_xmalloc(cap);
    size_t got;
    while ((got = fread(buf + len, 1, cap - len - 1, f)) > 0) {
        len += got;
        if (cap - len - 1 == 0) {
            if (cap > ((size_t)1 << 30)) {
                st_fail("prompt file '%s' is larger than 1 GiB", path);
                free(buf);
                buf = NULL;
                break;
            }
            cap *= 2;
            buf = realloc(buf, cap);
            if (!buf) {
                st_fail("out of memory reading '%s'", path);
                break;
            }
        }
    }
    if (buf) buf[len] = 0;
    if (f != stdin) fclose(f);
    return buf;
}

static int print_token(void *user, int32_t id, const char *piece, size_t len) {
    (void)user;
    (void)id;
    fwrite(piece, 1, len, stdout);
    fflush(stdout);
    return 0;
}

int cli_run(int argc, char **argv) {
    struct cli_model_opts o;
    cli_model_opts_default(&o);
    o.s.progress = true; // a bar on a terminal while a large model is read in
    const char *prompt = NULL, *file = NULL, *system = NULL, *template_name = NULL;
    long long n_predict = 256;
    bool chat = false, no_think = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int rc = cli_model_opt(&o, argc, argv, &i);
        if (rc < 0) goto usage_error;
        if (rc > 0) continue;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            printf("%s%s", run_help, cli_model_opts_help);
            return 0;
        } else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) {
            if (!(prompt = cli_value(argc, argv, &i))) goto usage_error;
        } else if (!strcmp(a, "-f") || !strcmp(a, "--file")) {
            if (!(file = cli_value(argc, argv, &i))) goto usage_error;
        } else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) {
            const char *v = cli_value(argc, argv, &i);
            if (!v || cli_parse_int(a, v, -1, 1 << 30, &n_predict)) goto usage_error;
        } else if (!strcmp(a, "--chat")) {
            chat = true;
        } else if (!strcmp(a, "--system")) {
            if (!(system = cli_value(argc, argv, &i))) goto usage_error;
        } else if (!strcmp(a, "--template")) {
            if (!(template_name = cli_value(argc, argv, &i))) goto usage_error;
        } else if (!strcmp(a, "--no-think")) {
            no_think = true;
        } else {
            st_fail("unknown option '%s'", a);
            goto usage_error;
        }
    }
    if (!o.s.model) {
        st_fail("no model given: use -m FILE");
        goto usage_error;
    }
    if (!prompt == !file) {
        st_fail(prompt ? "give the prompt with -p or -f, not both"
                       : "no prompt given: use -p TEXT or -f FILE");
        goto usage_error;
    }
    if ((system || template_name || no_think) && !chat) {
        st_fail("--system, --template and --no-think only apply with --chat");
        goto usage_error;
    }
    if (sampler_params_check(&o.sp)) goto usage_error;

    char *file_text = NULL;
    if (file && !(prompt = file_text = read_file(file))) {
        fprintf(stderr, "strata: %s\n", st_last_error());
        return 1;
    }
    int status = 1;
    struct session ss = {0};
    struct model *m = NULL;
    struct backend *be = NULL;
    struct context *ctx = NULL;
    struct sampler *s = NULL;
    int32_t *ids = NULL;
    double t0 = st_time_s();
    if (session_open(&o.s, &ss)) goto fail;
    m = ss.model;
    be = ss.be;
    ctx = ss.ctx;
    double t_load = st_time_s() - t0;
    int n;
    if (chat) {
        struct chat_format fmt;
        struct chat_message msgs[2];
        int n_msgs = 0;
        if (system) msgs[n_msgs++] = (struct chat_message){"system", system};
        msgs[n_msgs++] = (struct chat_message){"user", prompt};
        n = session_chat_format(m, template_name, &fmt) || session_chat_no_think(&fmt, no_think)
                ? -1
                : session_chat_tokens(m, &fmt, msgs, n_msgs, true, &ids);
    } else {
        n = session_text_tokens(m, prompt, &ids);
    }
    if (n < 0) goto fail;
    if (n == 0) {
        st_fail("the prompt is empty after tokenization");
        goto fail;
    }
    if (n > ctx->n_ctx) {
        st_fail("the prompt has %d tokens but the context holds %d; use a larger -c (the model "
                "was trained on %d) or a shorter prompt",
                n, ctx->n_ctx, m->hp.n_ctx_train);
        goto fail;
    }
    if (!(s = sampler_init(&o.sp, m->hp.n_vocab))) goto fail;
    struct gen_stats st;
    if (generate(ctx, s, ids, n, (int)n_predict, print_token, NULL, &st)) goto fail;
    printf("\n");
    fflush(stdout);
    fprintf(stderr,
            "\nstrata: backend %s, load %.2f s | prompt %d tokens, %.2f s, %.1f tok/s | "
            "generated %d tokens, %.2f s, %.1f tok/s (%.1f ms/tok)%s\n",
            be->name, t_load, st.n_prompt, st.t_prompt,
            st.t_prompt > 0 ? (st.n_prompt - st.n_reused) / st.t_prompt : 0.0, st.n_gen, st.t_gen,
            st.t_gen > 0 ? st.n_gen / st.t_gen : 0.0, st.n_gen ? 1e3 * st.t_gen / st.n_gen : 0.0,
            st.stop_reason == GEN_STOP_CONTEXT ? " [context full]" : "");
    status = 0;
fail:
    if (status) fprintf(stderr, "strata: %s\n", st_last_error());
    free(ids);
    free(file_text);
    sampler_free(s);
    session_close(&ss);
    return status;
usage_error:
    fprintf(stderr, "strata run: %s\nTry 'strata run --help'.\n", st_last_error());
    return 2;
}

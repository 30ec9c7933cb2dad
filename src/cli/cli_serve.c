// cli_serve.c: `strata serve`: its options, then the server (src/server/).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli_args.h"
#include "cli/commands.h"
#include "server/server.h"
#include "text/chat.h"
#include "util.h"

static const char serve_help[] =
    "usage: strata serve -m MODEL [options]\n"
    "\n"
    "Serves the model over HTTP: an OpenAI-compatible API (/v1/chat/completions,\n"
    "/v1/completions, /v1/embeddings, /v1/models; also without /v1), /props, /health,\n"
    "/metrics, /tokenize, /detokenize, and a chat page at /. Requests run together in\n"
    "parallel slots, one batch per step for all of them (continuous batching); the rest\n"
    "wait and start in the order they came. docs/SERVER.md lists every parameter.\n"
    "\n"
    "      --host ADDR        address to listen on (default: 127.0.0.1, this machine only;\n"
    "                         0.0.0.0 or :: for every interface)\n"
    "      --port N           port (default: 8080; 0 picks a free one, printed at start-up)\n"
    "      --api-key KEY      require 'Authorization: Bearer KEY' on every route but / and\n"
    "                         /health (default: the environment's STRATA_API_KEY, else none)\n"
    "      --alias NAME       the model's id in the API (default: the file name without .gguf)\n"
    "      --template NAME    chat template family instead of the model's own\n"
    "                         (chatml, qwen2.5, qwen3, phi3, phi4, llama2, llama3, llama3.1,\n"
    "                         gemma2, gemma3, mistral-legacy, mistral-v1, mistral-v3,\n"
    "                         mistral-v3-tekken, mistral-v7-tekken)\n"
    "      --no-think         a thinking template (qwen3) answers without thinking unless a\n"
    "                         request sets chat_template_kwargs.enable_thinking\n"
    "  -np, --parallel N      requests served at once, each with a KV cache of -c positions\n"
    "                         (default: 4, or as many as fit the memory)\n"
    "      --timeout S        a request's limit in seconds, from its arrival to its last\n"
    "                         token (default: 600)\n"
    "      --max-body BYTES   largest request body (default: 4194304)\n"
    "      --max-queue N      requests that may wait; beyond, 503 (default: 64)\n"
    "      --max-connections N  open connections at most (default: 128)\n"
    "      --idle-timeout S   close a connection idle or sending this slowly for S seconds\n"
    "                         (default: 30)\n"
    "  -h, --help             this help\n"
    "\n"
    "Model options (the sampling options are the defaults of requests that do not set them):\n";

// Parses the options into cfg. Returns 0, 1 when help was printed, or -1 with a message.
static int serve_parse(int argc, char **argv, struct server_config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    struct cli_model_opts mo;
    cli_model_opts_default(&mo);
    mo.s.progress = true; // a bar on a terminal while a large model is read in
    cfg->host = "127.0.0.1";
    cfg->port = 8080;
    cfg->api_key = getenv("STRATA_API_KEY");
    if (cfg->api_key && !*cfg->api_key) cfg->api_key = NULL;
    cfg->max_body = 4u << 20;
    cfg->timeout_s = 600;
    cfg->max_queue = 64;
    cfg->max_connections = 128;
    cfg->idle_timeout_s = 30;
    int n_seq = 0; // automatic
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        long long n = 0;
        double f;
        int rc = cli_model_opt(&mo, argc, argv, &i);
        if (rc < 0) return -1;
        if (rc > 0) continue;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            printf("%s%s", serve_help, cli_model_opts_help);
            return 1;
        } else if (!strcmp(a, "--host")) {
            if (!(cfg->host = cli_value(argc, argv, &i))) return -1;
        } else if (!strcmp(a, "--port")) {
            if (!(v = cli_value(argc, argv, &i)) || cli_parse_int(a, v, 0, 65535, &n)) return -1;
            cfg->port = (int)n;
        } else if (!strcmp(a, "--api-key")) {
            if (!(cfg->api_key = cli_value(argc, argv, &i))) return -1;
            if (!*cfg->api_key) return st_fail("--api-key: the key is empty");
        } else if (!strcmp(a, "--alias")) {
            if (!(cfg->alias = cli_value(argc, argv, &i))) return -1;
            if (!*cfg->alias || strlen(cfg->alias) >= 128 || strchr(cfg->alias, '/'))
                return st_fail("--alias: '%s' must be 1 to 127 characters without '/'", cfg->alias);
        } else if (!strcmp(a, "--template")) {
            if (!(cfg->template_name = cli_value(argc, argv, &i))) return -1;
            struct chat_format fmt;
            if (chat_format_by_name(cfg->template_name, &fmt)) return -1;
        } else if (!strcmp(a, "--no-think")) {
            cfg->no_think = true;
        } else if (!strcmp(a, "-np") || !strcmp(a, "--parallel")) {
            if (!(v = cli_value(argc, argv, &i)) || cli_parse_int(a, v, 1, 256, &n)) return -1;
            n_seq = (int)n;
        } else if (!strcmp(a, "--timeout")) {
            if (!(v = cli_value(argc, argv, &i)) || cli_parse_float(a, v, 0.1, 86400 * 7, &f)) return -1;
            cfg->timeout_s = f;
        } else if (!strcmp(a, "--max-body")) {
            if (!(v = cli_value(argc, argv, &i)) || cli_parse_int(a, v, 1024, 1ll << 30, &n)) return -1;
            cfg->max_body = (size_t)n;
        } else if (!strcmp(a, "--max-queue")) {
            if (!(v = cli_value(argc, argv, &i)) || cli_parse_int(a, v, 1, 1 << 20, &n)) return -1;
            cfg->max_queue = (int)n;
        } else if (!strcmp(a, "--max-connections")) {
            if (!(v = cli_value(argc, argv, &i)) || cli_parse_int(a, v, 1, 10000, &n)) return -1;
            cfg->max_connections = (int)n;
        } else if (!strcmp(a, "--idle-timeout")) {
            if (!(v = cli_value(argc, argv, &i)) || cli_parse_int(a, v, 1, 86400, &n)) return -1;
            cfg->idle_timeout_s = (int)n;
        } else {
            return st_fail("unknown option '%s'", a);
        }
    }
    cfg->so = mo.s;
    cfg->so.n_seq = n_seq;
    cfg->sp = mo.sp;
    cfg->seed_given = mo.seed_given; // else each request draws a fresh random seed
    if (!cfg->so.model) return st_fail("no model given: use -m FILE");
    return sampler_params_check(&cfg->sp);
}

int cli_serve(int argc, char **argv) {
    struct server_config cfg;
    int prc = serve_parse(argc, argv, &cfg);
    if (prc) {
        if (prc > 0) return 0;
        fprintf(stderr, "strata serve: %s\nTry 'strata serve --help'.\n", st_last_error());
        return 2;
    }
    return server_run(&cfg);
}

#!/bin/sh
# Command-line behaviour a user sees: help, bad flags and values, bad files,
# limits. Every failure must be a clear message and a non-zero exit, never a crash.
BIN=${STRATA_BIN:-build/strata}
MODEL=${STRATA_TEST_MODEL:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
pass=0
fail=0
skip=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$BIN" synth -o "$tmp/tiny.gguf" >/dev/null 2>&1

# expect NAME WANT_STATUS PATTERN -- ARGS...: runs strata with ARGS (stdin from
# the file $stdin when set) and checks the exit status and that stdout+stderr
# match the extended regex PATTERN.
stdin=
expect() {
    name=$1 want=$2 pattern=$3
    shift 4
    if [ -n "$stdin" ]; then
        "$BIN" "$@" <"$stdin" >"$tmp/out" 2>&1
    else
        "$BIN" "$@" >"$tmp/out" 2>&1
    fi
    got=$?
    if [ "$got" -eq "$want" ] && grep -Eq -- "$pattern" "$tmp/out"; then
        pass=$((pass + 1))
        echo "  ok   $name"
    else
        fail=$((fail + 1))
        echo "  FAIL $name: exit $got (want $want), output:"
        sed 's/^/    | /' "$tmp/out" | head -20
    fi
}

expect help 0 "usage: strata COMMAND" -- --help
expect no_command 2 "usage" --
expect unknown_command 2 "unknown command 'frobnicate'" -- frobnicate
expect run_help 0 "--top-p" -- run --help
expect unknown_flag 2 "unknown option '--bogus'" -- run -m x -p hi --bogus
expect bad_number 2 "-n: 'abc' is not a whole number" -- run -m x -p hi -n abc
expect bad_float 2 "--temp: 'hot' is not a number" -- run -m x -p hi --temp hot
expect out_of_range 2 "--top-p: 1.5 is out of range" -- run -m x -p hi --top-p 1.5
expect missing_value 2 "-m needs a value" -- run -p hi -m
expect no_model 2 "no model given" -- run -p hi
expect no_prompt 2 "no prompt given" -- run -m x
expect no_think_without_chat 2 "--no-think only apply with --chat" -- run -m x -p hi --no-think
expect missing_file 1 "cannot open|No such file" -- run -m "$tmp/nope.gguf" -p hi
printf 'GGUF\003\000\000\000' >"$tmp/trunc.gguf"
expect truncated_file 1 "trunc.gguf" -- run -m "$tmp/trunc.gguf" -p hi
printf 'NOPE\003\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000' >"$tmp/magic.gguf"
expect wrong_magic 1 "magic" -- run -m "$tmp/magic.gguf" -p hi
expect info_missing_arg 2 "usage|MODEL" -- info
expect info_devices 0 "GPU backend" -- info --devices
expect info_devices_and_model 2 "takes no model" -- info --devices x.gguf
expect synth_help 0 "--shape" -- synth --help
expect synth_bad_type 2 "unknown tensor type 'Q9_9'" -- synth -o "$tmp/s.gguf" --type Q9_9
expect synth_bad_width 1 "not a multiple of" -- synth -o "$tmp/s.gguf" --dim 80 --heads 4 --type Q8_0
expect synth_and_run 0 "generated 4 tokens" -- run -m "$tmp/tiny.gguf" -p "hello" -n 4 --temp 0
expect bench_tiny 0 "tg8 " -- bench -m "$tmp/tiny.gguf" -p 16 -n 8 -r 1
expect bench_parallel 0 "tg8 .*ms/step" -- bench -m "$tmp/tiny.gguf" -p 16 -n 8 -r 1 -np 4
expect bench_parallel_zero 2 "-np: 0 is out of range \\[1, 256\\]" -- bench -m "$tmp/tiny.gguf" -np 0
expect bench_parallel_huge 2 "-np: 300 is out of range" -- bench -m "$tmp/tiny.gguf" -np 300
expect bench_nothing 2 "-p 0 and -n 0 leave nothing to measure" -- bench -m "$tmp/tiny.gguf" -p 0 -n 0
expect cache_f32 0 "tg8 " -- bench -m "$tmp/tiny.gguf" -p 16 -n 8 -r 1 --cache-type f32
expect cache_f16_ref 0 "tg8 " -- bench -m "$tmp/tiny.gguf" -p 16 -n 8 -r 1 -ctk f16 -ctv f16 --backend cpu-ref
expect cache_unknown 2 "--cache-type: unknown KV cache type 'q8_0' \\(known: f16, f32\\)" -- \
    run -m "$tmp/tiny.gguf" -p hi -n 1 --cache-type q8_0
expect cache_k_v_differ 2 "-ctv f32: the K and V caches are kept in one type, and f16 was asked for already" -- \
    run -m "$tmp/tiny.gguf" -p hi -n 1 -ctk f16 -ctv f32
expect main_gpu_negative 2 "--main-gpu: -1 is out of range \\[0, 1023\\]" -- run -m "$tmp/tiny.gguf" -p hi -n 1 --main-gpu -1
expect main_gpu_cpu 0 "" -- run -m "$tmp/tiny.gguf" -p hi -n 1 -mg 1 --backend cpu
expect split_mode_bad 2 "-sm: split mode 'Layer': use none, layer or row" -- run -m "$tmp/tiny.gguf" -p hi -sm Layer
expect tensor_split_bad 2 "-ts: tensor split '3,x': entry 2 is not a number" -- run -m "$tmp/tiny.gguf" -p hi -ts 3,x
expect tensor_split_zero 2 "--tensor-split: tensor split '0,0': every proportion is 0" -- \
    run -m "$tmp/tiny.gguf" -p hi --tensor-split 0,0
expect split_on_cpu 1 "--split-mode layer divides a model over GPUs, and the cpu backend runs on the host" -- \
    run -m "$tmp/tiny.gguf" -p hi -n 1 -sm layer --backend cpu
expect tensor_split_on_ref 1 "--tensor-split divides a model over GPUs, and the cpu-ref backend runs on the host" -- \
    perplexity -m "$tmp/tiny.gguf" -f README.md -ts 1 --backend cpu-ref
if "$BIN" info --devices 2>&1 | grep -q "none in this build"; then
    expect split_no_gpu 1 "--split-mode row: this build has no GPU backend" -- run -m "$tmp/tiny.gguf" -p hi -sm row
else
    echo "  skip split_no_gpu: this build has a GPU backend"
    skip=$((skip + 1))
fi
expect bench_busy 0 "tg8 .*busy: another process spins on CPU" -- bench -m "$tmp/tiny.gguf" -p 16 -n 8 -r 1 --busy
expect bench_ceiling 0 "ceiling  [0-9.]* GB/s read: tg floor [0-9.]* tok/s, tg8 at [0-9]*% of it" -- bench -m "$tmp/tiny.gguf" -p 16 -n 8 -r 1 --ceiling
expect bench_ceiling_ref 0 "ceiling  .* GB/s read" -- bench -m "$tmp/tiny.gguf" -p 0 -n 2 -r 1 --ceiling --backend cpu-ref
expect synth_q4_k_m 0 "wrote" -- synth -o "$tmp/k.gguf" --type Q4_K_M --dim 256 --ff 512 --layers 3
expect run_q4_k_m 0 "generated 4 tokens" -- run -m "$tmp/k.gguf" -p "hello" -n 4 --temp 0
export STRATA_CPU_ISA=sse9
expect cpu_isa_unknown 0 "STRATA_CPU_ISA=sse9 is not one of" -- run -m "$tmp/tiny.gguf" -p hi -n 1
unset STRATA_CPU_ISA
export STRATA_LOAD_PROGRESS=yes
expect switch_not_0_or_1 0 "STRATA_LOAD_PROGRESS=yes is not 0 or 1; ignored" -- run -m "$tmp/tiny.gguf" -p hi -n 1
unset STRATA_LOAD_PROGRESS

# perplexity on the tiny model: a text of about 1,100 byte-level tokens
i=0
while [ $i -lt 12 ]; do
    echo "Line $i of a plain text that the tiny model scores; it has letters, digits 0123 and punctuation." >>"$tmp/text.txt"
    i=$((i + 1))
done
head -c 24 "$tmp/text.txt" >"$tmp/short.txt"
"$BIN" synth -o "$tmp/untied.gguf" --untied >/dev/null 2>&1
expect ppl_help 0 "kl-divergence-base" -- perplexity --help
expect ppl_no_text 2 "no text given: use -f" -- perplexity -m "$tmp/tiny.gguf"
expect ppl_kld_needs_base 2 "needs the base file" -- perplexity -m "$tmp/tiny.gguf" --kl-divergence
expect ppl_sampler_flag 2 "unknown option '--temp'" -- perplexity -m "$tmp/tiny.gguf" -f "$tmp/text.txt" --temp 0
expect ppl_tiny_ctx 2 "-c 2 is too small" -- perplexity -m "$tmp/tiny.gguf" -f "$tmp/text.txt" -c 2
expect ppl_missing_text 1 "cannot open the text .*nope.txt" -- perplexity -m "$tmp/tiny.gguf" -f "$tmp/nope.txt" -c 16
expect ppl_short_text 1 "has [0-9]+ tokens, too few for one chunk of -c 64.*use -c [0-9]+ or less" -- \
    perplexity -m "$tmp/tiny.gguf" -f "$tmp/short.txt" -c 64
expect ppl_ctx_above_model 1 "larger than the model's context of 2048 tokens; use -c 2048 or less" -- \
    perplexity -m "$tmp/tiny.gguf" -f "$tmp/text.txt" -c 4096
expect ppl_progress 0 "^\\[1\\][0-9]+\\.[0-9]{4},\\[2\\][0-9]+\\.[0-9]{4},.*\\[28\\][0-9]+\\.[0-9]{4},$" -- \
    perplexity -m "$tmp/untied.gguf" -f "$tmp/text.txt" -c 32 -b 7 --backend cpu-ref
expect ppl_final 0 "^Final estimate: PPL = [0-9]+\\.[0-9]{4} \\+/- [0-9]+\\.[0-9]{5}$" -- \
    perplexity -m "$tmp/untied.gguf" -f "$tmp/text.txt" -c 32 -b 7 --backend cpu-ref
expect ppl_writes_base 0 "Final estimate" -- \
    perplexity -m "$tmp/tiny.gguf" -f "$tmp/text.txt" -c 32 --kl-divergence-base "$tmp/base.kld"
expect ppl_kld_self 0 "Same top p: 100.000 ± 0.000 %" -- \
    perplexity -m "$tmp/tiny.gguf" --kl-divergence --kl-divergence-base "$tmp/base.kld" -f "$tmp/text.txt"
expect ppl_kld_other_c 2 "computed with -c 32, not -c 64: use -c 32" -- \
    perplexity -m "$tmp/tiny.gguf" --kl-divergence --kl-divergence-base "$tmp/base.kld" -c 64
expect ppl_kld_not_a_base 1 "does not look like a file of log-probabilities" -- \
    perplexity -m "$tmp/tiny.gguf" --kl-divergence --kl-divergence-base "$tmp/text.txt"
head -c 1000 "$tmp/base.kld" >"$tmp/cut.kld"
expect ppl_kld_truncated 1 "cut.kld has 1000 bytes, but its header.*truncated" -- \
    perplexity -m "$tmp/tiny.gguf" --kl-divergence --kl-divergence-base "$tmp/cut.kld"
expect ppl_kld_other_text 1 "short.txt does not give the base file's tokens: (the text ends|they differ) at token [1-9]" -- \
    perplexity -m "$tmp/tiny.gguf" --kl-divergence --kl-divergence-base "$tmp/base.kld" -f "$tmp/short.txt"

# expect_model: expect, or a skip when the test model is absent.
expect_model() {
    if [ -f "$MODEL" ]; then
        expect "$@"
    else
        skip=$((skip + 1))
        echo "  skip $1: $MODEL not found (run scripts/fetch-model.sh)"
    fi
}

expect_model ctx_too_big 1 "KV cache.*use -c [0-9]+ or less" -- run -m "$MODEL" -p hi -c 16000000
expect_model prompt_too_long 1 "prompt has [0-9]+ tokens but the context holds 8" -- \
    run -m "$MODEL" -p "one two three four five six seven eight nine ten eleven twelve" -c 8
expect_model backend_unknown 2 "unknown backend 'tpu'" -- run -m "$MODEL" -p hi --backend tpu
expect_model run_greedy 0 "generated 8 tokens" -- run -m "$MODEL" -p "The capital of France is" -n 8 --temp 0
expect_model run_chat 0 "generated" -- run -m "$MODEL" -p "Say hi." --chat -n 8 --temp 0 -t 1
expect_model info_model 0 "token_embd.weight" -- info "$MODEL"
# --no-think adds Qwen3's empty "<think>\n\n</think>\n\n" after the generation
# prompt: 10 and 19 prompt tokens are what llama.cpp's tokenizer gives for the
# two renderings of "hi" in the test model's vocabulary.
expect_model run_qwen3_think 0 "prompt 10 tokens" -- \
    run -m "$MODEL" -p hi --chat --template qwen3 -n 1 --temp 0 -t 1
expect_model run_qwen3_no_think 0 "prompt 19 tokens" -- \
    run -m "$MODEL" -p hi --chat --template qwen3 --no-think -n 1 --temp 0 -t 1
expect_model run_no_think_chatml 1 "no thinking switch" -- run -m "$MODEL" -p hi --chat --no-think -n 1
printf 'hi\n' >"$tmp/hi.txt"
stdin="$tmp/hi.txt"
expect_model chat_qwen3_no_think 0 "prompt 19 tokens" -- \
    chat -m "$MODEL" --template qwen3 --no-think -n 1 --temp 0 -t 1
expect_model chat_no_think_chatml 1 "no thinking switch" -- chat -m "$MODEL" --no-think -n 1
stdin=

# Greedy text is the same on one thread and on four: the CPU backend computes
# each output element on one thread, so how rows are shared cannot change a bit.
# (Under ThreadSanitizer this is also what runs the thread pool on the model.)
if [ -f "$MODEL" ]; then
    "$BIN" run -m "$MODEL" -p "The capital of France is" -n 16 --temp 0 -t 1 >"$tmp/t1" 2>"$tmp/t1.err"
    "$BIN" run -m "$MODEL" -p "The capital of France is" -n 16 --temp 0 -t 4 >"$tmp/t4" 2>"$tmp/t4.err"
    if [ -s "$tmp/t1" ] && cmp -s "$tmp/t1" "$tmp/t4"; then
        pass=$((pass + 1))
        echo "  ok   threads_same_text"
    else
        fail=$((fail + 1))
        echo "  FAIL threads_same_text: -t 1 and -t 4 differ:"
        cat "$tmp/t1" "$tmp/t1.err" "$tmp/t4" "$tmp/t4.err" | sed 's/^/    | /' | head -20
    fi
else
    skip=$((skip + 1))
    echo "  skip threads_same_text: $MODEL not found (run scripts/fetch-model.sh)"
fi
# A fixed seed repeats the text; -1 (llama.cpp's spelling) draws a fresh seed
# each run, as no -s does. The random-weight model's logits are far apart
# (at temperature 2 most seeds give the same 16 tokens), so the draws are made
# at temperature 1000, close to uniform over its 512 tokens: two runs then
# agree on all 16 tokens only when the seed was fixed.
seeded() { "$BIN" run -m "$tmp/tiny.gguf" -p hi -n 16 --temp 1000 --top-k 0 --top-p 1 --min-p 0 "$@" 2>/dev/null; }
seeded -s 7 >"$tmp/s7a"
seeded -s 7 >"$tmp/s7b"
seeded -s -1 >"$tmp/sra"
seeded -s -1 >"$tmp/srb"
if [ -s "$tmp/s7a" ] && cmp -s "$tmp/s7a" "$tmp/s7b" && [ -s "$tmp/sra" ] && ! cmp -s "$tmp/sra" "$tmp/srb"; then
    pass=$((pass + 1))
    echo "  ok   seed_fixed_and_random"
else
    fail=$((fail + 1))
    echo "  FAIL seed_fixed_and_random: -s 7 twice should agree, -s -1 twice should not:"
    for f in s7a s7b sra srb; do printf '    | %s: ' "$f"; od -An -c "$tmp/$f" | head -2 | tr -s ' '; done
fi
echo "RESULT $pass $fail $skip"

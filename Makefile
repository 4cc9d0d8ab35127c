# vllm.c build. `make` builds build/vllmc and build/libvllmc.a (CPU);
# `make CUDA=1` adds the CUDA backend; `make HIP=1 HIP_ARCH=gfx1100` builds it for AMD with hipcc.
# Targets: all, test, asan, fuzz, run, clean. Files named *_avx2.c / *_avx512.c get their ISA flags;
# the code picks between them at run time.

CC      ?= cc
BUILD   ?= build
OPT     ?= -O2
CFLAGS  += -std=c11 -D_GNU_SOURCE $(OPT) -g -Wall -Wextra -Werror -Iinclude -Isrc -MMD -MP -pthread
LDLIBS  += -lpcre2-8 -lcjson -lm -pthread
AVX2_FLAGS   := -mavx2 -mfma -mf16c -mbmi2
AVX512_FLAGS := $(AVX2_FLAGS) -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni
AMX_FLAGS    := $(AVX512_FLAGS) -mamx-tile -mamx-int8 -mxsave

LIB_SRC := $(sort $(wildcard src/common/*.c src/gguf/*.c src/quant/*.c src/tokenizer/*.c src/template/*.c \
             src/model/*.c src/backend/*.c src/backend/cpu/*.c src/engine/*.c))
SRV_SRC := $(sort $(wildcard src/server/*.c))
CLI_SRC := $(sort $(wildcard src/cli/*.c))
TEST_SRC := $(sort $(wildcard tests/test_*.c))
FUZZ_SRC := $(sort $(wildcard fuzz/fuzz_*.c))

ifneq ($(SRV_SRC),)
LDLIBS += -lmicrohttpd
endif

LIB_OBJ := $(LIB_SRC:%.c=$(BUILD)/%.o) $(SRV_SRC:%.c=$(BUILD)/%.o)
CLI_OBJ := $(CLI_SRC:%.c=$(BUILD)/%.o)
TESTS   := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)

ifeq ($(CUDA),1)
NVCC      ?= nvcc
CUDA_ARCH ?= -gencode=arch=compute_90,code=sm_90
NVFLAGS   += -O3 -std=c++17 $(CUDA_ARCH) -Iinclude -Isrc -Xcompiler -Wall,-Wextra,-Werror -lineinfo -MMD -MP
CU_SRC    := $(sort $(wildcard src/backend/cuda/*.cu))
LIB_OBJ   += $(CU_SRC:%.cu=$(BUILD)/%.o)
CFLAGS    += -DVLLMC_CUDA=1
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(shell which $(NVCC)))
LDLIBS    += -L$(CUDA_HOME)/lib64 -lcudart -lcublas -lcublasLt -lstdc++
endif

# HIP (AMD, ROCm >= 6): `make HIP=1 HIP_ARCH=gfx1100` (or gfx1200, gfx1030) builds the GPU backend from the
# same kernel files with hipcc and links vllmc and the tests against libamdhip64 (device "cuda" runs on HIP).
# `hip-check` only compiles the kernels (-nogpulib -fgpu-rdc -c): Debian's ROCm 5.2 ships no gfx11 device
# library, so that is what CI can check; scripts/hip-check.sh runs every check this compiler allows.
# A gfx11 HIP_ARCH adds -DVLLMC_HIP_ARCH_GFX11: host and device code size the prefill mat-vec with it
# (gpu_compat.h), so build one HIP_ARCH family at a time.
HIPCC     ?= hipcc
HIP_ARCH  ?= gfx1100
ROCM_PATH ?= /opt/rocm
HIP_SRC   := $(sort $(wildcard src/backend/cuda/*.cu))
HIP_OBJ   := $(HIP_SRC:src/backend/cuda/%.cu=build/hip/$(HIP_ARCH)/%.o)
HIP_EXTRA ?=
HIPFLAGS  := -x hip --offload-arch=$(HIP_ARCH) -O3 -std=c++17 -Iinclude -Isrc -Wall -Wextra -Werror \
             -Wno-unused-command-line-argument $(if $(filter gfx11%,$(HIP_ARCH)),-DVLLMC_HIP_ARCH_GFX11) $(HIP_EXTRA)

all: $(BUILD)/vllmc $(BUILD)/libvllmc.a

ifeq ($(HIP),1)
HIP_LIB_OBJ := $(HIP_SRC:%.cu=$(BUILD)/%.hip.o)
LIB_OBJ     += $(HIP_LIB_OBJ)
CFLAGS      += -DVLLMC_CUDA=1
LDLIBS      += -L$(ROCM_PATH)/lib -lamdhip64 -lstdc++
$(HIP_LIB_OBJ): $(BUILD)/%.hip.o: %.cu
	@mkdir -p $(@D)
	$(HIPCC) $(HIPFLAGS) -MMD -MP -c $< -o $@
endif

hip-check: $(HIP_OBJ) # (headers tracked: -MMD)
	@echo "hip: $(words $(HIP_OBJ)) kernel files compiled for $(HIP_ARCH)"

build/hip/$(HIP_ARCH)/%.o: src/backend/cuda/%.cu
	@mkdir -p $(@D)
	$(HIPCC) $(HIPFLAGS) -nogpulib -fgpu-rdc -MMD -MP -c $< -o $@

$(BUILD)/libvllmc.a: $(LIB_OBJ)
	@mkdir -p $(@D)
	$(AR) rcs $@ $^

$(BUILD)/vllmc: $(CLI_OBJ) $(BUILD)/libvllmc.a
	$(CC) $(CFLAGS) -o $@ $(CLI_OBJ) $(BUILD)/libvllmc.a $(LDFLAGS) $(LDLIBS)

$(BUILD)/%_avx2.o: %_avx2.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(AVX2_FLAGS) -c $< -o $@

$(BUILD)/%_avx512.o: %_avx512.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(AVX512_FLAGS) -c $< -o $@

$(BUILD)/%_amx.o: %_amx.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(AMX_FLAGS) -c $< -o $@

$(BUILD)/%.o: %.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/%.o: %.cu
	@mkdir -p $(@D)
	$(NVCC) $(NVFLAGS) -c $< -o $@

$(BUILD)/tests/%: tests/%.c $(BUILD)/libvllmc.a tests/test.h
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -Itests -o $@ $< $(BUILD)/libvllmc.a $(LDFLAGS) $(LDLIBS)

tests: $(TESTS)

# GPU parity tests (tests/cuda/test_*.c, built by the tests rule above): `make CUDA=1 cuda-tests`.
CUDA_TESTS := $(patsubst tests/cuda/%.c,$(BUILD)/tests/cuda/%,$(sort $(wildcard tests/cuda/test_*.c)))
cuda-tests: $(CUDA_TESTS)

# Debian packages (build + test) and the pinned Python test oracles in .venv.
deps:
	@bash scripts/install-deps.sh
	@bash scripts/setup-venv.sh

# The whole test suite: installs what it needs, builds, then runs the C unit tests, the fuzzers for a
# bounded time, and the oracle tests (Python venv, see tests/requirements.txt).
test: deps
	@$(MAKE) --no-print-directory all tests
	@$(MAKE) --no-print-directory fuzz > $(BUILD)/fuzz-build.log 2>&1 || { tail -n 30 $(BUILD)/fuzz-build.log; exit 1; }
	@bash tests/run.sh $(BUILD)

# Sanitizer build of everything, tests run under ASan + UBSan.
asan:
	$(MAKE) BUILD=build/asan OPT="-O1 -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined" \
	    LDFLAGS="-fsanitize=address,undefined" all tests
	@VLLMC_TEST_ONLY_C=1 bash tests/run.sh build/asan

# The CUDA build with ASan + UBSan on its host code (the C files) and ASan on the .cu files' host side: its host paths
# run on the GPU-less runtime of scripts/cuda-stub.sh (tests/py/test_cuda_host.py takes build/cuda-asan when it exists).
cuda-asan:
	$(MAKE) CUDA=1 BUILD=build/cuda-asan OPT="-O1 -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined" \
	    LDFLAGS="-fsanitize=address,undefined" \
	    NVFLAGS="-O1 -std=c++17 -gencode=arch=compute_90,code=sm_90 -Iinclude -Isrc -Xcompiler -Wall,-Wextra,-fsanitize=address,-fno-omit-frame-pointer -MMD -MP" all

# libFuzzer targets (clang), with ASan + UBSan.
FUZZ_BUILD := build/fuzz
# An object that clang cannot compile only drops out of the archive (-k): a target that needs it fails to link.
fuzz:
	$(MAKE) CC=clang BUILD=$(FUZZ_BUILD) OPT="-O1 -fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer" \
	    $(patsubst $(BUILD)/%,$(FUZZ_BUILD)/%,$(LIB_OBJ))
	@rm -f $(FUZZ_BUILD)/libvllmc.a && $(AR) rcs $(FUZZ_BUILD)/libvllmc.a $$(find $(FUZZ_BUILD)/src -name '*.o')
	@mkdir -p $(FUZZ_BUILD)/fuzz
	@for f in $(FUZZ_SRC); do n=$$(basename $$f .c); \
	  echo "clang $$f"; \
	  clang -std=c11 -D_GNU_SOURCE -O1 -g -Iinclude -Isrc -fsanitize=fuzzer,address,undefined -o $(FUZZ_BUILD)/fuzz/$$n $$f $(FUZZ_BUILD)/libvllmc.a $(LDLIBS) || exit 1; done

# Build, fetch a small real checkpoint, and generate text from it.
run:
	@bash scripts/install-deps.sh
	@$(MAKE) --no-print-directory all
	@bash scripts/run.sh

clean:
	rm -rf build

.PHONY: all tests test deps asan cuda-asan fuzz run clean hip-check cuda-tests

-include $(LIB_OBJ:.o=.d) $(CLI_OBJ:.o=.d) $(TESTS:=.d) $(HIP_OBJ:.o=.d)

#!/usr/bin/env bash
# Dev machine: build the CUDA binaries and fill .carry/ (git-ignored) with what scripts/gpu-check.sh needs on
# the GPU machine: bin.tar.xz (vllmc, the tests/cuda binaries, bench_gemv, bench_mega, bench_chain), lib/ (the shared libraries they
# load, except glibc, the C++ runtime and the CUDA libraries the GPU machine has), synth_gguf.py, and models/ (tiny dense llama / qwen2 / qwen3
# GGUFs from tests/tools/make_tiny_models.py, when the Python venv can quantize), moe/ (tiny qwen35moe q8_0 and
# q4_k_m from tests/tools/make_tiny_qwen35.py). Then call the device with
# carry [".carry"] and `bash scripts/gpu-check.sh`.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build/cuda}
make -j"$(nproc)" CUDA=1 BUILD="$BUILD" all cuda-tests >/tmp/gpu-carry-build.log 2>&1 || { tail -30 /tmp/gpu-carry-build.log; exit 1; }
nvcc -O3 -std=c++17 -gencode=arch=compute_90,code=sm_90 -Iinclude -Isrc -o "$BUILD/bench_gemv" bench/bench_gemv.cu \
    "$BUILD/libvllmc.a" -lpcre2-8 -lcjson -lm -lpthread -lcublas -lcublasLt
nvcc -O3 -std=c++17 -gencode=arch=compute_90,code=sm_90 -Iinclude -Isrc -o "$BUILD/bench_mega" bench/bench_mega.cu \
    "$BUILD/libvllmc.a" -lpcre2-8 -lcjson -lm -lpthread -lcublas -lcublasLt
nvcc -O3 -std=c++17 -gencode=arch=compute_90,code=sm_90 -o "$BUILD/bench_chain" bench/bench_chain.cu
# the binaries travel as one xz archive: each links the same CUDA kernels, ~8 MB a copy, which xz stores once
# (~7 MB for all of them against ~50 MB loose; -9 for the 64 MB dictionary: at the default 8 MB the copies sit too far
# apart to be matched)
rm -rf .carry/bin /tmp/gpu-carry-bin; mkdir -p .carry/lib /tmp/gpu-carry-bin
cp "$BUILD/vllmc" "$BUILD/bench_gemv" "$BUILD/bench_mega" "$BUILD/bench_chain" /tmp/gpu-carry-bin/
# EXTRA_BUILDS="name:-DFLAG[,-DFLAG2] ...": one more vllmc per entry, its kernels compiled with those flags, carried as
# vllmc_<name> (gpu-check's stage binvar times each against vllmc)
for e in ${EXTRA_BUILDS:-}; do
    name=${e%%:*}; flags=${e#*:}
    make -j"$(nproc)" CUDA=1 BUILD="/tmp/gpu-carry-$name" CUDA_ARCH="-gencode=arch=compute_90,code=sm_90 ${flags//,/ }" \
        "/tmp/gpu-carry-$name/vllmc" >/tmp/gpu-carry-build-$name.log 2>&1 || { tail -20 /tmp/gpu-carry-build-$name.log; exit 1; }
    cp "/tmp/gpu-carry-$name/vllmc" "/tmp/gpu-carry-bin/vllmc_$name"
done
# EXTRA_BINS="path:name ...": a vllmc built elsewhere (e.g. from an earlier commit), carried as vllmc_<name> for binvar
for e in ${EXTRA_BINS:-}; do cp "${e%%:*}" "/tmp/gpu-carry-bin/vllmc_${e##*:}"; done
for t in tests/cuda/test_*.c; do cp "$BUILD/tests/cuda/$(basename "$t" .c)" /tmp/gpu-carry-bin/; done
XZ_OPT=-9 tar cJf .carry/bin.tar.xz -C /tmp/gpu-carry-bin .
# the CUDA runtime and cuBLAS come from the GPU machine's own CUDA (/usr/local/cuda/lib64): libcublasLt alone is
# ~540 MB, far over the carry limit
for l in $(ldd "$BUILD/vllmc" | awk '{print $3}' | grep '^/'); do
    case $(basename "$l") in
    libc.so*|libdl.so*|libm.so*|libpthread.so*|librt.so*|libstdc++*|libgcc_s*|libcublas*|libcudart*) ;;
    *) cp -L "$l" .carry/lib/ ;;
    esac
done
# the kernel tracer for gpu-check's trace stage (CUPTI activity records, graph nodes included)
gcc -O2 -shared -fPIC -I/usr/local/cuda/include tools/cupti_trace.c -L/usr/local/cuda/lib64 -lcupti -o .carry/cupti_trace.so
SHARED=${SHARED:-../shared}
[ -f "$SHARED/tools/synth_gguf.py" ] && cp "$SHARED/tools/synth_gguf.py" .carry/
if [ ! -d .carry/models ] && [ -x .venv/bin/python ]; then
    mkdir -p .carry/models
    .venv/bin/python tests/tools/make_tiny_models.py .carry/models --types q8_0,q4_k_m >/tmp/gpu-carry-models.log 2>&1 ||
        echo "tiny dense models not made (see /tmp/gpu-carry-models.log)"
    # qwen2 at 896 columns: its Q4_K_M mix has the Q5_0 / Q8_0 fallbacks of rows that are not a multiple of 256
    .venv/bin/python tests/tools/make_tiny_models.py .carry/models --types q4_k_m --arch qwen2w >>/tmp/gpu-carry-models.log 2>&1 ||
        echo "tiny qwen2w model not made (see /tmp/gpu-carry-models.log)"
    rm -f .carry/models/*-f32.gguf # the f32 sources: ~28 MB the GPU checks do not use (the carry limit)
fi
# tiny qwen35moe (quantized variants only: the f32 ones would not fit the carry limit)
if [ ! -d .carry/moe ] && [ -x .venv/bin/python ]; then
    mkdir -p .carry/moe /tmp/gpu-carry-moe
    if .venv/bin/python tests/tools/make_tiny_qwen35.py /tmp/gpu-carry-moe --arch qwen35moe --types q8_0,q4_k_m \
        >/tmp/gpu-carry-moe.log 2>&1; then
        cp /tmp/gpu-carry-moe/qwen35moe-tiny-q8_0.gguf /tmp/gpu-carry-moe/qwen35moe-tiny-q4_k_m.gguf .carry/moe/
    else
        echo "tiny qwen35moe models not made (see /tmp/gpu-carry-moe.log)"
    fi
fi
du -sh .carry

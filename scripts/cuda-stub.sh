#!/usr/bin/env bash
# Builds the GPU-less CUDA runtime (tests/tools/cuda_stub.c) as libcudart.so.13, libcublas.so.13 and
# libcublasLt.so.13 in OUT_DIR. With OUT_DIR first on LD_LIBRARY_PATH, a `make CUDA=1` binary runs its host side
# on a machine without a GPU: kernels and graphs do nothing, so the output is meaningless, but the recording of
# each step, the passes over its records and the graph cache run for real (tests/py/test_cuda_host.py), e.g.
#   scripts/cuda-stub.sh build/stub && LD_LIBRARY_PATH=build/stub VLLMC_CUDA_MEGA2=4 build/cuda/vllmc bench -m M.gguf
# Usage: scripts/cuda-stub.sh OUT_DIR   (CUDA_INCLUDE: the CUDA headers; default: beside nvcc, or /usr/local/cuda)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: scripts/cuda-stub.sh OUT_DIR}
inc=${CUDA_INCLUDE:-}
if [ -z "$inc" ]; then
    if command -v nvcc > /dev/null; then inc=$(dirname "$(dirname "$(command -v nvcc)")")/include; else inc=/usr/local/cuda/include; fi
fi
[ -f "$inc/cuda_runtime_api.h" ] || { echo "cuda-stub: no cuda_runtime_api.h in $inc (set CUDA_INCLUDE)"; exit 2; }
mkdir -p "$out"
for lib in cudart:STUB_CUDART cublas:STUB_CUBLAS cublasLt:STUB_NONE; do
    name=${lib%%:*} def=${lib##*:}
    so=lib$name.so.13
    echo "$so { global: *; };" > "$out/$name.map"
    ${CC:-cc} -std=c11 -O1 -Wall -Wextra -Werror -fPIC -shared -I"$inc" -D"$def" -Wl,-soname,"$so" \
        -Wl,--version-script="$out/$name.map" -o "$out/$so" tests/tools/cuda_stub.c
done
echo "$out"

#!/usr/bin/env bash
# Creates .venv with the pinned test oracles (tests/requirements.txt). Re-running is cheap: pip reuses
# its cache, including the llama-cpp-python wheel it built from source the first time (~10 min on 2 cores).
set -euo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON:-python3}
if ! "$py" -c 'import venv, ensurepip' 2>/dev/null; then
    echo "setup-venv: python3-venv is missing (apt-get install python3-venv)"; exit 1
fi
[ -x .venv/bin/python ] || "$py" -m venv .venv
stamp=.venv/.requirements.sha
want=$(sha256sum tests/requirements.txt | cut -d' ' -f1)
if [ "$(cat $stamp 2>/dev/null)" != "$want" ]; then
    .venv/bin/pip install -q --upgrade pip
    # llama.cpp is built for a portable x86-64 with AVX2, so the wheel in pip's cache works on any CI host.
    CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON}" \
    CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) \
        .venv/bin/pip install -q -r tests/requirements.txt
    echo "$want" > $stamp
fi
echo "setup-venv: ok ($(.venv/bin/python --version))"

#!/usr/bin/env bash
# Instruction counts of one kernel's SASS: the whole function, and the part between its dependency wait (ACQBULK, the
# griddepcontrol.wait) and its first CTA barrier, where a mat-vec's terms are. For counting what a change to a
# kernel's inner loop costs without a GPU (static counts: a loop body counts once).
#   scripts/sass-count.sh OBJECT KERNEL-NAME-SUBSTRING
#   e.g. nvcc -O3 -std=c++17 -gencode=arch=compute_90,code=sm_90 -Iinclude -Isrc -c src/backend/cuda/gemv_q.cu -o /tmp/g.o
#        scripts/sass-count.sh /tmp/g.o _Z14mm_kernel_colsILi2ELi1ELi4ELi1ELi512ELi1E
# cuobjdump: $CUOBJDUMP, else the one on PATH, else the one Triton's wheel carries (fetched once into /tmp/cutools;
# the CUDA toolkit of the dev machine has none).
set -euo pipefail
[ $# -eq 2 ] || { sed -n '2,8p' "$0"; exit 2; }
obj=$1 want=$2
tool=${CUOBJDUMP:-$(command -v cuobjdump || true)}
if [ -z "$tool" ]; then
    tool=/tmp/cutools/cuobjdump
    if [ ! -x "$tool" ]; then
        d=$(mktemp -d)
        pip download -q --no-deps -d "$d" triton >/dev/null
        mkdir -p /tmp/cutools
        unzip -q -o -j "$d"/triton-*.whl 'triton/backends/nvidia/bin/cuobjdump' 'triton/backends/nvidia/bin/nvdisasm' -d /tmp/cutools
        chmod +x /tmp/cutools/*
        rm -rf "$d"
    fi
fi
name=$("$tool" -sass "$obj" | grep -o "Function : [^ ]*$want[^ ]*" | head -1 | cut -d' ' -f3 || true)
[ -n "$name" ] || { echo "no kernel matching $want in $obj" >&2; exit 1; }
sass=$(mktemp)
"$tool" -sass -fun "$name" "$obj" | grep -E '^\s+/\*[0-9a-f]{4,}\*/' >"$sass"
ops() { grep -oE '^\s+/\*[0-9a-f]+\*/\s+(@!?U?P[0-9T] )?[A-Z0-9_.]+' | awk '{print $NF}' | sort | uniq -c | sort -rn; }
a=$(grep -n 'ACQBULK' "$sass" | head -1 | cut -d: -f1 || true)
b=$(awk -v a="${a:-0}" 'NR > a && /BAR\.SYNC/ {print NR; exit}' "$sass")
echo "$name: $(wc -l <"$sass") instructions"
if [ -n "$a" ] && [ -n "$b" ]; then
    echo "before the wait: $((a - 1)); wait .. first barrier: $((b - a)); the rest: $(($(wc -l <"$sass") - b + 1))"
    echo "between the wait and the first barrier, by opcode:"
    sed -n "${a},$((b - 1))p" "$sass" | ops | head -25
else
    echo "by opcode:"
    ops <"$sass" | head -25
fi
rm -f "$sass"

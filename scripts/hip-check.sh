#!/usr/bin/env bash
# Every check of the HIP (AMD) build that this machine's compiler allows, and a line per target saying how
# it was checked. Debian's hipcc (ROCm 5.2, LLVM 15):
#   gfx1100 (RDNA3)  every kernel file compiled to device code with -Werror, -nogpulib (as CI does: Debian ships
#                    no gfx11 device library). Then, with a device-library directory made here from Debian's
#                    target-independent bitcode plus a generated oclc_isa_version_1100.bc (one constant,
#                    11000), the ISA is generated and inspected (wave32, the v_dot4_i32_iu8 packed dots,
#                    registers, spills, LDS of each kernel; the WMMA of the f16 GEMM) and the whole build is linked
#   gfx1030 (RDNA2)  the same, with Debian's own gfx1030 device library
# The linked binaries cannot run here (no AMD GPU).
#   gfx1200 (RDNA4)  unknown to this compiler: not checked (needs ROCm >= 6.4; see docs/ROCM.md)
# Usage: scripts/hip-check.sh [--no-link]. Output: a summary table last; ISA listings under build/hip/isa/.
set -uo pipefail
cd "$(dirname "$0")/.."
LINK=1
[ "${1:-}" = "--no-link" ] && LINK=0
HIPCC=${HIPCC:-hipcc}
JOBS=${JOBS:-$(nproc)}
summary=()
HIP_OFF_KERNELS='attn_prefill_kernel|gdn_chunk_|gdn_conv_chunk_kernel|gdn_qk_norm_kernel'
declare -A devlib
fail=0
note() { summary+=("$1"); }
# ROCm 5.2's clang 15 sometimes corrupts its heap in the gfx11 "AMDGPU Insert Delay ALU" pass on the largest
# kernels ("malloc(): unsorted double linked list corrupted"; seen with a gemv_q.cu whose prefill kernel body was
# doubled, 1 compile in 4, the same input compiling the next time). A command that dies that way is run again,
# up to twice, and counted.
crashes=0
retry_crash() { # log command... : run it, appending to log; rerun when the compiler crashed
    local log=$1 try; shift
    for try in 1 2 3; do
        local before; before=$(wc -c < "$log" 2>/dev/null || echo 0)
        "$@" >> "$log" 2>&1 && return 0
        tail -c +"$((before + 1))" "$log" | grep -q 'PLEASE submit a bug report' || return 1
        crashes=$((crashes + 1))
    done
    return 1
}

if ! command -v "$HIPCC" > /dev/null; then
    echo "hip-check: $HIPCC not found (Debian: apt-get install hipcc)"; exit 2
fi
echo "hip-check: $($HIPCC --version 2>/dev/null | grep -m1 -i 'version' || echo "$HIPCC")"

# ISA of one kernel file for one target: per kernel, VGPRs, spills, scratch, LDS, wave size; and whether
# the code calls out (with -nogpulib, math library calls stay external and force a 16 KB scratch guess).
isa_table() { # arch file.s
    awk -v arch="$1" '
        /^[ \t]*\.group_segment_fixed_size:/ { lds = $2 }
        /^[ \t]*\.name:/ { name = $2 }
        /^[ \t]*\.private_segment_fixed_size:/ { scratch = $2 }
        /^[ \t]*\.vgpr_count:/ { vgpr = $2 }
        /^[ \t]*\.vgpr_spill_count:/ { spill = $2 }
        /^[ \t]*\.wavefront_size:/ { wave = $2;
            printf "  %-8s %-60.60s wave%-3s vgpr %4s spill %3s scratch %6s lds %6s\n", arch, name, wave, vgpr, spill, scratch, lds }
    ' "$2"
}

mkdir -p build/hip/isa
# device library for gfx1100: Debian's bitcode (ocml/ockl are target-independent; the oclc_isa_version_*.bc
# control files only define __oclc_ISA_version) plus the gfx1100 control file it lacks
devlib_flag() { # arch -> extra hipcc flag that gives this arch a device library ("" when the system has one)
    local arch=$1 ver=${1#gfx} sys=""
    for d in "${ROCM_PATH:-/opt/rocm}/amdgcn/bitcode" /usr/lib/x86_64-linux-gnu/amdgcn/bitcode /usr/lib/amdgcn/bitcode; do
        [ -f "$d/ocml.bc" ] && { sys=$d; break; }
    done
    [ -n "$sys" ] || { echo "-nogpulib"; return; }
    [ -f "$sys/oclc_isa_version_$ver.bc" ] && { echo ""; return; }
    local dis as major   # the LLVM tools of hipcc's own clang (bitcode is not readable by an older LLVM)
    major=$($HIPCC --version 2>/dev/null | grep -io 'clang version [0-9]*' | head -1 | grep -o '[0-9]*$')
    dis=$(command -v "llvm-dis-$major" || command -v llvm-dis)
    as=$(command -v "llvm-as-$major" || command -v llvm-as)
    [ -n "$dis" ] && [ -n "$as" ] && [ -f "$sys/oclc_isa_version_1030.bc" ] || { echo "-nogpulib"; return; }
    local d=$PWD/build/hip/devlib-$arch
    rm -rf "$d"; mkdir -p "$d"
    for f in "$sys"/*.bc; do ln -s "$f" "$d/"; done
    local num=$(( 10#${ver:0:-2} * 1000 + 16#${ver: -2:1} * 100 + 16#${ver: -1} ))
    "$dis" "$sys/oclc_isa_version_1030.bc" -o - | sed "s/constant i32 10300/constant i32 $num/" | "$as" -o "$d/oclc_isa_version_$ver.bc" \
        && echo "--rocm-device-lib-path=$d" || echo "-nogpulib"
}

for arch in gfx1100 gfx1030; do
    log=build/hip/isa/compile-$arch.log
    if make -j"$JOBS" --no-print-directory HIP=1 HIP_ARCH=$arch hip-check > "$log" 2>&1; then
        n=$(ls src/backend/cuda/*.cu | wc -l)
        # device assembly, to look at what the compiler made of the kernels
        libs=$(devlib_flag $arch)
        devlib[$arch]=$libs
        isa_ok=1
        fam=""; [[ $arch == gfx11* ]] && fam=-DVLLMC_HIP_ARCH_GFX11   # as the Makefile does
        for f in src/backend/cuda/*.cu; do
            b=$(basename "$f" .cu)
            retry_crash "$log" $HIPCC -x hip --offload-arch=$arch $libs $fam --cuda-device-only -O3 -std=c++17 -Iinclude \
                -Isrc -Wno-unused-command-line-argument -S "$f" -o build/hip/isa/$b-$arch.s || isa_ok=0
        done
        dots=$(cat build/hip/isa/*-$arch.s 2>/dev/null | grep -c 'v_dot4c\?_i32_iu\?8' || true)
        w32=$(cat build/hip/isa/*-$arch.s 2>/dev/null | grep -c '\.wavefront_size: *32' || true)
        w64=$(cat build/hip/isa/*-$arch.s 2>/dev/null | grep -c '\.wavefront_size: *64' || true)
        wmma=$(cat build/hip/isa/*-$arch.s 2>/dev/null | grep -c 'v_wmma_' || true)
        how="system device library"
        [ "$libs" = -nogpulib ] && how="-nogpulib"
        [[ "$libs" == --rocm-device-lib-path* ]] && how="generated gfx11 ISA-version stub + Debian device library"
        { echo "ISA per kernel ($arch, $how)$([ "$libs" = -nogpulib ] && echo ': math-library calls stay external; scratch and VGPR caps reflect those calls')"; for s in build/hip/isa/*-$arch.s; do isa_table $arch "$s"; done; } > build/hip/isa/kernels-$arch.txt
        # spills in the kernels a HIP build launches, and apart those of the prefill kernels it keeps off (the chunked
        # GDN and the prefill attention want ~150 KB of shared memory a CTA: cuda_backend.cu turns them off on HIP)
        spills=$(awk -v off="$HIP_OFF_KERNELS" '{ for (i = 1; i < NF; i++) if ($i == "spill") s = $(i + 1) } NR > 1 && $2 !~ off { t += s } END { print t + 0 }' build/hip/isa/kernels-$arch.txt)
        spills_off=$(awk -v off="$HIP_OFF_KERNELS" '{ for (i = 1; i < NF; i++) if ($i == "spill") s = $(i + 1) } NR > 1 && $2 ~ off { t += s } END { print t + 0 }' build/hip/isa/kernels-$arch.txt)
        note "$arch: $n kernel files compiled (-Werror); ISA ($how) $([ $isa_ok = 1 ] && echo generated || echo FAILED): $w32 wave32 / $w64 wave64 kernels, $dots packed int8 dot instructions, $wmma WMMA instructions, $spills VGPRs spilled in the kernels HIP launches ($spills_off more in the prefill kernels it keeps off)"
        [ $isa_ok = 1 ] && [ "$w64" = 0 ] || fail=1
    else
        tail -30 "$log"
        note "$arch: kernel compile FAILED (see $log)"
        fail=1
    fi
done

if [ $LINK = 1 ]; then
    for arch in gfx1030 gfx1100; do
        libs=${devlib[$arch]:-}
        if [ "$libs" = -nogpulib ]; then note "$arch: full build not possible (no device library)"; continue; fi
        log=build/hip/isa/link-$arch.log
        : > "$log"
        if retry_crash "$log" make -j"$JOBS" --no-print-directory HIP=1 HIP_ARCH=$arch HIP_EXTRA="$libs" BUILD=build/hip/full-$arch all cuda-tests; then
            libhip=$(ldd build/hip/full-$arch/vllmc 2>/dev/null | grep -o 'libamdhip64[^ ]*' | head -1)
            note "$arch: full build linked: build/hip/full-$arch/vllmc and tests/cuda/* against ${libhip:-?}$([ -n "$libs" ] && echo ' (device library with the generated ISA-version stub)') (not run: no AMD GPU here)"
        else
            tail -30 "$log"
            note "$arch: full build FAILED (see $log)"
            fail=1
        fi
    done
else
    note "full builds skipped (--no-link)"
fi

if $HIPCC -x hip --offload-arch=gfx1200 -nogpulib -fgpu-rdc -c src/backend/cuda/gemv_q.cu -Iinclude -Isrc -o /dev/null > /dev/null 2>&1; then
    note "gfx1200: this compiler knows gfx1200: run make HIP=1 HIP_ARCH=gfx1200 hip-check"
else
    note "gfx1200: not checked (unknown to this hipcc; needs ROCm >= 6.4)"
fi

[ $crashes -gt 0 ] && note "compiler crashes retried: $crashes (clang 15, gfx11 Insert Delay ALU; see the top of this script)"
echo "hip-check summary:"
for s in "${summary[@]}"; do echo "  $s"; done
for a in gfx1100 gfx1030; do [ -f build/hip/isa/kernels-$a.txt ] && echo "  per-kernel ISA: build/hip/isa/kernels-$a.txt"; done
exit $fail

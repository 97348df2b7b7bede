#!/bin/sh
# bench/probe/one_rank_fused.sh: builds and runs bench/probe/one_rank_fused.cu
# on a one-GPU machine, from the repository root after `make`: cuts the
# paper schedule's one-rank FusedAllReduce kernel (v1_f0, and its elementwise
# form v1_f0_one) and the MM_AR_C elementwise kernel (v2_k0) out of
# `coconet gen --all-schedules` of examples/self_attention.coco, and includes
# them. Prints a table.
# Variable: PROBE_DIR (the folder for the generated code and the build;
# build/probe by default).
set -e
D=${PROBE_DIR:-build/probe}
mkdir -p "$D"
./coconet gen examples/self_attention.coco --ranks 1 -D B=8 -D S=1024 -D H=3072 \
    --all-schedules -o "$D/gen" >/dev/null
# every line of the paper and MM_AR_C variants up to their host functions
awk '/^\/\/ =+ self_attention: paper =+$/ { on = 1 }
     /^\/\/ =+ self_attention: MM_AR_C =+$/ { on = 1 }
     /^static int v[0-9]+_(f|k)[0-9]+_go\(/ { on = 0 }
     /^\/\/ =+ self_attention: / && !/: (paper|MM_AR_C) =+$/ { on = 0 }
     on' "$D/gen/self_attention.cu" >"$D/kernels.inc"
grep -q 'v1_f0(' "$D/kernels.inc" && grep -q 'v1_f0_one(' "$D/kernels.inc" &&
    grep -q 'v2_k0(' "$D/kernels.inc" ||
    { echo "one_rank_fused.sh: the kernels v1_f0, v1_f0_one and v2_k0 were not found"; exit 1; }
# the toolkit and NCCL that make chose (build/cuda.conf)
. ./build/cuda.conf
"$NVCC" -O3 -std=c++17 -arch=sm_90 -DCOCO_ONLY_P=1 -I"$D/gen" -I"$NCCL_INCLUDE" -L"$NCCL_LIB" \
    -DCOCO_PROBE_KERNELS="\"$PWD/$D/kernels.inc\"" bench/probe/one_rank_fused.cu \
    -o "$D/one_rank_fused" -Xlinker -rpath="$NCCL_LIB" -lcublasLt $NCCL_LINK
"$D/one_rank_fused"

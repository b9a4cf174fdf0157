#!/usr/bin/env bash
# Issue 22's checks for a lent GPU, in one call of under ten minutes, most telling first; each command has a
# limit of its own, so one that overruns leaves time for the rest. Results and each command's log go to $OUT.
#
#   OUT=/some/folder TAG=h200 bash benchmarks/gpu_checks.sh
#
# 1. speed_memory at batch 256: the compiled PALs forward and steps against the base where the kernels, not the
#    host, set the pace (at batch 32 LoRA, with 0.3% more FLOPs, cost 1.53x, mostly outside its kernels); the
#    base's MFU at a larger batch
# 2. pal_layout: do the PAL's matrix products at aligned sizes (204 -> 208) leave CUTLASS sm80 kernels for
#    faster ones? (one PAL layer, three layouts, eager and compiled)
# 3. host_overhead: the host's work per compiled call with CUDA graphs (guards, graph replay), base against
#    PALs and LoRA, at negligible arithmetic
# 4. profile_pals: the compiled forward's GPU time by kind of kernel at batch 32, and the wall time outside kernels
set -uo pipefail
OUT="${OUT:?set OUT to the folder for the results}"
TAG="${TAG:-gpu}"
cd "$(dirname "$0")/.."
mkdir -p "$OUT"

run() {
    local limit=$1 name=$2
    shift 2
    local start=$SECONDS
    timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
    echo "== $name: exit $? after $((SECONDS - start)) s (limit $limit s)"
    grep -v -e "^round " -e "Warning" "$OUT/$name.log" | tail -n 25
}

run 190 "speed_memory_bert_base_${TAG}_bf16_b256_reduce_overhead" python3 benchmarks/speed_memory.py \
    --model bert-base --device cuda --dtype bf16 --batch 256 --length 128 --warmup 2 --repeats 7 --compile \
    --compile-mode reduce-overhead --methods pals --parallel-configs '' --no-memory --out-dir "$OUT" \
    --name "speed_memory_bert_base_${TAG}_bf16_b256_reduce_overhead"
run 120 "pal_layout_${TAG}_bf16" python3 benchmarks/pal_layout.py --device cuda --out-dir "$OUT" \
    --name "pal_layout_${TAG}_bf16"
run 150 "host_overhead_${TAG}_reduce_overhead" python3 benchmarks/host_overhead.py --device cuda \
    --compile-mode reduce-overhead --methods pals,lora --threads 1 --out-dir "$OUT" \
    --name "host_overhead_${TAG}_reduce_overhead"
run 90 "profile_pals_forward_${TAG}_bf16_reduce_overhead" python3 benchmarks/profile_pals.py --model bert-base \
    --device cuda --dtype bf16 --batch 32 --compile-mode reduce-overhead --mode forward --steps 10 --top 30

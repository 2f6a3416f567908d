#!/usr/bin/env bash
# The H200 runs of issue 37, step by step, on a GPU machine without internet (wheels carried in .whl/: flashinfer-python
# 0.5.3, apache-tvm-ffi < 0.2, nvidia-cudnn-frontend, msgspec; README "FlashInfer on a GPU machine without internet").
#
#   bash benchmarks/h200_runs.sh OUT STEP...      STEP: main | decode4-a | decode4-b | counters4 | main-unfused | decode-a | decode-b | counters | replay | seed | serving
#
# main      the README's main job on this machine (default backends, seed preset, counters on), timed with its breakdown
# decode-a  the selection corpus's decode workloads 1-20 (examples/h200-corpus/workloads-a.txt) with every paged
#           decode backend (ours, FlashInfer tc / cuDNN / XQA / FA2 / FA3 paged, flex paged, sdpa-cudnn on the copy)
# decode-b  workloads 21-40, the same backends
# decode    workloads 1-40 in one run with ours, FlashInfer tc and cuDNN paged, sdpa-cudnn on the copy (the short form)
# decode4-a workloads 1-20 with those four backends, one run that finishes (profiler pass included) in one call
# decode4-b workloads 21-40, the same four
# counters4 the Nsight Compute pass over decode4-a, every cell
# main-unfused  the counter pass main's default leaves out (sdpa-math, eager, torch-paged-reference), on a copy of main
# counters  the Nsight Compute pass over decode-a (ours and FlashInfer's cuDNN paged decode)
# replay    the simulator's committed example: every step shape of its steps.txt with the backends it priced, --repeat 3
# seed      the seed preset with every backend (--backend all), counters on
# serving   the serving preset with every backend, no counters
# heldout-a / heldout-b  issue 34's held-out decode shapes 1-20 / 21-40 (examples/h200-heldout/workloads.txt) with the
#           four decode contenders; heldout-dense its 20 dense shapes with the dense contenders; heldout-rivals the
#           contested decode shapes with the backends that contested them (sdpa-nested, flashinfer-decode);
#           HELD, CONTESTED, RIVALS name another draw's files and contesters (the second draw: examples/h200-heldout-2,
#           whose README gives the commands; RIVALS_OUT names the run folder; DENSE_FROM / DENSE_TO the dense lines of HELD,
#           default 41-60, and DENSE_OUT the dense run's folder and log); heldout-rivals-dense its contested dense shapes (CONTESTED_DENSE, RIVALS_DENSE)
# corpus-dense  22 dense prefill / training shapes for the store (examples/h200-corpus/workloads-dense.txt)
# replay-mixed  the Azure conversation replay priced with triton-paged-prefill's one-launch mixed steps
#           (examples/simulate-azure-llama3-8b/triton-mixed/steps.txt), --repeat 3
# replay-moon   the Mooncake replay's step shapes (examples/simulate-mooncake-llama3-8b/steps.txt), both pairs, --repeat 2
# host-stall  benchmarks/host_stall.py on draw 3's launch-bound prefill and two training steps: each cell timed with the
#           host's stalls hidden (results schema 4) and without (schema <= 3), 5 rounds each (JSON in OUT)
# train-a / train-b  the store's 38 training steps outside draw 3 (TRAIN, default examples/h200-host-hidden/workloads-train.txt) 1-19 /
#           20-38 with sdpa-cudnn and sdpa-flash, timed with the host's stalls hidden
# prefill-a / prefill-b  the store's 43 dense prefills outside draw 3 (PREFILL, default
#           examples/h200-host-hidden/workloads-prefill.txt) 1-22 / 23-43 with sdpa-cudnn, sdpa-flash, flashinfer-prefill-ragged
# Runs are written under /tmp/h200-runs (outside the working tree: a later call replaces untracked paths there), one log
# per step; after every step the run directories are tarred into OUT/runs.tar.gz (at most 8 files come back).
set -uo pipefail
OUT=${1:?usage: h200_runs.sh OUT STEP...}; shift
cd "$(dirname "$0")/.."
W=/tmp/h200-runs; mkdir -p "$W" "$OUT"
export PYTHONUNBUFFERED=1
if ! command -v profattn >/dev/null || ! python3 -c 'import flashinfer' 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site
  python3 -m pip install -q --no-deps --no-build-isolation -e . >"$OUT/pip.log" 2>&1 || { cat "$OUT/pip.log"; exit 1; }
fi
DECODE=(--backend triton-paged-decode --backend flashinfer-decode-tc --backend flashinfer-cudnn-decode
        --backend flashinfer-xqa-decode --backend flashinfer-prefill-paged-fa2 --backend flashinfer-prefill-paged-fa3
        --backend flex-paged-decode --backend sdpa-cudnn)
DECODE4=(--backend triton-paged-decode --backend flashinfer-decode-tc --backend flashinfer-cudnn-decode --backend sdpa-cudnn)
specs() { grep -v '^#' "$1" | sed 's/^/--workload /'; }
lines() { grep -v '^#' "$1" | sed -n "$2,$3p" | sed 's/^/--workload /'; }
steps_specs() { grep -v '^#' "$1" | cut -f2 | sed 's/^/--workload /'; }
HELD=${HELD:-examples/h200-heldout/workloads.txt}  # HELD=examples/h200-heldout-2/workloads.txt for the second draw
CONTESTED=${CONTESTED:-examples/h200-heldout/workloads-contested.txt}
read -ra RIVALS <<<"${RIVALS:-sdpa-nested flashinfer-decode}"
CONTESTED_DENSE=${CONTESTED_DENSE:-examples/h200-heldout-2/workloads-contested-dense.txt}
read -ra RIVALS_DENSE <<<"${RIVALS_DENSE:-eager flashinfer-prefill-paged flex sdpa-efficient sdpa-nested}"
DENSE=(--backend sdpa-flash --backend sdpa-efficient --backend sdpa-cudnn --backend flashinfer-prefill-ragged)
TRAIN=${TRAIN:-examples/h200-host-hidden/workloads-train.txt}
PREFILL=${PREFILL:-examples/h200-host-hidden/workloads-prefill.txt}
TRAIN_BACKENDS=(--backend sdpa-cudnn --backend sdpa-flash)
PREFILL_BACKENDS=(--backend sdpa-cudnn --backend sdpa-flash --backend flashinfer-prefill-ragged)
STALL=(--workload phase=prefill,batch=4,q_len=1024,kv_len=1024,num_q_heads=2,num_kv_heads=1,head_dim=128,dtype=bfloat16
       --workload phase=train,batch=2,q_len=1024,kv_len=1024,num_q_heads=1,num_kv_heads=1,head_dim=64,dtype=bfloat16
       --workload phase=train,batch=1,q_len=2048,kv_len=2048,num_q_heads=16,num_kv_heads=8,head_dim=128,dtype=bfloat16)
replay_specs() { grep -v '^#' examples/simulate-azure-llama3-8b/steps.txt | cut -f2 | sed 's/^/--workload /'; }
step() {  # step NAME TIMEOUT_S COMMAND...: run, log, tar
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  echo "== $name: $*" >>"$OUT/steps.log"
  # every output line stamped with the seconds since the step began (where the time goes, cell by cell)
  timeout "$limit" "$@" 2>&1 | python3 -u -c 'import sys, time
t0 = time.perf_counter()
for line in sys.stdin: sys.stdout.write(f"{time.perf_counter() - t0:7.1f} {line}")' >"$OUT/$name.log"
  echo "== $name: exit ${PIPESTATUS[0]} after $((SECONDS - t0)) s" >>"$OUT/steps.log"
  tar czf "$OUT/runs.tar.gz" -C "$W" . 2>/dev/null
}
for s in "$@"; do
  case $s in
    main) step main 200 /usr/bin/time -v profattn profile --out "$W/main" ;;
    decode-a) step decode-a 420 profattn profile $(specs examples/h200-corpus/workloads-a.txt) "${DECODE[@]}" --no-counters --out "$W/decode-a" ;;
    decode) step decode 360 profattn profile $(specs examples/h200-corpus/workloads-a.txt) $(specs examples/h200-corpus/workloads-b.txt) \
              --backend triton-paged-decode --backend flashinfer-decode-tc --backend flashinfer-cudnn-decode --backend sdpa-cudnn \
              --no-counters --out "$W/decode" ;;
    decode4-a) step decode4-a 300 profattn profile $(specs examples/h200-corpus/workloads-a.txt) "${DECODE4[@]}" --no-counters --out "$W/decode4-a" ;;
    decode4-b) step decode4-b 300 profattn profile $(specs examples/h200-corpus/workloads-b.txt) "${DECODE4[@]}" --no-counters --out "$W/decode4-b" ;;
    counters4) step counters4 240 profattn counters "$W/decode4-a" ;;
    main-unfused) cp -r "$W/main" "$W/main-unfused"
              step main-unfused 200 profattn counters "$W/main-unfused" --backend sdpa-math --backend eager --backend torch-paged-reference ;;
    decode-b) step decode-b 420 profattn profile $(specs examples/h200-corpus/workloads-b.txt) "${DECODE[@]}" --no-counters --out "$W/decode-b" ;;
    counters) step counters 300 profattn counters "$W/decode-a" --backend triton-paged-decode --backend flashinfer-cudnn-decode ;;
    replay) step replay 300 profattn profile $(replay_specs) --backend triton-paged-decode --backend flashinfer-decode-tc \
              --backend flashinfer-prefill-paged --repeat 3 --no-counters --out "$W/replay" ;;
    seed) step seed 300 profattn profile --preset seed --backend all --out "$W/seed" ;;
    serving) step serving 400 profattn profile --preset serving --backend all --no-counters --out "$W/serving" ;;
    heldout-a) step heldout-a 280 profattn profile $(lines $HELD 1 20) "${DECODE4[@]}" --no-counters --out "$W/heldout-decode-a" ;;
    heldout-b) step heldout-b 285 profattn profile $(lines $HELD 21 40) "${DECODE4[@]}" --no-counters --out "$W/heldout-decode-b" ;;
    host-stall) step host-stall 60 python3 benchmarks/host_stall.py "${STALL[@]}" --rounds 5 --json "$OUT/host-stall.json" ;;
    train-a) step train-a ${TRAIN_LIMIT:-290} profattn profile $(lines "$TRAIN" 1 19) "${TRAIN_BACKENDS[@]}" --no-counters --out "$W/train-a" ;;
    train-b) step train-b ${TRAIN_LIMIT:-290} profattn profile $(lines "$TRAIN" 20 100) "${TRAIN_BACKENDS[@]}" --no-counters --out "$W/train-b" ;;
    prefill-a) step prefill-a 290 profattn profile $(lines "$PREFILL" 1 22) "${PREFILL_BACKENDS[@]}" --no-counters --out "$W/prefill-a" ;;
    prefill-b) step prefill-b 290 profattn profile $(lines "$PREFILL" 23 100) "${PREFILL_BACKENDS[@]}" --no-counters --out "$W/prefill-b" ;;
    heldout-dense) step "${DENSE_OUT:-heldout-dense}" ${DENSE_LIMIT:-270} profattn profile $(lines $HELD ${DENSE_FROM:-41} ${DENSE_TO:-60}) "${DENSE[@]}" --no-counters --out "$W/${DENSE_OUT:-heldout-dense}" ;;
    heldout-rivals) step heldout-rivals 380 profattn profile $(lines "$CONTESTED" 1 100) \
              $(printf -- '--backend %s ' "${RIVALS[@]}") --no-counters --out "$W/${RIVALS_OUT:-heldout-rivals}" ;;
    heldout-rivals-dense) step heldout-rivals-dense 250 profattn profile $(lines "$CONTESTED_DENSE" 1 100) \
              $(printf -- '--backend %s ' "${RIVALS_DENSE[@]}") --no-counters --out "$W/heldout-rivals-dense" ;;
    corpus-dense) step corpus-dense 270 profattn profile $(lines examples/h200-corpus/workloads-dense.txt 1 100) "${DENSE[@]}" \
              --no-counters --out "$W/corpus-dense" ;;
    replay-mixed) step replay-mixed 200 profattn profile $(steps_specs examples/simulate-azure-llama3-8b/triton-mixed/steps.txt) \
              --backend triton-paged-decode --backend triton-paged-prefill --repeat 3 --no-counters --out "$W/replay-mixed" ;;
    replay-moon) step replay-moon 280 profattn profile $(steps_specs examples/simulate-mooncake-llama3-8b/steps.txt) \
              --backend triton-paged-decode --backend triton-paged-prefill --backend flashinfer-decode-tc \
              --backend flashinfer-prefill-paged --repeat 2 --no-counters --out "$W/replay-moon" ;;
    *) echo "unknown step $s" >&2; exit 2 ;;
  esac
done
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv >"$OUT/gpu.txt" 2>&1
ls "$OUT"

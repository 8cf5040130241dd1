#!/usr/bin/env bash
# Horovod's synthetic benchmark (bench/pytorch_synthetic_benchmark.py) with
# horovodlite and with DDP (gloo), interleaved in pairs (the order alternates
# each pair), np 2, OMP_NUM_THREADS=1, plain `mpirun -np 2 --bind-to none`
# (plus ci/env.sh's OMPI_MCA_* variables), on one or both torch lines; prints
# each run's total img/s with the time and the 1-minute load before it
# (issue 29: horovodlite >= DDP on ResNet-18 and ResNet-50, both lines):
#   bash bench/resnet_vs_ddp.sh                                  # resnet18, both lines, 2 pairs
#   MODEL=resnet50 PAIRS=1 BATCHES="2 3 2" LINES=debian bash bench/resnet_vs_ddp.sh
# BATCHES: warm-up batches, batches per iteration, iterations (default "2 5 3").
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
model=${MODEL:-resnet18}
read -r warm per iters <<<"${BATCHES:-2 5 3}"
run() {  # line variant
  local line=$1 variant=$2 python build flag=""
  case $line in
    pypi) python=$root/.venv/bin/python build=$root/build ;;
    debian) python=/usr/bin/python3 build=$root/build-debian ;;
  esac
  [ "$variant" = ddp ] && flag=--ddp
  local t load
  t=$(date -u +%H:%M:%S)
  load=$(cut -d' ' -f1 /proc/loadavg)
  local total
  total=$( (source ci/env.sh
    OMP_NUM_THREADS=1 PYTHONPATH=$build/python timeout 900 mpirun -np 2 --bind-to none -x OMP_NUM_THREADS \
      "$python" bench/pytorch_synthetic_benchmark.py --model "$model" --batch-size 16 --no-cuda \
      --num-warmup-batches "$warm" --num-batches-per-iter "$per" --num-iters "$iters" $flag) 2>&1 |
    grep "Total img/sec" | sed 's/.*: //')
  echo "$model $line $variant $t load $load: ${total:-FAILED} img/s"
}
for pair in $(seq 1 "${PAIRS:-2}"); do
  for line in ${LINES:-pypi debian}; do
    if [ $((pair % 2)) -eq 1 ]; then
      run "$line" horovodlite
      run "$line" ddp
    else
      run "$line" ddp
      run "$line" horovodlite
    fi
  done
done
echo "end $(date -u +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg)"

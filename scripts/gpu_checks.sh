#!/usr/bin/env bash
# The checks a session lent a GPU runs in one call (each step under its own time limit, so one
# hang cannot eat the others' time): the CUDA cases of the test suite (every test parametrized
# over devices, plus the CUDA-only save/load, parity and NCCL tests), the step, vMF and DSIVI
# benchmarks on the GPU, a one-minute slice of the runbook's first leg and every example's
# --quick configuration. Logs and tables go to $OUT (default /tmp/gpu_checks).
#
#   bash scripts/gpu_checks.sh            # on the GPU machine, from the repository root
#
# Wheels in .whl/ (Pyro, for an image without it) and a data copy in .gpudata/ (shared/data's
# uci and MNIST) are used as scripts/gpu_env.sh says.
set -u
OUT=${OUT:-/tmp/gpu_checks}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
source scripts/gpu_env.sh

step() {  # step NAME SECONDS COMMAND...: run under a limit, log to $OUT/NAME.log, say how it ended
    local name=$1 limit=$2; shift 2
    local start=$SECONDS
    timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
    local rc=$?
    echo "== $name: rc $rc in $((SECONDS - start)) s (limit $limit s)"
    tail -n 25 "$OUT/$name.log"
}

{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c "import torch, pyro; print('torch', torch.__version__, 'pyro', pyro.__version__, torch.cuda.get_device_name(), 'cpus', __import__('os').cpu_count())"
  # this copy's .git can lag behind the tree sent: the caller names the commit
  echo "commit ${PYROZOO_SOURCE_COMMIT:-not named (set PYROZOO_SOURCE_COMMIT); the copied git says $(git rev-parse HEAD 2>/dev/null)}"; } | tee "$OUT/machine.txt"

PYTEST="python3 -m pytest -q -p no:cacheprovider -o addopts=-ra"
step cuda_tests "${CUDA_TESTS_LIMIT:-280}" $PYTEST -n 12 -k cuda tests
step cuda_only_tests "${CUDA_ONLY_LIMIT:-100}" $PYTEST -n 4 tests/test_save_load.py \
    "tests/test_distributed.py::test_cuda_chain_has_the_cpu_chains_statistics" \
    "tests/test_distributed.py::test_nccl_data_parallel_fit_follows_the_one_process_fit"
step step_overhead "${STEP_LIMIT:-90}" python3 benchmarks/step_overhead.py --device cuda --rounds 10  # 52 s on an H200
step vmf_sampling "${BENCH_LIMIT:-55}" python3 benchmarks/vmf_sampling.py --device cuda --layer
step dsivi_cost "${BENCH_LIMIT:-55}" python3 benchmarks/dsivi_cost.py --device cuda

# the runbook's first leg for a minute, then its status: a leg slice cut at its limit on a real GPU
# (marked partial, resumable), and the seconds it took for the runbook's time guesses
runbook_slice() {
    python3 tools/gpu_runbook.py --next --limit "${RUNBOOK_LIMIT:-60}" --grace 20 --results-dir /tmp/runbook/results --run-dir /tmp/runbook/runs
    python3 tools/gpu_runbook.py --status --results-dir /tmp/runbook/results --run-dir /tmp/runbook/runs | head -n 8
}
export -f runbook_slice
step runbook_slice "$(( ${RUNBOOK_LIMIT:-60} + 60 ))" bash -c runbook_slice

# Fashion-MNIST (30 MB) does not fit beside MNIST and the UCI sets under the device's 64 MiB
# working-tree limit: without it, compare_objectives leaves out its Fashion-MNIST and rotated-MNIST
# scores (--no-ood) rather than failing on the missing files
extra_options() {
    if [ "$1" = compare_objectives ] && [ ! -d "${PYROZOO_DATA_DIR:-shared/data}/FashionMNIST" ]; then echo --no-ood; fi
}
export -f extra_options
# every paper reproduction's and controlled study's --quick configuration on the GPU, 8 at a
# time, then the user examples'; left out: the tools (ledger, runbook, manifest, reference
# builds, which are not in these folders), ResNet-20 (needs CIFAR-10) and the two that only read
# other runs' results
examples_on_cuda() {
    ls reproductions/*.py studies/*.py \
        | grep -v -E "resnet_compression|uci_rdp_table|local_reparam_variance_scale" \
        | xargs -P 8 -I{} bash -c 'n=$(basename {} .py); timeout '"${EXAMPLE_LIMIT:-150}"' python3 {} --quick --device cuda --no-progress --results-dir /tmp/cuda_examples/$n $(extra_options $n) > /tmp/cuda_examples_$n.log 2>&1; echo "$n rc=$?"'
    for f in /tmp/cuda_examples_*.log; do echo "---- $f"; tail -n 8 "$f"; done
    # the short scripts a user copies: their own --quick and --device
    ls examples/*.py \
        | xargs -P 8 -I{} bash -c 'n=$(basename {} .py); timeout '"${EXAMPLE_LIMIT:-150}"' python3 {} --quick --device cuda > /tmp/cuda_user_examples_$n.log 2>&1; echo "$n rc=$?"'
    for f in /tmp/cuda_user_examples_*.log; do echo "---- $f"; tail -n 8 "$f"; done
}
mkdir -p /tmp/cuda_examples
export -f examples_on_cuda
step cuda_examples "$(( ${EXAMPLE_LIMIT:-150} + 20 ))" bash -c examples_on_cuda
exit 0

#!/usr/bin/env bash
# The GPU runbook's legs for one machine's time, and the one file that brings their results back
# (a machine given back keeps nothing; only a few files come back from it):
#
#   bash scripts/gpu_legs.sh COMMIT SECONDS [LIMIT [LEGS]]   # on the GPU machine, from the repository root
#   python tools/gpu_runbook.py --import <the files' folder>/gpu_legs.tgz   # back here
#
# COMMIT is the hash of the clean commit sent (the machine's copy of .git can lag behind it, so
# the manifest rows take it from here, $PYROZOO_SOURCE_COMMIT); SECONDS the time for legs, which
# run one after another while a whole LIMIT (default 480) is left, in the plan's order or only
# LEGS (names or numbers, comma-separated: gpu_runbook.py --only). Carry runs/gpu (the state:
# which legs are done) along with .whl/ and the data folder (scripts/gpu_env.sh; the
# Fashion-MNIST legs need $PYROZOO_DATA_DIR to be a folder with FashionMNIST/). The bundle,
# $OUT/gpu_legs.tgz, holds docs/results/gpu's files, their manifest rows and the state; a leg cut
# at its limit resumes from scratch on the next machine (its checkpoints stay behind), so LIMIT
# should hold a whole leg.
set -u
if [ $# -lt 2 ]; then echo "usage: bash scripts/gpu_legs.sh COMMIT SECONDS [LIMIT [LEGS]]" >&2; exit 2; fi
export PYROZOO_SOURCE_COMMIT=$1
OUT=${OUT:-/tmp/gpu_legs}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-4}
source scripts/gpu_env.sh
nvidia-smi --query-gpu=name --format=csv,noheader
python3 tools/gpu_runbook.py --next --budget "$2" --limit "${3:-480}" --grace 20 ${4:+--only "$4"} 2>&1 | tee "$OUT/gpu_legs.log" | grep -E "^== |accuracy|Error|error:"
python3 tools/gpu_runbook.py --status | grep -v "not started"
python3 tools/gpu_runbook.py --export "$OUT/gpu_legs.tgz"

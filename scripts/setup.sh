#!/usr/bin/env bash
# Creates the virtual environment and installs pyrozoo with its test, plotting and baselines extras,
# and puts this checkout on its path (for the repository-only zoo_protocols).
# Usage: scripts/setup.sh [VENV_DIR]
#   TORCH_INDEX_URL=https://download.pytorch.org/whl/cu124 scripts/setup.sh   # a CUDA build of torch
# Without TORCH_INDEX_URL, torch==2.13.0 is installed first (on CPU-only machines set up
# like ours this resolves to a local CPU wheel; it also keeps pip from resolving an
# unpinned torch to the multi-GB CUDA build). An already installed torch is kept.
set -euo pipefail
VENV="${1:-.venv}"
PYTHON="${PYTHON:-python3}"
if [ ! -x "$VENV/bin/python" ]; then
    "$PYTHON" -m venv "$VENV"
fi
PIP=("$VENV/bin/python" -m pip install --quiet --disable-pip-version-check)
if ! "$VENV/bin/python" -c "import torch" >/dev/null 2>&1; then
    if [ -n "${TORCH_INDEX_URL:-}" ]; then
        "${PIP[@]}" torch --index-url "$TORCH_INDEX_URL"
    else
        "${PIP[@]}" "torch==2.13.0"
    fi
fi
"${PIP[@]}" -e ".[test,plots,baselines]"
# laplace-torch and two of its dependencies declare torchvision, which they do not use on this path: without
# their dependencies (the baselines extra brings the rest), so pip pulls in neither torchvision nor another torch
"${PIP[@]}" --no-deps "laplace-torch==0.3" "backpack-for-pytorch==1.7.1" "curvlinops-for-pytorch==3.0.1"
# the paper reproductions, studies and tools import zoo_protocols, a repository-only package that
# pip install . leaves out: this environment finds it (and them) in the checkout
SITE=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "$(cd "$(dirname "$0")/.." && pwd)" > "$SITE/pyrozoo-checkout.pth"
touch "$VENV/.installed"
echo "pyrozoo installed in $VENV ($("$VENV/bin/python" -c 'import torch, pyro; print("torch", torch.__version__, "pyro", pyro.__version__)'))"

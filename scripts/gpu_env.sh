# Sourced by the scripts that run on the GPU machine (gpu_checks.sh, gpu_legs.sh), from the
# repository root: the machine's image has torch but not Pyro, so wheels found in .whl/ are
# installed to /tmp/site; the checkout goes on PYTHONPATH; a data copy in .gpudata/ becomes
# $PYROZOO_DATA_DIR unless that is set (a folder with FashionMNIST/, say); $OUT exists.
export PYTHONUNBUFFERED=1
mkdir -p "$OUT"
if compgen -G ".whl/*.whl" > /dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
    export PYTHONPATH=/tmp/site
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
if [ -z "${PYROZOO_DATA_DIR:-}" ] && [ -d .gpudata ]; then export PYROZOO_DATA_DIR=$PWD/.gpudata; fi

"""Shared test configuration: devices, dtypes, seeding, slow tests.

Tests are parametrized over ``device`` (``cpu``, plus ``cuda`` when available) and, where
precision matters, ``dtype``. Long experiments carry ``@pytest.mark.slow`` and run only
with ``--runslow``; each has a fast variant that always runs.
"""

from pathlib import Path

import pyro
import pytest
import torch

# One intra-op thread: the tests use small tensors, for which thread synchronisation costs
# more than it saves, and under a loaded machine (or pytest-xdist) it can cost 100x.
torch.set_num_threads(1)

def _data_root():
    """The shared data's root as the examples find it ($PYROZOO_DATA_DIR, else shared/data beside
    the checkout), or a path that does not exist: tests that need the data skip, saying so."""
    from zoo_protocols.paths import default_data_dir

    try:
        return default_data_dir()
    except FileNotFoundError:
        return Path(__file__).resolve().parents[2] / "shared" / "data"


DATA = _data_root()

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
# cuDNN convolutions default to TF32 (10-bit mantissa) on Ampere and later: the tests compare
# float32 results to rounding, so on a GPU they run in full float32 as on the CPU
torch.backends.cudnn.allow_tf32 = False
DTYPES = [torch.float32, torch.float64]


def pytest_addoption(parser):
    parser.addoption("--runslow", action="store_true", default=False, help="run tests marked slow")


def pytest_collection_modifyitems(config, items):
    if config.getoption("--runslow"):
        return
    skip = pytest.mark.skip(reason="slow: run with --runslow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _fresh_pyro_state():
    pyro.clear_param_store()
    pyro.set_rng_seed(0)
    pyro.enable_validation(True)
    yield
    pyro.clear_param_store()


@pytest.fixture(params=DEVICES)
def device(request):
    return torch.device(request.param)


@pytest.fixture(params=DTYPES, ids=["float32", "float64"])
def dtype(request):
    return request.param

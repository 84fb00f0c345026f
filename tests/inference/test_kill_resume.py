"""Real signals, real processes: a run killed by SIGINT, or by SIGKILL in the middle of
writing a checkpoint, resumes to exactly the result of a run that was never interrupted."""

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from pyrozoo.serialization import load_state

ROOT = Path(__file__).resolve().parents[2]

# The child trains for 4 epochs and saves its final parameters to RESULT. KILL says how it is
# stopped: "sigint" signals itself at the end of epoch 2 (as Ctrl-C would);
# "sigkill-in-save" dies while the second checkpoint file is half written.
CHILD = r"""
import os, signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)  # as from a terminal, even when pytest runs in the background
import torch
torch.set_num_threads(1)
import pyro
import pyrozoo.serialization as serialization
from pyrozoo.inference import SGLD, fit
from pyrozoo.guides import MeanFieldNormalGuide
from tests.inference.cases import conjugate_problem, linear_regression_model, small_bnn

runner, kill, checkpoint, result = sys.argv[1:5]
checkpoint = None if checkpoint == "-" else checkpoint
saves = 0
real_save = torch.save

def save_then_die(obj, f, *args, **kwargs):
    global saves
    saves += 1
    real_save(obj, f, *args, **kwargs)
    if saves == 2:
        with open(f, "r+b") as handle:  # half of the temporary file is on disk
            handle.truncate(os.path.getsize(f) // 2)
        os.kill(os.getpid(), signal.SIGKILL)

if kill == "sigkill-in-save":
    torch.save = save_then_die

def interrupt(epoch, row):
    if kill == "sigint" and epoch == 1:
        os.kill(os.getpid(), signal.SIGINT)

pyro.set_rng_seed(0)
if runner == "fit":
    model = small_bnn(dataset_size=None)
    guide = MeanFieldNormalGuide(model, init_scale=0.05)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(48, 5, generator=g)
    fit(model, guide, (x, x[:, :1] - x[:, 1:2]), epochs=4, batch_size=16, seed=3, checkpoint=checkpoint, progress=False, callback=interrupt)
    values = {k: v.detach().clone() for k, v in guide.state_dict().items()}
else:
    problem = conjugate_problem(n=40)
    sampler = SGLD(linear_regression_model(problem, dataset_size=40), lr=1e-3)
    sampler.run((problem.x, problem.y.unsqueeze(-1)), epochs=4, batch_size=10, seed=3, checkpoint=checkpoint, progress=False, callback=interrupt)
    values = sampler.values()
torch.save = real_save
serialization.save_state(values, result)
"""


def _child(runner, kill, checkpoint, result):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-c", CHILD, runner, kill, str(checkpoint), str(result)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    out = {}
    for runner in ("fit", "sampler"):
        result = tmp_path_factory.mktemp(runner) / "result.pt"
        done = _child(runner, "none", "-", result)
        assert done.returncode == 0, done.stderr
        out[runner] = load_state(result)
    return out


#: how a process ends when a KeyboardInterrupt reaches its top: killed by SIGINT where the
#: interpreter can re-raise it at exit, else 130 or 1 (seen where the signal mask holds SIGINT
#: back), with the KeyboardInterrupt's traceback either way
INTERRUPTED = (-signal.SIGINT, 128 + signal.SIGINT, 1)


def _stopped_as(kill, done) -> bool:
    if kill == "sigint":
        return done.returncode in INTERRUPTED and done.stderr.rstrip().endswith("KeyboardInterrupt")
    return done.returncode == -signal.SIGKILL


@pytest.mark.parametrize("kill", ["sigint", "sigkill-in-save"])
@pytest.mark.parametrize("runner", ["fit", "sampler"])
def test_a_killed_run_resumes_bit_identically(runner, kill, uninterrupted, tmp_path):
    checkpoint, result = tmp_path / "checkpoint.pt", tmp_path / "result.pt"
    killed = _child(runner, kill, checkpoint, result)
    assert _stopped_as(kill, killed), (killed.returncode, killed.stderr)
    assert not result.exists() and checkpoint.exists()
    assert load_state(checkpoint)["epoch"] in (1, 2)  # a complete checkpoint, whatever was torn
    resumed = _child(runner, "none", checkpoint, result)
    assert resumed.returncode == 0, resumed.stderr
    final = load_state(result)
    assert final.keys() == uninterrupted[runner].keys()
    for name, value in uninterrupted[runner].items():
        assert torch.equal(final[name], value), name

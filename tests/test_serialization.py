"""save_state / load_state: state is stored as data, a crafted file runs nothing, a broken
file is named, and a failed write leaves the previous file valid."""

import errno
import os
import pathlib
import random

import numpy as np
import pyro
import pytest
import torch
from pyro.distributions import constraints

from pyrozoo import atomic
from pyrozoo.inference import SGLD, fit
from pyrozoo.inference.sample_storage import DiskSamples
from pyrozoo.serialization import decode, encode, load_state, save_state
from pyrozoo.utils import rng_states, set_rng_states
from tests.inference.cases import conjugate_problem, linear_regression_model, small_bnn
from tests.runner import SCRIPT_FOLDERS

CONSTRAINTS = [
    constraints.real,
    constraints.positive,
    constraints.unit_interval,
    constraints.simplex,
    constraints.softplus_positive,
    constraints.interval(-1.5, 2.0),
    constraints.greater_than(3.0),
    constraints.half_open_interval(0.0, 1.0),
    constraints.independent(constraints.positive, 2),
    constraints.independent(constraints.interval(0.0, 4.0), 1),
]


def _same_constraint(a, b) -> bool:
    return type(a) is type(b) and {k: v for k, v in vars(a).items() if not isinstance(v, constraints.Constraint)} == {
        k: v for k, v in vars(b).items() if not isinstance(v, constraints.Constraint)
    } and all(_same_constraint(v, vars(b)[k]) for k, v in vars(a).items() if isinstance(v, constraints.Constraint))


@pytest.mark.parametrize("constraint", CONSTRAINTS, ids=repr)
def test_constraints_round_trip(constraint, tmp_path):
    save_state({"c": constraint}, tmp_path / "s.pt")
    back = load_state(tmp_path / "s.pt")["c"]
    assert _same_constraint(back, constraint)
    x = torch.rand(3, 2, 2) * 0.5 + 0.1
    assert torch.equal(back.check(x), constraint.check(x))


def test_module_level_constraints_keep_their_identity():
    from pyrozoo.distributions.constraints import positive_finite

    for constraint in (constraints.positive, constraints.real, positive_finite):
        assert decode(encode(constraint)) is constraint


def test_rng_states_round_trip_exactly(tmp_path, device):
    """Python's, NumPy's and torch's generators continue where they were saved."""
    pyro.set_rng_seed(11)
    random.random(), np.random.rand(), torch.rand(3)
    save_state({"rng": rng_states()}, tmp_path / "rng.pt")
    expected = (random.random(), np.random.rand(), torch.rand(3))
    pyro.set_rng_seed(99)
    set_rng_states(load_state(tmp_path / "rng.pt", map_location=device)["rng"])
    got = (random.random(), np.random.rand(), torch.rand(3))
    assert got[:2] == expected[:2] and torch.equal(got[2], expected[2])


def test_nested_plain_state_round_trips(tmp_path, device):
    state = {"a": [1, 2.5, "x", None, True], "t": (torch.arange(3.0, device=device), torch.Size([2, 3])), "d": {0: torch.ones(2, dtype=torch.float64)}}
    save_state(state, tmp_path / "s.pt")
    back = load_state(tmp_path / "s.pt", map_location=device)
    assert back["a"] == state["a"] and back["t"][1] == torch.Size([2, 3]) and isinstance(back["t"], tuple)
    assert torch.equal(back["t"][0], state["t"][0]) and back["t"][0].device == state["t"][0].device
    assert back["d"][0].dtype == torch.float64


def test_an_object_without_a_data_form_is_refused_on_save(tmp_path):
    with pytest.raises(TypeError, match=r"state\['model'\].*Linear.*state_dict"):
        save_state({"model": torch.nn.Linear(2, 2)}, tmp_path / "s.pt")
    assert not (tmp_path / "s.pt").exists()


class _Payload:
    """Unpickling this object creates ``marker``: what a crafted checkpoint would do."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (pathlib.Path.touch, (pathlib.Path(self.marker),))


def _malicious_file(tmp_path, name="evil.pt"):
    marker = tmp_path / "payload_ran"
    path = tmp_path / name
    torch.save({"format": "pyrozoo-state", "version": 1, "state": {"epoch": 1, "x": _Payload(marker)}}, path)
    return path, marker


def test_the_payload_of_the_test_really_runs_under_a_plain_unpickler(tmp_path):
    """The crafted file used below is a real attack: an unrestricted load creates the marker."""
    path, marker = _malicious_file(tmp_path)
    torch.load(path, weights_only=False)
    assert marker.exists()


def test_a_crafted_file_is_refused_without_running_anything(tmp_path):
    path, marker = _malicious_file(tmp_path)
    with pytest.raises(ValueError, match=f"{path}.*nothing in it was run"):
        load_state(path)
    assert not marker.exists()


def _fit_setup():
    pyro.clear_param_store()
    torch.manual_seed(0)
    model = small_bnn(dataset_size=None)
    from pyrozoo.guides import MeanFieldNormalGuide

    g = torch.Generator().manual_seed(0)
    x = torch.randn(32, 5, generator=g)
    return model, MeanFieldNormalGuide(model, init_scale=0.05), (x, x[:, :1])


def _sampler_run(checkpoint, epochs=1, sink=None):
    pyro.clear_param_store()
    problem = conjugate_problem(n=20)
    sampler = SGLD(linear_regression_model(problem, dataset_size=20), lr=1e-4)
    sampler.run((problem.x, problem.y.unsqueeze(-1)), epochs=epochs, batch_size=10, checkpoint=checkpoint, sink=sink, seed=0, progress=False)
    return sampler


RESUMERS = {
    "fit": lambda ckpt: fit(*_fit_setup(), epochs=1, batch_size=16, checkpoint=ckpt, progress=False),
    "sampler": lambda ckpt: _sampler_run(ckpt),
}


@pytest.mark.parametrize("resumer", RESUMERS)
def test_resuming_from_a_crafted_checkpoint_runs_nothing(resumer, tmp_path):
    path, marker = _malicious_file(tmp_path, "checkpoint.pt")
    with pytest.raises(ValueError, match="checkpoint.pt"):
        RESUMERS[resumer](path)
    assert not marker.exists()


def _broken_files(tmp_path):
    valid = tmp_path / "valid.pt"
    save_state({"epoch": 3, "w": torch.randn(1000)}, valid)
    raw = valid.read_bytes()
    files = {
        "empty": b"",
        "truncated": raw[: len(raw) // 2],
        "random bytes": os.urandom(256),
        "text": b"epoch,loss\n1,0.5\n",
    }
    paths = {}
    for name, content in files.items():
        paths[name] = tmp_path / f"{name.replace(' ', '_')}.pt"
        paths[name].write_bytes(content)
    foreign = tmp_path / "foreign.pt"
    torch.save({"epoch": 3}, foreign)  # a plain torch file: not a pyrozoo state
    paths["foreign"] = foreign
    return paths


BROKEN = ["empty", "truncated", "random bytes", "text", "foreign"]


@pytest.mark.parametrize("kind", BROKEN)
@pytest.mark.parametrize("resumer", [None, *RESUMERS])
def test_a_broken_file_is_an_error_naming_it(kind, resumer, tmp_path):
    path = _broken_files(tmp_path)[kind]
    with pytest.raises(ValueError, match=str(path)):
        load_state(path) if resumer is None else RESUMERS[resumer](path)


def test_a_missing_file_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.pt"):
        load_state(tmp_path / "nope.pt")


def _disk_full_after(nbytes):
    """A ``torch.save`` that writes ``nbytes`` and then fails as a full disk does."""
    real_save = torch.save

    def save(obj, f, *args, **kwargs):
        real_save(obj, f, *args, **kwargs)
        with open(f, "r+b") as handle:
            handle.truncate(nbytes)
        raise OSError(errno.ENOSPC, "No space left on device")

    return save


@pytest.mark.parametrize("saver", ["save_state", "fit", "sampler"])
def test_a_failed_save_names_the_file_and_keeps_the_previous_one(saver, tmp_path, monkeypatch):
    ckpt = tmp_path / "checkpoint.pt"
    if saver == "save_state":
        save_state({"epoch": 1}, ckpt)
    else:
        RESUMERS[saver](ckpt)
    before = ckpt.read_bytes()
    monkeypatch.setattr(torch, "save", _disk_full_after(10))
    with pytest.raises(OSError, match=f"could not write {ckpt}.*No space left"):
        if saver == "save_state":
            save_state({"epoch": 2}, ckpt)
        elif saver == "fit":
            fit(*_fit_setup(), epochs=2, batch_size=16, checkpoint=ckpt, progress=False)
        else:
            _sampler_run(ckpt, epochs=2)
    monkeypatch.undo()
    assert ckpt.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint.pt"]  # no temporary file left
    assert load_state(ckpt)["epoch"] == 1


def test_disk_sample_shards_are_data_and_a_bad_manifest_is_named(tmp_path):
    sink = DiskSamples(tmp_path / "samples", shard_size=2)
    for i in range(3):
        sink.append({"w": torch.full((2,), float(i))})
    sink.flush()
    assert torch.equal(DiskSamples(tmp_path / "samples").load()["w"][:, 0], torch.tensor([0.0, 1.0, 2.0]))
    path, marker = _malicious_file(tmp_path)
    os.replace(path, tmp_path / "samples" / "samples-00000.pt")
    with pytest.raises(ValueError, match="samples-00000.pt"):
        DiskSamples(tmp_path / "samples").load()
    assert not marker.exists()
    atomic.write_text(tmp_path / "samples" / "manifest.json", '{"shards": [{"file": "../../etc/passwd", "count": 1}]}')
    with pytest.raises(ValueError, match="manifest.json"):
        DiskSamples(tmp_path / "samples")


def test_no_other_loader_unpickles_files():
    """Every state file is read through load_state: no torch.load or pickle.load elsewhere
    (CIFAR's batches, pickles by their format, go through a restricted unpickler)."""
    root = pathlib.Path(__file__).resolve().parents[1]
    offenders = []
    for folder in ("pyrozoo", "zoo_protocols", *(f.name for f in SCRIPT_FOLDERS), "benchmarks", "scripts"):
        for path in sorted((root / folder).rglob("*.py")):
            if path.name == "serialization.py":
                continue
            for number, line in enumerate(path.read_text().splitlines(), 1):
                if any(call in line for call in ("torch.load(", "pickle.load(", "pickle.loads(", "weights_only=False")):
                    offenders.append(f"{path.relative_to(root)}:{number}: {line.strip()}")
    assert not offenders, "\n".join(offenders)

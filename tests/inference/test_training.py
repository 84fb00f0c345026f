"""fit: training, exact checkpoint/resume, interrupts, clear errors on bad input."""

import pyro
import pytest
import torch

from pyrozoo.data import TensorBatches
from pyrozoo.guides import DeltaGuide, MeanFieldNormalGuide
from pyrozoo.inference import BlundellKLReweighting, LinearKLWarmup, fit
from pyrozoo.serialization import load_state
from tests.inference.cases import small_bnn


def _data(n=64, device="cpu", seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 5, generator=g)
    y = (x[:, :1] * 2 - x[:, 1:2]) + 0.1 * torch.randn(n, 1, generator=g)
    return x.to(device), y.to(device)


def _setup(seed=0, device="cpu"):
    pyro.clear_param_store()
    torch.manual_seed(seed)
    model = small_bnn(device=device, dataset_size=None)
    return model, MeanFieldNormalGuide(model, init_scale=0.05)


def _state(model, guide):
    return [p.detach().clone() for p in list(model.parameters()) + list(guide.parameters())]


@pytest.mark.parametrize("estimator", [None, "local", "flipout"])
def test_training_lowers_the_loss(estimator, device):
    model, guide = _setup(device=device)
    history = fit(model, guide, _data(device=device), epochs=30, batch_size=16, lr=0.02, estimator=estimator, seed=1, progress=False)
    assert list(history.columns) == ["epoch", "loss", "kl_scale", "lr", "seconds"]
    assert history.loss.iloc[-5:].mean() < history.loss.iloc[:5].mean()
    assert model.likelihood.dataset_size == 64  # set from the data


@pytest.mark.parametrize("kl_schedule", [None, LinearKLWarmup(0, 3), BlundellKLReweighting()], ids=["none", "warmup", "blundell"])
def test_checkpoint_resume_equals_uninterrupted_run(tmp_path, kl_schedule, device):
    data = _data(device=device)
    model, guide = _setup(device=device)
    fit(model, guide, data, epochs=6, batch_size=16, seed=3, progress=False, estimator="local", kl_schedule=kl_schedule)
    straight = _state(model, guide)

    ckpt = tmp_path / "run.ckpt"
    model, guide = _setup(device=device)
    fit(model, guide, data, epochs=3, batch_size=16, seed=3, progress=False, estimator="local", kl_schedule=kl_schedule, checkpoint=ckpt)
    # a fresh process: other initial values, other RNG state; on CUDA the RNG states load back onto the CPU
    model, guide = _setup(seed=99, device=device)
    history = fit(model, guide, data, epochs=6, batch_size=16, seed=3, progress=False, estimator="local", kl_schedule=kl_schedule, checkpoint=ckpt)
    assert list(history.epoch) == [1, 2, 3, 4, 5, 6]
    for a, b in zip(straight, _state(model, guide)):
        assert torch.equal(a, b)


def test_interrupt_saves_a_checkpoint_and_resume_finishes_identically(tmp_path):
    data = _data()
    model, guide = _setup()
    fit(model, guide, data, epochs=5, batch_size=16, seed=4, progress=False)
    straight = _state(model, guide)

    ckpt = tmp_path / "run.ckpt"

    def interrupt(epoch, row):
        if epoch == 2:
            raise KeyboardInterrupt

    model, guide = _setup()
    with pytest.raises(KeyboardInterrupt):
        fit(model, guide, data, epochs=5, batch_size=16, seed=4, progress=False, checkpoint=ckpt, checkpoint_every=100, callback=interrupt)
    assert ckpt.exists() and load_state(ckpt)["epoch"] == 3
    model, guide = _setup(seed=7)
    fit(model, guide, data, epochs=5, batch_size=16, seed=4, progress=False, checkpoint=ckpt)
    for a, b in zip(straight, _state(model, guide)):
        assert torch.equal(a, b)


@pytest.mark.parametrize("checkpoint_every", [1, 100])
def test_an_interrupt_mid_epoch_resumes_from_the_epochs_start(tmp_path, checkpoint_every):
    """The half-updated parameters of an interrupted epoch are not saved: the checkpoint holds
    the state at the epoch's start (from disk, or from the copy kept when the last completed
    epoch was not written), and the resumed run equals the uninterrupted one."""
    data = _data()
    model, guide = _setup()
    fit(model, guide, data, epochs=5, batch_size=16, seed=4, progress=False)
    straight = _state(model, guide)

    def interrupt_mid_epoch(epoch, batch, num_batches):
        if (epoch, batch) == (2, 2):
            raise KeyboardInterrupt
        return 1.0

    ckpt = tmp_path / "run.ckpt"
    model, guide = _setup()
    with pytest.raises(KeyboardInterrupt):
        fit(model, guide, data, epochs=5, batch_size=16, seed=4, progress=False, checkpoint=ckpt, checkpoint_every=checkpoint_every, kl_schedule=interrupt_mid_epoch)
    saved = load_state(ckpt)
    assert saved["epoch"] == 2 and len(saved["history"]) == 2
    # Adam has taken exactly the two completed epochs' steps (4 batches each), not the partial ones
    assert all(int(v["step"]) == 8 for v in saved["optimizer"]["state"].values())
    model, guide = _setup(seed=7)
    fit(model, guide, data, epochs=5, batch_size=16, seed=4, progress=False, checkpoint=ckpt)
    for a, b in zip(straight, _state(model, guide)):
        assert torch.equal(a, b)


def test_callback_can_stop_early():
    model, guide = _setup()
    history = fit(model, guide, _data(), epochs=10, batch_size=32, progress=False, callback=lambda epoch, row: epoch == 1)
    assert len(history) == 2


def test_tensor_batches_are_accepted():
    x, y = _data()
    model, guide = _setup()
    history = fit(model, DeltaGuide(model), TensorBatches(x, y, batch_size=8, seed=0), epochs=2, progress=False)
    assert len(history) == 2


@pytest.mark.parametrize(
    "data,error,match",
    [
        ((torch.tensor([[float("nan")] * 5] + [[0.0] * 5] * 3), torch.zeros(4, 1)), ValueError, "NaN"),
        ((torch.zeros(4, 5), torch.tensor([[0.0], [float("inf")], [0.0], [0.0]])), ValueError, "training y"),
        ((torch.zeros(4, 5), torch.zeros(3, 1)), ValueError, "different numbers of examples"),
        ((torch.zeros(4, 5), torch.zeros(4, 2)), ValueError, "do not match network output"),
        ((torch.zeros(4, 7), torch.zeros(4, 1)), ValueError, "expects inputs with 5 features"),
        ((torch.zeros(4, 5),), ValueError, "must be"),
        ((torch.zeros(4, 5), [0.0] * 4), TypeError, "must be a tensor"),
    ],
    ids=["nan-x", "inf-y", "lengths", "y-shape", "x-shape", "no-y", "list-y"],
)
def test_bad_data_raises_clear_errors(data, error, match):
    model, guide = _setup()
    with pytest.raises(error, match=match):
        fit(model, guide, data, epochs=1, progress=False)


@pytest.mark.parametrize(
    "kwargs,match",
    [({"epochs": -1}, "epochs"), ({"epochs": 1, "estimator": "lrt"}, "estimator"), ({"epochs": 1, "checkpoint_every": 0}, "checkpoint_every"), ({"epochs": 1, "batch_size": 0}, "batch_size"),
     ({"epochs": 1, "lr": 0.0}, "lr"), ({"epochs": 1, "lr": -1e-3}, "lr"), ({"epochs": 1, "lr": float("nan")}, "lr"), ({"epochs": 1, "lr": float("inf")}, "lr")],
)
def test_bad_arguments_raise(kwargs, match):
    model, guide = _setup()
    with pytest.raises(ValueError, match=match):
        fit(model, guide, _data(), progress=False, **kwargs)


def test_divergence_is_reported_not_hidden():
    x, y = _data()
    model, guide = _setup()
    with pytest.raises(FloatingPointError, match="loss became"):
        fit(model, guide, (x * 1e30, y), epochs=2, progress=False)


def test_cuda_request_without_cuda_is_an_error():
    if torch.cuda.is_available():
        pytest.skip("CUDA is available here")
    model, guide = _setup()
    with pytest.raises(RuntimeError, match="CUDA is not available"):
        fit(model, guide, _data(), epochs=1, device="cuda", progress=False)


@pytest.mark.parametrize("bad_label", [3, -1])
def test_labels_outside_the_classifier_range_are_named_before_training(bad_label):
    from pyrozoo.guides import SparseVariationalDropoutGuide
    from pyrozoo.models import MLP, BayesianNeuralNetwork, CategoricalLikelihood, LogUniformPrior

    x, y = torch.randn(40, 4), torch.randint(0, 3, (40,))
    y[7] = bad_label
    model = BayesianNeuralNetwork(MLP(4, [6], 3), LogUniformPrior(), CategoricalLikelihood(40))  # improper: never drawn from
    guide = SparseVariationalDropoutGuide(model)
    with pytest.raises(ValueError, match=rf"label\(s\) \[{bad_label}\].*0\.\.2"):
        fit(model, guide, (x, y), epochs=1, progress=False)

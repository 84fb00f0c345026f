"""predict / evaluate: shapes, chunking, original-unit metrics, classification metrics."""

import math

import pyro.distributions as dist
import pytest
import torch

from pyrozoo.guides import DeltaGuide, MeanFieldNormalGuide
from pyrozoo.inference import evaluate, posterior_samples, predict
from pyrozoo.models import MLP, BayesianNeuralNetwork, Categorical, NormalPrior
from tests.inference.cases import small_bnn


def _regression(device="cpu", guide_class=MeanFieldNormalGuide):
    model = small_bnn(device=device)
    x, y = torch.randn(30, 5, device=device), torch.randn(30, 1, device=device)
    guide = guide_class(model) if guide_class is DeltaGuide else guide_class(model, init_scale=0.1)
    guide(x, y)
    return model, guide, x, y


def test_regression_prediction_summaries(device):
    model, guide, x, y = _regression(device)
    pred = predict(model, guide, x, num_samples=50)
    assert pred.mean.shape == (30, 1) and pred.std.shape == (30, 1) and pred.samples.shape == (50, 30, 1)
    samples = posterior_samples(model, guide, x, num_samples=50)
    noise_var = (1.0 / samples["noise_precision"]).mean()
    assert (pred.std**2 >= noise_var * (1 - 1e-5)).all()  # total variance includes the noise


def test_chunks_share_one_posterior_draw():
    """The same input in two different chunks gets the same output within a draw (one
    network per draw), and different outputs across draws."""
    model, guide, x, _ = _regression()
    doubled = torch.cat([x[:7], x[:7]])
    out = posterior_samples(model, guide, doubled, num_samples=4, batch_size=7)["_RETURN"]
    assert out.shape == (4, 14, 1)
    assert torch.allclose(out[:, :7], out[:, 7:])
    assert not torch.allclose(out[0], out[1])


def test_deterministic_guide_chunked_equals_unchunked():
    model, guide, x, _ = _regression(guide_class=DeltaGuide)
    a = posterior_samples(model, guide, x, num_samples=2)["_RETURN"]
    b = posterior_samples(model, guide, x, num_samples=2, batch_size=4)["_RETURN"]
    assert torch.allclose(a, b)


def test_metrics_in_original_units():
    model, guide, x, y = _regression(guide_class=DeltaGuide)
    standard = evaluate(model, guide, x, y, num_samples=1)
    scale, shift = 7.5, -3.0
    original = evaluate(model, guide, x, y, num_samples=1, y_scale=scale, y_shift=shift)
    assert original["rmse"] == pytest.approx(standard["rmse"] * scale, rel=1e-5)
    assert original["test_ll"] == pytest.approx(standard["test_ll"] - math.log(scale), rel=1e-6)
    # and the log-likelihood is the Gaussian density of the targets at the MAP point
    with torch.no_grad():
        f = model.net(x)
    precision = guide.median()["noise_precision"]
    expected = dist.Normal(f, precision.rsqrt()).log_prob(y).mean()
    assert standard["test_ll"] == pytest.approx(float(expected), rel=1e-5)


@pytest.mark.parametrize("output", ["column", "vector"])
def test_original_units_count_the_jacobian_once_per_target(output):
    """Outputs of shape (n, 1) or (n,): one scalar target per example, so the log-likelihood
    in original units is lower by log(scale), whatever the number of examples."""
    from torch import nn

    from pyrozoo.models import Gaussian

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = nn.Linear(5, 1)

        def forward(self, x):
            out = self.linear(x)
            return out if output == "column" else out.squeeze(-1)

    torch.manual_seed(0)
    model = BayesianNeuralNetwork(Net(), NormalPrior(1.0), Gaussian(30, precision=dist.Gamma(6.0, 6.0)))
    x = torch.randn(30, 5)
    y = torch.randn(30, 1) if output == "column" else torch.randn(30)
    guide = DeltaGuide(model)
    guide(x, y)
    standard = evaluate(model, guide, x, y, num_samples=1)
    original = evaluate(model, guide, x, y, num_samples=1, y_scale=2.0)
    assert original["test_ll"] == pytest.approx(standard["test_ll"] - math.log(2.0), rel=1e-6)


def test_classification_metrics(device):
    net = MLP(4, [8], 3).to(device)
    model = BayesianNeuralNetwork(net, NormalPrior(1.0), Categorical(50))
    x = torch.randn(20, 4, device=device)
    y = torch.randint(0, 3, (20,), device=device)
    guide = MeanFieldNormalGuide(model, init_scale=0.01)
    guide(x, y)
    metrics = evaluate(model, guide, x, y, num_samples=10)
    assert set(metrics) == {"accuracy", "error", "test_ll", "ece"}
    assert metrics["error"] == pytest.approx(100 * (1 - metrics["accuracy"]))
    pred = predict(model, guide, x, num_samples=10)
    assert torch.allclose(pred.mean.sum(-1), torch.ones(20, device=device), atol=1e-5)


def test_num_samples_must_be_positive():
    model, guide, x, _ = _regression()
    with pytest.raises(ValueError):
        predict(model, guide, x, num_samples=0)


def test_fixed_samples_evaluate_the_median_network():
    """``samples=`` conditions on given values: the posterior-median network's metrics."""
    model, guide, x, y = _regression()
    median = guide.median()
    out = posterior_samples(model, guide, x, num_samples=1, batch_size=8, samples={k: v[None] for k, v in median.items()})["_RETURN"]
    params = {k: v for k, v in median.items() if k != "noise_precision"}
    assert torch.allclose(out[0], model.net_output(params, x), atol=1e-6)

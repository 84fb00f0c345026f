"""The IVON baseline (ivon-opt): it trains, and it predicts with draws from its posterior."""

import pytest
import torch

pytest.importorskip("ivon")

from pyrozoo.baselines import IVONBaseline  # noqa: E402
from pyrozoo.models import MLP  # noqa: E402
from tests.baselines.conftest import LIKELIHOOD_CASES, targets_for  # noqa: E402


@pytest.mark.parametrize("make_likelihood, width", LIKELIHOOD_CASES)
def test_training_lowers_the_loss_and_the_predictive_has_spread(make_likelihood, width):
    # enough data for a posterior narrow enough that the sampled networks fit it
    x = torch.linspace(-2, 2, 256)[:, None]
    likelihood = make_likelihood(len(x))
    y = targets_for(likelihood, x)
    torch.manual_seed(0)
    baseline = IVONBaseline(MLP(1, [16], width), likelihood, hess_init=1.0)
    history = baseline.fit(x, y, epochs=50, batch_size=64, lr=0.1, noise_lr=0.1)
    # the loss at sampled weights is noisy from epoch to epoch: compare the last ten epochs' mean
    assert len(history) == 50 and sum(history[-10:]) / 10 < 0.75 * history[0]
    f, latents = baseline.sample_outputs(x, 30)
    assert f.shape == (30, len(x), width)
    assert (f.std(0) > 0).all()  # every draw is another network
    split = baseline.uncertainty(x, 30)
    assert (split["epistemic"] > 0).all()
    if getattr(likelihood, "precision_prior", None) is not None:
        # the learned noise precision is a point estimate: the same in every draw
        assert latents["precision"].shape == (30,) and torch.unique(latents["precision"]).numel() == 1
    # prediction leaves the posterior mean in the network
    mean = [p.detach().clone() for p in baseline.net.parameters()]
    baseline.sample_outputs(x, 3)
    assert all(torch.equal(a, b) for a, b in zip(mean, baseline.net.parameters()))


def test_sampled_weights_have_the_posterior_variance_of_the_prior_and_curvature():
    """IVON's posterior variance is 1 / (N (h + delta)), with delta = 1 / (s^2 N) for a
    N(0, s^2) prior; draws of one weight match it (up to their sampling error)."""
    x = torch.linspace(-1, 1, 20)[:, None]
    likelihood = LIKELIHOOD_CASES[1].values[0](20)
    baseline = IVONBaseline(MLP(1, [], 1), likelihood, prior_scale=0.5, hess_init=0.3)
    baseline.fit(x, torch.zeros(20), epochs=1, batch_size=20, lr=0.0)  # lr 0: the mean stays, h moves once
    group = baseline.optimizer.param_groups[0]
    assert group["weight_decay"] == pytest.approx(1 / (0.25 * 20))
    variance = 1.0 / (20 * (group["hess"] + group["weight_decay"]))
    draws = torch.stack([baseline.sample_outputs(torch.tensor([[0.0]]), 1)[0].reshape(()) for _ in range(4000)])
    bias_variance = float(variance[-1])  # the output at x = 0 is the bias, the last parameter
    assert float(draws.var()) == pytest.approx(bias_variance, rel=5 * (2 / 4000) ** 0.5)


def test_predicting_before_training_is_an_error():
    with pytest.raises(RuntimeError, match="fit"):
        IVONBaseline(MLP(1, [2], 1), LIKELIHOOD_CASES[2].values[0](4)).sample_outputs(torch.zeros(2, 1))

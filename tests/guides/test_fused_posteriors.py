"""Sparse VD and Bayesian compression steps with the fused posteriors (``guide.fused``, the
default) against the reference computation (``guide.fused = False``): under the same random
seed the ELBO, every gradient and the parameters after a few optimizer steps agree to rounding,
for each weight-noise estimator, under a KL weight, on dense and convolutional layers."""

import pyro
import pytest
import torch

from pyrozoo.guides.bayesian_compression import BayesianCompressionGuide
from pyrozoo.guides.variational_dropout import SparseVariationalDropoutGuide, VariationalDropoutGuide
from pyrozoo.inference import ClosedFormKL_ELBO, collect_parameters, default_optimizer
from pyrozoo.inference.training import training_step
from pyrozoo.models import MLP, BayesianNeuralNetwork, CategoricalLikelihood
from pyrozoo.models.compression_priors import GroupHorseshoePrior, GroupNormalJeffreysPrior
from pyrozoo.models.dropout_priors import ARDPrior, LogUniformPrior
from pyrozoo.poutine import latent_scale
from tests.guides.networks import SmallConvNet


#: name -> (prior factory, guide factory)
METHODS = {
    "sparse-vd": (LogUniformPrior, lambda m: SparseVariationalDropoutGuide(m)),
    "sparse-vd-no-train-clip": (LogUniformPrior, lambda m: SparseVariationalDropoutGuide(m, train_clip=False)),
    "additive-ard": (ARDPrior, lambda m: VariationalDropoutGuide(m, parameterization="additive")),
    "bc-gnj": (GroupNormalJeffreysPrior, lambda m: BayesianCompressionGuide(m, init_log_sigma2=-4.0)),
    "bc-ghs": (lambda: GroupHorseshoePrior(tau0=0.1), lambda m: BayesianCompressionGuide(m, init_log_sigma2=-4.0)),
}
ESTIMATORS = ["local", None, "flipout"]


def _setup(method, conv):
    prior, guide_factory = METHODS[method]
    pyro.clear_param_store()  # each set-up registers its own parameters under the same names
    torch.manual_seed(0)
    net = (SmallConvNet() if conv else MLP(6, [5], 4)).to(torch.float64)
    model = BayesianNeuralNetwork(net, prior(), CategoricalLikelihood(dataset_size=50))
    g = torch.Generator().manual_seed(1)
    x = torch.rand((8, 1, 6, 6) if conv else (8, 6), generator=g, dtype=torch.float64)
    y = torch.randint(0, 4, (8,), generator=g)
    guide = guide_factory(model)
    guide(x, y)
    # spread the parameters so that log alpha lies inside and outside the clip and on both
    # sides of the pruning threshold
    with torch.no_grad():
        for name, p in guide.named_parameters():
            p.add_((2.0 if "log_sigma2" in name else 0.3) * torch.randn(p.shape, generator=g, dtype=p.dtype))
    return model, guide, x, y


def _loss_and_grads(model, guide, x, y, estimator, fused):
    from pyrozoo.inference.training import ESTIMATORS as HANDLERS

    guide.fused = fused
    params = [p for p in collect_parameters(model, guide, ClosedFormKL_ELBO(), (x, y)) if p.requires_grad]
    torch.manual_seed(2)
    handler = HANDLERS[estimator]
    with latent_scale(0.3):
        if handler is None:
            loss = ClosedFormKL_ELBO().differentiable_loss(model, guide, x, y)
        else:
            with handler():
                loss = ClosedFormKL_ELBO().differentiable_loss(model, guide, x, y)
    return loss, torch.autograd.grad(loss, params, allow_unused=True)


@pytest.mark.parametrize("method", sorted(METHODS))
@pytest.mark.parametrize("estimator", ESTIMATORS, ids=str)
@pytest.mark.parametrize("conv", [False, True], ids=["mlp", "conv"])
def test_elbo_and_gradients_equal_the_reference(method, estimator, conv):
    model, guide, x, y = _setup(method, conv)
    loss, grads = _loss_and_grads(model, guide, x, y, estimator, fused=True)
    ref_loss, ref_grads = _loss_and_grads(model, guide, x, y, estimator, fused=False)
    torch.testing.assert_close(loss, ref_loss, rtol=1e-11, atol=1e-11)
    assert len(grads) == len(ref_grads)
    for a, b in zip(grads, ref_grads):
        assert (a is None) == (b is None)
        if a is not None:
            torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-10 * max(1.0, float(b.abs().max())))


@pytest.mark.filterwarnings("ignore::pyrozoo.models.dropout_priors.KLWarmupWarning")
@pytest.mark.parametrize("method", ["sparse-vd", "bc-gnj", "bc-ghs"])
def test_training_steps_equal_the_reference(method):
    """Five steps of ``fit``'s step (fused Adam) from the same state and seed."""
    states = []
    for fused in (True, False):
        model, guide, x, y = _setup(method, conv=False)
        guide.fused = fused
        objective = ClosedFormKL_ELBO()
        params = collect_parameters(model, guide, objective, (x, y))
        optimizer = default_optimizer(params, 1e-2)
        torch.manual_seed(3)
        losses = [training_step(model, guide, objective, optimizer, (x, y), estimator="local", params=params) for _ in range(5)]
        states.append((torch.stack(losses), [p.detach().clone() for p in params]))
    (losses, params), (ref_losses, ref_params) = states
    torch.testing.assert_close(losses, ref_losses, rtol=1e-10, atol=1e-10)
    for a, b in zip(params, ref_params):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-10)


def test_fused_posteriors_are_the_default():
    model, guide, x, y = _setup("sparse-vd", conv=False)
    assert SparseVariationalDropoutGuide.fused and BayesianCompressionGuide.fused
    assert type(guide.posterior("0.weight").base_dist).__name__ == "AdditiveDropoutNormal"
    with torch.no_grad():
        # no KL is computed for prediction
        assert guide.posterior("0.weight").base_dist._kl is None


@pytest.mark.parametrize("method", ["bc-gnj", "bc-ghs"])
def test_bayesian_compression_fuses_on_cpus_only(method, device):
    """On CUDA the reference weight posterior is the faster one (launch-bound): taken there
    whatever ``fused`` says; on a CPU the fused one."""
    from pyro import poutine

    from pyrozoo.distributions.noncentred_normal import NoncentredNormal

    model, guide, x, y = _setup(method, conv=False)
    model.to(device)
    guide.to(device)
    trace = poutine.trace(guide).get_trace(x.to(device), y.to(device))
    weights = [site["fn"].base_dist for name, site in trace.nodes.items() if site["type"] == "sample" and name.endswith("weight")]
    assert weights and all(isinstance(w, NoncentredNormal) == (device.type == "cpu") for w in weights)

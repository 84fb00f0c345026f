"""The mean-field step after issue 26 (Gaussian KLs that provide the variances, fused
local-reparameterization layers) against the reference computation it replaced: the same
loss bit for bit from the same random stream, the same gradients and steps to rounding."""

import pytest
import torch

import pyrozoo.inference.elbo as elbo_module
from pyrozoo.guides import MeanFieldNormalGuide
from pyrozoo.inference import ClosedFormKL_ELBO, default_optimizer
from pyrozoo.inference.training import training_step
from pyrozoo.inference.elbo import ReferenceClosedFormKL_ELBO
from pyrozoo.models import MLP, BayesianNeuralNetwork, CategoricalLikelihood, NormalPrior
from pyrozoo.poutine import flipout, latent_scale, local_reparameterization
from pyrozoo.poutine.weight_noise import local_reparameterization_reference
from tests.inference.cases import small_bnn

#: estimator -> (handler of the step under test, handler of the reference)
ESTIMATORS = {
    "none": (None, None),
    "local": (local_reparameterization, local_reparameterization_reference),
    "flipout": (flipout, flipout),
}


def _classifier():
    net = MLP(6, [8, 5], 3)
    return BayesianNeuralNetwork(net, NormalPrior(1.0), CategoricalLikelihood(dataset_size=200))


#: model name -> (model factory, data factory); the regression model's Gamma precision is a
#: LogNormal site that the Gaussian node leaves to the site-by-site KL
MODELS = {
    "classifier": (_classifier, lambda g: (torch.randn(10, 6, generator=g), torch.randint(0, 3, (10,), generator=g))),
    "regression-random-precision": (lambda: small_bnn(precision="random"), lambda g: (torch.randn(10, 5, generator=g), torch.randn(10, 1, generator=g))),
}


def _setup(model_name, seed=0):
    torch.manual_seed(seed)
    make_model, make_data = MODELS[model_name]
    model = make_model()
    x, y = make_data(torch.Generator().manual_seed(seed))
    guide = MeanFieldNormalGuide(model, init_scale=0.05)
    guide(x, y)
    return model, guide, x, y


def _loss(objective, handler, model, guide, x, y, kl_scale, seed):
    torch.manual_seed(seed)
    with latent_scale(kl_scale):
        if handler is None:
            return objective.differentiable_loss(model, guide, x, y)
        with handler():
            return objective.differentiable_loss(model, guide, x, y)


@pytest.mark.parametrize("kl_scale", [1.0, 0.3])
@pytest.mark.parametrize("estimator", list(ESTIMATORS))
@pytest.mark.parametrize("model_name", list(MODELS))
def test_loss_and_gradients_equal_the_reference(model_name, estimator, kl_scale, monkeypatch):
    model, guide, x, y = _setup(model_name)
    params = [p for p in guide.parameters()] + [p for p in model.parameters() if p.requires_grad]
    calls = []
    summed = elbo_module.summed_kl_total
    monkeypatch.setattr(elbo_module, "summed_kl_total", lambda pairs, **kw: calls.append(kw) or summed(pairs, **kw))
    handler, reference_handler = ESTIMATORS[estimator]
    loss = _loss(ClosedFormKL_ELBO(), handler, model, guide, x, y, kl_scale, seed=5)
    assert calls == [{"provide_variances": True}]  # the direct evaluation ran, with the Gaussian node
    ref = _loss(ReferenceClosedFormKL_ELBO(), reference_handler, model, guide, x, y, kl_scale, seed=5)
    assert torch.equal(loss, ref)
    grads = torch.autograd.grad(loss, params, allow_unused=True)
    ref_grads = torch.autograd.grad(ref, params, allow_unused=True)
    for g, r in zip(grads, ref_grads):
        assert (g is None) == (r is None)
        if g is not None:
            # float32 sums of at most a few hundred terms, in another order
            torch.testing.assert_close(g, r, rtol=1e-5, atol=1e-5 * r.abs().max().item())


@pytest.mark.parametrize("estimator", ["local", "none"])
def test_training_steps_equal_the_reference(estimator):
    """Five steps of ``training_step`` (fused Adam) from the same start and seed: the same
    parameters to rounding, so the step changed the cost and not the optimisation."""
    runs = []
    for objective, handler in ((ClosedFormKL_ELBO(), ESTIMATORS[estimator][0]), (ReferenceClosedFormKL_ELBO(), ESTIMATORS[estimator][1])):
        model, guide, x, y = _setup("classifier")
        params = list(guide.parameters())
        opt = default_optimizer(params, 1e-2)
        torch.manual_seed(11)
        losses = []
        for _ in range(5):
            if handler is None:
                losses.append(training_step(model, guide, objective, opt, (x, y), params=params))
            else:
                with handler():
                    losses.append(training_step(model, guide, objective, opt, (x, y), params=params))
        runs.append((torch.stack(losses), [p.detach().clone() for p in params]))
    (losses, params), (ref_losses, ref_params) = runs
    torch.testing.assert_close(losses, ref_losses, rtol=1e-5, atol=0.0)
    for p, r in zip(params, ref_params):
        torch.testing.assert_close(p, r, rtol=1e-5, atol=1e-6)

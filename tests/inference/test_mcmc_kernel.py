"""The Pyro MCMC-runner adapter: MCMC and StreamingMCMC drive a stochastic-gradient
sampler over minibatches, and its samples feed Predictive."""

import pytest
import torch
from pyro.infer import MCMC, Predictive
from pyro.infer.mcmc.api import StreamingMCMC

from pyrozoo.inference.mcmc_kernel import SGMCMCKernel
from pyrozoo.inference.sgmcmc import SGHMC, SGLD
from tests.inference.cases import conjugate_problem, linear_regression_model, unscaled_regression_model


def test_mcmc_runner_collects_thinned_samples_that_feed_predictive():
    problem = conjugate_problem(n=40)
    model = linear_regression_model(problem, dataset_size=40)
    sampler = SGHMC(model, lr=1e-4, momentum=0.5)
    kernel = SGMCMCKernel(sampler, batch_size=10, thin=4)
    mcmc = MCMC(kernel, num_samples=30, warmup_steps=20, disable_progbar=True)
    mcmc.run(problem.x, problem.y.unsqueeze(-1))
    samples = mcmc.get_samples()
    assert samples["weight"].shape == (30, 1, 3)
    assert sampler.num_steps == (20 + 30) * 4
    # the last sample is the sampler's current state
    assert torch.equal(samples["weight"][-1], sampler.values()["weight"])
    post_mean, _ = problem.posterior()
    predictive = Predictive(model, posterior_samples=samples, return_sites=["_RETURN"])(problem.x)
    assert predictive["_RETURN"].shape == (30, 40, 1)
    # the chain has moved from the network's initialisation (model.net keeps it) to the posterior
    start = model.net.weight.detach().reshape(-1)
    assert (samples["weight"][-10:].mean(0).reshape(-1) - post_mean).norm() < 0.3 * (start - post_mean).norm()


def test_streaming_mcmc_keeps_only_statistics():
    problem = conjugate_problem(n=40)
    sampler = SGLD(linear_regression_model(problem, dataset_size=40), lr=1e-4)
    mcmc = StreamingMCMC(SGMCMCKernel(sampler, batch_size=20), num_samples=25, warmup_steps=5, disable_progbar=True)
    mcmc.run(problem.x, problem.y.unsqueeze(-1))
    stats = mcmc.get_statistics(group_by_chain=False)
    assert stats["weight"]["count"] == 25


def test_kernel_needs_the_data():
    problem = conjugate_problem(n=40)
    kernel = SGMCMCKernel(SGLD(linear_regression_model(problem, dataset_size=40), lr=1e-4), batch_size=10)
    with pytest.raises(ValueError, match=r"\(x, y\)"):
        MCMC(kernel, num_samples=2, warmup_steps=0, disable_progbar=True).run(problem.x)


def test_kernel_rejects_a_model_without_the_minibatch_scale():
    problem = conjugate_problem(n=40)
    kernel = SGMCMCKernel(SGLD(unscaled_regression_model, lr=1e-4), batch_size=10)
    with pytest.raises(ValueError, match="N/n"):
        MCMC(kernel, num_samples=2, warmup_steps=0, disable_progbar=True).run(problem.x, problem.y)

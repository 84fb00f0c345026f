"""The LeNet compression recipes' ``build_*`` functions (split out of ``train_*`` so that
``benchmarks/epoch_time.py`` times the recipes' own step): training through them gives, under a
fixed seed, exactly the parameters of the recipes' training as it was written before the split."""

import pyro
import pytest
import torch

from zoo_protocols import compress_bayesian_compression as bc, compress_rdp as rdp, compress_sparse_vd as svd
from zoo_protocols.config import RunConfig
from zoo_protocols.lenet_recipes import fit_recipe, kl_warmup, linear_to_zero, network_for
from zoo_protocols.methods import method
from pyrozoo.models import BayesianNeuralNetwork, CategoricalLikelihood

EPOCHS = 1


def train_sparse_vd_before(train, config, epochs):
    s = config.settings(svd.DEFAULTS, svd.SPEC.defaults)
    pyro.clear_param_store()
    torch.manual_seed(config.seed)
    net = network_for(config, s["init"])
    model = BayesianNeuralNetwork(net, svd.PRIORS[s["prior"]](), CategoricalLikelihood(dataset_size=len(train[0])))
    guide = svd.SPEC.guide(model, s)
    hold = 0.5 if config.arch == "lenet300" else 0.0
    fit_arguments = {**svd.SPEC.fit_arguments(s, epochs), "kl_schedule": kl_warmup(epochs)}
    history = fit_recipe(model, guide, train, config, epochs, 1e-3, lr_schedule=linear_to_zero(epochs, hold), **fit_arguments)
    return model, guide, history


def train_bayesian_compression_before(train, config, epochs, spec):
    s = config.settings(spec.defaults, bc.DEFAULTS)
    pyro.clear_param_store()
    torch.manual_seed(config.seed)
    net = network_for(config, s["init"])
    model = BayesianNeuralNetwork(net, spec.prior(s), CategoricalLikelihood(dataset_size=len(train[0])))
    guide = spec.guide(model, s)
    lr_schedule = linear_to_zero(epochs, float(s["lr_hold"]))
    fit_arguments = {**spec.fit_arguments(s, epochs), "kl_schedule": kl_warmup(epochs)}
    history = fit_recipe(model, guide, train, config, epochs, 1e-3, lr_schedule=lr_schedule, **fit_arguments)
    return model, guide, history


def train_rdp_before(train, config, epochs):
    s = rdp.settings(config)
    pyro.clear_param_store()
    torch.manual_seed(config.seed)
    net = network_for(config, "torch")
    model = BayesianNeuralNetwork(net, rdp.SPEC.prior(s), CategoricalLikelihood(dataset_size=len(train[0])))
    guide = rdp.SPEC.guide(model, s)
    history = fit_recipe(model, guide, train, config, epochs, float(s["lr"]), **rdp.SPEC.fit_arguments(s, epochs))
    return model, guide, history


#: name -> (the training after the split, the training before it)
CASES = {
    "sparse-vd": (svd.train_sparse_vd, train_sparse_vd_before),
    "bc-gnj": (lambda *a: bc.train_bayesian_compression(*a, method("bc-gnj")), lambda *a: train_bayesian_compression_before(*a, method("bc-gnj"))),
    "bc-ghs": (lambda *a: bc.train_bayesian_compression(*a, method("bc-ghs")), lambda *a: train_bayesian_compression_before(*a, method("bc-ghs"))),
    "rdp": (rdp.train_rdp, train_rdp_before),
}


def _trained(train_fn, data):
    config = RunConfig(arch="lenet300", batch_size=32, seed=3, progress=False, extra={"input_shape": (1, 8, 8), "num_classes": 4})
    model, guide, history = train_fn(data, config, EPOCHS)
    state = {f"guide.{k}": v.detach().clone() for k, v in guide.state_dict().items()}
    state.update({f"model.{k}": v.detach().clone() for k, v in model.state_dict().items()})
    state.update({f"store.{k}": v.detach().clone() for k, v in pyro.get_param_store().items()})
    return state, history


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("name", list(CASES))
def test_build_then_fit_trains_exactly_as_before(name):
    g = torch.Generator().manual_seed(0)
    data = (torch.rand(64, 1, 8, 8, generator=g), torch.randint(0, 4, (64,), generator=g))
    after, history_after = _trained(CASES[name][0], data)
    before, history_before = _trained(CASES[name][1], data)
    assert sorted(after) == sorted(before) and len(after) > 0
    for key in before:
        assert torch.equal(after[key], before[key]), key
    assert list(history_after["loss"]) == list(history_before["loss"])

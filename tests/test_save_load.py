"""pyrozoo.save / pyrozoo.load: a fitted posterior round-trips as data, onto any device, and
a file that does not fit what it is loaded into is named."""

import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro.distributions import constraints

import pyrozoo
from pyrozoo.guides import DeltaGuide, MeanFieldNormalGuide
from pyrozoo.inference import SGHMC, fit, posterior_samples
from pyrozoo.inference.sample_storage import InMemorySamples
from tests.inference.cases import conjugate_problem, linear_regression_model, small_bnn

GUIDES = {"mean-field": lambda m: MeanFieldNormalGuide(m, init_scale=0.05), "map": DeltaGuide}


def _data(device="cpu"):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(48, 5, generator=g)
    return x.to(device), (x[:, :1] - x[:, 1:2]).to(device)


def _fitted(guide_name, hidden=7, device="cpu"):
    pyro.clear_param_store()
    torch.manual_seed(0)
    model = small_bnn(hidden=hidden, dataset_size=None, device=device)
    guide = GUIDES[guide_name](model)
    fit(model, guide, _data(device), epochs=3, batch_size=16, lr=0.02, seed=1, progress=False)
    return model, guide


def _fresh(guide_name, hidden=7, device="cpu"):
    pyro.clear_param_store()
    torch.manual_seed(123)
    model = small_bnn(hidden=hidden, dataset_size=48, device=device)
    return model, GUIDES[guide_name](model)


@pytest.mark.parametrize("guide_name", GUIDES)
def test_a_fitted_guide_round_trips_and_predicts_the_same(guide_name, device, tmp_path):
    model, guide = _fitted(guide_name, device=device)
    x, y = _data(device)
    pyro.set_rng_seed(5)
    before = posterior_samples(model, guide, x, num_samples=4)["_RETURN"]
    pyrozoo.save(guide, tmp_path / "guide.pt")

    model2, guide2 = _fresh(guide_name, device=device)
    loaded = pyrozoo.load(tmp_path / "guide.pt", into=guide2, args=(x[:4], y[:4]), map_location=device)
    assert loaded is guide2
    for (name, a), (name2, b) in zip(guide.state_dict().items(), guide2.state_dict().items()):
        assert name == name2 and torch.equal(a, b) and b.device == a.device
    pyro.set_rng_seed(5)
    after = posterior_samples(model2, guide2, x, num_samples=4)["_RETURN"]
    assert torch.equal(before, after)


def test_a_guide_loads_onto_another_device(tmp_path):
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    _, guide = _fitted("mean-field")
    pyrozoo.save(guide, tmp_path / "guide.pt")
    model2, guide2 = _fresh("mean-field", device="cuda")
    x, y = _data("cuda")
    pyrozoo.load(tmp_path / "guide.pt", into=guide2, args=(x[:4], y[:4]), map_location="cuda")
    for a, b in zip(guide.state_dict().values(), guide2.state_dict().values()):
        assert b.is_cuda and torch.equal(a, b.cpu())


def test_a_guide_of_another_model_is_refused(tmp_path):
    _, guide = _fitted("mean-field", hidden=8)
    pyrozoo.save(guide, tmp_path / "guide.pt")
    _, other = _fresh("mean-field", hidden=16)
    with pytest.raises(ValueError, match="guide.pt does not fit this MeanFieldNormalGuide.*size mismatch"):
        pyrozoo.load(tmp_path / "guide.pt", into=other, args=tuple(t[:4] for t in _data()))


def test_a_guide_of_another_class_is_refused(tmp_path):
    _, guide = _fitted("mean-field")
    pyrozoo.save(guide, tmp_path / "guide.pt")
    _, other = _fresh("map")
    with pytest.raises(ValueError, match="MeanFieldNormalGuide, not of a .*DeltaGuide"):
        pyrozoo.load(tmp_path / "guide.pt", into=other, args=tuple(t[:4] for t in _data()))


def test_loading_needs_a_target_or_the_inputs_that_set_it_up(tmp_path):
    _, guide = _fitted("mean-field")
    pyrozoo.save(guide, tmp_path / "guide.pt")
    with pytest.raises(ValueError, match="pass into="):
        pyrozoo.load(tmp_path / "guide.pt")
    _, fresh = _fresh("mean-field")
    with pytest.raises(ValueError, match="pass args="):
        pyrozoo.load(tmp_path / "guide.pt", into=fresh)


def test_a_chain_and_its_draws_round_trip(tmp_path, device):
    problem = conjugate_problem(n=40)
    data = (problem.x.to(device), problem.y.unsqueeze(-1).to(device))

    def sampler():
        pyro.clear_param_store()
        return SGHMC(linear_regression_model(problem, device=device, dataset_size=40), lr=1e-4, momentum=0.5)

    chain, sink = sampler(), InMemorySamples()
    chain.run(data, epochs=2, batch_size=10, sink=sink, seed=0, progress=False)
    pyrozoo.save(chain, tmp_path / "chain.pt")
    pyrozoo.save(sink.load(), tmp_path / "draws.pt")

    restored = pyrozoo.load(tmp_path / "chain.pt", into=sampler(), args=(data[0][:10], data[1][:10]), map_location=device)
    assert restored.num_steps == chain.num_steps
    assert torch.equal(restored.values()["weight"], chain.values()["weight"])
    draws = pyrozoo.load(tmp_path / "draws.pt")
    assert torch.equal(draws["weight"], sink.load()["weight"])
    with pytest.raises(ValueError, match="draws"):
        pyrozoo.load(tmp_path / "draws.pt", into=sampler())


def test_the_param_store_of_a_plain_pyro_guide_round_trips(tmp_path):
    def guide():
        pyro.param("loc", torch.tensor([0.5, -1.0]))
        pyro.param("scale", torch.tensor([0.2, 0.3]), constraint=constraints.positive)
        pyro.param("p", torch.tensor(0.25), constraint=constraints.unit_interval)

    guide()
    expected = {k: v.detach().clone() for k, v in pyro.get_param_store().items()}
    pyrozoo.save(pyro.get_param_store(), tmp_path / "params.pt")
    pyro.clear_param_store()
    pyrozoo.load(tmp_path / "params.pt")
    store = pyro.get_param_store()
    assert store.keys() == expected.keys()
    for k, v in expected.items():
        assert torch.allclose(store[k], v)
    assert store._constraints["scale"] is constraints.positive


def test_objects_without_a_state_are_refused(tmp_path):
    with pytest.raises(TypeError, match="cannot save a function"):
        pyrozoo.save(lambda: None, tmp_path / "f.pt")
    with pytest.raises(TypeError, match="cannot save a dict"):
        pyrozoo.save({}, tmp_path / "f.pt")


def test_a_checkpoint_is_not_taken_for_a_posterior(tmp_path):
    pyrozoo.serialization.save_state({"epoch": 1}, tmp_path / "ck.pt")
    with pytest.raises(ValueError, match="not a saved posterior"):
        pyrozoo.load(tmp_path / "ck.pt")


def test_plain_pyro_autoguides_round_trip(tmp_path):
    """A Pyro AutoNormal (a PyroModule) is saved by its state dict like pyrozoo's guides."""

    def model(x):
        w = pyro.sample("w", dist.Normal(torch.zeros(2), 1.0).to_event(1))
        with pyro.plate("data", len(x)):
            pyro.sample("y", dist.Normal(x @ w, 1.0), obs=x.sum(-1))

    x = torch.randn(10, 2)
    guide = pyro.infer.autoguide.AutoNormal(model)
    svi = pyro.infer.SVI(model, guide, pyro.optim.Adam({"lr": 0.1}), pyro.infer.Trace_ELBO())
    for _ in range(5):
        svi.step(x)
    pyrozoo.save(guide, tmp_path / "auto.pt")
    pyro.clear_param_store()
    fresh = pyrozoo.load(tmp_path / "auto.pt", into=pyro.infer.autoguide.AutoNormal(model), args=(x,))
    assert torch.equal(fresh.locs.w, guide.locs.w)

"""Data-parallel SVI and parallel SG-MCMC on torch.distributed, with real processes.

Each fixture below spawns two gloo ranks on a free port (``torch.multiprocessing``) once and
runs a scenario on both; the tests compare what the ranks computed with the same scenario on
one process: data-parallel ``fit`` with global batch ``B`` follows the one-process ``fit`` with
batch ``B`` to rounding (an even split and an uneven last batch, with a KL schedule), the
data-parallel SG-MCMC chain (SGLD; SGHMC with SG-MCMC-SA's tied noise scale) is the
one-process chain, independent chains are distinct, reproducible, one-process chains of
their derived seeds, and resume exactly; every rank but 0 writes no file (a Python audit
hook sees every ``open`` for writing, rename and removal). A CUDA parity test and the NCCL
path run where a GPU is present.
"""

import os
import socket
import subprocess
import sys
from functools import partial
from pathlib import Path

import pyro
import pyro.distributions as dist
import pytest
import torch
import torch.distributed as torch_dist
import torch.multiprocessing as mp
from pyro.ops.stats import effective_sample_size

# an optimizer's first use imports torch._dynamo (seconds): imported once here, where the
# forked ranks inherit it, instead of in every rank of every scenario
import torch._dynamo  # noqa: E402,F401

from pyrozoo import distributed
from pyrozoo.data import TensorBatches
from pyrozoo.chains import chain_diagnostics, pool_chains
from pyrozoo.data import ShardedBatches
from pyrozoo.distributed import DataParallel, IndependentChains, chain_seed, gather_chains
from pyrozoo.guides import DeltaGuide, MeanFieldNormalGuide
from pyrozoo.inference import SGHMC, SGLD, BlundellKLReweighting, DiskSamples, InMemorySamples, StochasticApproximation, fit
from pyrozoo.models import BayesianNeuralNetwork, GaussianLikelihood
from pyrozoo.models.spike_and_slab import SpikeAndSlabPrior
from pyrozoo.serialization import load_state, save_state
from tests.inference.cases import conjugate_problem, linear_regression_model, small_bnn

HAS_CUDA = torch.cuda.is_available()
ROOT = Path(__file__).resolve().parents[1]
#: float64 rounding after a few dozen steps whose only difference is the order of a sum
ROUNDING = dict(rtol=1e-9, atol=1e-12)


# -- spawning ranks ------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _audit_writes(folder: Path) -> list:
    """Every write, rename or removal of a file under ``folder`` this process makes from now on."""
    root = os.path.abspath(folder)
    writes = []

    def under(path) -> bool:
        return isinstance(path, (str, bytes, os.PathLike)) and os.path.abspath(os.fsdecode(path)).startswith(root)

    def hook(event, args):
        if event == "open":
            path, mode, flags = args
            writing = any(c in mode for c in "wax+") if isinstance(mode, str) else bool(flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT))
            if writing and under(path):
                writes.append((event, os.fsdecode(path)))
        elif event in ("os.rename", "os.remove", "os.truncate", "shutil.rmtree") and any(under(a) for a in args[:2]):
            writes.append((event, os.fsdecode(args[0])))

    sys.addaudithook(hook)
    return writes


def _rank_main(rank, world_size, port, backend, scenario, out_dir, run_dir, kwargs):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    if backend == "nccl":
        torch.cuda.set_device(rank)
    writes = _audit_writes(Path(run_dir))
    torch_dist.init_process_group(backend, rank=rank, world_size=world_size)
    try:
        result = SCENARIOS[scenario](Path(run_dir), **kwargs)
        torch_dist.barrier()
    finally:
        torch_dist.destroy_process_group()
    result["writes"] = list(writes)
    save_state(result, Path(out_dir) / f"rank{rank}.pt")


def spawn(scenario: str, folder: Path, world_size: int = 2, backend: str = "gloo", **kwargs) -> list:
    """Runs ``SCENARIOS[scenario](run_dir, **kwargs)`` on ``world_size`` new processes;
    returns each rank's result (with ``writes``: its file writes under ``run_dir``).

    CPU ranks are forked (they start with this process's imports: seconds instead of tens
    of seconds on a loaded machine); CUDA ranks are spawned (CUDA does not survive a fork)."""
    out_dir, run_dir = folder / "out", folder / "run"
    out_dir.mkdir(parents=True)
    run_dir.mkdir()
    args = (world_size, free_port(), backend, scenario, str(out_dir), str(run_dir), kwargs)
    mp.start_processes(_rank_main, args=args, nprocs=world_size, join=True, start_method="spawn" if backend == "nccl" else "fork")
    return [load_state(out_dir / f"rank{r}.pt") for r in range(world_size)]


# -- scenarios: the same code on each rank and on one process --------------------------------
#: name -> (guide, n, global batch size, KL schedule): an even split; an uneven last batch
#: (51 = 3 x 16 + 3: parts of 2 and 1) under Blundell's per-batch KL weights
SVI_CASES = {
    "map-even": ("delta", 48, 16, None),
    "mfvi-uneven-blundell": ("meanfield", 51, 16, "blundell"),
}
#: a case for local reparameterization, whose draws follow the parts' sizes (equal here)
LRT_CASE = {"mfvi-even": ("meanfield", 48, 16, None)}


def svi_run(case, epochs=4, checkpoint=None, device="cpu", distributed=None, callback=None, estimator=None) -> dict:
    guide_kind, n, batch_size, schedule = {**SVI_CASES, **LRT_CASE}[case]
    pyro.clear_param_store()
    pyro.set_rng_seed(0)
    model = small_bnn(dataset_size=None, dtype=torch.float64, device=device)
    guide = DeltaGuide(model) if guide_kind == "delta" else MeanFieldNormalGuide(model, init_scale=0.05)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(n, 5, generator=g, dtype=torch.float64)
    y = x[:, :1] - x[:, 1:2] + 0.1 * torch.randn(n, 1, generator=g, dtype=torch.float64)
    kl = BlundellKLReweighting() if schedule == "blundell" else None
    history = fit(model, guide, (x.to(device), y.to(device)), epochs=epochs, batch_size=batch_size, lr=0.01, kl_schedule=kl, estimator=estimator, seed=3, progress=False, checkpoint=checkpoint, distributed=distributed, callback=callback)
    return {"state": {k: v.detach().cpu().clone() for k, v in guide.state_dict().items()}, "loss": [float(v) for v in history["loss"]]}


def gradient_steps() -> list:
    """Two steps of DataParallel.average_gradients on hand-made gradients (see the test)."""
    parallel, rank = DataParallel(), torch_dist.get_rank()
    a, b = torch.zeros(3, requires_grad=True), torch.zeros(2, requires_grad=True)
    c = torch.zeros(1, dtype=torch.float64, requires_grad=True)
    steps = [
        # a everywhere, c on rank 0 only, b nowhere; parts of 3 and 1 examples
        ({"a": torch.full((3,), rank + 1.0), "c": torch.ones(1, dtype=torch.float64) if rank == 0 else None}, 3 if rank == 0 else 1),
        # b appears on rank 1 (after a step without it), c is gone; parts of 2 and 2
        ({"a": torch.full((3,), 2.0 * rank), "b": torch.full((2,), 4.0) if rank == 1 else None}, 2),
    ]
    out = []
    for grads, size in steps:
        for name, p in zip("abc", (a, b, c)):
            p.grad = grads.get(name)
        parallel.average_gradients([a, b, c], size)
        out.append({name: p.grad for name, p in zip("abc", (a, b, c)) if p.grad is not None})
    return out


def svi_scenario(run_dir: Path, device="cpu") -> dict:
    out = {case: svi_run(case, device=device) for case in SVI_CASES}
    out["gradient steps"] = gradient_steps()
    out["uninterrupted"] = svi_run("mfvi-uneven-blundell", epochs=4, checkpoint=run_dir / "uninterrupted.pt", device=device)
    svi_run("mfvi-uneven-blundell", epochs=2, checkpoint=run_dir / "resumed.pt", device=device)
    out["resumed"] = svi_run("mfvi-uneven-blundell", epochs=4, checkpoint=run_dir / "resumed.pt", device=device)
    # local reparameterization: shared draws (the ranks' random states agree at every epoch's
    # end) and per-rank draws (they differ), which resume exactly too
    for draws in ("shared", "per_rank"):
        states = []
        run = partial(svi_run, "mfvi-even", estimator="local", distributed=DataParallel(draws=draws), device=device)
        out[draws] = run(callback=lambda epoch, row: states.append(torch.get_rng_state().clone()))
        out[draws]["states"] = states
        out[draws]["uninterrupted"] = run(checkpoint=run_dir / f"{draws}-uninterrupted.pt")
        run(epochs=2, checkpoint=run_dir / f"{draws}-resumed.pt")
        out[draws]["resumed"] = run(checkpoint=run_dir / f"{draws}-resumed.pt")
    # a callback that asks rank 0 alone to stop after epoch 2 stops every rank there
    out["stopped"] = svi_run("map-even", device=device, callback=lambda epoch, row: epoch == 1 and torch_dist.get_rank() == 0)
    return out


def sgld_run(seed=5, epochs=3, checkpoint=None, sink=None, distributed=None, device="cpu", lr=1e-3) -> dict:
    pyro.set_rng_seed(0)
    problem = conjugate_problem(n=40)
    sampler = SGLD(linear_regression_model(problem, device=device), lr=lr)
    sink = sink if sink is not None else InMemorySamples()
    history = sampler.run((problem.x.to(device), problem.y.unsqueeze(-1).to(device)), epochs=epochs, batch_size=10, seed=seed, sink=sink, checkpoint=checkpoint, progress=False, distributed=distributed)
    draws = sink.load() if len(sink) else {}
    return {"values": {k: v.cpu() for k, v in sampler.values().items()}, "draws": draws, "log_joint": [float(v) for v in history["log_joint"]]}


def sghmc_sa_run(distributed=None) -> dict:
    """SGHMC-SA on a sparse regression whose noise scale is SA's sigma (Eq. 14's residual)."""
    pyro.set_rng_seed(0)
    g = torch.Generator().manual_seed(2)
    x = torch.randn(40, 8, generator=g, dtype=torch.float64)
    y = x[:, :2].sum(-1, keepdim=True) + 0.3 * torch.randn(40, 1, generator=g, dtype=torch.float64)
    net = torch.nn.Linear(8, 1, bias=False).double()
    prior = SpikeAndSlabPrior(0.1, 10.0, sparse={"expose_parameters": ["weight"]}, a=1.0, b=8.0)
    model = BayesianNeuralNetwork(net, prior, GaussianLikelihood(None, precision=dist.Gamma(0.5, 0.5)))
    prior.empirical_bayes(model, sigma=1.0, kappa0=1.0, kappa1=1.0)
    sampler = SGHMC(model, lr=1e-3, adaptations=[StochasticApproximation(prior, 0.5)])
    sampler.run((x, y), epochs=3, batch_size=10, seed=4, progress=False, distributed=distributed)
    state = prior.state
    return {"values": sampler.values(), "sigma": state.sigma.clone(), "rho": {k: v.clone() for k, v in state.rho.items()}}


def sgmcmc_scenario(run_dir: Path, device="cpu") -> dict:
    return {"sgld": sgld_run(sink=DiskSamples(run_dir / "draws", shard_size=5), checkpoint=run_dir / "sgld.pt", device=device), "sghmc-sa": sghmc_sa_run()}


def chains_scenario(run_dir: Path) -> dict:
    chains = IndependentChains()
    first = sgld_run(distributed=chains, epochs=3)
    again = sgld_run(distributed=chains, epochs=3, checkpoint=run_dir / "uninterrupted.pt")
    sgld_run(distributed=chains, epochs=2, checkpoint=run_dir / "resumed.pt")
    resumed = sgld_run(distributed=chains, epochs=3, checkpoint=run_dir / "resumed.pt")
    gathered = gather_chains(first["draws"], parallel=chains)
    out = {"first": first, "again": again, "resumed": resumed, "gathered": gathered}
    try:  # chain 1 diverges: both chains end, naming it, and no rank waits for the other
        sgld_run(distributed=chains, lr=1e-3 if torch_dist.get_rank() == 0 else 1e30)
    except FloatingPointError as e:
        out["diverged"] = str(e)
    if gathered is not None:
        out["diagnostics"] = chain_diagnostics(gathered).to_dict("list")
    return out


SCENARIOS = {"svi": svi_scenario, "sgmcmc": sgmcmc_scenario, "chains": chains_scenario}


@pytest.fixture(scope="module")
def svi_ranks(tmp_path_factory):
    folder = tmp_path_factory.mktemp("svi")
    return spawn("svi", folder), folder / "run"


@pytest.fixture(scope="module")
def sgmcmc_ranks(tmp_path_factory):
    folder = tmp_path_factory.mktemp("sgmcmc")
    return spawn("sgmcmc", folder), folder / "run"


@pytest.fixture(scope="module")
def chain_ranks(tmp_path_factory):
    folder = tmp_path_factory.mktemp("chains")
    return spawn("chains", folder), folder / "run"


def assert_close(a: dict, b: dict, **tolerance):
    assert a.keys() == b.keys()
    for k in a:
        assert torch.allclose(a[k], b[k], **tolerance), (k, (a[k] - b[k]).abs().max())


def assert_equal(a: dict, b: dict):
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k


# -- data-parallel SVI -----------------------------------------------------------------------
@pytest.mark.parametrize("case", list(SVI_CASES))
def test_data_parallel_fit_follows_the_one_process_fit(svi_ranks, case):
    ranks, _ = svi_ranks
    one = svi_run(case, distributed=False)
    assert_close(ranks[0][case]["state"], one["state"], **ROUNDING)
    assert_equal(ranks[1][case]["state"], ranks[0][case]["state"])  # one all-reduced gradient: identical updates
    if case == "map-even":  # equal parts: the mean of the ranks' losses is the one-process loss
        assert ranks[0][case]["loss"] == pytest.approx(one["loss"], rel=1e-6)  # fit sums the loss in float32
    assert ranks[1][case]["loss"] == ranks[0][case]["loss"]


def test_gradients_are_averaged_with_the_parts_sizes_and_missing_ones_stay_missing(svi_ranks):
    ranks, _ = svi_ranks
    first, second = (ranks[0]["gradient steps"][k] for k in range(2))
    # sum_r n_r g_r / sum_r n_r: a = (3 * 1 + 1 * 2) / 4, c = (3 * 1 + 1 * 0) / 4; b had no gradient anywhere
    assert first.keys() == {"a", "c"}
    assert torch.equal(first["a"], torch.full((3,), 1.25)) and torch.equal(first["c"], torch.tensor([0.75], dtype=torch.float64))
    # b, not sent in the first step's all-reduce, is reduced when it appears; c is gone
    assert second.keys() == {"a", "b"}
    assert torch.equal(second["a"], torch.full((3,), 1.0)) and torch.equal(second["b"], torch.full((2,), 2.0))
    for k in range(2):
        assert_equal(ranks[1]["gradient steps"][k], ranks[0]["gradient steps"][k])


@pytest.mark.parametrize("draws", ["shared", "per_rank"])
def test_per_rank_draws_are_the_ranks_own_and_resume_exactly(svi_ranks, draws):
    ranks, _ = svi_ranks
    same_state = [torch.equal(a, b) for a, b in zip(ranks[0][draws]["states"], ranks[1][draws]["states"])]
    assert same_state == [draws == "shared"] * 4  # at each epoch's end (48 = 3 x 16: equal parts)
    for rank in ranks:
        assert_equal(rank[draws]["resumed"]["state"], rank[draws]["uninterrupted"]["state"])
        assert_equal(rank[draws]["state"], ranks[0][draws]["state"])  # one averaged gradient: one model
    assert not torch.equal(ranks[0]["shared"]["state"]["locs.0__weight"], ranks[0]["per_rank"]["state"]["locs.0__weight"])


def test_data_parallel_fit_resumes_exactly_and_only_rank_0_writes(svi_ranks):
    ranks, run_dir = svi_ranks
    assert [len(rank["stopped"]["loss"]) for rank in ranks] == [2, 2]
    assert_equal(ranks[0]["resumed"]["state"], ranks[0]["uninterrupted"]["state"])
    assert ranks[0]["resumed"]["loss"] == ranks[0]["uninterrupted"]["loss"]
    assert ranks[0]["writes"] and ranks[1]["writes"] == []
    saved = load_state(run_dir / "uninterrupted.pt")
    assert saved["distributed"] == {"mode": "data", "world_size": 2}
    with pytest.raises(ValueError, match="2 processes .data-parallel.*this run is one process.*nproc_per_node 2"):
        svi_run("mfvi-uneven-blundell", epochs=5, checkpoint=run_dir / "uninterrupted.pt", distributed=False)


# -- SG-MCMC, one chain over the ranks -------------------------------------------------------
def test_data_parallel_sgld_is_the_one_process_chain(sgmcmc_ranks, tmp_path):
    ranks, run_dir = sgmcmc_ranks
    one = sgld_run(distributed=False)
    assert_close(ranks[0]["sgld"]["values"], one["values"], **ROUNDING)
    assert_close(ranks[0]["sgld"]["draws"], one["draws"], **ROUNDING)
    assert ranks[0]["sgld"]["log_joint"] == pytest.approx(one["log_joint"], rel=1e-12)
    assert_equal(ranks[1]["sgld"]["values"], ranks[0]["sgld"]["values"])
    # the disk sink is rank 0's alone; the other rank wrote nothing at all
    assert ranks[1]["sgld"]["draws"] == {} and ranks[1]["writes"] == []
    assert_equal(DiskSamples(run_dir / "draws").load(), ranks[0]["sgld"]["draws"])


def test_sg_mcmc_sa_state_is_the_one_process_state_on_every_rank(sgmcmc_ranks):
    ranks, _ = sgmcmc_ranks
    one = sghmc_sa_run(distributed=False)
    for rank in ranks:
        assert torch.allclose(rank["sghmc-sa"]["sigma"], one["sigma"], **ROUNDING)
        assert_close(rank["sghmc-sa"]["rho"], one["rho"], **ROUNDING)
        assert_close(rank["sghmc-sa"]["values"], one["values"], **ROUNDING)
    assert torch.equal(ranks[0]["sghmc-sa"]["sigma"], ranks[1]["sghmc-sa"]["sigma"])
    assert not torch.equal(one["sigma"], torch.tensor(1.0, dtype=torch.float64))  # SA moved it


# -- SG-MCMC, independent chains -------------------------------------------------------------
def test_independent_chains_are_the_one_process_chains_of_their_seeds(chain_ranks):
    ranks, _ = chain_ranks
    for r, rank in enumerate(ranks):
        one = sgld_run(seed=chain_seed(5, r), distributed=False)
        assert_close(rank["first"]["draws"], one["draws"], rtol=0, atol=0)
    assert not torch.allclose(ranks[0]["first"]["draws"]["weight"], ranks[1]["first"]["draws"]["weight"])


def test_independent_chains_are_reproducible_resume_and_pool_on_rank_0(chain_ranks):
    ranks, run_dir = chain_ranks
    for rank in ranks:
        assert_equal(rank["again"]["draws"], rank["first"]["draws"])
        assert_equal(rank["resumed"]["draws"], rank["again"]["draws"])
    assert ranks[1]["gathered"] is None and ranks[1]["writes"] == []
    chains = ranks[0]["gathered"]["weight"]
    assert chains.shape == (2, 12, 1, 3)
    for r in range(2):
        assert torch.equal(chains[r], ranks[r]["first"]["draws"]["weight"])
    pooled = pool_chains(ranks[0]["gathered"])["weight"]
    assert torch.equal(pooled, torch.cat([chains[0], chains[1]]))
    diagnostics = ranks[0]["diagnostics"]
    assert diagnostics["site"] == ["weight"] and diagnostics["chains"] == [2] and diagnostics["draws"] == [12]
    assert diagnostics["max_split_rhat"][0] == pytest.approx(chain_diagnostics(ranks[0]["gathered"])["max_split_rhat"][0])
    saved = load_state(run_dir / "uninterrupted.pt")
    assert saved["distributed"] == {"mode": "chains", "world_size": 2} and len(saved["chains"]) == 2
    for rank in ranks:
        assert "log-joint became" in rank["diverged"] and "in chain 1 of 2" in rank["diverged"]


# -- pieces on one process -------------------------------------------------------------------
@pytest.mark.parametrize("n, batch_size, world_size", [(48, 16, 2), (51, 16, 2), (50, 9, 3), (10, 10, 4)])
def test_sharded_batches_split_the_one_process_batches(n, batch_size, world_size):
    x = torch.arange(float(n))
    whole = list(TensorBatches(x, batch_size=batch_size, seed=7))
    parts = [list(ShardedBatches(x, batch_size=batch_size, seed=7, rank=r, world_size=world_size)) for r in range(world_size)]
    for r in range(world_size):
        assert len(parts[r]) == len(whole) == len(ShardedBatches(x, batch_size=batch_size, seed=7, rank=r, world_size=world_size))
    for b, (xb, idx) in enumerate(whole):
        assert torch.equal(torch.cat([parts[r][b][1] for r in range(world_size)]), idx)
        assert torch.equal(torch.cat([parts[r][b][0] for r in range(world_size)]), xb)
        sizes = [len(parts[r][b][1]) for r in range(world_size)]
        assert max(sizes) - min(sizes) <= 1 and min(sizes) >= 1


def test_sharded_batches_refuse_a_batch_a_rank_would_get_nothing_of():
    with pytest.raises(ValueError, match="last batch holds 1 .*drop_last=True"):
        ShardedBatches(torch.arange(17.0), batch_size=8, rank=0, world_size=2)
    assert len(ShardedBatches(torch.arange(17.0), batch_size=8, rank=0, world_size=2, drop_last=True)) == 2
    with pytest.raises(ValueError, match="smaller than the 4 processes"):
        ShardedBatches(torch.arange(17.0), batch_size=3, rank=0, world_size=4)


def test_chain_seeds_are_distinct_and_reproducible():
    seeds = [chain_seed(s, r) for s in range(4) for r in range(4)]
    assert len(set(seeds)) == len(seeds)
    assert seeds == [chain_seed(s, r) for s in range(4) for r in range(4)]
    with pytest.raises(ValueError, match="seed must be an int >= 0"):
        chain_seed(-1, 0)


def split_rhat_by_hand(x):
    """BDA3 Sec. 11.4 for a scalar: halves of each chain, W the mean within-half variance,
    B/n the variance of the half means, var+ = (n-1)/n W + B/n, R-hat = sqrt(var+ / W)."""
    c, s = x.shape
    halves = torch.cat([x[:, : s // 2], x[:, s - s // 2 :]])
    n = halves.shape[1]
    w = halves.var(1).mean()
    b_over_n = halves.mean(1).var()
    return float(((n - 1) / n * w + b_over_n).div(w).sqrt())


def test_chain_diagnostics_report_split_rhat_across_chains():
    g = torch.Generator().manual_seed(0)
    agree = torch.randn(4, 1000, 2, generator=g, dtype=torch.float64)
    apart = agree + torch.arange(4.0, dtype=torch.float64).view(4, 1, 1)  # chains centred 1 sd apart
    table = chain_diagnostics({"agree": agree, "apart": apart})
    rhat = dict(zip(table.site, table.max_split_rhat))
    assert rhat["agree"] == pytest.approx(max(split_rhat_by_hand(agree[..., j]) for j in range(2)), rel=1e-9)
    assert rhat["apart"] == pytest.approx(max(split_rhat_by_hand(apart[..., j]) for j in range(2)), rel=1e-9)
    # iid chains of 1000: var(half means) ~ 1/500, so R-hat - 1 ~ 1e-3; chains 1 sd apart: var+ / W ~ 2.2
    assert rhat["agree"] < 1.01 and rhat["apart"] > 1.3
    assert table.min_ess[0] == pytest.approx(float(effective_sample_size(agree, 0, 1).min()))
    with pytest.raises(ValueError, match="draws >= 4"):
        chain_diagnostics({"w": agree[:, :3]})


def test_torchrun_without_a_process_group_is_an_error(monkeypatch):
    for name, value in dict(RANK="0", WORLD_SIZE="2", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT="1").items():
        monkeypatch.setenv(name, value)
    assert distributed.launched_by_torchrun()
    with pytest.raises(RuntimeError, match="init_from_env"):
        distributed.resolve(None)
    assert distributed.resolve(False) is None
    with pytest.raises(RuntimeError, match="no torch.distributed process group"):
        distributed.resolve(True)


@pytest.fixture
def one_process_group():
    """A gloo process group of this process alone (no other process to wait for)."""
    torch_dist.init_process_group("gloo", store=torch_dist.HashStore(), rank=0, world_size=1)
    yield
    torch_dist.destroy_process_group()


def test_a_group_of_one_is_one_process_and_the_modes_are_checked(one_process_group, tmp_path):
    assert distributed.resolve(None) is None  # nothing to split: the plain run
    one = svi_run("mfvi-uneven-blundell", checkpoint=tmp_path / "plain.pt")
    forced = svi_run("mfvi-uneven-blundell", checkpoint=tmp_path / "forced.pt", distributed=True)  # the collectives all the same
    assert_close(forced["state"], one["state"], **ROUNDING)
    resumed = svi_run("mfvi-uneven-blundell", epochs=5, checkpoint=tmp_path / "forced.pt", distributed=False)  # one process either way
    assert len(resumed["loss"]) == 5
    with pytest.raises(ValueError, match="IndependentChains is for samplers"):
        svi_run("map-even", distributed=IndependentChains())
    with pytest.raises(ValueError, match="draws='shared'"):
        sgld_run(distributed=DataParallel(draws="per_rank"))
    with pytest.raises(ValueError, match="independent chains need a seed"):
        SGLD(linear_regression_model(conjugate_problem()), lr=1e-3).run((torch.randn(8, 3, dtype=torch.float64), torch.randn(8, 1, dtype=torch.float64)), epochs=1, batch_size=4, distributed=IndependentChains(), progress=False)
    with pytest.raises(ValueError, match="record into memory"):
        sgld_run(distributed=IndependentChains(), sink=DiskSamples(tmp_path / "draws"))


def test_one_process_resolves_to_no_process_group(monkeypatch):
    for name in distributed.TORCHRUN_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    assert not distributed.launched_by_torchrun() and distributed.resolve(None) is None
    assert not distributed.init_from_env() and distributed.is_main() and distributed.get_world_size() == 1


@pytest.mark.slow
def test_the_uci_example_under_torchrun_writes_the_one_process_results(tmp_path):
    """``torchrun --nproc_per_node 2 reproductions/uci_regression.py`` (unchanged flags) against the
    one-process run: MAP in float64 for 20 epochs, where rounding has not yet grown (the fast
    variants: the two-rank fit tests above)."""
    import pandas as pd

    flags = ["--method", "map", "--dataset", "bostonHousing", "--splits", "0", "--epochs", "20", "--float64", "--device", "cpu", "--no-progress"]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    example = str(ROOT / "reproductions" / "uci_regression.py")
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(free_port())]
    for name, command in (("one", [sys.executable, example]), ("two", torchrun + [example])):
        done = subprocess.run(command + flags + ["--results-dir", str(tmp_path / name)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-2000:]
    one, two = (pd.read_csv(tmp_path / name / "uci_map.csv") for name in ("one", "two"))
    assert two.rmse.tolist() == pytest.approx(one.rmse.tolist(), rel=1e-9)
    assert two.test_ll.tolist() == pytest.approx(one.test_ll.tolist(), rel=1e-9)
    assert sorted(p.name for p in (tmp_path / "two").iterdir()) == sorted(p.name for p in (tmp_path / "one").iterdir())


# -- CUDA ------------------------------------------------------------------------------------
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
def test_cuda_chain_has_the_cpu_chains_statistics():
    """Same seed, CPU and CUDA (whose generators differ): the posterior means of the two SGLD
    chains agree within five standard errors (each from the chain's effective sample size)."""
    stats = {}
    for device in ("cpu", "cuda"):
        run = sgld_run(epochs=300, device=device)
        w = run["draws"]["weight"].reshape(-1, 3)[500:].cpu()
        ess = effective_sample_size(w.unsqueeze(0), 0, 1)
        stats[device] = (w.mean(0), w.var(0) / ess)
    (m0, v0), (m1, v1) = stats["cpu"], stats["cuda"]
    assert ((m0 - m1).abs() <= 5 * (v0 + v1).sqrt()).all(), (m0, m1, (v0 + v1).sqrt())


@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
def test_nccl_data_parallel_fit_follows_the_one_process_fit(tmp_path):
    world_size = min(2, torch.cuda.device_count())  # NCCL needs one GPU per rank
    ranks = spawn("svi", tmp_path, world_size=world_size, backend="nccl", device="cuda")
    for case in SVI_CASES:
        one = svi_run(case, device="cuda", distributed=False)
        assert_close(ranks[0][case]["state"], one["state"], rtol=1e-7, atol=1e-9)
    assert_equal(ranks[0]["resumed"]["state"], ranks[0]["uninterrupted"]["state"])

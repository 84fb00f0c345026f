"""The RDP method of the UCI protocol: its schedule and optimizer."""

import torch

from pyrozoo.data import UCIDataset
from pyrozoo.inference import ClosedFormKL_ELBO, collect_parameters
from zoo_protocols.paths import default_data_dir
from zoo_protocols.config import RunConfig
from zoo_protocols.uci_rdp import build, optimizer_factory, schedule


def test_schedule_and_noise_learning_rate():
    split = UCIDataset("yacht", default_data_dir()).split(0).to(dtype=torch.float32)
    config = RunConfig()
    epochs, batch = schedule(split, config)
    assert batch == 32 and abs(epochs * -(-len(split.y_train) // batch) - 1200) <= 10
    model, guide = build(split, config)
    x, y = split.x_train[:8], split.y_train[:8]
    guide(x, y)
    params = collect_parameters(model, guide, ClosedFormKL_ELBO(), (x, y))
    opt = optimizer_factory(guide, 3e-3, 10.0)(params)
    noise = {id(guide.locs["noise_precision"]), id(guide.log_scales["noise_precision"])}
    lrs = {id(p): g["lr"] for g in opt.param_groups for p in g["params"]}
    assert set(lrs) == {id(p) for p in params}
    assert all(abs(lrs[i] - 3e-2) < 1e-12 for i in noise)
    assert all(abs(lr - 3e-3) < 1e-12 for i, lr in lrs.items() if i not in noise)

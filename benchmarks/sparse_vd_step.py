"""The Sparse VD step for ``step_overhead.py``: log-uniform prior, SparseVariationalDropoutGuide,
ClosedFormKL_ELBO, local reparameterization — exactly the step ``fit`` takes in
``pyrozoo/experiments/compress_sparse_vd.py``."""

from typing import Callable

from pyrozoo.guides.variational_dropout import SparseVariationalDropoutGuide
from pyrozoo.inference import ClosedFormKL_ELBO, default_optimizer, training_step
from pyrozoo.models import BayesianNeuralNetwork, Categorical, LeNet5, LeNet300100
from pyrozoo.models.dropout_priors import LogUniformPrior

NUM_TRAIN = 60000


def sparse_vd_step(arch, x, y) -> Callable[[], None]:
    net = (LeNet300100 if arch == "lenet300" else LeNet5)().to(x.device)
    model = BayesianNeuralNetwork(net, LogUniformPrior(), Categorical(NUM_TRAIN))
    guide = SparseVariationalDropoutGuide(model)
    guide(x, y)
    objective = ClosedFormKL_ELBO()
    opt = default_optimizer(list(guide.parameters()) + list(model.parameters()), 1e-3)
    return lambda: training_step(model, guide, objective, opt, (x, y), estimator="local")

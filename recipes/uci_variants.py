"""UCI runners for model/guide/objective combinations that exist in the zoo but had no UCI
method: the pieces of the ELBO family taken apart, DSIVI and sparse variational dropout.

Every runner builds the protocol's network (:func:`~recipes.uci.uci_model`),
picks a prior, a guide and an objective from the zoo, and trains and evaluates through the
same :func:`recipes.uci_vi._train_and_evaluate` as ``map`` / ``mfvi`` / ``bbb``
(so ``config.epochs`` / ``batch_size`` / ``lr`` and the linear learning-rate decay mean the
same for all of them). Together with ``mfvi`` they separate what each ingredient does:

* ``mfvi-mc``: mean-field Normal guide, ``N(0, 1)`` prior, Pyro's ``Trace_ELBO`` (the KL
  estimated by Monte Carlo, ``log q(w) - log p(w)`` at the sample), one weight sample per
  minibatch;
* ``mfvi-cf``: the same with the closed-form KL (:class:`~pyrozoo.inference.ClosedFormKL_ELBO`),
  still one weight sample per minibatch (no local reparameterization);
* ``mfvi`` (in :mod:`~recipes.uci_vi`): closed-form KL *and* the local
  reparameterization trick;
* ``dsivi``: the doubly semi-implicit bound (Molchanov 2022, Eq. 14): a semi-implicit
  (hypernetwork) posterior (:class:`~pyrozoo.guides.SemiImplicitGuide`, ``K1`` mixing draws)
  under the marginal of the hierarchical prior ``w | lambda ~ N(0, 1/lambda)``,
  ``lambda ~ Gamma(1, 1)`` (:class:`~pyrozoo.models.NormalGammaPrior`, ``K2`` draws);
* ``sparse-vd``: sparse variational dropout (Molchanov et al. 2017): log-uniform prior on
  the weight matrices (biases point estimates), the additive parameterisation, the closed-form
  KL approximation, local reparameterization, a linear KL warm-up over the first
  ``warmup_fraction`` of the epochs.
"""

import pyro
from pyro.infer.autoguide import AutoGuideList
from pyro.infer.autoguide.initialization import InitMessenger

from pyrozoo.data import UCISplit
from pyrozoo.guides import MeanFieldNormalGuide, SemiImplicitGuide
from pyrozoo.guides.base import init_to_network
from pyrozoo.guides.variational_dropout import SparseVariationalDropoutGuide
from pyrozoo.inference import DSIVI_ELBO, ClosedFormKL_ELBO, LinearKLWarmup
from pyrozoo.models import Gaussian, NormalGammaPrior, NormalPrior
from pyrozoo.models.dropout_priors import LogUniformPrior
from recipes.uci import UCIRunConfig, register_uci_method
from recipes.uci_vi import _model, _setting, _train_and_evaluate

#: defaults of these runners (``config.extra`` overrides them)
DEFAULTS = {"K1": 8, "K2": 8, "mixing_scale": 1e-2, "normal_gamma": (1.0, 1.0), "warmup_fraction": 0.2}


def _extra(config: UCIRunConfig, key: str):
    return config.extra.get(key, DEFAULTS[key])


def _mean_field(split: UCISplit, config: UCIRunConfig):
    model = _model(split, NormalPrior(_setting(config, "prior_scale")), config)
    return model, MeanFieldNormalGuide(model, init_scale=_setting(config, "init_scale"))


@register_uci_method("mfvi-mc", "mean-field Gaussian VI, N(0, 1) prior, Pyro Trace_ELBO (Monte Carlo KL), weight sampling")
def run_mfvi_mc(split: UCISplit, config: UCIRunConfig) -> dict:
    pyro.clear_param_store()
    model, guide = _mean_field(split, config)
    return _train_and_evaluate(split, config, model, guide, objective=pyro.infer.Trace_ELBO())


@register_uci_method("mfvi-cf", "mean-field Gaussian VI, N(0, 1) prior, closed-form KL, weight sampling (no local reparameterization)")
def run_mfvi_cf(split: UCISplit, config: UCIRunConfig) -> dict:
    pyro.clear_param_store()
    model, guide = _mean_field(split, config)
    return _train_and_evaluate(split, config, model, guide, objective=ClosedFormKL_ELBO())


@register_uci_method("dsivi", "DSIVI: semi-implicit posterior under the marginal Normal-Gamma prior, DSIVI_ELBO(K1, K2)")
def run_dsivi(split: UCISplit, config: UCIRunConfig) -> dict:
    pyro.clear_param_store()
    K1, K2 = int(_extra(config, "K1")), int(_extra(config, "K2"))
    a, b = _extra(config, "normal_gamma")
    model = _model(split, NormalGammaPrior(a, b, form="marginal", num_mixing=K2), config)
    guide = SemiImplicitGuide(model, num_mixing=K1, init_scale=_setting(config, "init_scale"), mixing_scale=_extra(config, "mixing_scale"))
    return _train_and_evaluate(split, config, model, guide, objective=DSIVI_ELBO(K1, K2))


@register_uci_method("sparse-vd", "sparse variational dropout: log-uniform prior on weights, additive parameterisation, local reparameterization")
def run_sparse_vd(split: UCISplit, config: UCIRunConfig) -> dict:
    pyro.clear_param_store()
    model = _model(split, LogUniformPrior(), config)
    # the dropout guide covers the weights; the noise precision (a positive site) keeps the
    # log-normal posterior of the mean-field guide, as in the other methods
    precision = Gaussian.PRECISION_SITE
    # (the list and the mean-field part trace the model for their prototypes: at the network's
    # values, as the log-uniform prior is improper and cannot be sampled)
    traceable = InitMessenger(init_to_network)(model)
    guide = AutoGuideList(traceable)
    guide.append(SparseVariationalDropoutGuide(model, hide=[precision]))
    guide.append(MeanFieldNormalGuide(traceable, hide=model.random_parameter_names, init_scale=_setting(config, "init_scale")))
    epochs = min(_setting(config, "epochs"), 5) if config.quick else _setting(config, "epochs")
    warmup = LinearKLWarmup(0.0, max(_extra(config, "warmup_fraction") * epochs, 1e-3))
    return _train_and_evaluate(split, config, model, guide, objective=ClosedFormKL_ELBO(), estimator="local", kl_schedule=warmup)

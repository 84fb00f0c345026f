"""Experiment protocols shared by the example scripts, with registries of methods.

* :mod:`pyrozoo.experiments.uci` — the UCI regression protocol; methods register with
  :func:`~pyrozoo.experiments.uci.register_uci_method` in modules named ``uci_*.py``.
* :mod:`pyrozoo.experiments.lenet` — MNIST LeNet compression; methods register with
  :func:`~pyrozoo.experiments.lenet.register_compression_method` in modules named
  ``compress_*.py``.
* :mod:`pyrozoo.experiments.mnist` — MNIST classification with a small fully connected
  network (error, test log-likelihood); methods register with
  :func:`~pyrozoo.experiments.mnist.register_mnist_method` in modules named ``mnist_*.py``.
* :mod:`pyrozoo.experiments.compare` — runs methods of these registries side by side under
  a matched budget of gradient evaluations (``examples/compare_objectives.py``).

All three registries are :class:`~pyrozoo.experiments.registry.MethodRegistry` objects
(``UCI_REGISTRY``, ``MNIST_REGISTRY``, ``COMPRESSION_REGISTRY``); method modules in this
package are discovered and imported by :func:`load_methods`.
"""

import importlib
import pkgutil
import warnings


def load_methods(prefix: str) -> None:
    """Imports every module of this package whose name starts with ``prefix``
    (e.g. ``"uci_"``), so that its methods register themselves."""
    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith(prefix):
            try:
                importlib.import_module(f"{__name__}.{info.name}")
            except ImportError as e:
                # one broken method module must not take the others down; asking for one of
                # its methods then fails with "unknown method", after this warning
                warnings.warn(f"experiment module {__name__}.{info.name} could not be imported: {e}")

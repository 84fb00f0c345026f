"""Mixing distributions of semi-implicit distributions.

A semi-implicit distribution ``q(z) = ∫ q(z | ψ) q(ψ) dψ`` (Molchanov 2022, Eq. 12) needs
only *samples* of its mixing variable ψ. A mixing object turns a sample shape into
mixing draws::

    mixing.sample(sample_shape) -> ψ  with leading dimensions ``sample_shape``

ψ may be a tensor or a tuple / list / dict of tensors (e.g. a location and a log-scale),
whatever the conditional ``ψ -> Distribution`` of :class:`~pyrozoo.distributions.SemiImplicit`
takes. Three kinds cover the thesis' uses:

* :class:`ImplicitMixing`: ψ = f(ε) for noise ε, e.g. a hypernetwork (implicit, reparameterized);
* :class:`ExplicitMixing`: ψ from a Pyro/torch distribution, e.g. a Gamma precision;
* :class:`FiniteMixing`: ψ uniformly (or with given weights) from N atoms, e.g. the encoder's
  posteriors at the training points, which also allows exact enumeration.
"""

import math
from typing import Callable, Iterator, List, Optional, Tuple, Union

import torch
from torch.distributions import Distribution


def tree_map(fn: Callable[[torch.Tensor], torch.Tensor], tree):
    """Applies ``fn`` to every tensor of a tensor / tuple / list / dict structure."""
    if torch.is_tensor(tree):
        return fn(tree)
    if isinstance(tree, (tuple, list)):
        return type(tree)(tree_map(fn, t) for t in tree)
    if isinstance(tree, dict):
        return {k: tree_map(fn, v) for k, v in tree.items()}
    raise TypeError(f"mixing draws must be tensors or tuples/lists/dicts of tensors, got {type(tree).__name__}")


def tree_leaves(tree) -> list:
    if torch.is_tensor(tree):
        return [tree]
    if isinstance(tree, (tuple, list)):
        return [leaf for t in tree for leaf in tree_leaves(t)]
    if isinstance(tree, dict):
        return [leaf for v in tree.values() for leaf in tree_leaves(v)]
    raise TypeError(f"mixing draws must be tensors or tuples/lists/dicts of tensors, got {type(tree).__name__}")


def _reshape_leading(tree, n: int, shape: torch.Size):
    """Replaces the ``n`` leading dimensions of every leaf (flattened or not) by ``shape``."""
    return tree_map(lambda t: t.reshape(tuple(shape) + t.shape[n:]), tree)


def _check_sample_shape(sample_shape) -> torch.Size:
    shape = torch.Size(sample_shape)
    if any(s < 0 for s in shape):
        raise ValueError(f"sample_shape must be non-negative, got {tuple(shape)}")
    return shape


def module_parameters(fn) -> Optional[List[torch.Tensor]]:
    """The parameters of ``fn`` if it is an ``nn.Module`` (anything with ``parameters()``) or
    a method of one, else ``None``: what a mixing computed by ``fn`` depends on besides the
    random numbers. Buffers are left out (the training inputs of an aggregated posterior are
    a large buffer that training does not change)."""
    owner = fn if callable(getattr(fn, "parameters", None)) else getattr(fn, "__self__", None)
    params = getattr(owner, "parameters", None)
    return list(params()) if callable(params) else None


class Mixing:
    """Base class: ``sample(sample_shape)`` returns mixing draws ψ with leading dims ``sample_shape``."""

    #: whether draws are differentiable in the mixing's parameters (needed for gradients
    #: of a guide's mixing, or of a learnable prior's mixing)
    has_rsample = True

    def sample(self, sample_shape=torch.Size()):
        raise NotImplementedError

    def dependencies(self) -> Optional[List[torch.Tensor]]:
        """The tensors whose values, together with the random numbers, determine the draws,
        or ``None`` when unknown. A cache of draws
        (:class:`~pyrozoo.distributions.PriorComponentCache`) compares them to notice that
        its draws went stale."""
        return None

    def __call__(self, sample_shape=torch.Size()):
        return self.sample(sample_shape)


class ImplicitMixing(Mixing):
    r"""ψ = f(ε) with ε from a noise distribution: an implicit, reparameterized mixing.

    :param callable network: maps a ``(B, *noise_shape)`` batch of noise to ``(B, ...)``
        mixing draws (a tensor or a structure of tensors with leading dimension ``B``);
        typically an ``nn.Module`` (a hypernetwork). It sees one flat batch, so any module
        that takes ``(B, features)`` works.
    :param noise_shape: shape of one noise draw, e.g. ``(10,)``.
    :param noise: a distribution with empty batch and event shape for the i.i.d. noise
        entries (default standard Normal), or a ``Distribution`` of shape ``noise_shape``.
    :param like: a tensor whose dtype and device the default noise takes (default: those of
        the network's first parameter, else torch's defaults).
    """

    def __init__(self, network: Callable, noise_shape, noise: Optional[Distribution] = None, like: Optional[torch.Tensor] = None):
        if not callable(network):
            raise TypeError("network must be callable: noise batch -> mixing draws")
        self.network = network
        self.noise_shape = torch.Size(noise_shape if not isinstance(noise_shape, int) else (noise_shape,))
        if any(s <= 0 for s in self.noise_shape):
            raise ValueError(f"noise_shape must be positive, got {tuple(self.noise_shape)}")
        if noise is not None:
            if not isinstance(noise, Distribution):
                raise TypeError(f"noise must be a torch/Pyro Distribution, got {type(noise).__name__}")
            shape = noise.batch_shape + noise.event_shape
            if shape not in (torch.Size(), self.noise_shape):
                raise ValueError(f"noise has shape {tuple(shape)}; expected () or noise_shape={tuple(self.noise_shape)}")
        self.noise = noise
        self.like = like

    def _reference(self) -> Optional[torch.Tensor]:
        if self.like is not None:
            return self.like
        params = getattr(self.network, "parameters", None)
        if params is not None:
            for p in params():
                return p
        return None

    def sample_noise(self, sample_shape=torch.Size()) -> torch.Tensor:
        sample_shape = _check_sample_shape(sample_shape)
        if self.noise is None:
            ref = self._reference()
            kwargs = {} if ref is None else {"dtype": ref.dtype, "device": ref.device}
            return torch.randn(sample_shape + self.noise_shape, **kwargs)
        shape = self.noise.batch_shape + self.noise.event_shape
        extra = self.noise_shape if shape == torch.Size() else torch.Size()
        eps = self.noise.sample(sample_shape + extra)
        return eps

    def sample(self, sample_shape=torch.Size()):
        sample_shape = _check_sample_shape(sample_shape)
        eps = self.sample_noise(sample_shape)
        flat = eps.reshape((-1,) + self.noise_shape)
        out = self.network(flat)
        for leaf in tree_leaves(out):
            if leaf.dim() == 0 or leaf.shape[0] != flat.shape[0]:
                raise ValueError(
                    f"the mixing network returned a tensor of shape {tuple(leaf.shape)} for a batch of "
                    f"{flat.shape[0]} noise draws; its leading dimension must be the batch"
                )
        return _reshape_leading(out, 1, sample_shape)

    def dependencies(self):
        """The network's parameters (``None`` for a network that is not a module or method of one)."""
        return module_parameters(self.network)


class ExplicitMixing(Mixing):
    """ψ drawn from a Pyro/torch distribution (``rsample`` where it exists).

    Example: the Gamma precision of a hierarchical Normal prior,
    ``ExplicitMixing(dist.Gamma(a, b).expand(weight.shape))``.
    """

    def __init__(self, distribution: Distribution):
        if not isinstance(distribution, Distribution):
            raise TypeError(f"distribution must be a torch/Pyro Distribution, got {type(distribution).__name__}")
        self.distribution = distribution
        self.has_rsample = bool(distribution.has_rsample)

    def sample(self, sample_shape=torch.Size()):
        sample_shape = _check_sample_shape(sample_shape)
        d = self.distribution
        if d.has_rsample:
            return d.rsample(sample_shape)
        if torch.is_grad_enabled() and any(
            torch.is_tensor(v) and v.requires_grad for k, v in vars(d).items() if k in d.arg_constraints
        ):
            raise NotImplementedError(
                f"{type(d).__name__} has no rsample, so draws carry no gradient to its learnable parameters; "
                "use a reparameterizable mixing distribution or fixed parameters"
            )
        return d.sample(sample_shape)

    def dependencies(self):
        """The distribution's parameter tensors."""
        d = self.distribution
        return [v for k, v in vars(d).items() if k in d.arg_constraints and torch.is_tensor(v)]


class FiniteMixing(Mixing):
    r"""ψ uniform (or with given probabilities) over ``N`` atoms: a finite, explicit mixture.

    The atoms are either given as a tensor (or structure of tensors) whose leading dimension
    indexes them, or computed on demand by ``atoms(indices)`` from a 1-D index tensor, e.g.
    the encoder's posterior parameters at training points
    ``FiniteMixing(lambda idx: encoder(x_train[idx]), size=len(x_train))`` (the aggregated
    posterior of a VAE, Molchanov 2022, Eq. 21). Draws are i.i.d. with replacement, as the
    DSIVI bound (Eq. 14) requires. Gradients reach the atoms, not the probabilities: learnable
    probabilities need exact enumeration (:meth:`enumerate`).

    :param atoms: tensor / structure with leading dimension ``N``, or a callable ``idx -> atoms[idx]``.
    :param int size: ``N`` (required with a callable).
    :param probs: optional probabilities of the atoms (``N`` entries, non-negative, summing to 1).
    :param device: where index tensors are created for a callable (default: the atoms' or
        probabilities' device, else the CPU).
    """

    def __init__(self, atoms, size: Optional[int] = None, probs: Optional[torch.Tensor] = None, device=None):
        if callable(atoms) and not torch.is_tensor(atoms):
            if size is None:
                raise ValueError("FiniteMixing with a callable needs size= (the number of atoms)")
            self._fn = atoms
            self._atoms = None
        else:
            leaves = tree_leaves(atoms)
            if not leaves:
                raise ValueError("FiniteMixing needs at least one atom tensor")
            n = {leaf.shape[0] if leaf.dim() else None for leaf in leaves}
            if len(n) != 1 or None in n:
                raise ValueError(f"atom tensors must share their leading (atom) dimension, got sizes {sorted(map(str, n))}")
            n = n.pop()
            if size is not None and size != n:
                raise ValueError(f"size={size} but the atoms have {n} entries")
            size = n
            self._fn = None
            self._atoms = atoms
        if not isinstance(size, int) or size <= 0:
            raise ValueError(f"the number of atoms must be a positive int, got {size!r}")
        self.size = size
        if probs is not None:
            probs = torch.as_tensor(probs)
            if probs.shape != (size,):
                raise ValueError(f"probs must have shape ({size},), got {tuple(probs.shape)}")
            if not torch.isfinite(probs).all() or (probs < 0).any():
                raise ValueError("probs must be finite and non-negative")
            if not torch.isclose(probs.sum(), torch.ones((), dtype=probs.dtype, device=probs.device), atol=1e-5):
                raise ValueError(f"probs must sum to 1, got {float(probs.sum())}")
        self.probs = probs
        self.device = torch.device(device) if device is not None else None

    def atoms(self, idx: torch.Tensor):
        """The atoms at a 1-D index tensor, leading dimension ``len(idx)``."""
        if self._fn is not None:
            return self._fn(idx)
        return tree_map(lambda t: t.index_select(0, idx.to(t.device)), self._atoms)

    def _device(self):
        if self.device is not None:
            return self.device
        if self._atoms is not None:
            return tree_leaves(self._atoms)[0].device
        if self.probs is not None:
            return self.probs.device
        return None

    def sample_indices(self, sample_shape=torch.Size()) -> torch.Tensor:
        sample_shape = _check_sample_shape(sample_shape)
        n = math.prod(sample_shape)
        if self.probs is None:
            idx = torch.randint(self.size, (n,), device=self._device())
        else:
            if torch.is_grad_enabled() and self.probs.requires_grad:
                raise NotImplementedError(
                    "sampling atoms carries no gradient to learnable probabilities; evaluate the mixture "
                    "exactly (SemiImplicit(..., num_mixing=None)) instead"
                )
            idx = torch.multinomial(self.probs.detach(), n, replacement=True) if n else torch.zeros(0, dtype=torch.long, device=self.probs.device)
        return idx.reshape(sample_shape)

    def sample(self, sample_shape=torch.Size()):
        return self.sample_with_indices(sample_shape)[0]

    def sample_with_indices(self, sample_shape=torch.Size()):
        """``(draws, indices)``: the draws of :meth:`sample` (same random numbers) and the atom
        index behind each, shape ``sample_shape``."""
        sample_shape = _check_sample_shape(sample_shape)
        idx = self.sample_indices(sample_shape)
        return _reshape_leading(self.atoms(idx.reshape(-1)), 1, sample_shape), idx

    def dependencies(self):
        """The atom tensors (given as tensors) or the parameters of the module that computes
        them (``None`` for a callable that is neither a module nor a method of one), and
        the probabilities."""
        deps = tree_leaves(self._atoms) if self._fn is None else module_parameters(self._fn)
        if deps is None:
            return None
        return deps + ([self.probs] if self.probs is not None else [])

    def log_probs(self, dtype=None, device=None) -> torch.Tensor:
        """Log-probabilities of all atoms, shape ``(N,)``."""
        if self.probs is None:
            return torch.full((self.size,), -math.log(self.size), dtype=dtype, device=device)
        return self.probs.log().to(dtype=dtype or self.probs.dtype, device=device or self.probs.device)

    def enumerate(self, chunk_size: Optional[int] = None) -> Iterator[Tuple[object, torch.Tensor]]:
        """Yields ``(atoms, indices)`` over all atoms in chunks of ``chunk_size`` (all at once by default)."""
        step = self.size if not chunk_size else int(chunk_size)
        if step <= 0:
            raise ValueError(f"chunk_size must be positive, got {chunk_size}")
        device = self._device()
        for start in range(0, self.size, step):
            idx = torch.arange(start, min(start + step, self.size), device=device)
            yield self.atoms(idx), idx


def as_mixing(mixing: Union[Mixing, Callable]) -> Mixing:
    """A :class:`Mixing` from a mixing object or a plain ``sample_shape -> ψ`` callable."""
    if isinstance(mixing, Mixing):
        return mixing
    if isinstance(mixing, Distribution):
        return ExplicitMixing(mixing)
    if callable(mixing):
        return _CallableMixing(mixing)
    raise TypeError(f"mixing must be a Mixing, a Distribution or a callable sample_shape -> draws, got {type(mixing).__name__}")


class _CallableMixing(Mixing):
    def __init__(self, fn):
        self.fn = fn

    def sample(self, sample_shape=torch.Size()):
        return self.fn(_check_sample_shape(sample_shape))

    def dependencies(self):
        return module_parameters(self.fn)

"""The bound-module registry: which `BoundModule` the library builds for each of our operators.
"""
from __future__ import annotations

from bound_propagation import BoundModelFactory, Exp, FixedLinear, Parallel

from attncert.baselines.op_bilinear import BilinearProduct, BoundAlphaBilinear
from attncert.baselines.op_convex import BoundAlphaExp, BoundAlphaPositiveReciprocal, PositiveReciprocal
from attncert.baselines.op_linear import BoundInputLinear, BoundPlainLinear, InputLinear
from attncert.baselines.op_parallel import BoundSummedParallel

def head_factory() -> BoundModelFactory:
    """The library's factory with our modules registered (registration order: most specific last)."""
    factory = BoundModelFactory()
    factory.register(Parallel, BoundSummedParallel)
    factory.register(FixedLinear, BoundPlainLinear)
    factory.register(Exp, BoundAlphaExp)
    factory.register(PositiveReciprocal, BoundAlphaPositiveReciprocal)
    factory.register(BilinearProduct, BoundAlphaBilinear)
    factory.register(InputLinear, BoundInputLinear)
    return factory

"""A module imported on first use, for the declarations that only name JAX.

A serving model's declarations (its keys, columns, domain rules) are read by every command;
its kernels run only when a grid is evaluated. Modules on the declaration path therefore
bind JAX, and the kernel modules they call, through `lazy_module`: the name is bound at
import time, the import happens at the first attribute lookup (inside a kernel, when it is
traced), so `sweep show` and a rerun that finds its answers on disk never import JAX.

    if TYPE_CHECKING:
        import jax.numpy as jnp
    else:
        jnp = lazy_module("jax.numpy")

Type checkers see the plain import; at run time attribute lookups are cached on the proxy,
so a traced kernel pays one dictionary lookup per name, as with a real module.
"""

from __future__ import annotations

import importlib
import types
from typing import Any


class _LazyModule(types.ModuleType):
    """Stands in for module `__name__` until an attribute is read, then forwards to it."""

    def __getattr__(self, attr: str) -> Any:
        value = getattr(importlib.import_module(self.__name__), attr)
        self.__dict__[attr] = value  # the next lookup finds it without this method
        return value

    def __repr__(self) -> str:
        return f"<lazy module {self.__name__!r}>"


def lazy_module(name: str) -> types.ModuleType:
    """A stand-in for `import name` that imports it when an attribute is first read."""
    return _LazyModule(name)

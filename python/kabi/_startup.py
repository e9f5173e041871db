"""What ``import kabi`` does once: load libkabi's built-in and environment plugins, then register the torch-native
kernels declared in the registry. Imported for that effect by ``kabi/__init__.py``."""

from __future__ import annotations

from ._plugins import load_builtin_plugins
from .backends import torch_native

load_builtin_plugins()
torch_native.register()

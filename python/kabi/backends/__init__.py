"""Implementations of kabi's ops, one module (or package) per backend: ``torch_native`` (registered when kabi is
imported) and ``triton``. Native backends live in libkabi's plugins (csrc/plugins)."""

"""The base layer, just above the binding ``kabi._core``: kabi's exceptions, torch dtype and tensor helpers, the
records of the core's answers (problems, kernels, candidates), devices, the op declarations read from
``registry/*.toml``, and the op fronts' decision cache. It imports nothing of kabi but ``kabi._core``."""

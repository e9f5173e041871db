"""The selection layer: timing (``bench``), the correctness gate, measuring candidates, the tuning policy and
tuning keys, the tuner (the op fronts' decision-miss handler, installed by the bootstrap), the tuning cache API
(``kabi.cache``), distributed agreement, ``kabi.verify`` and ``kabi.explain``. Imports from ``kabi.ops`` and
below."""

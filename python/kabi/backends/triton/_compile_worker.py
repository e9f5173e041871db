"""A worker process compiling Triton device binaries: ``python -m kabi.backends.triton._compile_worker REQUEST``.

``_native`` starts one per core to compile the binaries of a first CUDA dispatch in parallel. A fresh interpreter,
rather than multiprocessing's spawn or forkserver, because those import the parent's ``__main__`` again in every
child: a user's script without a ``__main__`` guard would run its own work there. REQUEST is JSON: ``{"arch": 90,
"multiprocessors": 132, "directory": "...", "variants": [[family, config tag, dtype, layout, rows], ...]}``; the worker
prints one line per variant that failed (``NAME: error``) and exits 0 once it has tried them all.
"""

from __future__ import annotations

import json
import sys


def compile_request(request: dict) -> list[str]:
    """Compile every variant of a request; return why each failure failed."""
    from ._compile import compile_to_binary
    from ._names import binary_name
    from ._binary_families import binary_families

    failures = []
    for family_name, tag, dtype, layout, rows in request["variants"]:
        name = binary_name(family_name, tag, layout, dtype, request["arch"], rows)
        try:
            (config,) = [config for config in binary_families()[family_name].configs if config.tag == tag]
            compile_to_binary(family_name, config, dtype, request["arch"], request["directory"], layout=layout,
                              multiprocessors=request["multiprocessors"], rows=rows)
        except Exception as error:  # noqa: BLE001 - one config Triton cannot build must not cost the others
            failures.append(f"{name}: {type(error).__name__}: {error}".replace("\n", " "))
    return failures


if __name__ == "__main__":
    for failure in compile_request(json.loads(sys.argv[1])):
        print(failure)

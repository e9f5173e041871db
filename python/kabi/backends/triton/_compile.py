"""Compiling a Triton kernel to a device binary: a cubin plus the manifest that tells the core how to launch it.

No GPU is needed: ``triton.compile`` with a ``GPUTarget`` runs the whole pipeline down to ptxas. The manifest's
parameter list is the kernel's own arguments minus those Triton folded into constants, followed by the scratch
pointers Triton 3.x appends to every entry; it is checked against the PTX ``.entry`` before anything is written.

Example (on any machine with Triton)::

    path = compile_to_binary("persistent_tma", HOPPER_CONFIGS[0], torch.bfloat16, 90, "binaries/")
    # binaries/triton.matmul.persistent_tma.bm128_bn256_bk64_w8_s3_g8.row_major.bfloat16.sm90.{cubin,kabi-manifest}
    kabi.load_binaries("binaries/")      # registers it as a native kernel
"""

from __future__ import annotations

from pathlib import Path

import torch

from ._binary_families import binary_families
from ._configs import MatmulConfig
from ._decode_configs import DecodeConfig
from ._manifest import Manifest, ManifestParam, check_against_ptx, fnv1a64, ptx_entry_params, write_binary
from ._names import binary_name, kernels_fingerprint

# Hopper persistent scheduling bakes the SM count into the grid rule; an H100/H200 SXM has 132.
DEFAULT_MULTIPROCESSORS = 132


# What a cubin's PTX shows of the device features it needs (kabi's feature names).
_PTX_FEATURES = (("tma", "cp.async.bulk.tensor"), ("wgmma", "wgmma."))


def _family(kernel_family):
    from ._families import KernelFamily

    if isinstance(kernel_family, KernelFamily):
        return kernel_family
    families = binary_families()
    if kernel_family not in families:
        raise ValueError(f"kernel_family must be one of {', '.join(families)}, got {kernel_family!r}")
    return families[kernel_family]


def _resolve_dtype(dtype: torch.dtype | str) -> torch.dtype:
    from ._families import DTYPE_NAMES

    dtypes_by_name = {name: torch_dtype for torch_dtype, name in DTYPE_NAMES.items()}
    resolved = dtypes_by_name.get(dtype) if isinstance(dtype, str) else dtype
    if resolved not in DTYPE_NAMES:
        raise TypeError(f"dtype must be one of {', '.join(dtypes_by_name)} (or the torch dtype); got {dtype!r}")
    return resolved


def _dtype(dtype: torch.dtype | str, family) -> torch.dtype:
    from ._families import DTYPE_NAMES

    resolved = _resolve_dtype(dtype)
    if resolved not in family.dtypes:
        allowed = ", ".join(DTYPE_NAMES[allowed_dtype] for allowed_dtype in family.dtypes)
        raise TypeError(f"dtype: the {family.name} family compiles for {allowed}; got {dtype}")
    return resolved


def _arch_range(family, arch: int) -> tuple[tuple, int, int]:
    """(exact archs, arch_min, arch_max) a cubin built for ``arch`` runs on. A cubin runs on later minor
    versions of its major; sm_90 code uses wgmma, which exists only on sm_90a, so it is exact."""
    if family.exact_archs and arch not in family.exact_archs:
        raise ValueError(f"arch: the {family.name} family needs sm_{family.exact_archs[0]}, got {arch}")
    if arch < family.arch_min:
        raise ValueError(f"arch: the {family.name} family needs sm_{family.arch_min} or later, got {arch}")
    if arch >= 90:
        return (arch,), 0, 0
    return (), arch, (arch // 10) * 10 + 9


def _scratch_params(extra: int, metadata, name: str) -> list[ManifestParam]:
    if extra < 0 or extra > 2:
        raise RuntimeError(f"{name}: the compiled entry has {extra} parameters beyond the kernel's own; kabi "
                           "knows Triton's global and profile scratch pointers (at most 2)")
    sizes = [metadata.global_scratch_size, getattr(metadata, "profile_scratch_size", 0)][:extra]
    return [ManifestParam.scratch(size) for size in sizes]


def compile_to_binary(kernel_family, config: MatmulConfig | DecodeConfig, dtype: torch.dtype | str,
                      arch: int, out_dir: str | Path, *, layout: str = "row_major",
                      multiprocessors: int = DEFAULT_MULTIPROCESSORS, rows: int = 0) -> Path:
    """Compile one (family, config) for ``dtype`` and ``arch`` into ``out_dir``/NAME.cubin and
    NAME.kabi-manifest; returns the manifest's path. ``kernel_family`` is a name from ``binary_families()`` or a
    KernelFamily.

    ``layout`` is the input layout the binary is specialized for: "row_major" (a and b row-major, unit strides
    folded in), "column_major" (both transposed views), "row_column" (a row-major, b column-major: ``x @ w.T``)
    or "strided" (any strides, slower loads; tiled and small_m only); for the grouped family, w's layout:
    "row_column" (the view [E, K, N] of an nn.Linear weight [E, N, K]) or "row_major" ([E, K, N]), x row-major.
    ``multiprocessors`` is a persistent kernel's program count (the target GPU's SM count). ``rows`` is the row
    count of a program for the decode family, which compiles one binary per count (1 for a GEMV config; 16, 32 or
    64 for a dot config). The manifest's features are those the PTX uses (``tma``, ``wgmma``).
    """
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from ._families import DTYPE_NAMES

    family = _family(kernel_family)
    dtype = _dtype(dtype, family)
    config_type = type(family.configs[0])
    if not isinstance(config, config_type):
        raise TypeError(f"config must be a {config_type.__name__} for the {family.name} family, got "
                        f"{type(config).__name__}")
    if layout not in family.binary_layouts(config):
        raise ValueError(f"layout: the {family.name} family compiles {config.tag} for "
                         f"{', '.join(family.binary_layouts(config))}; got {layout!r}")
    exact_archs, arch_min, arch_max = _arch_range(family, arch)
    if rows not in family.binary_rows(config, dtype, arch):
        raise ValueError(f"rows: the {family.name} family compiles {config.tag} in {DTYPE_NAMES[dtype]} for "
                         f"sm_{arch} with rows in {family.binary_rows(config, dtype, arch)}; got {rows}")
    spec = family.binary_spec(config, dtype, layout, **family.binary_options(arch, multiprocessors, rows))

    source = ASTSource(family.kernel, spec.signature, spec.constexprs, spec.attrs)
    compiled = triton.compile(source, target=GPUTarget("cuda", arch, 32),
                              options={"num_warps": config.num_warps, "num_stages": config.num_stages,
                                       "enable_fp_fusion": True})
    name = binary_name(family.name, config.tag, layout, DTYPE_NAMES[dtype], arch, rows)
    ptx_types = ptx_entry_params(compiled.asm["ptx"])
    params = list(spec.params) + _scratch_params(len(ptx_types) - len(spec.params), compiled.metadata, name)
    check_against_ptx(params, ptx_types, name)

    image = compiled.asm["cubin"]
    # Per-input layouts only where the inputs differ, so that every other manifest keeps format 1.
    input_layouts = spec.input_layouts if len(set(spec.input_layouts)) > 1 else ()
    manifest = Manifest(
        op=family.op, name=name, backend="triton", device="cuda", priority=family.priority + 1,
        dtypes=(DTYPE_NAMES[dtype],), type_constraints=spec.type_constraints, layouts=spec.layouts,
        input_layouts=input_layouts, alignment=16,
        batch_mode=spec.batch_mode,
        image=f"{name}.cubin", image_format="cubin", image_fnv1a64=fnv1a64(image), arch=arch,
        entry=compiled.metadata.name, grid=spec.grid, block=(config.num_threads, 1, 1),
        shared_memory_bytes=compiled.metadata.shared, cluster_size=1,
        params=tuple(params),
        archs=exact_archs, arch_min=arch_min, arch_max=arch_max,
        features=tuple(feature for feature, instruction in _PTX_FEATURES if instruction in compiled.asm["ptx"]),
        fingerprint=f"{kernels_fingerprint()}:{name}",
        extra_comments=(f"compiled by kabi with triton {triton.__version__}: {family.name} {config.tag}"
                        + (f", {rows} rows per program" if rows else ""),))
    return write_binary(manifest, image, out_dir)


def compile_all(arch: int, out_dir: str | Path, *, dtypes=("float16", "bfloat16"), layouts=("row_major",),
                families=None, multiprocessors: int = DEFAULT_MULTIPROCESSORS) -> list[Path]:
    """Compile every config of every family (or of ``families``, names) that can be a binary for ``arch``: each
    dtype, layout and row count the family compiles for. Returns the manifests' paths;
    the directory is then ready for ``kabi.load_binaries``.

    Example::

        compile_all(90, "binaries/", families=["persistent_tma"])   # 4 configs x 2 dtypes
    """
    resolved_dtypes = [_resolve_dtype(dtype) for dtype in dtypes]
    paths = []
    for family in (_family(name) for name in (binary_families() if families is None else families)):
        if (family.exact_archs and arch not in family.exact_archs) or arch < family.arch_min:
            continue
        for config in family.configs:
            for dtype in (dtype for dtype in resolved_dtypes if dtype in family.dtypes):
                for layout in (layout for layout in layouts if layout in family.binary_layouts(config)):
                    paths.extend(compile_to_binary(family, config, dtype, arch, out_dir, layout=layout,
                                                   multiprocessors=multiprocessors, rows=rows)
                                 for rows in family.binary_rows(config, dtype, arch))
    return paths

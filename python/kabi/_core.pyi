"""Type stub of kabi._core, the pybind11 binding of libkabi's C ABI (csrc/python)."""

from typing import Any, Callable, Sequence

# A tensor as the binding takes it: (data_ptr, shape, strides, dtype_code, dtype_bits, device_type, device_index).
Descriptor = tuple[int, Sequence[int], Sequence[int], int, int, int, int]
# An input as the binding takes it: a descriptor, or None for an optional input left out.
InputDescriptor = Descriptor | None
# An attribute value in schema order: an int, float or bool, or an enum attribute's value name (or index).
AttributeValue = int | float | bool | str

HEADER_ABI_VERSION: int
DTYPES: dict[str, int]
FEATURES: dict[str, int]
LAYOUTS: dict[str, int]
BATCH_MODES: dict[str, int]

def abi_version() -> int: ...
def library_version() -> str: ...
def status_name(status: int) -> str: ...

# Ops and kernels.
def op_info(name: str) -> dict[str, Any]: ...
def op_schema(name: str) -> dict[str, Any]: ...
def register_op(name: str, schema: str, type_variables: str | None = None, tuning_key: str | None = None) -> None: ...
def op_list() -> list[str]: ...
def kernel_info(op: str, name: str) -> dict[str, Any]: ...
def kernel_list(op: str | None = None) -> list[dict[str, Any]]: ...
def kernel_register_external(
    op: str,
    name: str,
    backend: str,
    device_type: int,
    arch_min: int,
    arch_max: int,
    archs: Sequence[int],
    priority: int,
    required_features: int,
    dtypes: int,
    type_constraints: str | None,
    layouts: int,
    input_layouts: Sequence[int],
    alignment: int,
    batch_mode: int,
    supports: Callable[[dict[str, Any]], bool | str] | None,
    fingerprint: str | None,
) -> None: ...
def kernel_unregister(op: str, name: str) -> None: ...

# Validation, selection, launch.
def describe(
    op: str,
    inputs: Sequence[InputDescriptor],
    outputs: Sequence[Descriptor] = (),
    attributes: Sequence[AttributeValue] = (),
) -> dict[str, Any]: ...
def select(
    op: str,
    inputs: Sequence[InputDescriptor],
    outputs: Sequence[Descriptor] = (),
    force: str | None = None,
    use_environment: bool = True,
    use_tuning_cache: bool = True,
    allow_unverified: bool = False,
    allow_failed_gate: bool = False,
    allow_none: bool = False,
    attributes: Sequence[AttributeValue] = (),
    execution_mode: str = "eager",
    with_rejected: bool = True,
) -> dict[str, Any]: ...
def check_outputs_do_not_alias_inputs(
    op: str, inputs: Sequence[InputDescriptor], outputs: Sequence[Descriptor]
) -> None: ...
def launch(
    op: str,
    kernel: str,
    inputs: Sequence[InputDescriptor],
    outputs: Sequence[Descriptor],
    stream: int = 0,
    attributes: Sequence[AttributeValue] = (),
) -> None: ...
def registry_generation() -> int: ...
def op_generation(op: str) -> int: ...
def environment_force(op: str) -> str | None: ...

class PreparedLaunch:
    """A native kernel bound to one problem; call it with the tensors (inputs, then outputs)."""

    def __init__(
        self,
        op: str,
        kernel: str,
        inputs: Sequence[InputDescriptor],
        outputs: Sequence[Descriptor],
        stream: int = 0,
        attributes: Sequence[AttributeValue] = (),
    ) -> None: ...
    def __call__(self, *tensors: Any) -> None: ...
    def on_stream(self, stream: int, *tensors: Any) -> None: ...
    def on_current_stream(self, *tensors: Any) -> None: ...
    @property
    def kernel(self) -> str: ...

class DecisionTable:
    """An op's decisions: the one table its front's hit path reads (csrc/python/decision_table.hpp)."""

    max_entries: int
    def __init__(
        self,
        op: str,
        attributes: Sequence[tuple[str, Sequence[str]] | tuple[str, Sequence[str], Sequence[Any]]],
        tensor_types: Sequence[type],
        facts: Callable[[Any], tuple],
    ) -> None: ...
    def store(
        self,
        inputs: tuple,
        attributes: tuple,
        scope: Any,
        implementation: Callable[..., Any],
        outputs: tuple,
        kernel: str,
        generation: int,
        native: PreparedLaunch | None = None,
        allocate_output: Callable[[], Any] | None = None,
        when_capturing: tuple[Callable[..., Any], str, PreparedLaunch | None, Callable[[], Any] | None] | None = None,
    ) -> bool: ...
    def find(
        self, inputs: tuple, attributes: tuple, scope: Any, capturing: bool = False
    ) -> tuple[Callable[..., Any], tuple, str] | None: ...
    def begin_miss(self) -> int: ...
    def clear(self) -> None: ...
    @property
    def generation(self) -> int: ...
    @property
    def hits(self) -> int: ...
    @property
    def misses(self) -> int: ...
    def reset_counts(self) -> None: ...
    def __len__(self) -> int: ...

def dlpack_exchange_available(tensor_type: type) -> bool: ...

def make_op_front(
    name: str,
    doc: str,
    module: str,
    table: DecisionTable,
    required_inputs: int,
    input_names: Sequence[str],
    attribute_names: Sequence[str],
    attribute_defaults: Sequence[Any],
    scope_var: Any,
    miss: Callable[..., Any],
    call_with_out: Callable[..., Any],
    kernel_failed: Callable[[str, Exception], Exception],
    bind_call: Callable[..., Any],
) -> Callable[..., Any]: ...

# Devices.
def device_count(device_type: int) -> int: ...
def device_info(device_type: int, device_index: int = 0) -> dict[str, Any]: ...
def device_signature(device_type: int, device_index: int = 0) -> str: ...

# Plugins and device binaries.
def plugin_load(path: str) -> None: ...
def plugin_load_builtin() -> None: ...
def plugin_load_builtin_device(device_type: int) -> None: ...
def plugin_load_from_environment() -> None: ...
def plugin_records() -> list[dict[str, Any]]: ...
def binaries_load(directory: str) -> int: ...
def binary_load(manifest_path: str, op: str, supports: Callable[[dict], bool | str] | None = None) -> str: ...

# Tuning cache.
TUNING_RECORD_GATE_ONLY: int
TUNING_RECORD_MEMORY_ONLY: int
TUNING_RECORD_GRAPH_MODE: int
TUNING_RECORD_SCREENED: int

def tuning_store(
    op: str,
    inputs: Sequence[InputDescriptor],
    outputs: Sequence[Descriptor],
    measurements: Sequence[tuple[str, float, str, int, float]],
    attributes: Sequence[AttributeValue] = (),
) -> None: ...
def cache_list(op: str | None = None) -> list[dict[str, Any]]: ...
def cache_directory() -> str: ...
def cache_default_directory() -> str: ...
def cache_set_directory(directory: str | None) -> None: ...
def cache_reload() -> None: ...
def cache_clear() -> None: ...
def cache_export(path: str) -> None: ...
def cache_import(path: str) -> None: ...
def cache_stats() -> tuple[int, int]: ...

# The allocator behind workspaces.
def set_allocator(
    device_types: Sequence[int],
    allocate: Callable[[int, int, int, int], int],
    release: Callable[[int, int, int, int, int], None],
) -> None: ...
def reset_allocator() -> None: ...

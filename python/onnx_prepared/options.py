"""`SessionOptions` and `RunOptions`, with onnxruntime's fields and this
runtime's own, and onnxruntime's option enums."""

from __future__ import annotations

import warnings
from enum import IntEnum

from ._onnx_prepared import RunOptions as _NativeRunOptions
from .errors import Unsupported


class GraphOptimizationLevel(IntEnum):
    """onnxruntime's levels, accepted for compatibility: this runtime
    always lowers the whole graph the same way."""

    ORT_DISABLE_ALL = 0
    ORT_ENABLE_BASIC = 1
    ORT_ENABLE_EXTENDED = 2
    ORT_ENABLE_LAYOUT = 3
    ORT_ENABLE_ALL = 99


class ExecutionMode(IntEnum):
    """Accepted for compatibility: the runtime's scheduler runs every ready
    node of a run as soon as a thread is free."""

    ORT_SEQUENTIAL = 0
    ORT_PARALLEL = 1


class ExecutionOrder(IntEnum):
    """Accepted for compatibility: the order comes from the scoped plan."""

    DEFAULT = 0
    PRIORITY_BASED = 1
    MEMORY_EFFICIENT = 2


class ConfigEntryIgnored(UserWarning):
    """A session config entry this runtime does not know: kept (and
    returned by `get_session_config_entry`), with no effect."""


# Session config keys onnxruntime documents that have no counterpart here:
# accepted with no effect and no warning (tuning knobs of its own thread
# pool, allocators, graph transformers and file formats).
KNOWN_CONFIG_NO_OPS = frozenset(
    {
        "session.intra_op.allow_spinning",
        "session.inter_op.allow_spinning",
        "session.force_spinning_stop",
        "session.intra_op_thread_affinities",
        "session.dynamic_block_base",
        "session.use_env_allocators",
        "session.use_device_allocator_for_initializers",
        "session.disable_prepacking",
        "session.set_denormal_as_zero",
        "session.disable_cpu_ep_fallback",
        "session.disable_quant_qdq",
        "session.disable_double_qdq_remover",
        "session.enable_quant_qdq_cleanup",
        "session.qdqisint8allowed",
        "session.x64quantprecision",
        "session.disable_aot_function_inlining",
        "session.disable_specified_optimizers",
        "session.save_model_format",
        "session.use_ort_model_bytes_directly",
        "session.use_ort_model_bytes_for_initializers",
        "session.minimal_build_optimizations",
        "session.strict_shape_type_inference",
        "session.allow_released_opsets_only",
        "session.graph_optimizations_loop_level",
        "session.disable_gemm_fast_gelu_fusion",
        "optimization.enable_gelu_approximation",
        "optimization.minimal_build_optimizations",
        "mlas.enable_gemm_fastmath_arm64_bfloat16",
        "mlas.use_lut_gemm",
        "ep.context_enable",
        "ep.context_embed_mode",
        "ep.context_file_path",
        "ep.share_ep_contexts",
    }
)


# Session config keys this runtime honours: the model format (ONNX only)
# and onnxruntime's MatMulNBits accuracy level (4: int8 activations, as
# `int8_activations`; anything else: exact f32, the default).
HONOURED_CONFIG = frozenset({"session.load_model_format", "session.qdq_matmulnbits_accuracy_level"})


class SessionOptions:
    """How a session runs.

    onnxruntime's fields:

    * ``intra_op_num_threads``: threads per run (the calling thread plus
      ``n - 1`` helpers); 0 (the default): one per core.
    * ``enable_profiling``: the session records a trace of every run's
      tasks; ``InferenceSession.end_profiling()`` writes it (Chrome's trace
      format, ``chrome://tracing`` or Perfetto) to
      ``<profile_file_prefix>_<date>_<time>.json``.
    * ``add_session_config_entry`` / ``get_session_config_entry``: entries
      are kept; ``session.load_model_format`` ``ORT`` is refused when the
      session opens, ``session.qdq_matmulnbits_accuracy_level`` ``4`` turns
      on ``int8_activations``; keys onnxruntime documents for its own
      thread pool, allocators and graph transformers are accepted with no
      effect, and keys this runtime does not know are reported when a
      session opens (a ``ConfigEntryIgnored`` warning), never fatal.
    * ``inter_op_num_threads``, ``graph_optimization_level``,
      ``execution_mode``, ``execution_order``, ``enable_cpu_mem_arena``,
      ``enable_mem_pattern``, ``enable_mem_reuse``,
      ``use_deterministic_compute``, ``use_per_session_threads``, the log
      fields and ``optimized_model_filepath``: accepted, no effect (a
      session never writes an optimized model; one set warns).

    This runtime's own:

    * ``cache_dir``: the prepared cache's folder (packed weights written by
      one process, read by the next); ``cache_policy``: ``"disabled"``,
      ``"read-only"``, ``"build-if-missing"`` (the default with a
      ``cache_dir``) or ``"require-complete"``; ``cache_copy_in``: copy
      each cache payload into memory instead of mapping it (for cache
      folders other programs write: a mapped payload truncated while in
      use would kill the process);
    * ``memory_limits``: bytes per memory domain, e.g.
      ``{"prepared": 64 << 20, "total": 256 << 20}`` (domains
      ``preparation``, ``prepared``, ``execution``, ``io``; ``total`` for
      all of them);
    * ``map_weights``: map external data read-only and use aligned weights
      in place;
    * ``resident_tables``: read large tables that only row gathers read
      (embeddings) whole and keep them in memory; by default a run reads
      the rows it picks from the model's data file and the table never
      counts in the process's memory (a run after the data file was
      written, truncated or touched in place fails with an error saying it
      changed: open the model again);
    * ``portable``: scalar kernels and portable layouts instead of the CPU's
      SIMD ones;
    * ``int8_activations``: quantize MatMulNBits activations to int8 where
      the model asks for it (``accuracy_level = 4``), as onnxruntime does;
    * ``io_workers``: threads reading weights (0: the default, 2).
    """

    __slots__ = (
        "intra_op_num_threads",
        "inter_op_num_threads",
        "graph_optimization_level",
        "execution_mode",
        "execution_order",
        "enable_cpu_mem_arena",
        "enable_mem_pattern",
        "enable_mem_reuse",
        "enable_profiling",
        "profile_file_prefix",
        "optimized_model_filepath",
        "use_deterministic_compute",
        "use_per_session_threads",
        "log_severity_level",
        "log_verbosity_level",
        "logid",
        "cache_dir",
        "cache_policy",
        "cache_copy_in",
        "memory_limits",
        "map_weights",
        "resident_tables",
        "portable",
        "int8_activations",
        "io_workers",
        "_config",
        "_providers",
        "_free_dimensions",
    )

    def __init__(self) -> None:
        self.intra_op_num_threads = 0
        self.inter_op_num_threads = 0
        self.graph_optimization_level = GraphOptimizationLevel.ORT_ENABLE_ALL
        self.execution_mode = ExecutionMode.ORT_SEQUENTIAL
        self.execution_order = ExecutionOrder.DEFAULT
        self.enable_cpu_mem_arena = True
        self.enable_mem_pattern = True
        self.enable_mem_reuse = True
        self.enable_profiling = False
        self.profile_file_prefix = "onnxruntime_profile_"
        self.optimized_model_filepath = ""
        self.use_deterministic_compute = False
        self.use_per_session_threads = True
        self.log_severity_level = -1
        self.log_verbosity_level = 0
        self.logid = ""
        self.cache_dir = None
        self.cache_policy = None
        self.cache_copy_in = False
        self.memory_limits = None
        self.map_weights = False
        self.resident_tables = False
        self.portable = False
        self.int8_activations = False
        self.io_workers = 0
        self._config: dict[str, str] = {}
        self._providers: list[tuple[str, dict]] = []
        self._free_dimensions: dict[str, int] = {}

    def add_session_config_entry(self, key: str, value: str) -> None:
        self._config[str(key)] = str(value)

    def get_session_config_entry(self, key: str) -> str:
        try:
            return self._config[key]
        except KeyError:
            raise RuntimeError(f"SessionOptions does not have configuration with key: {key}") from None

    def add_free_dimension_override_by_name(self, dim_name: str, dim_value: int) -> None:
        """Accepted: the runtime specializes every run to its inputs' actual
        shapes, so fixing a symbolic dimension changes nothing."""
        self._free_dimensions[str(dim_name)] = int(dim_value)

    def add_free_dimension_override_by_denotation(self, dim_denotation: str, dim_value: int) -> None:
        """Accepted, as ``add_free_dimension_override_by_name``."""
        self._free_dimensions[str(dim_denotation)] = int(dim_value)

    def add_initializer(self, name: str, ortvalue) -> None:
        raise Unsupported(
            f"add_initializer({name!r}): replacing an initializer is not supported; "
            "write the weight into the model (onnx.numpy_helper) or make it a graph input"
        )

    def add_external_initializers(self, names, ortvalues) -> None:
        raise Unsupported(
            "add_external_initializers: weights come from the model's own external data file; "
            "save the model with external data (onnx.save_model(..., save_as_external_data=True))"
        )

    def add_external_initializers_from_files_in_memory(self, names, buffers, lengths) -> None:
        raise Unsupported(
            "add_external_initializers_from_files_in_memory: weights are read from files beside "
            "the model (this is what lets a run start before they are loaded)"
        )

    def register_custom_ops_library(self, library_path: str) -> None:
        raise Unsupported(
            f"register_custom_ops_library({library_path!r}): onnxruntime custom operator libraries "
            "are native onnxruntime kernels and cannot run here"
        )

    def add_provider(self, provider_name: str, provider_options: dict | None = None) -> None:
        """Records the provider; only ``CPUExecutionProvider`` runs here."""
        self._providers.append((str(provider_name), dict(provider_options or {})))

    def add_provider_for_devices(self, ep_devices, provider_options: dict | None = None) -> None:
        """Accepted: every device this runtime uses is the CPU."""
        self._providers.append(("CPUExecutionProvider", dict(provider_options or {})))

    def has_providers(self) -> bool:
        return bool(self._providers)

    def set_provider_selection_policy(self, policy) -> None:
        """Accepted, no effect: the CPU is the only provider."""

    def set_provider_selection_policy_delegate(self, delegate) -> None:
        """Accepted, no effect: the CPU is the only provider."""

    def set_load_cancellation_flag(self, value: bool) -> None:
        """Accepted, no effect: opening reads only the graph, never the
        weights, so there is nothing long to cancel."""

    def set_ep_context_data_read_func(self, read_func) -> None:
        """Accepted, no effect: EP context models are compiled for other
        providers."""

    def clear_ep_context_data_read_func(self) -> None:
        """Accepted, no effect."""

    def _report(self) -> None:
        """Warns about what a session opened with these options ignores,
        and refuses what it cannot honour."""
        fmt = self._config.get("session.load_model_format", "ONNX")
        if fmt.upper() != "ONNX":
            raise Unsupported(f"session.load_model_format {fmt!r}: onnx_prepared reads ONNX models only")
        unknown = sorted(k for k in self._config if k not in KNOWN_CONFIG_NO_OPS and k not in HONOURED_CONFIG)
        if unknown:
            warnings.warn(
                f"session config entries with no effect in onnx_prepared: {', '.join(unknown)}",
                ConfigEntryIgnored,
                stacklevel=4,
            )
        if self.optimized_model_filepath:
            warnings.warn(
                f"optimized_model_filepath {self.optimized_model_filepath!r}: onnx_prepared writes no "
                "optimized model (it lowers the graph when it opens it; see cache_dir for what it keeps)",
                ConfigEntryIgnored,
                stacklevel=4,
            )


class RunOptions(_NativeRunOptions):
    """Per-run options (onnxruntime's): ``terminate = True`` from any
    thread ends the runs in flight with these options (they raise
    ``onnx_prepared.Terminated``, which is onnxruntime's ``Fail`` and a
    ``RuntimeError``) and fails the runs started while it stays set; the
    session stays usable. ``logid`` is the run's tag; the log fields,
    ``only_execute_path_to_fetches`` and run config entries are accepted
    with no effect."""

    def add_active_adapter(self, adapter) -> None:
        raise Unsupported("LoRA adapters (onnxruntime.LoraAdapter) are not supported: merge the adapter into the model")


__all__ = [
    "GraphOptimizationLevel",
    "ExecutionMode",
    "ExecutionOrder",
    "ConfigEntryIgnored",
    "SessionOptions",
    "RunOptions",
]

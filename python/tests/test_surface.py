"""onnxruntime's public surface, member by member: the Python README's table
names every public member of onnxruntime's `InferenceSession`,
`IOBinding`, `OrtValue`, `RunOptions`, `SessionOptions` and
`ModelMetadata`; each exists here; the refused ones raise
`onnx_prepared.Unsupported` (never `AttributeError`); config entries and
`patch_onnxruntime`."""

from __future__ import annotations

import re
import sys
import types
import warnings
from pathlib import Path

import numpy as np
import onnxruntime
import pytest

import onnx_prepared

README = Path(__file__).resolve().parents[1] / "README.md"
CLASSES = ["InferenceSession", "IOBinding", "OrtValue", "RunOptions", "SessionOptions", "ModelMetadata"]


def table() -> dict[str, str]:
    rows = re.findall(r"^\| `(\w+)\.(\w+)` \| (implemented|no-op|refused) \|", README.read_text(), re.M)
    return {f"{cls}.{member}": status for cls, member, status in rows}


def public(cls) -> list[str]:
    return sorted(n for n in dir(cls) if not n.startswith("_"))


@pytest.mark.parametrize("name", CLASSES)
def test_every_onnxruntime_member_is_in_the_table_and_here(name: str):
    rows = table()
    theirs = getattr(onnxruntime, name)
    ours = getattr(onnx_prepared, name)
    missing_rows = [m for m in public(theirs) if f"{name}.{m}" not in rows]
    assert not missing_rows, f"README table lacks {name}: {missing_rows}"
    missing_here = [m for m in public(theirs) if not hasattr(ours, m)]
    assert not missing_here, f"onnx_prepared.{name} lacks {missing_here}"


def test_refused_members_raise_unsupported(gemm_chain: Path):
    sess = onnx_prepared.InferenceSession(str(gemm_chain))
    opts = onnx_prepared.SessionOptions()
    value = onnx_prepared.OrtValue.ortvalue_from_numpy(np.zeros(3, np.float32))
    calls = {
        "InferenceSession.get_input_memory_infos": sess.get_input_memory_infos,
        "InferenceSession.get_output_memory_infos": sess.get_output_memory_infos,
        "InferenceSession.get_input_epdevices": sess.get_input_epdevices,
        "InferenceSession.get_provider_graph_assignment_info": sess.get_provider_graph_assignment_info,
        "InferenceSession.set_ep_dynamic_options": lambda: sess.set_ep_dynamic_options({}),
        "OrtValue.as_sparse_tensor": value.as_sparse_tensor,
        "OrtValue.ort_value_from_sparse_tensor": lambda: onnx_prepared.OrtValue.ort_value_from_sparse_tensor(None),
        "RunOptions.add_active_adapter": lambda: onnx_prepared.RunOptions().add_active_adapter(None),
        "SessionOptions.add_initializer": lambda: opts.add_initializer("w", value),
        "SessionOptions.add_external_initializers": lambda: opts.add_external_initializers(["w"], [value]),
        "SessionOptions.add_external_initializers_from_files_in_memory": (
            lambda: opts.add_external_initializers_from_files_in_memory(["a"], [b""], [0])
        ),
        "SessionOptions.register_custom_ops_library": lambda: opts.register_custom_ops_library("libx.so"),
    }
    refused = {k for k, v in table().items() if v == "refused"}
    assert refused == set(calls), "the refused rows and the calls checked here differ"
    for name, call in calls.items():
        with pytest.raises(onnx_prepared.Unsupported) as e:
            call()
        assert isinstance(e.value, NotImplementedError), name
        assert isinstance(e.value, onnx_prepared.capi.onnxruntime_pybind11_state.NotImplemented), name


def test_config_entries_known_unknown_and_refused(gemm_chain: Path):
    opts = onnx_prepared.SessionOptions()
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        onnx_prepared.InferenceSession(str(gemm_chain), opts)
    opts.add_session_config_entry("my.unknown.key", "1")
    with pytest.warns(onnx_prepared.ConfigEntryIgnored, match="my.unknown.key"):
        sess = onnx_prepared.InferenceSession(str(gemm_chain), opts)
    assert sess.get_session_options().get_session_config_entry("my.unknown.key") == "1"
    with pytest.raises(RuntimeError, match="does not have configuration with key"):
        opts.get_session_config_entry("absent")
    opts.add_session_config_entry("session.load_model_format", "ORT")
    with pytest.raises(onnx_prepared.Unsupported, match="ONNX models only"):
        onnx_prepared.InferenceSession(str(gemm_chain), opts)


def test_errors_are_onnxruntime_classes(gemm_chain: Path, tmp_path: Path):
    state = onnx_prepared.capi.onnxruntime_pybind11_state
    sess = onnx_prepared.InferenceSession(str(gemm_chain))
    with pytest.raises(state.InvalidArgument):
        sess.run(None, {"nope": np.zeros((1, 256), np.float32)})
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a model")
    with pytest.raises(state.InvalidProtobuf):
        onnx_prepared.InferenceSession(str(bad))


def ort_script(path: Path):
    """An application written for onnxruntime, unchanged."""
    import onnxruntime as ort  # noqa: PLC0415 - the application's own import

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(str(path), so, providers=ort.get_available_providers())
    try:
        sess.run(None, {"A": np.zeros((1, 256), np.float64)})
        raised = None
    except ort.capi.onnxruntime_pybind11_state.InvalidArgument as e:
        raised = type(e)
    (y,) = sess.run(None, {"A": np.ones((1, 256), np.float32)})
    return type(sess), raised, y


def test_patch_onnxruntime_replaces_and_restores(gemm_chain: Path):
    # A library imported before the patch, holding onnxruntime's class by name.
    library = types.ModuleType("some_library")
    library.InferenceSession = onnxruntime.InferenceSession
    library.Fail = onnxruntime.capi.onnxruntime_pybind11_state.Fail
    sys.modules["some_library"] = library
    original = onnxruntime.InferenceSession
    try:
        session_type, _, before = ort_script(gemm_chain)
        assert session_type is original
        onnx_prepared.patch_onnxruntime()
        try:
            assert onnxruntime.InferenceSession is onnx_prepared.InferenceSession
            assert library.InferenceSession is onnx_prepared.InferenceSession
            assert library.Fail is onnx_prepared.capi.onnxruntime_pybind11_state.Fail
            session_type, raised, after = ort_script(gemm_chain)
            assert session_type is onnx_prepared.InferenceSession
            assert raised is onnx_prepared.InputError
            np.testing.assert_allclose(after, before, rtol=1e-5, atol=1e-6)
        finally:
            onnx_prepared.unpatch_onnxruntime()
        assert onnxruntime.InferenceSession is original
        assert library.InferenceSession is original
        assert ort_script(gemm_chain)[0] is original
    finally:
        del sys.modules["some_library"]

"""Bad models, inputs and options raise Python exceptions carrying the
runtime's error kind; none crashes the interpreter, and a session that
refused an input still runs."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from conftest import one_thread, tiny_llm_feeds

import onnx_prepared
from onnx_prepared import errors


def test_every_kind_has_its_class():
    kinds = {cls.kind for cls in (getattr(errors, n) for n in errors.__all__)}
    assert kinds == {
        "error", "model", "external_data", "payload", "resolve", "input", "kernel",
        "budget", "preparation", "cancelled", "system", "cache",
        # The package's own: an onnxruntime member it refuses.
        "unsupported",
    }
    assert issubclass(onnx_prepared.InputError, ValueError)
    assert all(issubclass(getattr(errors, n), onnx_prepared.Error) for n in errors.__all__)


@pytest.fixture
def gemm(gemm_chain):
    return onnx_prepared.InferenceSession(str(gemm_chain), one_thread())


GOOD = np.ones((2, 256), np.float32)


@pytest.mark.parametrize(
    "feeds, match",
    [
        ({"A": GOOD.astype(np.float64)}, "f32"),
        ({"A": np.ones((2, 7), np.float32)}, "A"),
        ({"A": np.ones((2, 256, 1), np.float32)}, "A"),
        ({"A": np.float32(1.0)}, "A"),
        ({"A": GOOD.astype(bool)}, "A"),
        ({"A": GOOD, "B": GOOD}, "not a graph input"),
        ({}, "lacks input"),
        ({"A": np.array(["x"] * 256)}, "dtype"),
        ({"A": np.ones((1, 256), np.complex64)}, "dtype"),
        ({"A": np.array([object()] * 256)}, "dtype"),
        ({"A": [[1.0, 2.0], [3.0]]}, "A"),
        ({"A": "text"}, "A"),
    ],
    ids=[
        "f64", "inner-dim", "rank", "scalar", "bool", "unknown-name", "missing", "str-dtype",
        "complex", "object", "ragged-list", "a-string",
    ],
)
def test_bad_inputs_raise_input_errors(gemm, feeds, match):
    with pytest.raises(onnx_prepared.InputError, match=match) as e:
        gemm.run(None, feeds)
    assert e.value.kind == "input"
    # The session is unharmed.
    (y,) = gemm.run(None, {"A": GOOD})
    assert y.shape == (2, 256)


def test_bad_call_shapes_raise_type_errors(gemm):
    with pytest.raises(TypeError):
        gemm.run(None, [GOOD])
    with pytest.raises(TypeError):
        gemm.run(None, {1: GOOD})
    with pytest.raises(TypeError):
        gemm.run("Y", {"A": GOOD})
    with pytest.raises(onnx_prepared.InputError, match="not a graph output"):
        gemm.run(["Z"], {"A": GOOD})


def test_an_empty_batch_runs(gemm):
    (y,) = gemm.run(None, {"A": np.ones((0, 256), np.float32)})
    assert y.shape == (0, 256)


def test_non_finite_values_flow_through(gemm):
    x = GOOD.copy()
    x[0, 0] = np.nan
    x[1, 1] = np.inf
    (y,) = gemm.run(None, {"A": x})
    assert not np.isfinite(y).all()


def test_an_out_of_range_token_id_is_an_error(tiny_llm):
    sess = onnx_prepared.InferenceSession(str(tiny_llm), one_thread())
    feeds = tiny_llm_feeds(2)
    feeds["input_ids"] = np.array([[5, 1 << 40]], np.int64)
    with pytest.raises(onnx_prepared.Error) as e:
        sess.run(None, feeds)
    assert e.value.kind in ("input", "kernel") and e.value.failed_task == "run"
    assert sess.run(None, tiny_llm_feeds(2))[0].shape == (1, 2, 8192)


def test_randomized_garbage_never_crashes(tiny_llm, gemm):
    llm = onnx_prepared.InferenceSession(str(tiny_llm), one_thread())
    rng = np.random.default_rng(1234)
    dtypes = [np.float32, np.float64, np.int64, np.int32, np.uint8, np.bool_, np.float16]
    outcomes = {"ok": 0, "error": 0}
    for case in range(150):
        sess = llm if case % 2 else gemm
        names = [i.name for i in sess.get_inputs()]
        feeds = {}
        for name in names:
            if rng.random() < 0.05:
                continue  # missing
            rank = int(rng.integers(0, 5))
            shape = tuple(int(d) for d in rng.integers(0, 9, size=rank))
            dtype = dtypes[int(rng.integers(0, len(dtypes)))]
            feeds[name] = (rng.standard_normal(shape) * 100).astype(dtype)
        try:
            sess.run(None, feeds)
            outcomes["ok"] += 1
        except onnx_prepared.Error:
            outcomes["error"] += 1
    assert outcomes["error"] > 0
    assert gemm.run(None, {"A": GOOD})[0].shape == (2, 256)


def test_bad_models(tmp_path, gemm_chain):
    with pytest.raises(onnx_prepared.ModelError):
        onnx_prepared.InferenceSession(str(tmp_path / "absent.onnx"))
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(b"\x08\x07this is not a protobuf\xff\xff\xff")
    with pytest.raises(onnx_prepared.Error) as e:
        onnx_prepared.InferenceSession(str(garbage))
    assert e.value.kind == "model"
    truncated = tmp_path / "truncated.onnx"
    truncated.write_bytes(gemm_chain.read_bytes()[:100])
    with pytest.raises(onnx_prepared.Error):
        onnx_prepared.InferenceSession(str(truncated))
    # Serialized bytes have no folder beside them: their external data is missing.
    with pytest.raises(onnx_prepared.ExternalDataError, match="gemm-chain.data"):
        onnx_prepared.InferenceSession(gemm_chain.read_bytes())


def test_missing_external_data(tmp_path, gemm_chain):
    shutil.copy(gemm_chain, tmp_path / gemm_chain.name)  # without its .data file
    with pytest.raises(onnx_prepared.ExternalDataError) as e:
        onnx_prepared.InferenceSession(str(tmp_path / gemm_chain.name))
    assert e.value.kind == "external_data"


def test_unsupported_operators_fail_at_open(tmp_path):
    import onnx
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [])
    graph = helper.make_graph([helper.make_node("Det", ["x"], ["y"])], "det", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    onnx.save(model, str(tmp_path / "det.onnx"))
    with pytest.raises(onnx_prepared.ResolveError, match="Det"):
        onnx_prepared.InferenceSession(str(tmp_path / "det.onnx"))


@pytest.mark.parametrize(
    "field, value, match",
    [
        ("memory_limits", {"disk": 1}, "not a memory domain"),
        ("memory_limits", {"prepared": -1}, "number of bytes"),
        ("memory_limits", [("prepared", 1)], "dict"),
        ("intra_op_num_threads", -1, "intra_op_num_threads"),
        ("intra_op_num_threads", 5000, "more than"),
        ("cache_policy", 7, "cache_policy"),
    ],
)
def test_bad_options_raise_value_errors(gemm_chain, field, value, match):
    with pytest.raises(ValueError, match=match):
        onnx_prepared.InferenceSession(str(gemm_chain), one_thread(**{field: value}))


def test_generate_refuses_what_it_cannot_do(gemm, tiny_llm):
    with pytest.raises(onnx_prepared.Error, match="token-ids"):
        gemm.generate([1, 2, 3], 4)
    llm = onnx_prepared.InferenceSession(str(tiny_llm), one_thread())
    with pytest.raises(onnx_prepared.InputError, match="max_new_tokens"):
        llm.generate([1, 2], 0)
    with pytest.raises(onnx_prepared.InputError, match="max_new_tokens"):
        llm.generate([1, 2], onnx_prepared.MAX_NEW_TOKENS + 1)
    with pytest.raises(onnx_prepared.Error, match="empty prompt"):
        llm.generate([], 2)
    with pytest.raises(OverflowError):
        llm.generate([1, 2], -1)

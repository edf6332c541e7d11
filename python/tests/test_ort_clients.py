"""Contract tests: the call sequences real onnxruntime clients make,
replayed against onnxruntime and onnx_prepared (`rt` is either module),
with the results compared.

* optimum (`ORTModel*`): `IOBinding(session)` built directly, the
  session's `_model_path`, providers and provider options,
  `set_providers`, NodeArg types mapped to NumPy types, inputs and outputs
  bound by raw CPU pointer, `run_with_iobinding`;
* Ultralytics (`AutoBackend`, ONNX): `get_modelmeta().custom_metadata_map`
  parsed as it parses it, `run(output_names, ...)`, and its IOBinding form
  with keyword arguments and preallocated outputs;
* a decoder loop on IOBinding: each step's `present` outputs bound as the
  next step's `past` inputs (`get_outputs` / `bind_ortvalue_input`);
* silero-VAD and faster-whisper's VAD: thread counts, arena and log
  options, a 0-d `sr`, a non-contiguous input view, state fed back;
* `RunOptions.terminate` from another thread during a long run, before a
  run, and through `run_with_iobinding`; the next run succeeds;
* `OrtValue` and `run_with_ort_values`; `run_async` with onnxruntime's
  callback; profiling.
"""

from __future__ import annotations

import ast
import json
import threading
import time
from pathlib import Path

import _clients
import numpy as np
import onnxruntime
import pytest
from conftest import tiny_llm_feeds

import onnx_prepared

RUNTIMES = [onnxruntime, onnx_prepared]
IDS = ["onnxruntime", "onnx_prepared"]
# The element types optimum's TypeHelper maps NodeArg types to.
ORT_TO_NUMPY = {"tensor(float)": np.float32, "tensor(int64)": np.int64, "tensor(bool)": bool}


def exception_classes(rt):
    return rt.capi.onnxruntime_pybind11_state


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("client-models")
    return {
        "detector": _clients.detector(folder),
        "long": _clients.long_chain(folder),
        "vad": _clients.vad(folder),
    }


def both(script, *args):
    """`script(rt, *args)` with onnxruntime and with onnx_prepared."""
    return [script(rt, *args) for rt in RUNTIMES]


def assert_same_arrays(ours: list, theirs: list, rtol: float = 1e-5) -> None:
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs):
        a, b = np.asarray(a), np.asarray(b)
        assert a.shape == b.shape and a.dtype == b.dtype
        np.testing.assert_allclose(a, b, rtol=rtol, atol=rtol * max(1.0, float(np.abs(b).max(initial=0))))


# -- optimum -------------------------------------------------------------


def optimum_feature_extraction(rt, path: Path):
    """ORTModel's session use: construction with providers, provider options
    and session options; `_model_path`; `IOBinding(session)`; NodeArg types;
    numpy `run` and the IOBinding path with raw pointers."""
    opts = rt.SessionOptions()
    opts.graph_optimization_level = rt.GraphOptimizationLevel.ORT_ENABLE_ALL
    sess = rt.InferenceSession(
        Path(path), providers=["CPUExecutionProvider"], provider_options=[{}], sess_options=opts
    )
    assert Path(sess._model_path).name == path.name
    provider = sess.get_providers()[0]
    assert provider == "CPUExecutionProvider"
    assert sess.get_provider_options()[provider] == {}
    sess.set_providers([provider], provider_options=[{}])
    binding = rt.IOBinding(sess)
    inputs = {i.name: i for i in sess.get_inputs()}
    outputs = sess.get_outputs()
    x = np.random.default_rng(5).standard_normal((3, 256)).astype(np.float32)
    (plain,) = sess.run(None, {"A": x})
    # The IOBinding path: inputs and preallocated outputs by pointer.
    np_type = ORT_TO_NUMPY[inputs["A"].type]
    binding.bind_input("A", "cpu", 0, np_type, tuple(x.shape), x.ctypes.data)
    out = np.empty(3 * 256, ORT_TO_NUMPY[outputs[0].type])
    binding.bind_output(outputs[0].name, "cpu", 0, out.dtype.type, [3, 256], out.ctypes.data)
    binding.synchronize_inputs()
    sess.run_with_iobinding(binding)
    binding.synchronize_outputs()
    bound = out.reshape(3, 256).copy()
    # Outputs the session allocates (binding by name), read back.
    binding.clear_binding_outputs()
    binding.bind_output(outputs[0].name, "cpu")
    sess.run_with_iobinding(binding)
    (copied,) = binding.copy_outputs_to_cpu()
    (value,) = binding.get_outputs()
    return [plain, bound, copied, value.numpy()], value.shape(), value.data_type()


def test_optimum_feature_extraction_sequence(gemm_chain: Path):
    (ours, ours_shape, ours_type), (theirs, shape, dtype) = both(optimum_feature_extraction, gemm_chain)[::-1]
    assert (ours_shape, ours_type) == (shape, dtype)
    assert_same_arrays(ours, theirs)
    # Every path gives the plain run's outputs.
    assert_same_arrays(ours[1:], [ours[0]] * 3)


# -- Ultralytics ---------------------------------------------------------


def ultralytics_autobackend(rt, path: Path):
    """AutoBackend's ONNX path: metadata parsed as Ultralytics parses it,
    output names, `run`, and its IOBinding form (keywords, preallocated
    output buffer, input by pointer)."""
    assert "CPUExecutionProvider" in rt.get_available_providers()
    sess = rt.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    meta = sess.get_modelmeta()
    metadata = dict(meta.custom_metadata_map)
    for k in ("stride", "batch"):
        metadata[k] = int(metadata[k])
    for k in ("imgsz", "names", "args"):
        metadata[k] = ast.literal_eval(metadata[k])
    header = (meta.producer_name, meta.graph_name, meta.domain, meta.description, meta.graph_description, meta.version)
    output_names = [x.name for x in sess.get_outputs()]
    dynamic = isinstance(sess.get_outputs()[0].shape[0], str)
    fp16 = "float16" in sess.get_inputs()[0].type
    im = np.random.default_rng(1).random((1, 3, *metadata["imgsz"]), dtype=np.float32)
    y = sess.run(output_names, {sess.get_inputs()[0].name: im})
    io = sess.io_binding()
    out = np.empty(tuple(sess.get_outputs()[0].shape), np.float32)
    io.bind_output(
        name=output_names[0], device_type="cpu", device_id=0, element_type=np.float32,
        shape=tuple(out.shape), buffer_ptr=out.ctypes.data,
    )  # fmt: skip
    io.bind_input(
        name="images", device_type="cpu", device_id=0, element_type=np.float32,
        shape=tuple(im.shape), buffer_ptr=im.ctypes.data,
    )  # fmt: skip
    sess.run_with_iobinding(io)
    return metadata, header, output_names, (dynamic, fp16), [*y, out.copy()]


def test_ultralytics_autobackend_sequence(models):
    theirs, ours = both(ultralytics_autobackend, models["detector"])
    assert ours[:4] == theirs[:4]
    assert ours[0]["names"] == {0: "person", 1: "bicycle", 2: "car"}
    assert ours[1] == ("pytorch", "main_graph", "ai.ultralytics", _clients.DETECTOR_METADATA["description"],
                       "the detector's graph", 3)  # fmt: skip
    assert_same_arrays(ours[4], theirs[4])


# -- a decoder loop on IOBinding -----------------------------------------


def decoder_iobinding_loop(rt, path: Path, steps: int = 6):
    """Greedy decoding where each step's presents are bound, as OrtValues,
    as the next step's pasts; and the same loop with `run` and arrays."""
    opts = rt.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = rt.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    out_names = [o.name for o in sess.get_outputs()]
    presents = [n for n in out_names if n.startswith("present_")]
    feeds = tiny_llm_feeds(t=4, p=0, seed=2)
    io = sess.io_binding()
    for name, value in feeds.items():
        io.bind_cpu_input(name, value)
    tokens, p = [], 4
    for _ in range(steps):
        # Bound by name again each step, as optimum does (onnxruntime keeps
        # a run's outputs bound, and the shapes grow).
        io.clear_binding_outputs()
        for name in out_names:
            io.bind_output(name, "cpu")
        sess.run_with_iobinding(io)
        results = dict(zip(out_names, io.get_outputs()))
        token = int(results["logits"].numpy()[0, -1].argmax())
        tokens.append(token)
        io.bind_cpu_input("input_ids", np.array([[token]], np.int64))
        io.bind_cpu_input("attn_bias", np.zeros((1, 1, 1, p + 1), np.float32))
        for name in presents:
            io.bind_ortvalue_input(name.replace("present_", "past_"), results[name])
        p += 1
    # The same greedy loop through `run`.
    run_tokens, p, pasts = [], 4, {}
    current = dict(feeds)
    for _ in range(steps):
        outs = dict(zip(out_names, sess.run(None, current)))
        token = int(outs["logits"][0, -1].argmax())
        run_tokens.append(token)
        current = {"input_ids": np.array([[token]], np.int64), "attn_bias": np.zeros((1, 1, 1, p + 1), np.float32)}
        current.update({n.replace("present_", "past_"): outs[n] for n in presents})
        p += 1
    return tokens, run_tokens


def test_decoder_kv_loop_on_iobinding(tiny_llm: Path):
    (theirs, theirs_run), (ours, ours_run) = both(decoder_iobinding_loop, tiny_llm)
    assert ours == ours_run
    assert ours == theirs == theirs_run


def decoder_raw_pointer_loop(rt, path: Path, steps: int = 5):
    """optimum's legacy CPU decoder path (`use_io_binding=True` on CPU):
    every input, the pasts included, bound by raw pointer to host buffers,
    and every output bound to a preallocated buffer of the shape it will
    have (presents: the past length plus the new tokens)."""
    opts = rt.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = rt.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    out_names = [o.name for o in sess.get_outputs()]
    feeds = tiny_llm_feeds(t=3, p=0, seed=9)
    vocab = 8192
    tokens, p, t = [], 0, 3
    for _ in range(steps):
        io = sess.io_binding()
        for name, value in feeds.items():
            value = np.ascontiguousarray(value)
            feeds[name] = value  # kept alive while bound
            # A zero-length past has no buffer of its own: any pointer will do.
            ptr = value.ctypes.data if value.size else feeds["input_ids"].ctypes.data
            io.bind_input(name, "cpu", 0, value.dtype.type, tuple(value.shape), ptr)
        buffers = {}
        for name in out_names:
            shape = [1, t, vocab] if name == "logits" else [1, 8, p + t, 64]
            buffers[name] = np.empty(int(np.prod(shape)), np.float32)
            io.bind_output(name, "cpu", 0, np.float32, shape, buffers[name].ctypes.data)
        sess.run_with_iobinding(io)
        logits = buffers["logits"].reshape(1, t, vocab)
        token = int(logits[0, -1].argmax())
        tokens.append(token)
        p += t
        t = 1
        feeds = {"input_ids": np.array([[token]], np.int64), "attn_bias": np.zeros((1, 1, 1, p + 1), np.float32)}
        for name in out_names:
            if name.startswith("present_"):
                feeds[name.replace("present_", "past_")] = buffers[name].reshape(1, 8, p, 64)
    return tokens


def test_decoder_on_raw_pointers_as_legacy_optimum(tiny_llm: Path):
    theirs, ours = both(decoder_raw_pointer_loop, tiny_llm)
    assert ours == theirs


# -- voice activity detectors --------------------------------------------


def vad_stream(rt, path: Path):
    """silero-vad's OnnxWrapper and faster-whisper's SileroVADModel: one
    thread each way, arena off, quiet logs; a 0-d `sr`; chunks taken as
    non-contiguous views; the state fed back."""
    opts = rt.SessionOptions()
    opts.inter_op_num_threads = 1
    opts.intra_op_num_threads = 1
    opts.enable_cpu_mem_arena = False
    opts.log_severity_level = 4
    sess = rt.InferenceSession(str(path), providers=["CPUExecutionProvider"], sess_options=opts)
    audio = np.random.default_rng(4).standard_normal((1, 4096 * 2)).astype(np.float32)
    state = np.zeros((2, 1, 128), np.float32)
    probs = []
    for i in range(4):
        chunk = audio[:, 2 * 512 * i : 2 * 512 * (i + 1) : 2]  # a strided view
        out, state = sess.run(None, {"input": chunk, "state": state, "sr": np.array(16000, dtype="int64")})
        probs.append(out)
    return [*probs, state]


def test_vad_session_options_and_stream(models):
    theirs, ours = both(vad_stream, models["vad"])
    assert_same_arrays(ours, theirs)


# -- RunOptions.terminate --------------------------------------------------


def terminate_from_thread(rt, path: Path):
    opts = rt.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = rt.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    big = np.random.default_rng(0).standard_normal((1024, 1024)).astype(np.float32)
    small = big[:4]
    ro = rt.RunOptions()
    ro.logid = "long run"
    timer = threading.Timer(0.3, lambda: setattr(ro, "terminate", True))
    timer.start()
    start = time.perf_counter()
    try:
        with pytest.raises(Exception) as during:
            sess.run(None, {"x": big}, ro)
    finally:
        timer.cancel()
    elapsed = time.perf_counter() - start
    # Still set: the next run with these options fails at once.
    with pytest.raises(Exception) as before:
        sess.run(None, {"x": small}, ro)
    ro.terminate = False
    (after,) = sess.run(None, {"x": small}, ro)
    (fresh,) = sess.run(None, {"x": small})
    # Through run_with_iobinding (onnxruntime raises a RuntimeError there).
    ro.terminate = True
    io = sess.io_binding()
    io.bind_cpu_input("x", small)
    io.bind_output("y", "cpu")
    with pytest.raises(RuntimeError) as bound:
        sess.run_with_iobinding(io, ro)
    return during.value, before.value, bound.value, elapsed, [after, fresh]


def test_run_options_terminate_ends_a_long_run(models):
    results = both(terminate_from_thread, models["long"])
    for rt, (during, before, bound, elapsed, outputs) in zip(RUNTIMES, results):
        for e in (during, before):
            assert isinstance(e, exception_classes(rt).Fail), (rt.__name__, type(e))
            assert "terminate flag" in str(e)
        assert "terminate flag" in str(bound)
    # onnx_prepared's error is both onnxruntime's `Fail` and its own kind.
    assert isinstance(results[1][0], onnx_prepared.Terminated)
    assert isinstance(results[1][0], onnx_prepared.Cancelled)
    assert_same_arrays(results[1][4], results[0][4], rtol=1e-4)
    print(f"terminated after {results[0][3]:.2f} s (onnxruntime), {results[1][3]:.2f} s (onnx_prepared)")


def test_terminate_stops_the_run_between_kernels(models):
    """Set before the run starts, the run does no work; a run cancelled
    while hot stops between kernels, long before a whole run's time."""
    opts = onnx_prepared.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = onnx_prepared.InferenceSession(str(models["long"]), opts)
    x = np.ones((1024, 1024), np.float32)
    sess.prepare()
    t0 = time.perf_counter()
    sess.run(None, {"x": x})
    whole = time.perf_counter() - t0
    ro = onnx_prepared.RunOptions()
    threading.Timer(whole / 10, lambda: setattr(ro, "terminate", True)).start()
    t0 = time.perf_counter()
    with pytest.raises(onnx_prepared.Terminated):
        sess.run(None, {"x": x}, ro)
    cancelled = time.perf_counter() - t0
    # Generous: the point is that it did not run to the end.
    assert cancelled < whole * 0.8, (cancelled, whole)


# -- OrtValue, run_with_ort_values, run_async, profiling -------------------


def ort_values(rt, path: Path):
    sess = rt.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    x = np.random.default_rng(6).standard_normal((2, 256)).astype(np.float32)
    v = rt.OrtValue.ortvalue_from_numpy(x)
    described = (v.shape(), v.data_type(), v.element_type(), v.device_name(), v.is_tensor(), v.has_value(),
                 v.tensor_size_in_bytes(), v.data_ptr() == x.ctypes.data, v.is_tensor_sequence())  # fmt: skip
    (y,) = sess.run_with_ort_values(["Y"], {"A": v})
    y_desc = (y.shape(), y.data_type(), y.element_type(), y.device_name())
    first = y.numpy().copy()
    # The value views the array: a write shows on the next run.
    x[:] = 0.5
    (y2,) = sess.run_with_ort_values(None, {"A": v})
    z = rt.OrtValue.ortvalue_from_shape_and_type([2, 3], np.int64)
    z_desc = (z.shape(), z.data_type(), z.numpy().dtype)
    z.update_inplace(np.arange(6, dtype=np.int64).reshape(2, 3))
    view = v.numpy()
    view[0, 0] = 7.0
    return described, (y_desc, z_desc), [first, y2.numpy(), z.numpy(), np.asarray(y)], float(x[0, 0])


def test_ort_values_sequence(gemm_chain: Path):
    theirs, ours = both(ort_values, gemm_chain)
    assert ours[0] == theirs[0]
    assert ours[1] == theirs[1]
    assert_same_arrays(ours[2], theirs[2])
    assert ours[3] == theirs[3] == 7.0


def run_async_callback(rt, path: Path):
    sess = rt.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    done = threading.Event()
    got = {}

    def callback(results, user_data, err):
        got.update(results=results, user_data=user_data, err=err, thread=threading.current_thread())
        done.set()

    x = np.full((1, 256), 0.25, np.float32)
    sess.run_async(["Y"], {"A": x}, callback, {"tag": 1})
    assert done.wait(30)
    assert got["thread"] is not threading.main_thread()
    return got["results"], got["user_data"], got["err"]


def test_run_async_callback_signature(gemm_chain: Path):
    theirs, ours = both(run_async_callback, gemm_chain)
    assert ours[1:] == theirs[1:] == ({"tag": 1}, "")
    assert_same_arrays(ours[0], theirs[0])


def profiled(rt, path: Path, folder: Path):
    opts = rt.SessionOptions()
    opts.enable_profiling = True
    opts.profile_file_prefix = str(folder / f"{rt.__name__}")
    sess = rt.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    start = sess.get_profiling_start_time_ns()
    sess.run(None, {"A": np.ones((1, 256), np.float32)})
    name = sess.end_profiling()
    with open(name) as f:
        trace = json.load(f)
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    complete = [e for e in events if e.get("ph") == "X"]
    return name, start, complete, sess.end_profiling()


def test_profiling_writes_a_chrome_trace(gemm_chain: Path, tmp_path: Path):
    for rt, (name, start, complete, again) in zip(RUNTIMES, both(profiled, gemm_chain, tmp_path)):
        assert Path(name).parent == tmp_path and Path(name).name.startswith(rt.__name__), name
        assert name.endswith(".json") and start > 0
        assert complete and all({"name", "ts", "dur"} <= e.keys() for e in complete)
        assert again == ""


def from_bytes(rt, path: Path):
    """Tools that build a model in memory open it from its bytes
    (`InferenceSession(model.SerializeToString())`)."""
    sess = rt.InferenceSession(path.read_bytes(), providers=["CPUExecutionProvider"])
    im = np.random.default_rng(2).random((1, 3, 32, 32), dtype=np.float32)
    return sess, sess.run([], {"images": im})


def test_serialized_model_and_empty_output_names(models):
    (theirs_sess, theirs), (ours_sess, ours) = both(from_bytes, models["detector"])
    assert_same_arrays(ours, theirs)
    # The bytes went to a file of the session's own, removed with it.
    folder = Path(ours_sess._model_path).parent
    assert folder.is_dir() and folder != models["detector"].parent
    del ours_sess
    import gc

    gc.collect()
    assert not folder.exists()

"""The session beyond onnxruntime's interface: prepare, the hot path,
stats, memory limits, the forms inputs may take, the GIL released during
runs, and inputs not kept after a run."""

from __future__ import annotations

import gc
import threading
import weakref

import numpy as np
import pytest
from conftest import one_thread, tiny_llm_feeds

import onnx_prepared


def test_prepare_makes_the_session_hot_and_stats_count_it(gemm_chain):
    sess = onnx_prepared.InferenceSession(str(gemm_chain), one_thread())
    cold = sess.stats()
    assert not sess.is_hot()
    assert cold["source_bytes_read"] == 0 and cold["prepacks"] == 0  # metadata only so far
    assert cold["resident_objects"] == 0 and cold["prepared_objects"] > 0
    sess.prepare()
    assert sess.is_hot()
    s = sess.stats()
    assert s["source_bytes_read"] > 0
    assert s["prepacks"] > 0
    assert s["resident_objects"] == s["prepared_objects"]
    assert s["cache_hits"] == 0 and s["cache_writes"] == 0  # no cache
    assert s["peak_live_bytes"]["preparation"] > 0  # source buffers were live
    assert s["memory"]["preparation"]["live"] == 0  # and are freed
    assert s["memory"]["prepared"]["live"] == s["resident_bytes"] > 0
    assert s["memory"]["total"]["limit"] is None
    # The hot path reads nothing more.
    sess.run(None, {"A": np.ones((1, 256), np.float32)})
    assert sess.stats()["source_bytes_read"] == s["source_bytes_read"]


def test_first_run_streams_the_weights_in(tiny_llm):
    sess = onnx_prepared.InferenceSession(str(tiny_llm), one_thread())
    (logits, *_) = sess.run(None, tiny_llm_feeds(4))
    assert logits.shape == (1, 4, 8192) and np.isfinite(logits).all()
    sess.prepare()  # whatever the run left is finished
    assert sess.is_hot() and sess.stats()["prepacks"] > 0


def test_an_embedding_is_served_by_rows_unless_kept_resident(tiny_llm):
    rows = onnx_prepared.InferenceSession(str(tiny_llm), one_thread())
    opts = one_thread()
    opts.resident_tables = True
    resident = onnx_prepared.InferenceSession(str(tiny_llm), opts)
    feeds = tiny_llm_feeds(3)
    for got, want in zip(rows.run(None, feeds), resident.run(None, feeds)):
        np.testing.assert_array_equal(got, want)
    # A hot run reads its 3 embedding rows (512 f16 values each) from the
    # data file; a resident table reads nothing.
    before = (rows.stats()["source_bytes_read"], resident.stats()["source_bytes_read"])
    rows.run(None, feeds)
    resident.run(None, feeds)
    assert rows.stats()["source_bytes_read"] - before[0] == 3 * 512 * 2
    assert resident.stats()["source_bytes_read"] == before[1]
    table = 8192 * 512 * 2
    peaks = [s.stats()["peak_live_bytes"]["prepared"] for s in (rows, resident)]
    assert peaks[0] + table <= peaks[1], peaks


def test_memory_limits_are_applied_and_reported(tiny_llm):
    limit = 16 << 20  # the largest weight (the 8 MiB embedding) and some room
    sess = onnx_prepared.InferenceSession(
        str(tiny_llm), one_thread(memory_limits={"preparation": limit, "total": 256 << 20})
    )
    want = sess.run(None, tiny_llm_feeds(3))
    s = sess.stats()
    assert s["memory"]["preparation"]["limit"] == limit
    assert s["memory"]["total"]["limit"] == 256 << 20
    assert s["memory"]["prepared"]["limit"] is None
    assert 0 < s["peak_live_bytes"]["preparation"] <= limit
    free = onnx_prepared.InferenceSession(str(tiny_llm), one_thread())
    for g, w in zip(free.run(None, tiny_llm_feeds(3)), want):
        np.testing.assert_array_equal(g, w)


def test_a_prepared_limit_too_small_for_one_weight_fails_the_run(gemm_chain):
    sess = onnx_prepared.InferenceSession(str(gemm_chain), one_thread(memory_limits={"prepared": 1024}))
    with pytest.raises(onnx_prepared.Error) as e:
        sess.run(None, {"A": np.ones((1, 256), np.float32)})
    assert e.value.kind in ("budget", "preparation"), e.value
    # The refusal is an error, not a crash: the session still answers.
    assert sess.stats()["memory"]["prepared"]["live"] <= 1024


@pytest.mark.parametrize(
    "make",
    [
        lambda x: x.tolist(),  # a list: converted at the declared type
        lambda x: np.asfortranarray(x),  # another order
        lambda x: np.repeat(x, 2, axis=1)[:, ::2],  # a strided view
        lambda x: x.astype(">f4"),  # big-endian
        lambda x: x.copy(),  # C-contiguous: used in place
    ],
    ids=["list", "fortran", "strided", "big-endian", "contiguous"],
)
def test_inputs_in_any_layout_give_the_same_outputs(gemm_chain, make):
    sess = onnx_prepared.InferenceSession(str(gemm_chain), one_thread())
    x = np.random.default_rng(5).standard_normal((3, 256)).astype(np.float32)
    (want,) = sess.run(None, {"A": x})
    (got,) = sess.run(None, {"A": make(x)})
    np.testing.assert_array_equal(got, want)


def test_output_names_select_and_order(tiny_llm):
    sess = onnx_prepared.InferenceSession(str(tiny_llm), one_thread())
    feeds = tiny_llm_feeds(2)
    everything = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))
    picked = sess.run(["present_value_3", "logits", "present_value_3"], feeds)
    np.testing.assert_array_equal(picked[0], everything["present_value_3"])
    np.testing.assert_array_equal(picked[1], everything["logits"])
    np.testing.assert_array_equal(picked[2], everything["present_value_3"])
    assert picked[0] is not picked[2]  # a name asked twice: two arrays


def test_a_run_keeps_no_reference_to_its_inputs(gemm_chain):
    sess = onnx_prepared.InferenceSession(str(gemm_chain), one_thread())
    x = np.ones((2, 256), np.float32)
    alive = weakref.ref(x)
    sess.run(None, {"A": x})
    handle = sess.run_async(None, {"A": x})
    handle.result()
    del x, handle
    gc.collect()
    assert alive() is None, "the session still holds the input array"


def test_the_gil_is_released_while_a_run_goes_on(tiny_llm):
    sess = onnx_prepared.InferenceSession(str(tiny_llm), one_thread())
    sess.prepare()
    feeds = tiny_llm_feeds(128)
    sess.run(None, feeds)  # lowered once for these shapes
    started = threading.Event()

    def runs():
        started.set()
        for _ in range(3):
            sess.run(None, feeds)

    t = threading.Thread(target=runs)
    t.start()
    started.wait()
    spins = 0
    while t.is_alive():
        spins += 1
    t.join()
    # Three prefills of 128 tokens take tens of milliseconds: a run holding
    # the GIL would leave this thread a few switch intervals (5 ms each) at
    # most; released, it spins all along.
    assert spins > 10_000, f"only {spins} iterations ran beside the runs"


def test_threads_share_a_session(gemm_chain):
    sess = onnx_prepared.InferenceSession(str(gemm_chain))
    xs = [np.full((2, 256), i / 10, np.float32) for i in range(8)]
    want = [sess.run(None, {"A": x})[0] for x in xs]
    got = [None] * len(xs)

    def work(i):
        for _ in range(20):
            got[i] = sess.run(None, {"A": xs[i]})[0]

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(xs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def test_session_options_and_providers(gemm_chain):
    opts = onnx_prepared.SessionOptions()
    opts.intra_op_num_threads = 2
    opts.graph_optimization_level = onnx_prepared.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.portable = True
    opts.map_weights = True
    sess = onnx_prepared.InferenceSession(gemm_chain, sess_options=opts, providers=["CPUExecutionProvider"])
    assert sess.get_providers() == ["CPUExecutionProvider"]
    assert sess.get_session_options() is opts
    assert onnx_prepared.get_available_providers() == ["CPUExecutionProvider"]
    x = np.ones((1, 256), np.float32)
    (portable,) = sess.run(None, {"A": x})
    (simd,) = onnx_prepared.InferenceSession(str(gemm_chain)).run(None, {"A": x})
    np.testing.assert_allclose(portable, simd, rtol=1e-4, atol=1e-4 * np.abs(simd).max())
    with pytest.warns(RuntimeWarning, match="CPU"):
        onnx_prepared.InferenceSession(str(gemm_chain), providers=["CUDAExecutionProvider"])
    with pytest.raises(AttributeError):
        opts.no_such_option = 1

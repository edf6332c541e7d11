"""run_async and prepare_async: the handle's result(), await in asyncio,
onnxruntime's callback form, and cancellation (of the handle and of the
asyncio task awaiting it)."""

from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest
from conftest import one_thread, tiny_llm_feeds

import onnx_prepared


def test_result_equals_run(tiny_llm):
    sess = onnx_prepared.InferenceSession(str(tiny_llm), one_thread())
    feeds = tiny_llm_feeds(3)
    handle = sess.run_async(None, feeds)  # cold: the weights stream in behind it
    got = handle.result()
    assert handle.done()
    want = sess.run(None, feeds)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    # The result is kept: asking again gives the same arrays.
    assert all(a is b for a, b in zip(handle.result(), got))


def test_await_in_asyncio(tiny_llm):
    sess = onnx_prepared.InferenceSession(str(tiny_llm), one_thread())
    a, b = tiny_llm_feeds(3, seed=1), tiny_llm_feeds(5, seed=2)

    async def main():
        ready = sess.prepare_async()
        ticks = 0

        async def tick():
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0)

        ticker = asyncio.create_task(tick())
        assert not ready.done()  # 21 MB of weights to read and pack
        assert await ready is None
        during = ticks
        outs = await asyncio.gather(sess.run_async(["logits"], a), sess.run_async(["logits"], b))
        ticker.cancel()
        return outs, during

    (got_a, got_b), ticks = asyncio.run(main())
    assert ticks > 1, "the event loop was blocked while the session prepared"
    assert sess.is_hot()
    np.testing.assert_array_equal(got_a[0], sess.run(["logits"], a)[0])
    np.testing.assert_array_equal(got_b[0], sess.run(["logits"], b)[0])


def test_onnxruntime_callback_form(gemm_chain):
    sess = onnx_prepared.InferenceSession(str(gemm_chain), one_thread())
    x = np.ones((2, 256), np.float32)
    called = threading.Event()
    seen = {}

    def callback(outputs, user_data, err):
        seen.update(outputs=outputs, user_data=user_data, err=err)
        called.set()

    sess.run_async(None, {"A": x}, callback, "token")
    assert called.wait(60)
    assert seen["err"] == "" and seen["user_data"] == "token"
    np.testing.assert_array_equal(seen["outputs"][0], sess.run(None, {"A": x})[0])

    called.clear()
    sess.run_async(None, {"A": x.astype(np.float64)}, callback, None)
    assert called.wait(60)
    assert seen["outputs"] is None and "f64" in seen["err"]


def test_cancel_a_cold_run(tiny_llm):
    # A cold session: the run waits for 21 MB of weights to be read and
    # packed; cancelled at once, it ends cancelled.
    sess = onnx_prepared.InferenceSession(str(tiny_llm), one_thread(io_workers=1))
    feeds = tiny_llm_feeds(2)
    handle = sess.run_async(None, feeds)
    handle.cancel()
    with pytest.raises(onnx_prepared.Cancelled) as e:
        handle.result()
    assert e.value.kind == "cancelled" and isinstance(e.value, onnx_prepared.Error)
    assert handle.done()
    # The same exception again, and the session still runs.
    with pytest.raises(onnx_prepared.Cancelled):
        handle.result()
    fresh = onnx_prepared.InferenceSession(str(tiny_llm), one_thread())
    for g, w in zip(sess.run(None, feeds), fresh.run(None, feeds)):
        np.testing.assert_array_equal(g, w)


def test_cancel_from_another_thread_while_waiting(tiny_llm):
    sess = onnx_prepared.InferenceSession(str(tiny_llm), one_thread(io_workers=1))
    handle = sess.run_async(None, tiny_llm_feeds(2))
    waiting = threading.Event()
    outcome = {}

    def waiter():
        waiting.set()
        try:
            outcome["value"] = handle.result()
        except onnx_prepared.Error as e:
            outcome["error"] = e

    t = threading.Thread(target=waiter)
    t.start()
    waiting.wait()
    handle.cancel()  # callable while the other thread blocks in result()
    t.join(60)
    assert not t.is_alive()
    assert isinstance(outcome.get("error"), onnx_prepared.Cancelled), outcome


def test_cancelling_the_awaiting_task_cancels_the_run(tiny_llm):
    sess = onnx_prepared.InferenceSession(str(tiny_llm), one_thread(io_workers=1))
    handle = sess.run_async(None, tiny_llm_feeds(2))

    async def main():
        task = asyncio.create_task(_await(handle))
        await asyncio.sleep(0)  # the task starts awaiting
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    handle.wait()
    with pytest.raises(onnx_prepared.Cancelled):
        handle.result()


async def _await(handle):
    return await handle


def test_a_failed_run_raises_when_awaited(gemm_chain):
    sess = onnx_prepared.InferenceSession(str(gemm_chain), one_thread())

    async def main():
        return await sess.run_async(None, {"A": np.ones((1, 7), np.float32)})

    with pytest.raises(onnx_prepared.InputError) as e:
        asyncio.run(main())
    assert e.value.failed_task == "run"


def test_dropping_a_live_handle_waits_for_it(tiny_llm):
    sess = onnx_prepared.InferenceSession(str(tiny_llm), one_thread())
    handle = sess.run_async(None, tiny_llm_feeds(2))
    del handle  # the run finishes (the runtime never detaches a live one)
    sess.prepare()
    assert sess.is_hot()

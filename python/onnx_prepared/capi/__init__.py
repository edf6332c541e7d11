"""onnxruntime's `capi` names that scripts import directly
(`onnxruntime.capi.onnxruntime_pybind11_state` for its exception classes)."""

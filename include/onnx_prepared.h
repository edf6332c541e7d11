/*
 * onnx_prepared.h: the C API of onnx-prepared.
 *
 * Generated from capi/src by cbindgen (tools/c_header.sh); do not edit.
 *
 * Conventions:
 *  - Every object is an opaque handle the caller owns and frees with its
 *    *_release function; releasing NULL is a no-op. No function takes
 *    ownership of an argument implicitly.
 *  - Every function that can fail returns an OnnxpError*: NULL on success,
 *    else an error to read with onnxp_error_kind / onnxp_error_message and
 *    free with onnxp_error_release. Out-parameters are written only on
 *    success.
 *  - No function aborts or unwinds into the caller: a panic inside the
 *    library becomes an ONNXP_ERROR_KIND_PANIC error.
 *  - Each function's documentation states its thread safety.
 *
 * Link the static library (libonnx_prepared_capi.a) with:
 *   -lgcc_s -lutil -lrt -lpthread -lm -ldl
 */

#ifndef ONNX_PREPARED_H
#define ONNX_PREPARED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

// An element type, by its ONNX `TensorProto.DataType` code.
typedef enum {
    // Not a type the runtime knows.
    ONNXP_ELEMENT_TYPE_UNDEFINED = 0,
    // 32-bit float.
    ONNXP_ELEMENT_TYPE_FLOAT = 1,
    // 8-bit unsigned integer.
    ONNXP_ELEMENT_TYPE_UINT8 = 2,
    // 8-bit signed integer.
    ONNXP_ELEMENT_TYPE_INT8 = 3,
    // 16-bit unsigned integer.
    ONNXP_ELEMENT_TYPE_UINT16 = 4,
    // 16-bit signed integer.
    ONNXP_ELEMENT_TYPE_INT16 = 5,
    // 32-bit signed integer.
    ONNXP_ELEMENT_TYPE_INT32 = 6,
    // 64-bit signed integer.
    ONNXP_ELEMENT_TYPE_INT64 = 7,
    // One byte per element, 0 or 1.
    ONNXP_ELEMENT_TYPE_BOOL = 9,
    // IEEE half precision.
    ONNXP_ELEMENT_TYPE_FLOAT16 = 10,
    // 64-bit float.
    ONNXP_ELEMENT_TYPE_DOUBLE = 11,
    // 32-bit unsigned integer.
    ONNXP_ELEMENT_TYPE_UINT32 = 12,
    // 64-bit unsigned integer.
    ONNXP_ELEMENT_TYPE_UINT64 = 13,
    // bfloat16.
    ONNXP_ELEMENT_TYPE_BFLOAT16 = 16,
    // Unsigned 4-bit integers (weights only; never an input or output).
    ONNXP_ELEMENT_TYPE_UINT4 = 21,
    // Signed 4-bit integers (weights only; never an input or output).
    ONNXP_ELEMENT_TYPE_INT4 = 22,
} OnnxpElementType;

// The category of an error: the runtime's `ErrorKind`s, then the C API's
// own.
typedef enum {
    // No error: what `onnxp_error_kind(NULL)` returns.
    ONNXP_ERROR_KIND_OK = 0,
    // The model file could not be read or does not describe a usable model.
    ONNXP_ERROR_KIND_MODEL = 1,
    // An initializer's external data is malformed or points somewhere it
    // must not.
    ONNXP_ERROR_KIND_EXTERNAL_DATA = 2,
    // Reading a weight's payload failed.
    ONNXP_ERROR_KIND_PAYLOAD = 3,
    // The graph cannot be resolved to kernels (or its plan built).
    ONNXP_ERROR_KIND_RESOLVE = 4,
    // Bad inputs to a run: a missing, unknown or duplicate input, a wrong
    // element type or shape, caller memory whose size does not match.
    ONNXP_ERROR_KIND_INPUT = 5,
    // A kernel failed while running.
    ONNXP_ERROR_KIND_KERNEL = 6,
    // A memory limit refused an allocation.
    ONNXP_ERROR_KIND_BUDGET = 7,
    // A prepared object the run needed could not be produced.
    ONNXP_ERROR_KIND_PREPARATION = 8,
    // The run was cancelled.
    ONNXP_ERROR_KIND_CANCELLED = 9,
    // The system refused a resource other than memory (a thread).
    ONNXP_ERROR_KIND_SYSTEM = 10,
    // The prepared cache is corrupt, incomplete or cannot be used.
    ONNXP_ERROR_KIND_CACHE = 11,
    // A NULL pointer, a string that is not UTF-8, an unknown name or an
    // out-of-range enum value was passed.
    ONNXP_ERROR_KIND_INVALID_ARGUMENT = 100,
    // The object is lent to a run in flight (a context), or was used
    // against another object it does not belong to.
    ONNXP_ERROR_KIND_BUSY = 101,
    // The library panicked; the panic was caught at the boundary. The
    // objects passed to the call stay valid and may be released.
    ONNXP_ERROR_KIND_PANIC = 102,
    // An error kind this version of the C API does not name.
    ONNXP_ERROR_KIND_OTHER = 103,
} OnnxpErrorKind;

// Where a run stands.
typedef enum {
    // Still running (or waiting for weights).
    ONNXP_STATUS_RUNNING = 0,
    // Finished; the outputs are in the context (once waited).
    ONNXP_STATUS_SUCCEEDED = 1,
    // Failed; `onnxp_run_handle_wait` returns the error.
    ONNXP_STATUS_FAILED = 2,
    // Cancelled before it finished.
    ONNXP_STATUS_CANCELLED = 3,
} OnnxpStatus;

// A memory domain whose live bytes a limit caps
// (`onnxp_options_set_memory_limit`).
typedef enum {
    // Source buffers and scratch of reads, prepacks and cache writes.
    ONNXP_MEMORY_DOMAIN_PREPARATION = 0,
    // Resident prepared (packed) weights; under a limit, the least
    // recently used are evicted and restored when needed.
    ONNXP_MEMORY_DOMAIN_PREPARED = 1,
    // A run's intermediates and kernel workspaces.
    ONNXP_MEMORY_DOMAIN_EXECUTION = 2,
    // Outputs held by contexts, and staged inputs.
    ONNXP_MEMORY_DOMAIN_IO = 3,
    // Every domain together.
    ONNXP_MEMORY_DOMAIN_GLOBAL = 4,
} OnnxpMemoryDomain;

// What a session does with the prepared cache
// (`onnxp_options_set_cache_policy`).
typedef enum {
    // Ignore any prepared cache and never write one (the default).
    ONNXP_CACHE_POLICY_DISABLED = 0,
    // Use compatible entries; build misses in memory only.
    ONNXP_CACHE_POLICY_READ_ONLY = 1,
    // Use compatible entries; build misses and persist them.
    ONNXP_CACHE_POLICY_BUILD_IF_MISSING = 2,
    // Fail at open when a prepared object has no compatible entry.
    ONNXP_CACHE_POLICY_REQUIRE_COMPLETE = 3,
} OnnxpCachePolicy;

// One run's inputs and outputs for one session. Reusing a context for the
// next run reuses its buffers (a hot run allocates only for new inputs).
typedef struct OnnxpContext OnnxpContext;

// An error: a kind and a message. Returned by every function that can
// fail (NULL on success); the caller owns it and frees it with
// `onnxp_error_release`.
typedef struct OnnxpError OnnxpError;

// Options for `onnxp_session_open`: threads, I/O workers, pinning, memory
// limits, the prepared cache. Made by `onnxp_options_create` with the
// runtime's defaults; read (not kept) by `onnxp_session_open`.
typedef struct OnnxpOptions OnnxpOptions;

// An asynchronous run (`onnxp_run_async`): wait for it, poll it, cancel
// it, read its status. Free it with `onnxp_run_handle_release`.
typedef struct OnnxpRunHandle OnnxpRunHandle;

// An open model: its plan, weights as they load, and its worker pool.
// Shared by the contexts made from it, so releasing it while they live is
// allowed (the last of them frees it).
typedef struct OnnxpSession OnnxpSession;

// An output taken out of its context (`onnxp_context_take_output`): the
// caller's, until `onnxp_tensor_release`.
typedef struct OnnxpTensor OnnxpTensor;

// A read-only view of a tensor: an output in its context, or an
// `OnnxpTensor`.
typedef struct {
    // The elements, row-major, little-endian (booleans one byte each, 0 or
    // 1; float16 and bfloat16 as their 16-bit patterns).
    const void *data;
    // The element type.
    OnnxpElementType dtype;
    // Number of dims.
    size_t rank;
    // `rank` sizes.
    const size_t *dims;
    // Number of elements (the product of the dims).
    size_t element_count;
    // Bytes at `data`.
    size_t byte_len;
} OnnxpTensorView;

// A completion callback: called exactly once with the `user_data` given
// to `onnxp_run_async`, once the run has finished.
typedef void (*OnnxpCompletionFn)(void *user_data);

// A graph input or output as `onnxp_session_input` and
// `onnxp_session_output` describe it. Every pointer is owned by the
// session and valid until it is freed (its last reference released).
typedef struct {
    // The name, NUL-terminated UTF-8.
    const char *name;
    // The declared element type (`ONNXP_ELEMENT_TYPE_UNDEFINED` when the
    // model declares none the runtime knows).
    OnnxpElementType dtype;
    // Whether the model declares a shape; `rank` is 0 when it does not.
    bool has_shape;
    // Number of dims.
    size_t rank;
    // `rank` sizes: the fixed size, or -1 for a symbolic or unknown dim.
    const int64_t *dims;
    // `rank` names: the symbolic dim's name (`"T"`, `"batch"`), or NULL
    // for a fixed or unnamed dim.
    const char *const *dim_names;
} OnnxpValueInfo;

#ifdef __cplusplus
extern "C" {
#endif // __cplusplus

// Writes a new, empty context for `session` to `*out`. The context keeps
// the session alive.
//
// Thread safety: any thread, concurrently with any call on the session.
//
// # Safety
// `session` is NULL or live; `out` is NULL or valid for a write.
OnnxpError *onnxp_context_create(const OnnxpSession *session, OnnxpContext **out);

// Frees `context`. NULL is a no-op. A run in flight on it keeps what it
// needs until it finishes; its handle then has no context to give back to.
//
// Thread safety: once per context, when no other call on it is running.
//
// # Safety
// `context` is NULL or made by `onnxp_context_create` and not released.
void onnxp_context_release(OnnxpContext *context);

// Sets input `name` to a copy of the `byte_len` bytes at `data`: `rank`
// dims at `dims`, elements of `dtype` (an `OnnxpElementType` value) stored
// row-major and little-endian. The caller's memory is not used after the
// call returns. A size that does not match the dims fails with
// `ONNXP_ERROR_KIND_INPUT`; an element type or shape the model does not
// declare fails the run with `ONNXP_ERROR_KIND_INPUT`.
//
// Thread safety: calls on one context are serialized: during an
// `onnxp_run` on it they wait for the run; while it is lent to an
// `onnxp_run_async` they answer `ONNXP_ERROR_KIND_BUSY`.
//
// # Safety
// `context` is NULL or live; `name` is NULL or NUL-terminated; `dims` is
// NULL or valid for `rank` reads; `data` is NULL or valid for `byte_len`
// reads.
OnnxpError *onnxp_context_set_input(OnnxpContext *context,
                                    const char *name,
                                    int32_t dtype,
                                    const size_t *dims,
                                    size_t rank,
                                    const void *data,
                                    size_t byte_len);

// Sets input `name` to the caller's memory at `data` with no copy, for the
// next run only, as `onnxp_context_set_input` describes it otherwise.
//
// The caller promises that the `byte_len` bytes at `data` stay valid and
// unmodified until that run has finished: `onnxp_run` returned, or the
// run's handle was waited or released. The context then drops the input
// (a later run fails with `ONNXP_ERROR_KIND_INPUT` until it is set again),
// so the memory is never read after that run. Memory that cannot be used
// in place (bool elements, an address misaligned for the type) is copied
// instead, and the promise is not needed.
//
// Thread safety: as `onnxp_context_set_input`.
//
// # Safety
// As `onnxp_context_set_input`, and the promise above.
OnnxpError *onnxp_context_set_input_borrowed(OnnxpContext *context,
                                             const char *name,
                                             int32_t dtype,
                                             const size_t *dims,
                                             size_t rank,
                                             const void *data,
                                             size_t byte_len);

// Binds every KV-cache output to the input it becomes on the next run
// (`present_key_0` to `past_key_0`, `present.0.key` to
// `past_key_values.0.key`): after each successful run the output moves into
// the input with no copy. Writes the number of pairs bound to `*pairs`
// when `pairs` is not NULL.
//
// Thread safety: as `onnxp_context_set_input`.
//
// # Safety
// `context` is NULL or live; `pairs` is NULL or valid for a write.
OnnxpError *onnxp_context_bind_kv_cache(OnnxpContext *context, size_t *pairs);

// Binds output `output` to input `input`: after each successful run the
// output moves into the input with no copy (a caller-owned cache).
//
// Thread safety: as `onnxp_context_set_input`.
//
// # Safety
// `context` is NULL or live; `output` and `input` are NULL or
// NUL-terminated.
OnnxpError *onnxp_context_bind_cache(OnnxpContext *context, const char *output, const char *input);

// Writes a view of output `name` of the last run to `*view`. The view
// points into the context: valid until the next call that changes the
// context (a run, setting an input, taking this output) or its release.
//
// Thread safety: as `onnxp_context_set_input`.
//
// # Safety
// `context` is NULL or live; `name` is NULL or NUL-terminated; `view` is
// NULL or valid for a write.
OnnxpError *onnxp_context_output(OnnxpContext *context, const char *name, OnnxpTensorView *view);

// Takes output `name` of the last run out of the context with no copy and
// writes it to `*out`: the caller's until `onnxp_tensor_release`. The next
// run makes a new one.
//
// Thread safety: as `onnxp_context_set_input`.
//
// # Safety
// `context` is NULL or live; `name` is NULL or NUL-terminated; `out` is
// NULL or valid for a write.
OnnxpError *onnxp_context_take_output(OnnxpContext *context, const char *name, OnnxpTensor **out);

// Writes a view of `tensor` to `*view`, valid until the tensor is
// released.
//
// Thread safety: any thread; a tensor may be read from several threads at
// once.
//
// # Safety
// `tensor` is NULL or live; `view` is NULL or valid for a write.
OnnxpError *onnxp_tensor_view(const OnnxpTensor *tensor, OnnxpTensorView *view);

// Frees `tensor`. NULL is a no-op.
//
// Thread safety: once per tensor, when no other thread uses it.
//
// # Safety
// `tensor` is NULL or made by `onnxp_context_take_output` and not
// released.
void onnxp_tensor_release(OnnxpTensor *tensor);

// The kind of `error`; `ONNXP_ERROR_KIND_OK` for NULL.
//
// Thread safety: any thread; an error may be read from several threads at
// once.
//
// # Safety
// `error` is NULL or an error returned by this library and not released.
OnnxpErrorKind onnxp_error_kind(const OnnxpError *error);

// The message of `error`, NUL-terminated UTF-8, valid until the error is
// released; an empty string for NULL.
//
// Thread safety: any thread; an error may be read from several threads at
// once.
//
// # Safety
// `error` is NULL or an error returned by this library and not released.
const char *onnxp_error_message(const OnnxpError *error);

// Frees `error`. NULL is a no-op.
//
// Thread safety: any thread, once per error, when no other thread uses it.
//
// # Safety
// `error` is NULL or an error returned by this library and not released.
void onnxp_error_release(OnnxpError *error);

// Decodes up to `max_new_tokens` tokens greedily after the `prompt_len`
// token ids at `prompt` (batch 1) and writes them to `tokens`, their number
// to `*written`. The prompt runs as one streaming prefill (it starts while
// the weights load), then one token per run with the model's KV cache
// (past/present inputs and outputs) moved from run to run; masks,
// positions and sequence lengths are generated by their input's role.
// Fails with `ONNXP_ERROR_KIND_INPUT` for an empty prompt, a model that is
// not a decoder with a KV cache, or `max_new_tokens` above 65,536.
//
// Thread safety: any thread; generations on one session may overlap.
//
// # Safety
// `session` is NULL or live; `prompt` is NULL or valid for `prompt_len`
// reads; `tokens` is NULL or valid for `max_new_tokens` writes; `written`
// is NULL or valid for a write.
OnnxpError *onnxp_generate(const OnnxpSession *session,
                           const int64_t *prompt,
                           size_t prompt_len,
                           size_t max_new_tokens,
                           int64_t *tokens,
                           size_t *written);

// Writes new options with the runtime's defaults to `*out`: a CPU worker
// per core, two I/O workers, no pinning, no memory limit, no prepared
// cache.
//
// Thread safety: any thread.
//
// # Safety
// `out` is NULL or valid for a write.
OnnxpError *onnxp_options_create(OnnxpOptions **out);

// Frees `options`. NULL is a no-op. Sessions opened with them are not
// affected.
//
// Thread safety: once, when no other thread uses the options.
//
// # Safety
// `options` is NULL or made by `onnxp_options_create` and not released.
void onnxp_options_release(OnnxpOptions *options);

// Sets `threads` threads per run in all, as the CLI's `--threads` and
// Python's `intra_op_num_threads` count them: the thread that runs the
// inference and `threads - 1` CPU workers helping its kernels (at least
// one worker is started, for prepacks); kernels use at most `threads`
// threads.
//
// Thread safety: not with other calls on the same options.
//
// # Safety
// `options` is NULL or live.
OnnxpError *onnxp_options_set_thread_count(OnnxpOptions *options, size_t threads);

// Sets the number of CPU workers of the session's pool (kernels and
// prepacks; at least 1) and the most threads one kernel uses, the calling
// thread included (`intra_op_threads`; 0: the caller plus every CPU
// worker).
//
// Thread safety: not with other calls on the same options.
//
// # Safety
// `options` is NULL or live.
OnnxpError *onnxp_options_set_workers(OnnxpOptions *options,
                                      size_t cpu_workers,
                                      size_t intra_op_threads);

// Deprecated name of [`onnxp_options_set_workers`] (same arguments and
// meaning: CPU workers, not threads in all).
//
// # Safety
// As [`onnxp_options_set_workers`].
OnnxpError *onnxp_options_set_threads(OnnxpOptions *options,
                                      size_t cpu_threads,
                                      size_t intra_op_threads);

// Sets the number of I/O workers (weight reads; at least 1).
//
// Thread safety: not with other calls on the same options.
//
// # Safety
// `options` is NULL or live.
OnnxpError *onnxp_options_set_io_workers(OnnxpOptions *options, size_t io_workers);

// Pins the CPU workers to cores (`pin` true) or not.
//
// Thread safety: not with other calls on the same options.
//
// # Safety
// `options` is NULL or live.
OnnxpError *onnxp_options_set_pin_threads(OnnxpOptions *options, bool pin);

// Maps the model's external data files and uses aligned weights in place
// (`map` true) instead of reading them. A data file truncated by another
// program while it is mapped kills the process (SIGBUS).
//
// Thread safety: not with other calls on the same options.
//
// # Safety
// `options` is NULL or live.
OnnxpError *onnxp_options_set_map_weights(OnnxpOptions *options, bool map);

// Reads large tables that only row gathers read (embeddings) whole and
// keeps them in memory (`resident` true), instead of reading the rows
// each run picks from the model's data file (the default: such a table
// never counts in the process's memory, and a run reads one row per
// token). Rows are read from the data file as it was verified: a run
// after the file was written, truncated or touched in place fails with
// an error saying it changed (open the model again).
//
// Thread safety: not with other calls on the same options.
//
// # Safety
// `options` is NULL or live.
OnnxpError *onnxp_options_set_resident_tables(OnnxpOptions *options, bool resident);

// Caps the live bytes of `domain` (an `OnnxpMemoryDomain` value) at
// `bytes`; `UINT64_MAX` removes the limit. An allocation the limit refuses
// fails with `ONNXP_ERROR_KIND_BUDGET` (reads wait for room instead).
//
// Thread safety: not with other calls on the same options.
//
// # Safety
// `options` is NULL or live.
OnnxpError *onnxp_options_set_memory_limit(OnnxpOptions *options, int32_t domain, uint64_t bytes);

// Sets the prepared cache's directory (`dir`, UTF-8), or clears it when
// `dir` is NULL. A policy other than `ONNXP_CACHE_POLICY_DISABLED` needs a
// directory.
//
// Thread safety: not with other calls on the same options.
//
// # Safety
// `options` is NULL or live; `dir` is NULL or a NUL-terminated string.
OnnxpError *onnxp_options_set_cache_dir(OnnxpOptions *options, const char *dir);

// Sets what the session does with the prepared cache (`policy`, an
// `OnnxpCachePolicy` value).
//
// Thread safety: not with other calls on the same options.
//
// # Safety
// `options` is NULL or live.
OnnxpError *onnxp_options_set_cache_policy(OnnxpOptions *options, int32_t policy);

// Copies each prepared-cache payload into memory when it is read
// (`copy` true) instead of mapping it. Every payload is checked before
// use either way, and one truncated or rewritten before it is read is a
// miss; the hazard this removes: another program truncating a payload
// file while the session holds it mapped kills the process (SIGBUS). Set
// it for cache folders other programs write or clean.
//
// Thread safety: not with other calls on the same options.
//
// # Safety
// `options` is NULL or live.
OnnxpError *onnxp_options_set_cache_copy_in(OnnxpOptions *options, bool copy);

// Runs the model on `context`'s inputs and returns once the outputs are
// in `context` (read them with `onnxp_context_output`). A cold session
// streams: the run starts while the weights load, each step once its own
// weights are in. On failure the context keeps its inputs (after an
// internal panic, reported as `ONNXP_ERROR_KIND_PANIC`, it comes back
// empty).
//
// Thread safety: any thread; runs on one session may overlap, each with
// its own context. Calls on `context` from other threads wait for the run.
//
// # Safety
// `session` and `context` are NULL or live; `context` was made for
// `session`.
OnnxpError *onnxp_run(const OnnxpSession *session, OnnxpContext *context);

// Starts a run on `context`'s inputs and writes its handle to `*out` at
// once; the context is lent to the run until the handle is waited or
// released (calls on it answer `ONNXP_ERROR_KIND_BUSY` meanwhile). Never
// waits for weights: a cold session streams them in as the run goes.
//
// When `callback` is not NULL it is called exactly once with `user_data`
// when the run finishes (succeeded, failed or cancelled), on the thread
// that finishes it: a runtime worker thread; or the thread calling this
// function when the run finished before it returned; or one calling
// `onnxp_run_handle_cancel` that cancelled the run before it started.
// When it is called, `onnxp_run_handle_is_ready` reads true;
// `onnxp_run_handle_wait` (and `onnxp_run_handle_release`) return only
// after it has returned, so `user_data` may be freed then. It runs inside
// the runtime's completion path: it must not block (no wait on this or
// another run: signal a condition variable, post to a queue), must not
// release a session, context or run handle (the last release of a
// session joins the runtime's threads, possibly the one calling back),
// and `user_data` must be usable on that thread. `*out` is written
// before the callback can run: a callback may read the handle from
// where `out` pointed (e.g. to call `onnxp_run_handle_status`).
//
// Thread safety: as `onnxp_run`.
//
// # Safety
// `session` and `context` are NULL or live; `context` was made for
// `session`; `out` is NULL or valid for a write; `callback`, when not
// NULL, may be called with `user_data` on any thread.
OnnxpError *onnxp_run_async(const OnnxpSession *session,
                            OnnxpContext *context,
                            OnnxpCompletionFn callback,
                            void *user_data,
                            OnnxpRunHandle **out);

// Blocks until the run finished and gives the context its state back:
// NULL when the run succeeded (the outputs are in the context), else the
// run's error (`ONNXP_ERROR_KIND_CANCELLED` when cancelled), the context
// keeping its inputs. Waiting again returns the same result.
//
// Thread safety: any thread; concurrent waits on one handle all return
// the result.
//
// # Safety
// `handle` is NULL or live.
OnnxpError *onnxp_run_handle_wait(OnnxpRunHandle *handle);

// Writes whether the run has finished to `*ready` (`onnxp_run_handle_wait`
// then blocks at most until the completion callback returns).
//
// Thread safety: any thread, at any time, the completion callback
// included.
//
// # Safety
// `handle` is NULL or live; `ready` is NULL or valid for a write.
OnnxpError *onnxp_run_handle_is_ready(const OnnxpRunHandle *handle, bool *ready);

// Cancels the run: steps that have not started never run, a run waiting
// for weights ends at once; `onnxp_run_handle_wait` then returns an
// `ONNXP_ERROR_KIND_CANCELLED` error (or the run's result, when it
// finished first). Weight loading shared with other runs goes on for
// them. Idempotent.
//
// Thread safety: any thread, at any time, concurrently with `wait`.
//
// # Safety
// `handle` is NULL or live.
OnnxpError *onnxp_run_handle_cancel(OnnxpRunHandle *handle);

// Writes where the run stands to `*status`.
//
// Thread safety: any thread, at any time, the completion callback
// included.
//
// # Safety
// `handle` is NULL or live; `status` is NULL or valid for a write.
OnnxpError *onnxp_run_handle_status(const OnnxpRunHandle *handle, OnnxpStatus *status);

// Frees `handle`. NULL is a no-op. A run not waited yet is waited first
// (this blocks until it finishes: cancel it first to end it sooner), and
// its context gets its state back.
//
// Thread safety: once per handle, when no other call on it is running.
//
// # Safety
// `handle` is NULL or made by `onnxp_run_async` and not released.
void onnxp_run_handle_release(OnnxpRunHandle *handle);

// Opens the model at `path` (UTF-8) with `options` (NULL: defaults) and
// writes the session to `*out`. Reads the model's metadata only: weights
// load while the first run streams, or with `onnxp_session_prepare`.
// `options` is read, not kept.
//
// Thread safety: any thread; sessions are independent.
//
// # Safety
// `path` is NULL or NUL-terminated; `options` is NULL or live; `out` is
// NULL or valid for a write.
OnnxpError *onnxp_session_open(const char *path,
                               const OnnxpOptions *options,
                               const OnnxpSession **out);

// Releases the caller's reference to `session`. NULL is a no-op. Contexts
// made from it keep it alive until they are released; a run in flight
// keeps it alive until it finishes.
//
// Thread safety: once per session, when no other call on it is running.
//
// # Safety
// `session` is NULL or opened by `onnxp_session_open` and not released.
void onnxp_session_release(const OnnxpSession *session);

// Eager preparation: reads and packs every weight now and returns once
// all are resident, so that the next run takes the hot path. Optional: a
// first run without it streams the weights in as it goes.
//
// Thread safety: any thread, concurrently with runs on the session.
//
// # Safety
// `session` is NULL or live.
OnnxpError *onnxp_session_prepare(const OnnxpSession *session);

// Writes the number of graph inputs (or outputs) to `*count`.
//
// Thread safety: any thread, concurrently with any call on the session.
//
// # Safety
// `session` is NULL or live; `count` is NULL or valid for a write.
OnnxpError *onnxp_session_input_count(const OnnxpSession *session, size_t *count);

// Writes the number of graph outputs to `*count`.
//
// Thread safety: any thread, concurrently with any call on the session.
//
// # Safety
// `session` is NULL or live; `count` is NULL or valid for a write.
OnnxpError *onnxp_session_output_count(const OnnxpSession *session, size_t *count);

// Writes graph input `index` (declared order) to `*info`: its name,
// element type and dims, symbolic ones by name. The pointers in `*info`
// stay valid while the session lives.
//
// Thread safety: any thread, concurrently with any call on the session.
//
// # Safety
// `session` is NULL or live; `info` is NULL or valid for a write.
OnnxpError *onnxp_session_input(const OnnxpSession *session, size_t index, OnnxpValueInfo *info);

// Writes graph output `index` (graph order) to `*info`, as
// `onnxp_session_input` does for inputs.
//
// Thread safety: any thread, concurrently with any call on the session.
//
// # Safety
// `session` is NULL or live; `info` is NULL or valid for a write.
OnnxpError *onnxp_session_output(const OnnxpSession *session, size_t index, OnnxpValueInfo *info);

#ifdef __cplusplus
}  // extern "C"
#endif  // __cplusplus

#endif  /* ONNX_PREPARED_H */

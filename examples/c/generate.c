/*
 * Greedy decoding with the onnx-prepared C API.
 *
 *   generate MODEL.onnx [NEW_TOKENS]
 *
 * Opens a decoder model with a KV cache (the tiny-llm fixture: inputs
 * input_ids [1, T], attn_bias [1, 1, T, P + T] and past_{key,value}_i, outputs
 * logits and present_{key,value}_i), runs the prompt asynchronously while the
 * weights stream in, then decodes one token per blocking run with the
 * presents moved into the pasts. Finally it checks its tokens against
 * onnxp_generate. Exits 0 when they match.
 *
 * Build (from the repository root, after `cargo build -p onnx-prepared-capi`):
 *   cc -std=c11 -Wall -Wextra -Iinclude examples/c/generate.c \
 *      target/debug/libonnx_prepared_capi.a -lgcc_s -lutil -lrt -lpthread -lm -ldl \
 *      -o target/generate-c
 */
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onnx_prepared.h"

#define MAX_TOKENS 64

/* Prints and frees `err`; returns whether there was one. */
static int failed(OnnxpError *err, const char *what) {
    if (err == NULL) {
        return 0;
    }
    fprintf(stderr, "%s failed (kind %d): %s\n", what, (int)onnxp_error_kind(err),
            onnxp_error_message(err));
    onnxp_error_release(err);
    return 1;
}

#define TRY(call)                   \
    do {                            \
        if (failed((call), #call)) { \
            goto done;              \
        }                           \
    } while (0)

/* The completion callback: runs once on the thread that finished the run. It
 * must not block, so it only counts. */
static void on_complete(void *user_data) {
    atomic_fetch_add((atomic_int *)user_data, 1);
}

/* The most likely next token: the argmax of the last row of `logits`. */
static int64_t argmax_last_row(const OnnxpTensorView *logits) {
    if (logits->dtype != ONNXP_ELEMENT_TYPE_FLOAT || logits->rank == 0) {
        return -1;
    }
    size_t width = logits->dims[logits->rank - 1];
    const float *row = (const float *)logits->data + (logits->element_count - width);
    size_t best = 0;
    for (size_t i = 1; i < width; i++) {
        if (row[i] > row[best]) {
            best = i;
        }
    }
    return (int64_t)best;
}

/* Sets input_ids (borrowed: `ids` stays untouched until the run ends) and a
 * causal attn_bias for `t` new tokens after `past` cached ones. */
static OnnxpError *set_step_inputs(OnnxpContext *ctx, const int64_t *ids, size_t t, size_t past,
                                   float *bias) {
    size_t total = past + t;
    for (size_t i = 0; i < t; i++) {
        for (size_t j = 0; j < total; j++) {
            bias[i * total + j] = j <= past + i ? 0.0f : -10000.0f;
        }
    }
    size_t ids_dims[2] = {1, t};
    OnnxpError *err = onnxp_context_set_input_borrowed(
        ctx, "input_ids", ONNXP_ELEMENT_TYPE_INT64, ids_dims, 2, ids, t * sizeof(int64_t));
    if (err != NULL) {
        return err;
    }
    size_t bias_dims[4] = {1, 1, t, total};
    return onnxp_context_set_input(ctx, "attn_bias", ONNXP_ELEMENT_TYPE_FLOAT, bias_dims, 4, bias,
                                   t * total * sizeof(float));
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s MODEL.onnx [NEW_TOKENS]\n", argv[0]);
        return 2;
    }
    int n = argc > 2 ? atoi(argv[2]) : 4;
    if (n < 1 || n > MAX_TOKENS) {
        fprintf(stderr, "NEW_TOKENS must be 1 to %d\n", MAX_TOKENS);
        return 2;
    }
    size_t new_tokens = (size_t)n;
    int status = 1;
    OnnxpOptions *options = NULL;
    const OnnxpSession *session = NULL;
    OnnxpContext *ctx = NULL;
    OnnxpRunHandle *run = NULL;
    OnnxpTensor *taken = NULL;
    float *bias = NULL;
    atomic_int callbacks = 0;

    TRY(onnxp_options_create(&options));
    TRY(onnxp_options_set_workers(options, 1, 1));
    TRY(onnxp_options_set_io_workers(options, 1));
    TRY(onnxp_session_open(argv[1], options, &session));
    onnxp_options_release(options); /* read by open, not kept */
    options = NULL;

    /* The model's inputs, symbolic dims by name. */
    size_t inputs = 0;
    TRY(onnxp_session_input_count(session, &inputs));
    TRY(onnxp_context_create(session, &ctx));
    for (size_t i = 0; i < inputs; i++) {
        OnnxpValueInfo info;
        TRY(onnxp_session_input(session, i, &info));
        printf("input %s: type %d [", info.name, (int)info.dtype);
        for (size_t d = 0; d < info.rank; d++) {
            if (info.dim_names[d] != NULL) {
                printf("%s%s", d ? ", " : "", info.dim_names[d]);
            } else {
                printf("%s%lld", d ? ", " : "", (long long)info.dims[d]);
            }
        }
        printf("]\n");
        if (strncmp(info.name, "past_", 5) == 0) {
            /* An empty cache: every symbolic dim (the past length) is 0. */
            size_t dims[8] = {0};
            for (size_t d = 0; d < info.rank && d < 8; d++) {
                dims[d] = info.dims[d] < 0 ? 0 : (size_t)info.dims[d];
            }
            TRY(onnxp_context_set_input(ctx, info.name, info.dtype, dims, info.rank, NULL, 0));
        }
    }
    size_t pairs = 0;
    TRY(onnxp_context_bind_kv_cache(ctx, &pairs));
    printf("%zu KV-cache pairs bound\n", pairs);

    const int64_t prompt[] = {1, 2, 3, 4};
    const size_t prompt_len = sizeof prompt / sizeof prompt[0];
    int64_t tokens[MAX_TOKENS];
    bias = malloc((prompt_len + MAX_TOKENS) * prompt_len * sizeof(float));
    if (bias == NULL) {
        goto done;
    }

    /* The prompt: an asynchronous run that starts while the weights load. */
    TRY(set_step_inputs(ctx, prompt, prompt_len, 0, bias));
    TRY(onnxp_run_async(session, ctx, on_complete, &callbacks, &run));
    TRY(onnxp_run_handle_wait(run));
    bool ready = false;
    OnnxpStatus run_status = ONNXP_STATUS_RUNNING;
    TRY(onnxp_run_handle_is_ready(run, &ready));
    TRY(onnxp_run_handle_status(run, &run_status));
    onnxp_run_handle_release(run);
    run = NULL;
    if (!ready || run_status != ONNXP_STATUS_SUCCEEDED || atomic_load(&callbacks) != 1) {
        fprintf(stderr, "prompt run: ready %d, status %d, %d callbacks\n", ready, (int)run_status,
                atomic_load(&callbacks));
        goto done;
    }
    OnnxpTensorView logits;
    TRY(onnxp_context_output(ctx, "logits", &logits));
    tokens[0] = argmax_last_row(&logits);

    /* Greedy decoding: one token per run, the presents moved into the pasts. */
    size_t past = prompt_len;
    for (size_t k = 1; k < new_tokens; k++) {
        TRY(set_step_inputs(ctx, &tokens[k - 1], 1, past, bias));
        TRY(onnxp_run(session, ctx));
        past += 1;
        if (k + 1 < new_tokens) {
            TRY(onnxp_context_output(ctx, "logits", &logits));
            tokens[k] = argmax_last_row(&logits);
        } else {
            /* The last logits are taken out of the context: ours to free. */
            TRY(onnxp_context_take_output(ctx, "logits", &taken));
            TRY(onnxp_tensor_view(taken, &logits));
            tokens[k] = argmax_last_row(&logits);
        }
    }

    /* The same decoding by the library. */
    int64_t expected[MAX_TOKENS];
    size_t written = 0;
    TRY(onnxp_generate(session, prompt, prompt_len, new_tokens, expected, &written));

    printf("tokens:");
    for (size_t k = 0; k < new_tokens; k++) {
        printf(" %lld", (long long)tokens[k]);
    }
    printf("\n");
    if (written != new_tokens || memcmp(tokens, expected, new_tokens * sizeof(int64_t)) != 0) {
        fprintf(stderr, "onnxp_generate disagrees (%zu tokens)\n", written);
        goto done;
    }
    printf("onnxp_generate agrees\n");
    status = 0;

done:
    onnxp_tensor_release(taken);
    onnxp_run_handle_release(run);
    onnxp_context_release(ctx);
    onnxp_session_release(session);
    onnxp_options_release(options);
    free(bias);
    return status;
}

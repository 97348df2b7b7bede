/* coco_check.cuh: the one generator of the checks of CUDA, NCCL and
 * cuBLASLt calls, for the runtime (rt/, in C), the generated code
 * (coco_device.cuh's COCO_CUDA, ...) and hand-written CUDA (tests/gpu/).
 * Plain C and C++; a .cuh so that it travels with the kernel headers (`gen
 * -o` copies them, the build cache hashes them). The includer includes the
 * libraries' headers it checks calls of.
 *
 * A kind K is a library's result type COCO_CHECK_K_T, its success value
 * COCO_CHECK_K_OK, and its words for a result, COCO_CHECK_K_WHY(result, buf,
 * len) (buf: len bytes it may write them into). CUDA, NCCL and LT
 * (cuBLASLt) are below; an includer may define more.
 *
 * Each form runs `call` once; when it fails, it calls
 *     report(ARGS..., text, __FILE__, __LINE__, why)
 * (text: the call as written, which the caller stringizes, so that macros
 * inside it are not expanded in the message) and then:
 *   COCO_CHECK_RET   returns report's value;
 *   COCO_CHECK_GOTO  goes to `label`;
 *   COCO_CHECK_CALL  goes on (for a report that does not return: exit). */
#ifndef COCO_CHECK_CUH
#define COCO_CHECK_CUH

#include <stdio.h>

#include "coconet_cuda.h"

#define COCO_CHECK_CUDA_T cudaError_t
#define COCO_CHECK_CUDA_OK cudaSuccess
#define COCO_CHECK_CUDA_WHY(e, buf, len) cudaGetErrorString(e)
#define COCO_CHECK_NCCL_T ncclResult_t
#define COCO_CHECK_NCCL_OK ncclSuccess
#define COCO_CHECK_NCCL_WHY(e, buf, len) ncclGetErrorString(e)
#define COCO_CHECK_LT_T cublasStatus_t
#define COCO_CHECK_LT_OK CUBLAS_STATUS_SUCCESS
#define COCO_CHECK_LT_WHY(e, buf, len) cublasLtGetStatusString(e)

/* `call`, then `fail` when its result is not kind's success, with
 * coco_why_ (the library's words) in scope */
#define COCO_CHECK_(kind, call, fail)                                                          \
    do {                                                                                       \
        COCO_CHECK_##kind##_T coco_result_ = (call);                                           \
        if (coco_result_ != COCO_CHECK_##kind##_OK) {                                          \
            char coco_buf_[512];                                                               \
            const char *coco_why_ =                                                            \
                COCO_CHECK_##kind##_WHY(coco_result_, coco_buf_, sizeof coco_buf_);            \
            (void)coco_buf_;                                                                   \
            fail;                                                                              \
        }                                                                                      \
    } while (0)

#define COCO_CHECK_RET(kind, call, text, report, ...)                                          \
    COCO_CHECK_(kind, call, return report(__VA_ARGS__, text, __FILE__, __LINE__, coco_why_))
#define COCO_CHECK_GOTO(kind, call, text, label, report, ...)                                  \
    COCO_CHECK_(kind, call, {                                                                  \
        report(__VA_ARGS__, text, __FILE__, __LINE__, coco_why_);                              \
        goto label;                                                                            \
    })
#define COCO_CHECK_CALL(kind, call, text, report, ...)                                         \
    COCO_CHECK_(kind, call, report(__VA_ARGS__, text, __FILE__, __LINE__, coco_why_))

/* A report for code that holds the ABI's context alone (hand-written
 * entry points): "rank R: CALL failed at FILE:LINE: WHY" in ctx->err; 1 */
static inline int coco_check_failed(const coco_cuda_ctx *ctx, const char *call,
                                    const char *file, int line, const char *why)
{
    snprintf(ctx->err, ctx->errlen, "rank %d: %s failed at %s:%d: %s", ctx->rank, call, file,
             line, why);
    return 1;
}

#endif

// backend.cu: the CUDA backend's table of operations (kernels/backend.h), its open/close (device
// choice, two streams, the cuBLASLt handle), workspace size, sync, queues and events. Built twice from
// the same source: mtk_cuda_ops by nvcc and mtk_sim_ops under the SIMT simulator.
#include "cuda.h"

namespace MTK_CU_NS {

static int open(mtk *k, const mtk_config *cfg, mt_err *e)
{
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess || n == 0) {
        cudaGetLastError();
        return mtk_err_set(e, "%s: no CUDA device (%s)", MTK_CU_OPS.name, err != cudaSuccess ? cudaGetErrorString(err) : "none found");
    }
    if (cfg->device < 0 || cfg->device >= n)
        return mtk_err_set(e, "%s: device %d does not exist (%d found)", MTK_CU_OPS.name, cfg->device, n);
    if (cudaSetDevice(cfg->device) != cudaSuccess) {
        cudaGetLastError();
        return mtk_err_set(e, "%s: cannot use device %d", MTK_CU_OPS.name, cfg->device);
    }
    Cu *c = (Cu *)calloc(1, sizeof *c);
    if (!c) return mtk_err_set(e, "out of memory");
    k->impl = c;
    for (int q = 0; q < MTK_QUEUES; q++)
        if (cudaStreamCreateWithFlags(&c->q[q], cudaStreamNonBlocking) != cudaSuccess) {
            cudaGetLastError();
            for (int r = 0; r < q; r++) cudaStreamDestroy(c->q[r]);
            free(c);
            k->impl = NULL;
            return mtk_err_set(e, "%s: cannot create a stream", MTK_CU_OPS.name);
        }
    if (gemm_open(k, e) < 0) {
        for (int q = 0; q < MTK_QUEUES; q++) cudaStreamDestroy(c->q[q]);
        free(c);
        k->impl = NULL;
        return -1;
    }
    k->threads = 1;
#ifndef SIMT_SIM
    int major = 0, minor = 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, cfg->device) == cudaSuccess &&
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, cfg->device) == cudaSuccess)
        k->cc = 10 * major + minor;
    cudaGetLastError();
#endif
    return 0;
}

static void close(mtk *k)
{
    Cu *c = cu(k);
    if (!c) return;
    cudaDeviceSynchronize();
    uploads_close(k);
    host_scratch_close(k);
    gemm_close(k);
    for (int q = 0; q < MTK_QUEUES; q++) cudaStreamDestroy(c->q[q]);
    free(c);
    k->impl = NULL;
}

static size_t workspace_need(const mtk *k, const mtk_limits *l)
{
    (void)k;
    // sumsq / count_nonfinite partials, two sets of column-sum partials, or the tensor-core attention
    // backward's delta (a float per row and head: at most max_act / 32, its head sizes being >= 32).
    size_t r = reduce_ws_bytes(l->max_flat), c = 2 * (COLSUM_WS_FLOATS * sizeof(float) + 64);
    size_t a = l->max_act / 32 * sizeof(float) + 64;
    r = r > c ? r : c;
    return (r > a ? r : a) + 256;
}

static int sync(mtk *k)
{
    cudaError_t err = cudaDeviceSynchronize();
    if (err == cudaSuccess) err = cudaGetLastError();
    if (err == cudaSuccess) return 0;
    mtk_fail(k, "%s: device error: %s", MTK_CU_OPS.name, cudaGetErrorString(err));
    return -1;
}

static void *native_queue(mtk *k, int q) { return q >= 0 && q < MTK_QUEUES ? (void *)cu(k)->q[q] : NULL; }

static void *event_new(mtk *k, mt_err *e)
{
    (void)k;
    cudaEvent_t ev;
    if (cudaEventCreateWithFlags(&ev, cudaEventDisableTiming) != cudaSuccess) {
        cudaGetLastError();
        mtk_err_set(e, "cannot create a CUDA event");
        return NULL;
    }
    return (void *)ev;
}
static void event_free(mtk *k, void *ev)
{
    (void)k;
    cudaEventDestroy((cudaEvent_t)ev);
}
static void event_record(mtk *k, void *ev, int q)
{
    cudaEventRecord((cudaEvent_t)ev, cu(k)->q[q]);
    check(k, "event_record");
}
static void event_wait(mtk *k, void *ev, int q)
{
    cudaStreamWaitEvent(cu(k)->q[q], (cudaEvent_t)ev, 0);
    check(k, "event_wait");
}
static int event_done(mtk *k, void *ev)
{
    (void)k;
    cudaError_t err = cudaEventQuery((cudaEvent_t)ev);
    if (err == cudaErrorNotReady) {
        cudaGetLastError();
        return 0;
    }
    return 1;
}

}  // namespace MTK_CU_NS

namespace ns = MTK_CU_NS;
extern "C" const mtk_ops MTK_CU_OPS = {
#ifdef SIMT_SIM
    .name = "sim",
#else
    .name = "cuda",
#endif
    .open = ns::open,
    .close = ns::close,
    .workspace_need = ns::workspace_need,
    .alloc = ns::alloc,
    .free = ns::dfree,
    .zero = ns::zero,
    .to_device = ns::to_device,
    .to_host = ns::to_host,
    .copy = ns::copy,
    .convert = ns::convert,
    .sync = ns::sync,
    .host_alloc = ns::host_alloc,
    .host_free = ns::host_free,
    .native_queue = ns::native_queue,
    .event_new = ns::event_new,
    .event_free = ns::event_free,
    .event_record = ns::event_record,
    .event_wait = ns::event_wait,
    .event_done = ns::event_done,
    .embed_fwd = ns::embed_fwd,
    .embed_bwd = ns::embed_bwd,
    .layernorm_fwd = ns::layernorm_fwd,
    .add_layernorm_fwd = ns::add_layernorm_fwd,
    .layernorm_bwd = ns::layernorm_bwd,
    .layernorm_bwd_drop = ns::layernorm_bwd_drop,
    .rmsnorm_fwd = ns::rmsnorm_fwd,
    .add_rmsnorm_fwd = ns::add_rmsnorm_fwd,
    .rmsnorm_bwd = ns::rmsnorm_bwd,
    .rmsnorm_bwd_drop = ns::rmsnorm_bwd_drop,
    .matmul_fwd = ns::matmul_fwd,
    .matmul_gelu_fwd = ns::matmul_gelu_fwd,
    .matmul_bwd = ns::matmul_bwd,
    .gelu_fwd = ns::gelu_fwd,
    .gelu_bwd = ns::gelu_bwd,
    .swiglu_fwd = ns::swiglu_fwd,
    .swiglu_bwd = ns::swiglu_bwd,
    .add = ns::add,
    .acc = ns::acc,
    .scale = ns::scale,
    .acc_f32 = ns::acc_f32,
    .bias_add = ns::bias_add,
    .dropout_fwd = ns::dropout_fwd,
    .dropout_bwd = ns::dropout_bwd,
    .attention_fwd = ns::attention_fwd,
    .attention_bwd = ns::attention_bwd,
    .attention_kv = ns::attention_kv,
    .attention_paged = ns::attention_paged,
    .attention_kv_pack = ns::attention_kv_pack,
    .attention_block_fwd = ns::attention_block_fwd,
    .attention_merge = ns::attention_merge,
    .attention_block_bwd = ns::attention_block_bwd,
    .attention_dqkv_pack = ns::attention_dqkv_pack,
    .rope = ns::rope,
    .xent_fwd_bwd = ns::xent_fwd_bwd,
    .xent_rowmax = ns::xent_rowmax,
    .xent_sumexp = ns::xent_sumexp,
    .xent_loss = ns::xent_loss,
    .xent_bwd = ns::xent_bwd,
    .sumsq = ns::sumsq,
    .sumsq_spans = ns::sumsq_spans,
    .count_nonfinite = ns::count_nonfinite,
    .adamw = ns::adamw,
    .router_fwd = ns::router_fwd,
    .router_bwd = ns::router_bwd,
    .moe_topk = ns::moe_topk,
    .moe_route_stats = ns::moe_route_stats,
    .moe_route_bwd = ns::moe_route_bwd,
    .moe_dispatch = ns::moe_dispatch,
    .moe_permute = ns::moe_permute,
    .moe_permute_bwd = ns::moe_permute_bwd,
    .moe_unpermute = ns::moe_unpermute,
    .moe_unpermute_bwd = ns::moe_unpermute_bwd,
    .grouped_matmul_fwd = ns::grouped_matmul_fwd,
    .grouped_matmul_bwd = ns::grouped_matmul_bwd,
    .sigmoid_gate_fwd = ns::sigmoid_gate_fwd,
    .sigmoid_gate_bwd = ns::sigmoid_gate_bwd,
    .fp8_qdq = ns::fp8_qdq,
    .fp8_scale_update = ns::fp8_scale_update,
    .greedy = ns::greedy,
};

/*
 * cupti_trace.so: a CUDA injection library that records every kernel's start and end, including the kernels
 * replayed inside CUDA graphs (each graph node separately), and writes them as CSV at exit. The GPU machine has
 * no Nsight Systems; this is what scripts/trace_steps.py reads to charge a decode step's time to its kernels.
 *
 *   CUDA_INJECTION64_PATH=/path/cupti_trace.so VLLMC_TRACE_OUT=trace.csv vllmc bench ...
 *
 * Build: gcc -O2 -shared -fPIC -I/usr/local/cuda/include tools/cupti_trace.c -L/usr/local/cuda/lib64 -lcupti
 */
#include <cupti.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TRACE_BUF (8u << 20)

static FILE *trace_out;
static unsigned long trace_records, trace_dropped;

static void CUPTIAPI trace_buf_request(uint8_t **buf, size_t *size, size_t *max_records) {
    *buf = aligned_alloc(8, TRACE_BUF);
    *size = *buf ? TRACE_BUF : 0;
    *max_records = 0;
}

static void CUPTIAPI trace_buf_complete(CUcontext ctx, uint32_t stream, uint8_t *buf, size_t size, size_t valid) {
    (void)ctx;
    (void)stream;
    (void)size;
    CUpti_Activity *rec = NULL;
    while (trace_out && cuptiActivityGetNextRecord(buf, valid, &rec) == CUPTI_SUCCESS) {
        if (rec->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && rec->kind != CUPTI_ACTIVITY_KIND_KERNEL) continue;
        const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)rec;
        fprintf(trace_out, "%llu,%llu,%d,%d,%d,%d,%u,\"%s\"\n", (unsigned long long)k->start,
                (unsigned long long)(k->end - k->start), k->gridX, k->gridY, k->blockX, k->registersPerThread,
                k->graphId, k->name ? k->name : "?");
        trace_records++;
    }
    size_t dropped = 0;
    if (cuptiActivityGetNumDroppedRecords(NULL, 0, &dropped) == CUPTI_SUCCESS) trace_dropped += dropped;
    free(buf);
}

static void trace_finish(void) {
    cuptiActivityFlushAll(1);
    if (trace_out) {
        fclose(trace_out);
        trace_out = NULL;
        fprintf(stderr, "cupti_trace: %lu kernel records, %lu dropped\n", trace_records, trace_dropped);
    }
}

int InitializeInjection(void) {
    const char *path = getenv("VLLMC_TRACE_OUT");
    trace_out = fopen(path && *path ? path : "cupti_trace.csv", "w");
    if (!trace_out) return 0;
    fprintf(trace_out, "Start (ns),Duration (ns),GrdX,GrdY,BlkX,Regs,Graph,Name\n");
    if (cuptiActivityRegisterCallbacks(trace_buf_request, trace_buf_complete) != CUPTI_SUCCESS ||
        cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS) {
        fprintf(stderr, "cupti_trace: CUPTI activity tracing unavailable\n");
        fclose(trace_out);
        trace_out = NULL;
        return 0;
    }
    atexit(trace_finish);
    return 1;
}

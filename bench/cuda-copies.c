// Times the device copies UCX issues in a process, on the GPU itself: a library loaded with
// LD_PRELOAD into a gdrpc process (or bench/ucx-call) that wraps the driver's asynchronous copies
// UCX's CUDA transports call (cuMemcpyDtoDAsync_v2, cuMemcpyAsync), records a CUDA event on the
// copy's own stream before and after each copy of 1 MiB or more, and notes when UCX first sees the
// event it records after the copy done (cuEventQuery). Also counts IPC handle opens (with their
// time) and stream callbacks. docs/gpu.md "Allocation sizes" is what it found.
//   cc -O2 -shared -fPIC -o cuda-copies.so bench/cuda-copies.c -I<cuda include> -ldl -lpthread
//   LD_PRELOAD=$PWD/cuda-copies.so GDRPC_CUDA_COPIES_DIR=/tmp/copies <command>
// Each process writes its summary to stderr at exit and, with GDRPC_CUDA_COPIES_DIR, to
// <dir>/cuda-copies.<pid>.txt, rewritten every 128 copies seen done (a process killed at the end,
// such as a benchmark's peer, leaves its last one). GDRPC_CUDA_COPIES_LABEL names the process in it.
// Each timed copy's issue pays for two event creations and records, and the summary file is
// written by the thread that polls UCX: timings of the process around it move a little. The first
// 4,096 copies of 1 MiB or more are timed, the rest only counted. test/bench/cuda-copies.test.ts
// runs it in front of a stand-in libcuda.
#define _GNU_SOURCE
#include <cuda.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef CUresult (*CopyFn)(CUdeviceptr, CUdeviceptr, size_t, CUstream);

static struct {
  CopyFn dtod, async;
  CUresult (*eventCreate)(CUevent*, unsigned int);
  CUresult (*eventRecord)(CUevent, CUstream);
  CUresult (*eventQuery)(CUevent);
  CUresult (*elapsed)(float*, CUevent, CUevent);
  CUresult (*ipcOpen)(CUdeviceptr*, CUipcMemHandle, unsigned int);
  CUresult (*addCallback)(CUstream, CUstreamCallback, void*, unsigned int);
} real;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static int timing = 0;  // every function the timing needs was found

static void Resolve(void) {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (lib == NULL) return;
  real.dtod = (CopyFn)dlsym(lib, "cuMemcpyDtoDAsync_v2");
  real.async = (CopyFn)dlsym(lib, "cuMemcpyAsync");
  *(void**)&real.eventCreate = dlsym(lib, "cuEventCreate");
  *(void**)&real.eventRecord = dlsym(lib, "cuEventRecord");
  *(void**)&real.eventQuery = dlsym(lib, "cuEventQuery");
  *(void**)&real.elapsed = dlsym(lib, "cuEventElapsedTime_v2");
  if (real.elapsed == NULL) *(void**)&real.elapsed = dlsym(lib, "cuEventElapsedTime");
  *(void**)&real.ipcOpen = dlsym(lib, "cuIpcOpenMemHandle_v2");
  *(void**)&real.addCallback = dlsym(lib, "cuStreamAddCallback");
  timing = real.eventCreate && real.eventRecord && real.eventQuery && real.elapsed;
}
static void Init(void) { pthread_once(&once, Resolve); }

enum { kMaxTimed = 4096, kMinTimed = 1 << 20, kDumpEvery = 128 };

struct Copy {
  size_t bytes;
  CUstream stream;
  CUevent before, after, ucx;  // ucx: the event UCX recorded on the stream right after the copy
  uint64_t issuedNs, returnedNs, seenNs;
  float gpuMs;
  int ready;  // issued with both events
  int seen;
};
static struct Copy copies[kMaxTimed];
static int timed = 0, lastTimed = -1;
static long allCopies = 0, seenCount = 0, ipcOpens = 0, callbacks = 0;
static double allBytes = 0, ipcUs = 0;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static uint64_t NowNs(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static CUresult Timed(CopyFn copy, CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream) {
  if (copy == NULL) return CUDA_ERROR_NOT_INITIALIZED;
  // The slot is taken under the lock; the events and the copy are issued outside it.
  pthread_mutex_lock(&lock);
  allCopies++;
  allBytes += (double)bytes;
  int slot = timing && bytes >= kMinTimed && timed < kMaxTimed ? timed++ : -1;
  pthread_mutex_unlock(&lock);
  if (slot < 0) return copy(dst, src, bytes, stream);
  struct Copy* c = &copies[slot];
  int events = real.eventCreate(&c->before, 0) == CUDA_SUCCESS && real.eventCreate(&c->after, 0) == CUDA_SUCCESS;
  uint64_t issued = NowNs();
  if (events) real.eventRecord(c->before, stream);
  CUresult result = copy(dst, src, bytes, stream);
  if (events) real.eventRecord(c->after, stream);
  uint64_t returned = NowNs();
  pthread_mutex_lock(&lock);
  c->bytes = bytes;
  c->stream = stream;
  c->issuedNs = issued;
  c->returnedNs = returned;
  // Only a copy with both events is followed (a slot left unready stays out of the summary).
  c->ready = events && result == CUDA_SUCCESS;
  if (c->ready) lastTimed = slot;
  pthread_mutex_unlock(&lock);
  return result;
}

CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream) {
  Init();
  return Timed(real.dtod, dst, src, bytes, stream);
}

CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream) {
  Init();
  return Timed(real.async, dst, src, bytes, stream);
}

CUresult cuEventRecord(CUevent event, CUstream stream) {
  Init();
  if (real.eventRecord == NULL) return CUDA_ERROR_NOT_INITIALIZED;
  CUresult result = real.eventRecord(event, stream);
  pthread_mutex_lock(&lock);
  // UCX records its completion event on the copy's stream right after the copy, in the same thread.
  if (lastTimed >= 0 && copies[lastTimed].stream == stream && copies[lastTimed].ucx == NULL) copies[lastTimed].ucx = event;
  pthread_mutex_unlock(&lock);
  return result;
}

static void Dump(void);

CUresult cuEventQuery(CUevent event) {
  Init();
  if (real.eventQuery == NULL) return CUDA_ERROR_NOT_INITIALIZED;
  CUresult result = real.eventQuery(event);
  if (result != CUDA_SUCCESS) return result;
  int dump = 0;
  pthread_mutex_lock(&lock);
  // UCX queries its events in order; the copy is among the last few timed.
  for (int i = timed - 1; i >= 0 && i >= timed - 64; i--) {
    struct Copy* c = &copies[i];
    if (!c->ready || c->ucx != event || c->seen) continue;
    c->seenNs = NowNs();
    // Recorded before UCX's event on the same stream: done too.
    if (real.elapsed(&c->gpuMs, c->before, c->after) == CUDA_SUCCESS) c->seen = 1;
    dump = c->seen && ++seenCount % kDumpEvery == 0;
    break;
  }
  pthread_mutex_unlock(&lock);
  if (dump) Dump();
  return result;
}

CUresult cuIpcOpenMemHandle_v2(CUdeviceptr* pointer, CUipcMemHandle handle, unsigned int flags) {
  Init();
  if (real.ipcOpen == NULL) return CUDA_ERROR_NOT_INITIALIZED;
  uint64_t started = NowNs();
  CUresult result = real.ipcOpen(pointer, handle, flags);
  pthread_mutex_lock(&lock);
  ipcOpens++;
  ipcUs += (double)(NowNs() - started) / 1e3;
  pthread_mutex_unlock(&lock);
  return result;
}

CUresult cuStreamAddCallback(CUstream stream, CUstreamCallback callback, void* data, unsigned int flags) {
  Init();
  if (real.addCallback == NULL) return CUDA_ERROR_NOT_INITIALIZED;
  __atomic_add_fetch(&callbacks, 1, __ATOMIC_RELAXED);
  return real.addCallback(stream, callback, data, flags);
}

static int Ascending(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

static double Median(double* values, int n) {
  if (n == 0) return 0;
  qsort(values, (size_t)n, sizeof *values, Ascending);
  return values[n / 2];
}

static void Report(FILE* out) {
  static double gpu[kMaxTimed], issue[kMaxTimed], seen[kMaxTimed], late[kMaxTimed];
  pthread_mutex_lock(&lock);
  int n = 0;
  double most = 0;
  for (int i = 0; i < timed; i++) {
    const struct Copy* c = &copies[i];
    if (!c->seen) continue;
    gpu[n] = c->gpuMs * 1e3;
    issue[n] = (double)(c->returnedNs - c->issuedNs) / 1e3;
    seen[n] = (double)(c->seenNs - c->issuedNs) / 1e3;
    late[n] = seen[n] - gpu[n];
    if (gpu[n] > most) most = gpu[n];
    n++;
  }
  const char* label = getenv("GDRPC_CUDA_COPIES_LABEL");
  fprintf(out,
          "cuda-copies[%d]%s%s: %ld copies (%.0f bytes), %d of 1 MiB or more timed; device time p50 %.1f max %.1f us; "
          "the copy call %.1f us; issued until UCX saw it done %.1f us, %.1f us after the device finished (p50); "
          "IPC handle opens %ld (%.0f us); stream callbacks %ld\n",
          (int)getpid(), label ? " " : "", label ? label : "", allCopies, allBytes, n, Median(gpu, n), most, Median(issue, n),
          Median(seen, n), Median(late, n), ipcOpens, ipcUs, callbacks);
  pthread_mutex_unlock(&lock);
}

static void Dump(void) {
  const char* dir = getenv("GDRPC_CUDA_COPIES_DIR");
  if (dir == NULL) return;
  char path[4096];
  snprintf(path, sizeof path, "%s/cuda-copies.%d.txt", dir, (int)getpid());
  FILE* out = fopen(path, "w");
  if (out == NULL) return;
  Report(out);
  fclose(out);
}

__attribute__((destructor)) static void AtExit(void) {
  if (allCopies == 0 && ipcOpens == 0) return;
  Report(stderr);
  Dump();
}

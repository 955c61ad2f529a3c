// The driver API table shared by the CUDA shim (cuda.cc) and its compute half (cuda_compute.cc).
#pragma once
#include <cuda.h>
#include <string>
#include <vector>

namespace gdrpc {
namespace cuda {

#define GDRPC_STR2(x) #x
#define GDRPC_STR(x) GDRPC_STR2(x)
// cuda.h maps names such as cuMemAlloc to their current ABI (cuMemAlloc_v2): stringifying the
// macro-expanded name looks up exactly the symbol a CUDA program built with this header would call.
#define GDRPC_CUDA_FUNCTIONS(X) \
  X(cuInit) X(cuDriverGetVersion) X(cuGetErrorString) X(cuDeviceGetCount) X(cuDeviceGet) X(cuDeviceGetName) \
  X(cuDeviceTotalMem) X(cuDeviceGetAttribute) X(cuDeviceGetPCIBusId) X(cuDeviceGetUuid) X(cuDeviceCanAccessPeer) \
  X(cuDevicePrimaryCtxRetain) X(cuCtxSetCurrent) X(cuCtxGetCurrent) X(cuCtxSynchronize) X(cuMemGetInfo) \
  X(cuMemAlloc) X(cuMemFree) X(cuMemHostAlloc) X(cuMemFreeHost) X(cuMemcpy) X(cuMemsetD8) X(cuPointerGetAttribute)
// Kernels, streams and events (cuda_compute.cc); loaded when present, checked before each use.
#define GDRPC_CUDA_COMPUTE_FUNCTIONS(X) \
  X(cuGetErrorName) X(cuModuleLoadDataEx) X(cuModuleUnload) X(cuModuleGetFunction) X(cuLaunchKernel) \
  X(cuFuncGetAttribute) X(cuStreamCreate) X(cuStreamDestroy) X(cuStreamSynchronize) X(cuStreamQuery) \
  X(cuStreamWaitEvent) X(cuEventCreate) X(cuEventDestroy) X(cuEventRecord) X(cuEventQuery) \
  X(cuEventSynchronize) X(cuEventElapsedTime) X(cuIpcGetMemHandle) X(cuIpcOpenMemHandle) X(cuIpcCloseMemHandle) \
  X(cuMemGetAddressRange)

struct Driver {
#define GDRPC_FIELD(fn) decltype(&::fn) fn = nullptr;
  GDRPC_CUDA_FUNCTIONS(GDRPC_FIELD)
  GDRPC_CUDA_COMPUTE_FUNCTIONS(GDRPC_FIELD)
#undef GDRPC_FIELD
  bool tried = false;
  bool ok = false;
  std::string reason;
  std::vector<CUcontext> contexts;  // retained primary contexts, by device
};

/** The loaded driver table (entries are null until Load() succeeds). */
Driver& TheDriver();

}  // namespace cuda
}  // namespace gdrpc

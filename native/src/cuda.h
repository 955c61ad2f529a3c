// The CUDA driver API, loaded at run time from libcuda.so.1 so that one build works with and
// without a GPU. Every entry point first makes the device's primary context current on the
// calling (main) thread, which is also the thread that progresses UCX and maps memory.
#pragma once
#include <napi.h>
#include <cstdint>
#include <string>

namespace gdrpc {
namespace cuda {

/** Loads the driver and runs cuInit once; false (with the reason) when there is no usable driver. */
bool Load(std::string* reason);
/** Makes the primary context of `device` (or of device 0 / the current one when -1) current. */
bool MakeCurrent(std::string* reason, int device = -1);
/** Makes current the primary context of the device that owns `ptr` (device 0 if unknown). */
bool MakeCurrentFor(uint64_t ptr, std::string* reason);
/** The `cuda` object of the addon: available(), deviceCount(), alloc(), copy(), ... */
Napi::Object Define(Napi::Env env);

}  // namespace cuda
}  // namespace gdrpc

// The compute half of the CUDA shim: PTX modules, kernel launches, streams and events.
#pragma once
#include <napi.h>

namespace gdrpc {
namespace cuda {

/** Adds moduleLoad, launch, stream* and event* to the addon's `cuda` object. */
void DefineCompute(Napi::Env env, Napi::Object cuda);

}  // namespace cuda
}  // namespace gdrpc

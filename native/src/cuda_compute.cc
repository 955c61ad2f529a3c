#include "cuda_compute.h"
#include <cuda.h>
#include <cstring>
#include <string>
#include <vector>
#include "cuda.h"
#include "cuda_driver.h"
#include "status.h"

// Kernels, streams and events through the driver API. Handles cross into JavaScript as bigints;
// core/compute owns their lifetimes (close()) and checks every argument before it comes here.
namespace gdrpc {
namespace cuda {

/** Throws FAILED_PRECONDITION unless the driver loaded, has `fn`, and `device`'s context is current. */
static void RequireCompute(Napi::Env env, int device, const void* fn, const char* name) {
  std::string reason;
  if (!Load(&reason)) Throw(env, "FAILED_PRECONDITION", "CUDA is unavailable: " + reason);
  if (fn == nullptr) Throw(env, "FAILED_PRECONDITION", std::string("this CUDA driver has no ") + name);
  if (!MakeCurrent(&reason, device)) Throw(env, "INVALID_ARGUMENT", "CUDA device " + std::to_string(device) + ": " + reason);
}
#define GDRPC_REQUIRE(env, device, fn) RequireCompute(env, device, reinterpret_cast<const void*>(TheDriver().fn), #fn)

/** The driver's name for `rc`, e.g. "CUDA_ERROR_INVALID_PTX". */
static std::string ErrorName(CUresult rc) {
  const char* name = nullptr;
  if (TheDriver().cuGetErrorName != nullptr) TheDriver().cuGetErrorName(rc, &name);
  return name != nullptr ? name : "CUDA_ERROR_" + std::to_string(static_cast<int>(rc));
}

/** Throws a GdrpcError naming the call and the driver's error (also as details.cudaError). */
static void Check(Napi::Env env, CUresult rc, const char* what, const std::string& extra = "") {
  if (rc == CUDA_SUCCESS) return;
  const char* code = rc == CUDA_ERROR_OUT_OF_MEMORY ? "RESOURCE_EXHAUSTED"
                   : rc == CUDA_ERROR_INVALID_VALUE || rc == CUDA_ERROR_NOT_FOUND || rc == CUDA_ERROR_INVALID_PTX ||
                           rc == CUDA_ERROR_INVALID_IMAGE || rc == CUDA_ERROR_INVALID_HANDLE
                       ? "INVALID_ARGUMENT"
                       : "INTERNAL";
  const char* text = nullptr;
  if (TheDriver().cuGetErrorString != nullptr) TheDriver().cuGetErrorString(rc, &text);
  std::string name = ErrorName(rc);
  std::string message = std::string(what) + ": " + name + (text != nullptr ? std::string(" (") + text + ")" : "") + extra;
  Napi::Error error = MakeError(env, code, message);
  Napi::Object details = Napi::Object::New(env);
  details.Set("cudaError", name);
  error.Value().Set("details", details);
  throw error;
}

static int IntArg(const Napi::CallbackInfo& info, size_t i) { return info[i].As<Napi::Number>().Int32Value(); }
template <typename T>
static T HandleArg(const Napi::CallbackInfo& info, size_t i) {
  bool lossless = true;
  return reinterpret_cast<T>(static_cast<uintptr_t>(info[i].As<Napi::BigInt>().Uint64Value(&lossless)));
}
template <typename T>
static Napi::Value HandleValue(Napi::Env env, T handle) {
  return Napi::BigInt::New(env, static_cast<uint64_t>(reinterpret_cast<uintptr_t>(handle)));
}

static CUdeviceptr DevicePointerArg(const Napi::CallbackInfo& info, size_t i) {
  bool lossless = true;
  return static_cast<CUdeviceptr>(info[i].As<Napi::BigInt>().Uint64Value(&lossless));
}

// ipcExport(device, ptr: bigint) -> { handle: Uint8Array(64), base: bigint, bytes }: the CUDA IPC
// handle of the whole allocation `ptr` lies in, and that allocation's range.
static Napi::Value IpcExport(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  GDRPC_REQUIRE(env, IntArg(info, 0), cuIpcGetMemHandle);
  GDRPC_REQUIRE(env, IntArg(info, 0), cuMemGetAddressRange);
  CUdeviceptr ptr = DevicePointerArg(info, 1);
  CUdeviceptr base = 0;
  size_t bytes = 0;
  Check(env, TheDriver().cuMemGetAddressRange(&base, &bytes, ptr), "cuMemGetAddressRange");
  CUipcMemHandle handle;
  Check(env, TheDriver().cuIpcGetMemHandle(&handle, base), "cuIpcGetMemHandle");
  Napi::Uint8Array out = Napi::Uint8Array::New(env, sizeof(handle.reserved));
  std::memcpy(out.Data(), handle.reserved, sizeof(handle.reserved));
  Napi::Object result = Napi::Object::New(env);
  result.Set("handle", out);
  result.Set("base", Napi::BigInt::New(env, static_cast<uint64_t>(base)));
  result.Set("bytes", static_cast<double>(bytes));
  return result;
}

// ipcOpen(device, handle: Uint8Array(64)) -> { address: bigint, bytes }: another process's
// allocation mapped into `device`'s context (peer access enabled as needed), and its size as the
// driver reports it here (not as the exporter said).
static Napi::Value IpcOpen(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  GDRPC_REQUIRE(env, IntArg(info, 0), cuIpcOpenMemHandle);
  GDRPC_REQUIRE(env, IntArg(info, 0), cuMemGetAddressRange);
  Napi::Uint8Array bytesIn = info[1].As<Napi::Uint8Array>();
  CUipcMemHandle handle;
  if (bytesIn.ByteLength() != sizeof(handle.reserved)) {
    Throw(env, "INVALID_ARGUMENT", "a CUDA IPC handle is " + std::to_string(sizeof(handle.reserved)) + " bytes");
  }
  std::memcpy(handle.reserved, bytesIn.Data(), sizeof(handle.reserved));
  CUdeviceptr address = 0;
  Check(env, TheDriver().cuIpcOpenMemHandle(&address, handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS), "cuIpcOpenMemHandle");
  CUdeviceptr base = 0;
  size_t bytes = 0;
  CUresult rc = TheDriver().cuMemGetAddressRange(&base, &bytes, address);
  if (rc != CUDA_SUCCESS || base != address) {
    TheDriver().cuIpcCloseMemHandle(address);
    Check(env, rc == CUDA_SUCCESS ? CUDA_ERROR_INVALID_VALUE : rc, "cuMemGetAddressRange of a mapped IPC handle");
  }
  Napi::Object result = Napi::Object::New(env);
  result.Set("address", Napi::BigInt::New(env, static_cast<uint64_t>(address)));
  result.Set("bytes", static_cast<double>(bytes));
  return result;
}

// ipcClose(device, address: bigint): unmaps what ipcOpen mapped.
static Napi::Value IpcClose(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  GDRPC_REQUIRE(env, IntArg(info, 0), cuIpcCloseMemHandle);
  Check(env, TheDriver().cuIpcCloseMemHandle(DevicePointerArg(info, 1)), "cuIpcCloseMemHandle");
  return env.Undefined();
}

// moduleLoad(device, ptx: Uint8Array ending in NUL) -> bigint; the JIT log joins the error.
static Napi::Value ModuleLoad(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  GDRPC_REQUIRE(env, IntArg(info, 0), cuModuleLoadDataEx);
  Napi::Uint8Array image = info[1].As<Napi::Uint8Array>();
  std::vector<char> log(8192, '\0');
  CUjit_option options[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  void* values[] = {log.data(), reinterpret_cast<void*>(static_cast<uintptr_t>(log.size()))};
  CUmodule module = nullptr;
  CUresult rc = TheDriver().cuModuleLoadDataEx(&module, image.Data(), 2, options, values);
  std::string jit(log.data());
  Check(env, rc, "cuModuleLoadDataEx", jit.empty() ? "" : ": " + jit);
  return HandleValue(env, module);
}

static Napi::Value ModuleUnload(const Napi::CallbackInfo& info) {
  GDRPC_REQUIRE(info.Env(), IntArg(info, 0), cuModuleUnload);
  Check(info.Env(), TheDriver().cuModuleUnload(HandleArg<CUmodule>(info, 1)), "cuModuleUnload");
  return info.Env().Undefined();
}

// moduleFunction(device, module, name) -> { handle, maxThreadsPerBlock }
static Napi::Value ModuleFunction(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  GDRPC_REQUIRE(env, IntArg(info, 0), cuModuleGetFunction);
  std::string name = info[2].As<Napi::String>().Utf8Value();
  CUfunction function = nullptr;
  Check(env, TheDriver().cuModuleGetFunction(&function, HandleArg<CUmodule>(info, 1), name.c_str()),
        "cuModuleGetFunction", " (" + name + ")");
  int maxThreads = 0;
  Check(env, TheDriver().cuFuncGetAttribute(&maxThreads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, function), "cuFuncGetAttribute");
  Napi::Object result = Napi::Object::New(env);
  result.Set("handle", HandleValue(env, function));
  result.Set("maxThreadsPerBlock", maxThreads);
  return result;
}

// launch(device, function, grid[3], block[3], sharedBytes, stream, args: Uint8Array, offsets:
// Uint32Array): parameter i lies at args[offsets[i]] (the driver knows each one's size).
static Napi::Value Launch(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  GDRPC_REQUIRE(env, IntArg(info, 0), cuLaunchKernel);
  CUfunction function = HandleArg<CUfunction>(info, 1);
  Napi::Array grid = info[2].As<Napi::Array>();
  Napi::Array block = info[3].As<Napi::Array>();
  auto dim = [](Napi::Array a, uint32_t i) { return a.Get(i).As<Napi::Number>().Uint32Value(); };
  unsigned int shared = info[4].As<Napi::Number>().Uint32Value();
  CUstream stream = HandleArg<CUstream>(info, 5);
  Napi::Uint8Array args = info[6].As<Napi::Uint8Array>();
  Napi::Uint32Array offsets = info[7].As<Napi::Uint32Array>();
  // The driver copies the values during the call: pointers into the JS bytes are enough.
  std::vector<void*> params(offsets.ElementLength());
  for (size_t i = 0; i < params.size(); ++i) params[i] = args.Data() + offsets[i];
  Check(env, TheDriver().cuLaunchKernel(function, dim(grid, 0), dim(grid, 1), dim(grid, 2), dim(block, 0), dim(block, 1),
                                        dim(block, 2), shared, stream, params.empty() ? nullptr : params.data(), nullptr),
        "cuLaunchKernel");
  return env.Undefined();
}

static Napi::Value StreamCreate(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  GDRPC_REQUIRE(env, IntArg(info, 0), cuStreamCreate);
  CUstream stream = nullptr;
  // Non-blocking: work on it never waits for the legacy default stream (UCX's copies use their own).
  Check(env, TheDriver().cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  return HandleValue(env, stream);
}

static Napi::Value StreamDestroy(const Napi::CallbackInfo& info) {
  GDRPC_REQUIRE(info.Env(), IntArg(info, 0), cuStreamDestroy);
  Check(info.Env(), TheDriver().cuStreamDestroy(HandleArg<CUstream>(info, 1)), "cuStreamDestroy");
  return info.Env().Undefined();
}

static Napi::Value StreamSynchronize(const Napi::CallbackInfo& info) {
  GDRPC_REQUIRE(info.Env(), IntArg(info, 0), cuStreamSynchronize);
  Check(info.Env(), TheDriver().cuStreamSynchronize(HandleArg<CUstream>(info, 1)), "cuStreamSynchronize");
  return info.Env().Undefined();
}

/** true when all work queued so far is done, false while some is pending; throws on a fault. */
static Napi::Value Ready(Napi::Env env, CUresult rc, const char* what) {
  if (rc == CUDA_ERROR_NOT_READY) return Napi::Boolean::New(env, false);
  Check(env, rc, what);
  return Napi::Boolean::New(env, true);
}

static Napi::Value StreamQuery(const Napi::CallbackInfo& info) {
  GDRPC_REQUIRE(info.Env(), IntArg(info, 0), cuStreamQuery);
  return Ready(info.Env(), TheDriver().cuStreamQuery(HandleArg<CUstream>(info, 1)), "cuStreamQuery");
}

static Napi::Value StreamWaitEvent(const Napi::CallbackInfo& info) {
  GDRPC_REQUIRE(info.Env(), IntArg(info, 0), cuStreamWaitEvent);
  Check(info.Env(), TheDriver().cuStreamWaitEvent(HandleArg<CUstream>(info, 1), HandleArg<CUevent>(info, 2), 0), "cuStreamWaitEvent");
  return info.Env().Undefined();
}

// eventCreate(device, timing) -> bigint
static Napi::Value EventCreate(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  GDRPC_REQUIRE(env, IntArg(info, 0), cuEventCreate);
  CUevent event = nullptr;
  unsigned int flags = info[1].As<Napi::Boolean>().Value() ? CU_EVENT_DEFAULT : CU_EVENT_DISABLE_TIMING;
  Check(env, TheDriver().cuEventCreate(&event, flags), "cuEventCreate");
  return HandleValue(env, event);
}

static Napi::Value EventDestroy(const Napi::CallbackInfo& info) {
  GDRPC_REQUIRE(info.Env(), IntArg(info, 0), cuEventDestroy);
  Check(info.Env(), TheDriver().cuEventDestroy(HandleArg<CUevent>(info, 1)), "cuEventDestroy");
  return info.Env().Undefined();
}

static Napi::Value EventRecord(const Napi::CallbackInfo& info) {
  GDRPC_REQUIRE(info.Env(), IntArg(info, 0), cuEventRecord);
  Check(info.Env(), TheDriver().cuEventRecord(HandleArg<CUevent>(info, 1), HandleArg<CUstream>(info, 2)), "cuEventRecord");
  return info.Env().Undefined();
}

static Napi::Value EventQuery(const Napi::CallbackInfo& info) {
  GDRPC_REQUIRE(info.Env(), IntArg(info, 0), cuEventQuery);
  return Ready(info.Env(), TheDriver().cuEventQuery(HandleArg<CUevent>(info, 1)), "cuEventQuery");
}

static Napi::Value EventSynchronize(const Napi::CallbackInfo& info) {
  GDRPC_REQUIRE(info.Env(), IntArg(info, 0), cuEventSynchronize);
  Check(info.Env(), TheDriver().cuEventSynchronize(HandleArg<CUevent>(info, 1)), "cuEventSynchronize");
  return info.Env().Undefined();
}

// eventElapsed(device, start, end) -> milliseconds
static Napi::Value EventElapsed(const Napi::CallbackInfo& info) {
  GDRPC_REQUIRE(info.Env(), IntArg(info, 0), cuEventElapsedTime);
  float ms = 0;
  Check(info.Env(), TheDriver().cuEventElapsedTime(&ms, HandleArg<CUevent>(info, 1), HandleArg<CUevent>(info, 2)), "cuEventElapsedTime");
  return Napi::Number::New(info.Env(), ms);
}

void DefineCompute(Napi::Env env, Napi::Object cuda) {
  cuda.Set("moduleLoad", Napi::Function::New(env, ModuleLoad));
  cuda.Set("moduleUnload", Napi::Function::New(env, ModuleUnload));
  cuda.Set("moduleFunction", Napi::Function::New(env, ModuleFunction));
  cuda.Set("launch", Napi::Function::New(env, Launch));
  cuda.Set("streamCreate", Napi::Function::New(env, StreamCreate));
  cuda.Set("streamDestroy", Napi::Function::New(env, StreamDestroy));
  cuda.Set("streamSynchronize", Napi::Function::New(env, StreamSynchronize));
  cuda.Set("streamQuery", Napi::Function::New(env, StreamQuery));
  cuda.Set("streamWaitEvent", Napi::Function::New(env, StreamWaitEvent));
  cuda.Set("eventCreate", Napi::Function::New(env, EventCreate));
  cuda.Set("eventDestroy", Napi::Function::New(env, EventDestroy));
  cuda.Set("eventRecord", Napi::Function::New(env, EventRecord));
  cuda.Set("eventQuery", Napi::Function::New(env, EventQuery));
  cuda.Set("eventSynchronize", Napi::Function::New(env, EventSynchronize));
  cuda.Set("eventElapsed", Napi::Function::New(env, EventElapsed));
  cuda.Set("ipcExport", Napi::Function::New(env, IpcExport));
  cuda.Set("ipcOpen", Napi::Function::New(env, IpcOpen));
  cuda.Set("ipcClose", Napi::Function::New(env, IpcClose));
}

}  // namespace cuda
}  // namespace gdrpc

#include "cuda.h"
#include <cuda.h>
#include <dlfcn.h>
#include <cstdio>
#include <vector>
#include "cuda_compute.h"
#include "cuda_driver.h"
#include "status.h"

namespace gdrpc {
namespace cuda {

Driver driver;

Driver& TheDriver() { return driver; }


bool Load(std::string* reason) {
  if (!driver.tried) {
    driver.tried = true;
    void* library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (library == nullptr) {
      const char* error = dlerror();
      driver.reason = error != nullptr ? error : "libcuda.so.1: cannot be loaded";
    } else {
      std::string missing;
#define GDRPC_LOAD(fn)                                                                      \
  driver.fn = reinterpret_cast<decltype(driver.fn)>(dlsym(library, GDRPC_STR(fn)));          \
  if (driver.fn == nullptr && missing.empty()) missing = GDRPC_STR(fn);
      GDRPC_CUDA_FUNCTIONS(GDRPC_LOAD)
#undef GDRPC_LOAD
      // Compute entry points are optional: a driver without one still moves memory.
#define GDRPC_LOAD_OPTIONAL(fn) \
  driver.fn = reinterpret_cast<decltype(driver.fn)>(dlsym(library, GDRPC_STR(fn)));
      GDRPC_CUDA_COMPUTE_FUNCTIONS(GDRPC_LOAD_OPTIONAL)
#undef GDRPC_LOAD_OPTIONAL
      if (!missing.empty()) {
        driver.reason = "libcuda.so.1 has no symbol " + missing;
      } else {
        CUresult rc = driver.cuInit(0);
        int count = 0;
        if (rc == CUDA_SUCCESS) rc = driver.cuDeviceGetCount(&count);
        if (rc != CUDA_SUCCESS) {
          const char* text = nullptr;
          driver.cuGetErrorString(rc, &text);
          driver.reason = std::string("cuInit failed: ") + (text != nullptr ? text : "unknown error");
        } else {
          driver.ok = true;
          driver.contexts.assign(static_cast<size_t>(count), nullptr);
        }
      }
    }
  }
  if (!driver.ok && reason != nullptr) *reason = driver.reason;
  return driver.ok;
}

static std::string ErrorText(CUresult rc) {
  const char* text = nullptr;
  if (driver.cuGetErrorString != nullptr) driver.cuGetErrorString(rc, &text);
  return text != nullptr ? text : "CUDA error " + std::to_string(static_cast<int>(rc));
}

bool MakeCurrent(std::string* reason, int device) {
  if (!Load(reason)) return false;
  if (device < 0) {
    CUcontext current = nullptr;
    if (driver.cuCtxGetCurrent(&current) == CUDA_SUCCESS && current != nullptr) return true;
    device = 0;
  }
  if (static_cast<size_t>(device) >= driver.contexts.size()) {
    if (reason) *reason = "no CUDA device " + std::to_string(device);
    return false;
  }
  CUresult rc = CUDA_SUCCESS;
  if (driver.contexts[device] == nullptr) {
    CUdevice handle = 0;
    rc = driver.cuDeviceGet(&handle, device);
    if (rc == CUDA_SUCCESS) rc = driver.cuDevicePrimaryCtxRetain(&driver.contexts[device], handle);
  }
  if (rc == CUDA_SUCCESS) rc = driver.cuCtxSetCurrent(driver.contexts[device]);
  if (rc != CUDA_SUCCESS) {
    if (reason) *reason = ErrorText(rc);
    return false;
  }
  return true;
}

bool MakeCurrentFor(uint64_t ptr, std::string* reason) {
  if (!Load(reason)) return false;
  int device = 0;
  if (driver.cuPointerGetAttribute(&device, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, static_cast<CUdeviceptr>(ptr)) !=
      CUDA_SUCCESS) {
    device = 0;
  }
  return MakeCurrent(reason, device);
}

/** Throws unless the driver is usable and `device`'s primary context is current. */
static void Require(Napi::Env env, int device = -1) {
  std::string reason;
  if (!Load(&reason)) Throw(env, "FAILED_PRECONDITION", "CUDA is unavailable: " + reason);
  if (!MakeCurrent(&reason, device)) Throw(env, "INVALID_ARGUMENT", "CUDA device " + std::to_string(device) + ": " + reason);
}

static void Check(Napi::Env env, CUresult rc, const char* what) {
  if (rc == CUDA_SUCCESS) return;
  const char* code = rc == CUDA_ERROR_OUT_OF_MEMORY ? "RESOURCE_EXHAUSTED"
                   : rc == CUDA_ERROR_INVALID_VALUE ? "INVALID_ARGUMENT" : "INTERNAL";
  Throw(env, code, std::string(what) + ": " + ErrorText(rc));
}

static int DeviceArg(const Napi::CallbackInfo& info, size_t i) { return info[i].As<Napi::Number>().Int32Value(); }
static CUdeviceptr PointerArg(const Napi::CallbackInfo& info, size_t i) {
  bool lossless = true;
  return static_cast<CUdeviceptr>(info[i].As<Napi::BigInt>().Uint64Value(&lossless));
}
/** A device pointer (bigint) or the address of a host view. */
static CUdeviceptr AddressArg(const Napi::CallbackInfo& info, size_t i) {
  if (info[i].IsBigInt()) return PointerArg(info, i);
  Napi::TypedArray view = info[i].As<Napi::TypedArray>();
  return reinterpret_cast<CUdeviceptr>(static_cast<uint8_t*>(view.ArrayBuffer().Data()) + view.ByteOffset());
}

static Napi::Value Available(const Napi::CallbackInfo& info) { return Napi::Boolean::New(info.Env(), Load(nullptr)); }

static Napi::Value UnavailableReason(const Napi::CallbackInfo& info) {
  std::string reason;
  if (Load(&reason)) return info.Env().Undefined();
  return Napi::String::New(info.Env(), reason);
}

static Napi::Value DriverVersion(const Napi::CallbackInfo& info) {
  Require(info.Env());
  int version = 0;
  Check(info.Env(), driver.cuDriverGetVersion(&version), "cuDriverGetVersion");
  return Napi::Number::New(info.Env(), version);
}

static Napi::Value DeviceCount(const Napi::CallbackInfo& info) {
  if (!Load(nullptr)) return Napi::Number::New(info.Env(), 0);
  return Napi::Number::New(info.Env(), static_cast<double>(driver.contexts.size()));
}

static Napi::Value Device(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int index = DeviceArg(info, 0);
  Require(env, index);
  CUdevice device = 0;
  Check(env, driver.cuDeviceGet(&device, index), "cuDeviceGet");
  char name[256] = "";
  Check(env, driver.cuDeviceGetName(name, sizeof(name), device), "cuDeviceGetName");
  size_t total = 0;
  Check(env, driver.cuDeviceTotalMem(&total, device), "cuDeviceTotalMem");
  char bus[64] = "";
  Check(env, driver.cuDeviceGetPCIBusId(bus, sizeof(bus), device), "cuDeviceGetPCIBusId");
  int major = 0, minor = 0;
  Check(env, driver.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device), "cuDeviceGetAttribute");
  Check(env, driver.cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device), "cuDeviceGetAttribute");
  CUuuid uuid{};
  Check(env, driver.cuDeviceGetUuid(&uuid, device), "cuDeviceGetUuid");
  char uuidText[48];
  const unsigned char* b = reinterpret_cast<const unsigned char*>(uuid.bytes);
  snprintf(uuidText, sizeof(uuidText), "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
           b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
  Napi::Object result = Napi::Object::New(env);
  result.Set("index", index);
  result.Set("name", name);
  result.Set("totalMemory", static_cast<double>(total));
  result.Set("pciBusId", bus);
  result.Set("computeCapability", std::to_string(major) + "." + std::to_string(minor));
  result.Set("uuid", uuidText);
  return result;
}

static Napi::Value CanAccessPeer(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Require(env, DeviceArg(info, 0));
  CUdevice a = 0, b = 0;
  Check(env, driver.cuDeviceGet(&a, DeviceArg(info, 0)), "cuDeviceGet");
  Check(env, driver.cuDeviceGet(&b, DeviceArg(info, 1)), "cuDeviceGet");
  int can = 0;
  Check(env, driver.cuDeviceCanAccessPeer(&can, a, b), "cuDeviceCanAccessPeer");
  return Napi::Boolean::New(env, can != 0);
}

static Napi::Value MemInfo(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Require(env, DeviceArg(info, 0));
  size_t free = 0, total = 0;
  Check(env, driver.cuMemGetInfo(&free, &total), "cuMemGetInfo");
  Napi::Object result = Napi::Object::New(env);
  result.Set("free", static_cast<double>(free));
  result.Set("total", static_cast<double>(total));
  return result;
}

static Napi::Value Alloc(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Require(env, DeviceArg(info, 0));
  CUdeviceptr ptr = 0;
  Check(env, driver.cuMemAlloc(&ptr, static_cast<size_t>(info[1].As<Napi::Number>().Int64Value())), "cuMemAlloc");
  return Napi::BigInt::New(env, static_cast<uint64_t>(ptr));
}

static Napi::Value Free(const Napi::CallbackInfo& info) {
  Require(info.Env());
  Check(info.Env(), driver.cuMemFree(PointerArg(info, 0)), "cuMemFree");
  return info.Env().Undefined();
}

static Napi::Value AllocHost(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Require(env);
  size_t bytes = static_cast<size_t>(info[0].As<Napi::Number>().Int64Value());
  void* ptr = nullptr;
  Check(env, driver.cuMemHostAlloc(&ptr, bytes, CU_MEMHOSTALLOC_PORTABLE), "cuMemHostAlloc");
  return Napi::ArrayBuffer::New(env, ptr, bytes, [](Napi::Env, void* data) { driver.cuMemFreeHost(data); });
}

static Napi::Value Copy(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Require(env);
  size_t bytes = static_cast<size_t>(info[2].As<Napi::Number>().Int64Value());
  Check(env, driver.cuMemcpy(AddressArg(info, 0), AddressArg(info, 1), bytes), "cuMemcpy");
  return env.Undefined();
}

static Napi::Value Memset(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Require(env);
  size_t bytes = static_cast<size_t>(info[2].As<Napi::Number>().Int64Value());
  Check(env, driver.cuMemsetD8(PointerArg(info, 0), static_cast<unsigned char>(info[1].As<Napi::Number>().Uint32Value()), bytes),
        "cuMemsetD8");
  Check(env, driver.cuCtxSynchronize(), "cuCtxSynchronize");
  return env.Undefined();
}

static Napi::Value PointerInfo(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Require(env);
  CUdeviceptr ptr = PointerArg(info, 0);
  unsigned int type = 0;
  int device = -1;
  Napi::Object result = Napi::Object::New(env);
  if (driver.cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, ptr) != CUDA_SUCCESS) {
    result.Set("memoryType", "unregistered");
    result.Set("device", -1);
    return result;
  }
  driver.cuPointerGetAttribute(&device, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, ptr);
  result.Set("memoryType", type == CU_MEMORYTYPE_DEVICE ? "cuda" : "host");
  result.Set("device", device);
  return result;
}

static Napi::Value Synchronize(const Napi::CallbackInfo& info) {
  Require(info.Env(), DeviceArg(info, 0));
  Check(info.Env(), driver.cuCtxSynchronize(), "cuCtxSynchronize");
  return info.Env().Undefined();
}

Napi::Object Define(Napi::Env env) {
  Napi::Object cuda = Napi::Object::New(env);
  cuda.Set("available", Napi::Function::New(env, Available));
  cuda.Set("unavailableReason", Napi::Function::New(env, UnavailableReason));
  cuda.Set("driverVersion", Napi::Function::New(env, DriverVersion));
  cuda.Set("deviceCount", Napi::Function::New(env, DeviceCount));
  cuda.Set("device", Napi::Function::New(env, Device));
  cuda.Set("canAccessPeer", Napi::Function::New(env, CanAccessPeer));
  cuda.Set("memInfo", Napi::Function::New(env, MemInfo));
  cuda.Set("alloc", Napi::Function::New(env, Alloc));
  cuda.Set("free", Napi::Function::New(env, Free));
  cuda.Set("allocHost", Napi::Function::New(env, AllocHost));
  cuda.Set("copy", Napi::Function::New(env, Copy));
  cuda.Set("memset", Napi::Function::New(env, Memset));
  cuda.Set("pointerInfo", Napi::Function::New(env, PointerInfo));
  cuda.Set("synchronize", Napi::Function::New(env, Synchronize));
  DefineCompute(env, cuda);
  return cuda;
}

}  // namespace cuda
}  // namespace gdrpc

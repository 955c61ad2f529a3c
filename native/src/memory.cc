#include "memory.h"
#include "context.h"
#include "cuda.h"
#include "state.h"
#include "status.h"

namespace gdrpc {

const char* MemoryTypeName(ucs_memory_type_t type) {
  switch (type) {
    case UCS_MEMORY_TYPE_HOST: return "host";
    case UCS_MEMORY_TYPE_CUDA: return "cuda";
    case UCS_MEMORY_TYPE_CUDA_MANAGED: return "cuda-managed";
    case UCS_MEMORY_TYPE_UNKNOWN: return "unknown";
    default: return ucs_memory_type_names[type];
  }
}

Napi::Function MemoryRegion::Define(Napi::Env env) {
  return DefineClass(env, "MemoryRegion", {
    InstanceAccessor<&MemoryRegion::GetAddress>("address"),
    InstanceAccessor<&MemoryRegion::GetLength>("length"),
    InstanceAccessor<&MemoryRegion::GetMemoryType>("memoryType"),
    InstanceMethod<&MemoryRegion::PackRkey>("packRkey"),
    InstanceMethod<&MemoryRegion::Close>("close"),
  });
}

MemoryRegion* MemoryRegion::From(Napi::Env env, Napi::Value value) {
  if (!value.IsObject()) return nullptr;
  State* state = State::Of(env);
  if (!value.As<Napi::Object>().InstanceOf(state->regionClass.Value())) return nullptr;
  return Unwrap(value.As<Napi::Object>());
}

MemoryRegion::MemoryRegion(const Napi::CallbackInfo& info) : Napi::ObjectWrap<MemoryRegion>(info) {
  Napi::Env env = info.Env();
  context_ = Context::Unwrap(info[0].As<Napi::Object>());
  context_->CheckOpen(env);
  ucs_memory_type_t requested = UCS_MEMORY_TYPE_HOST;
  if (info[1].IsArrayBuffer()) {
    Napi::ArrayBuffer buffer = info[1].As<Napi::ArrayBuffer>();
    address_ = buffer.Data();
    length_ = buffer.ByteLength();
  } else {
    bool lossless = true;
    address_ = reinterpret_cast<void*>(info[1].As<Napi::BigInt>().Uint64Value(&lossless));
    length_ = static_cast<size_t>(info[2].As<Napi::Number>().Int64Value());
    if (info[3].As<Napi::String>().Utf8Value() == "cuda") {
      requested = UCS_MEMORY_TYPE_CUDA;
      // UCX's cuda memory domain needs the pointer's context current on the mapping thread.
      std::string reason;
      if (!cuda::MakeCurrentFor(reinterpret_cast<uint64_t>(address_), &reason)) Throw(env, "FAILED_PRECONDITION", "cannot map CUDA memory: " + reason);
    }
  }
  ucp_mem_map_params_t params{};
  params.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                      UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE;
  params.address = address_;
  params.length = length_;
  params.memory_type = requested;
  ucs_status_t status = ucp_mem_map(context_->handle(), &params, &memh_);
  if (status != UCS_OK) {
    memh_ = nullptr;
    ThrowStatus(env, status, "ucp_mem_map of " + std::to_string(length_) + " bytes");
  }
  ucp_mem_attr_t attr{};
  attr.field_mask = UCP_MEM_ATTR_FIELD_MEM_TYPE;
  status = ucp_mem_query(memh_, &attr);
  memoryType_ = status == UCS_OK ? attr.mem_type : UCS_MEMORY_TYPE_UNKNOWN;
  if (info[1].IsArrayBuffer()) buffer_ = Napi::Persistent(info[1]);
  contextRef_ = Napi::Persistent(info[0].As<Napi::Object>());
  context_->AddRegion(this);
  State::Of(env)->counters.regions++;
}

MemoryRegion::~MemoryRegion() { Destroy(); }

void MemoryRegion::CheckOpen(Napi::Env env) const {
  if (memh_ == nullptr) Throw(env, "FAILED_PRECONDITION", "the memory region is closed");
}

Napi::Value MemoryRegion::GetAddress(const Napi::CallbackInfo& info) {
  return Napi::BigInt::New(info.Env(), static_cast<uint64_t>(reinterpret_cast<uintptr_t>(address_)));
}

Napi::Value MemoryRegion::PackRkey(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  CheckOpen(env);
  void* packed = nullptr;
  size_t size = 0;
  ucs_status_t status = ucp_rkey_pack(context_->handle(), memh_, &packed, &size);
  if (status != UCS_OK) ThrowStatus(env, status, "ucp_rkey_pack");
  Napi::Buffer<uint8_t> result = Napi::Buffer<uint8_t>::Copy(env, static_cast<uint8_t*>(packed), size);
  ucp_rkey_buffer_release(packed);
  return result;
}

Napi::Value MemoryRegion::Close(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (memh_ == nullptr) return env.Undefined();
  if (inUse_ > 0) {
    Throw(env, "FAILED_PRECONDITION", "the memory region is used by " + std::to_string(inUse_) + " pending operation(s)");
  }
  Destroy();
  return env.Undefined();
}

void MemoryRegion::Destroy() {
  if (memh_ == nullptr) return;
  ucp_mem_unmap(context_->handle(), memh_);
  memh_ = nullptr;
  context_->RemoveRegion(this);
  State::Of(Env())->counters.regions--;
  buffer_.Reset();
}

}  // namespace gdrpc

namespace gdrpc {

Napi::Value AddressOf(const Napi::CallbackInfo& info) {
  Napi::Value target = info[0];
  uint8_t* address = nullptr;
  if (target.IsArrayBuffer()) {
    address = static_cast<uint8_t*>(target.As<Napi::ArrayBuffer>().Data());
  } else if (target.IsTypedArray()) {
    Napi::TypedArray view = target.As<Napi::TypedArray>();
    address = static_cast<uint8_t*>(view.ArrayBuffer().Data()) + view.ByteOffset();
  } else if (target.IsDataView()) {
    Napi::DataView view = target.As<Napi::DataView>();
    address = static_cast<uint8_t*>(view.ArrayBuffer().Data()) + view.ByteOffset();
  } else {
    Throw(info.Env(), "INVALID_ARGUMENT", "addressOf expects an ArrayBufferView or an ArrayBuffer");
  }
  return Napi::BigInt::New(info.Env(), static_cast<uint64_t>(reinterpret_cast<uintptr_t>(address)));
}

}  // namespace gdrpc

// A memory region mapped with ucp_mem_map (host memory of a JS ArrayBuffer, or an address with a
// memory type), its UCX-detected memory type, and its packed remote key.
#pragma once
#include <napi.h>
#include <ucp/api/ucp.h>

namespace gdrpc {

class Context;

/** The binding's name of a UCX memory type ("host", "cuda", "cuda-managed", or UCX's own name). */
const char* MemoryTypeName(ucs_memory_type_t type);

class MemoryRegion : public Napi::ObjectWrap<MemoryRegion> {
 public:
  static Napi::Function Define(Napi::Env env);
  /** new MemoryRegion(context, arrayBuffer) or new MemoryRegion(context, address: bigint, length, 'host'|'cuda') */
  explicit MemoryRegion(const Napi::CallbackInfo& info);
  ~MemoryRegion() override;

  /** The region behind a JS value, or null when it is not a MemoryRegion. */
  static MemoryRegion* From(Napi::Env env, Napi::Value value);
  void CheckOpen(Napi::Env env) const;
  void* address() const { return address_; }
  size_t length() const { return length_; }
  ucp_mem_h memh() const { return memh_; }
  ucs_memory_type_t memoryType() const { return memoryType_; }
  /** In-flight operations using the region; close() refuses while any are. */
  void Acquire() { ++inUse_; }
  void Release() { --inUse_; }
  void Destroy();

 private:
  Napi::Value GetAddress(const Napi::CallbackInfo& info);
  Napi::Value GetLength(const Napi::CallbackInfo& info) { return Napi::Number::New(info.Env(), static_cast<double>(length_)); }
  Napi::Value GetMemoryType(const Napi::CallbackInfo& info) { return Napi::String::New(info.Env(), MemoryTypeName(memoryType_)); }
  Napi::Value PackRkey(const Napi::CallbackInfo& info);
  Napi::Value Close(const Napi::CallbackInfo& info);

  Context* context_ = nullptr;
  Napi::ObjectReference contextRef_;
  Napi::Reference<Napi::Value> buffer_;
  ucp_mem_h memh_ = nullptr;
  void* address_ = nullptr;
  size_t length_ = 0;
  ucs_memory_type_t memoryType_ = UCS_MEMORY_TYPE_UNKNOWN;
  int inUse_ = 0;
};

}  // namespace gdrpc

namespace gdrpc {
/** addressOf(view): the address of the first byte of a host ArrayBufferView or ArrayBuffer. */
Napi::Value AddressOf(const Napi::CallbackInfo& info);
}  // namespace gdrpc

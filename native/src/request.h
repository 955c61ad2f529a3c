// One in-flight UCX operation and the completion queue that settles it. UCX callbacks only record
// the outcome and queue the request; the worker settles the queue (resolves or rejects the JS
// promise, frees the UCX request) on the main thread after ucp_worker_progress has returned.
#pragma once
#include <napi.h>
#include <ucp/api/ucp.h>
#include <cstdint>
#include <optional>
#include <string>

namespace gdrpc {

class Worker;
class Endpoint;
class MemoryRegion;

/** A memory range an operation reads or writes, resolved from a JS view or a MemoryRegion. */
struct Span {
  void* address = nullptr;
  size_t length = 0;
  ucp_mem_h memh = nullptr;                        // set for MemoryRegion spans
  ucs_memory_type_t memoryType = UCS_MEMORY_TYPE_HOST;
  MemoryRegion* region = nullptr;
  Napi::Value holder;                              // the JS object that owns the memory
};

/** Resolves (target, offset, length): target is an ArrayBufferView, an ArrayBuffer or a MemoryRegion. */
Span ResolveSpan(Napi::Env env, Napi::Value target, Napi::Value offset, Napi::Value length);

enum class RequestKind { Send, Recv, Put, Get, Flush, Close };

/** Writes a message's sender tag and length as four uint32 words (tag low, tag high, length low,
 *  length high): the slot of tagRecvInto, tagRecvTakenInto and tagWatch. */
inline void WriteTagWords(uint32_t* slot, uint64_t tag, uint64_t length) {
  slot[0] = static_cast<uint32_t>(tag);
  slot[1] = static_cast<uint32_t>(tag >> 32);
  slot[2] = static_cast<uint32_t>(length);
  slot[3] = static_cast<uint32_t>(length >> 32);
}

struct Request {
  Request(Worker* worker, Endpoint* endpoint, RequestKind kind, uint32_t id, Napi::Env env);
  ~Request();

  /** Adds the UCX callback + user data + memory fields for `span` to `param`; with `hold` false
   *  the span's JS object is not referenced yet (Hold, once the operation turns out pending). */
  void Prepare(ucp_request_param_t& param, const Span* span, bool hold = true);
  /** References the JS object that owns the memory until completion (after Prepare without it). */
  void Hold(const Span& span) { holder = Napi::Persistent(span.holder); }
  /** Handles the return value of a *_nbx call: settles now, fails now, or registers as pending.
   *  Returns the JS promise; with `quiet`, undefined instead when UCX completed the operation
   *  inside the call (no promise is made: nothing is left to wait for). */
  Napi::Value Start(ucs_status_ptr_t result, const char* what, bool quiet = false);
  /** Makes the request report through `slot` and `callback` instead of a promise (tagRecvInto):
   *  on success the sender tag and length are written to `slot` (uint32 words: tag low, tag high,
   *  length low, length high), then `callback()`; on failure `callback(error)`. A cancelled or
   *  detached request calls nothing. */
  void ReportInto(Napi::Uint32Array slot, Napi::Function callback);
  /** Writes the received message's sender tag and length to `slot` (ReportInto's words). */
  void WriteSlot() const;
  /** Rejects the JS promise now (if not yet settled); the native request stays until UCX completes it. */
  void Detach(Napi::Env env, const char* code, const std::string& message, ucs_status_t status);
  /** Called by the worker when it drains the queue: settle JS, free the UCX request, delete,
   *  then call `completed` (if set): UCX no longer touches the buffer. With `keep`, everything
   *  but the delete: the worker deletes it later (UCX may still call back into it). */
  void Finish(Napi::Env env, bool keep = false);
  /** Takes an optional JS function argument as the `completed` callback. */
  void OnCompleted(Napi::Value callback);
  /** With a true `describe`, the protocol UCX selected is read back and reported (see `protocol`).
   *  Receives are never described: UCX 1.22 formats a received message's request from memory it
   *  has not set when the data had already arrived (ucp_tag_msg_recv_nbx completing at once: a
   *  SIGSEGV in ucp_request_query), and a receive's description says no more than its length and
   *  memory type, which the caller knows. */
  void Describe(Napi::Value describe) { this->describe = kind != RequestKind::Recv && describe.ToBoolean(); }

  Worker* worker;
  Endpoint* endpoint;
  RequestKind kind;
  uint32_t id;
  const char* what = "";
  Napi::Env env;
  /** Made by Start, unless a quiet operation completed inside its *_nbx call. */
  std::optional<Napi::Promise::Deferred> deferred;
  Napi::Reference<Napi::Value> holder;             // keeps the JS memory alive until completion
  Napi::FunctionReference completed;               // called once UCX has completed the request
  uint32_t* slot = nullptr;                        // ReportInto: where the outcome is written ...
  Napi::Reference<Napi::Value> slotHolder;         //   ... kept alive while the request lives
  Napi::FunctionReference report;                  //   ... and who is told
  MemoryRegion* region = nullptr;
  void* ucxRequest = nullptr;
  ucs_status_t status = UCS_INPROGRESS;
  ucp_tag_recv_info_t recvInfo{};
  bool settled = false;                            // the JS promise was resolved or rejected
  bool pending = false;                            // registered with the worker, completion awaited
  bool describe = false;                           // read the selected protocol back from UCX
  bool device = false;                             // its memory is on a device (the worker polls while it runs)
  std::string protocol;                            // ucp_request_query's info string when the operation started
  std::string finalProtocol;                       // ... and when it completed (a rendezvous may switch)
  /** A described tag send from host memory: its length, under which its endpoint keeps
   *  descriptions (Endpoint::Described) ... */
  std::optional<size_t> describedLength;
  /** ... and the endpoint's description for that length, if it has one: the request then may
   *  complete inside its *_nbx call. */
  std::optional<std::string> remembered;
  /** Completed inside its *_nbx call and described by `remembered`: settles with the endpoint's
   *  shared report object (Endpoint::DescribedReport). */
  bool describedFromMemory = false;

 private:
  void Settle(Napi::Env env);
  /** A *_nbx call's request still in flight: kept with the worker (and endpoint) until UCX
   *  completes it. */
  void Register(ucs_status_ptr_t result);
  /** The JS error for a failed request (status not UCS_OK). */
  Napi::Value Failure(Napi::Env env) const;
  /** UCX's description of the protocol this request runs (ucp_request_query INFO_STRING). */
  std::string QueryProtocol() const;
};

}  // namespace gdrpc

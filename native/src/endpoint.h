// A UCP endpoint in PEER error mode: tag send, RMA put/get, flush, close. The error callback only
// records the failure; on the main thread the endpoint rejects its pending operations with
// UNAVAILABLE, tells JS, and closes itself with FORCE as UCX requires for failed endpoints.
#pragma once
#include <napi.h>
#include <ucp/api/ucp.h>
#include <cstddef>
#include <set>
#include <string>
#include <unordered_map>

namespace gdrpc {

class Worker;
class RemoteKey;
struct Request;

class Endpoint : public Napi::ObjectWrap<Endpoint> {
 public:
  static Napi::Function Define(Napi::Env env);
  /** new Endpoint(worker, host, port, name, label) connects (label: the host as errors name it); new Endpoint(worker, External<conn_request>, peer) accepts. */
  explicit Endpoint(const Napi::CallbackInfo& info);
  ~Endpoint() override;

  ucp_ep_h handle() const { return ep_; }
  Worker* worker() const { return worker_; }
  bool failed() const { return failed_; }
  ucs_status_t failure() const { return failure_; }
  const std::string& peer() const { return peer_; }
  /** Keeps the process alive: open and not failed. */
  bool connected() const { return ep_ != nullptr && !failed_ && !closing_; }
  void CheckUsable(Napi::Env env) const;

  void AddRequest(Request* request) { requests_.insert(request); }
  void RemoveRequest(Request* request) { requests_.erase(request); }
  void AddRkey(RemoteKey* rkey) { rkeys_.insert(rkey); }
  void RemoveRkey(RemoteKey* rkey) { rkeys_.erase(rkey); }

  /** What UCX said of this endpoint's last described eager tag send from host memory of
   *  `length` bytes that ran one protocol from start to end; nullptr if none. A described tag send
   *  from host memory of that length then goes without UCP_OP_ATTR_FLAG_NO_IMM_CMPL, and one UCX
   *  completes inside its *_nbx call (which leaves no request to query) is described by this: the
   *  protocol for a tag send from host memory of a length is UCX's selection for them. */
  const std::string* Described(size_t length) const;
  /** Keeps `protocol` for `length`; at most kDescriptionsKept lengths (the table starts over when full). */
  void RememberDescribed(size_t length, const std::string& protocol);
  /** The report `{protocol, initialProtocol}` (both `protocol`) a send described from this table
   *  resolves to: one frozen object per length, made when first asked for, shared by every such
   *  send (a new object and string per send were most of what describing a 4 KiB send cost). */
  Napi::Object DescribedReport(Napi::Env env, size_t length, const std::string& protocol);

  /** Main thread, after the UCX error callback fired. */
  void OnFailed(Napi::Env env);
  /** The close request completed: the UCX endpoint is gone. */
  void OnClosed(Napi::Env env);
  /** Immediate forced close (worker close, finalizer, exit hook). */
  void Destroy(bool fromJs);

 private:
  Napi::Value SetHandler(const Napi::CallbackInfo& info);
  Napi::Value TagSend(const Napi::CallbackInfo& info);
  Napi::Value Put(const Napi::CallbackInfo& info);
  Napi::Value Get(const Napi::CallbackInfo& info);
  Napi::Value Flush(const Napi::CallbackInfo& info);
  Napi::Value Transports(const Napi::CallbackInfo& info);
  Napi::Value LocalAddress(const Napi::CallbackInfo& info);
  Napi::Value Close(const Napi::CallbackInfo& info);
  Napi::Value GetPeer(const Napi::CallbackInfo& info) { return Napi::String::New(info.Env(), peer_); }
  Napi::Value GetFailed(const Napi::CallbackInfo& info) { return Napi::Boolean::New(info.Env(), failed_); }

  Napi::Value Rma(const Napi::CallbackInfo& info, bool put);
  /** Rejects every pending operation of this endpoint now, and asks UCX to cancel them. */
  void DetachAll(Napi::Env env, bool closing);
  void DestroyRkeys();
  /** Starts ucp_ep_close_nbx; returns the promise of the close request. */
  Napi::Value StartClose(Napi::Env env, bool force);
  void Emit(Napi::Env env, const char* kind, Napi::Value value);

  static void OnError(void* arg, ucp_ep_h ep, ucs_status_t status);

  Worker* worker_ = nullptr;
  Napi::ObjectReference workerRef_;
  Napi::FunctionReference handler_;
  ucp_ep_h ep_ = nullptr;
  std::string peer_;
  std::set<Request*> requests_;
  std::set<RemoteKey*> rkeys_;
  struct Description {
    std::string protocol;
    Napi::ObjectReference report;  // DescribedReport's object, once asked for
  };
  std::unordered_map<size_t, Description> described_;  // see Described
  ucs_status_t failure_ = UCS_OK;
  bool failed_ = false;
  bool closing_ = false;
  bool counted_ = false;
};

}  // namespace gdrpc

#include "endpoint.h"
#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <cstring>
#include "request.h"
#include "listener_drain.h"
#include "rkey.h"
#include "state.h"
#include "status.h"
#include "worker.h"

namespace gdrpc {

Napi::Function Endpoint::Define(Napi::Env env) {
  return DefineClass(env, "Endpoint", {
    InstanceMethod<&Endpoint::SetHandler>("setHandler"),
    InstanceMethod<&Endpoint::TagSend>("tagSend"),
    InstanceMethod<&Endpoint::Put>("put"),
    InstanceMethod<&Endpoint::Get>("get"),
    InstanceMethod<&Endpoint::Flush>("flush"),
    InstanceMethod<&Endpoint::Transports>("transports"),
    InstanceMethod<&Endpoint::LocalAddress>("localAddress"),
    InstanceMethod<&Endpoint::Close>("close"),
    InstanceAccessor<&Endpoint::GetPeer>("peer"),
    InstanceAccessor<&Endpoint::GetFailed>("failed"),
  });
}

static sockaddr_storage Resolve(Napi::Env env, const std::string& host, uint32_t port) {
  in6_addr v6{};
  if (inet_pton(AF_INET6, host.c_str(), &v6) == 1) {
    // Listeners take IPv4 only (listener.cc: UCX 1.22 corrupts a server's heap on an IPv6 client).
    Throw(env, "INVALID_ARGUMENT", "host must be an IPv4 address or a name with one, got " + host + " (gdrpc listens and connects over IPv4)");
  }
  addrinfo hints{};
  // A name that has both resolves to its IPv4 address: the one a gdrpc listener can be on.
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  std::string service = std::to_string(port);
  int rc = getaddrinfo(host.c_str(), service.c_str(), &hints, &found);
  if (rc != 0 || found == nullptr) Throw(env, "INVALID_ARGUMENT", "cannot resolve host " + host + ": " + gai_strerror(rc));
  sockaddr_storage address{};
  std::memcpy(&address, found->ai_addr, found->ai_addrlen);
  freeaddrinfo(found);
  return address;
}

Endpoint::Endpoint(const Napi::CallbackInfo& info) : Napi::ObjectWrap<Endpoint>(info) {
  Napi::Env env = info.Env();
  worker_ = Worker::Unwrap(info[0].As<Napi::Object>());
  worker_->CheckOpen(env);
  ucp_ep_params_t params{};
  params.field_mask = UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
  params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  params.err_handler.cb = OnError;
  params.err_handler.arg = this;
  sockaddr_storage address{};
  std::string name;
  if (info[1].IsExternal()) {
    params.field_mask |= UCP_EP_PARAM_FIELD_CONN_REQUEST;
    params.conn_request = info[1].As<Napi::External<ucp_conn_request>>().Data();
    peer_ = info[2].As<Napi::String>().Utf8Value();
  } else {
    std::string host = info[1].As<Napi::String>().Utf8Value();
    uint32_t port = info[2].As<Napi::Number>().Uint32Value();
    address = Resolve(env, host, port);
    // How errors name the peer: the host as the caller named it, where it resolved the name itself.
    peer_ = (info[4].IsString() ? info[4].As<Napi::String>().Utf8Value() : host) + ":" + std::to_string(port);
    params.field_mask |= UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR;
    params.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
    params.sockaddr.addr = reinterpret_cast<const sockaddr*>(&address);
    params.sockaddr.addrlen = sizeof(address);
    if (info[3].IsString()) {
      name = info[3].As<Napi::String>().Utf8Value();
      params.field_mask |= UCP_EP_PARAM_FIELD_NAME;
      params.name = name.c_str();
    }
  }
  ucs_status_t status = ucp_ep_create(worker_->handle(), &params, &ep_);
  if (status != UCS_OK) {
    ep_ = nullptr;
    ThrowStatus(env, status, "ucp_ep_create to " + peer_);
  }
  workerRef_ = Napi::Persistent(info[0].As<Napi::Object>());
  counted_ = true;
  State::Of(env)->counters.endpoints++;
  worker_->AddEndpoint(this);
  worker_->Kick();  // the client-server handshake needs progress
}

Endpoint::~Endpoint() {
  FinalizerScope scope(State::Of(Env()));
  Destroy(false);
}

void Endpoint::OnError(void* arg, ucp_ep_h, ucs_status_t status) {
  Endpoint* self = static_cast<Endpoint*>(arg);
  if (self->failed_) return;
  self->failed_ = true;
  self->failure_ = status;
  Event event{Event::EndpointFailed};
  event.endpoint = self;
  self->worker_->Queue(event);
}

void Endpoint::CheckUsable(Napi::Env env) const {
  if (ep_ == nullptr || closing_) {
    if (failed_) Throw(env, "UNAVAILABLE", "endpoint to " + peer_ + " failed: " + ucs_status_string(failure_));
    Throw(env, "FAILED_PRECONDITION", "the endpoint to " + peer_ + " is closed");
  }
  if (failed_) {
    throw MakeError(env, "UNAVAILABLE", "endpoint to " + peer_ + " failed: " + ucs_status_string(failure_),
                    StatusName(failure_));
  }
}

Napi::Value Endpoint::SetHandler(const Napi::CallbackInfo& info) {
  handler_ = Napi::Persistent(info[0].As<Napi::Function>());
  return info.Env().Undefined();
}

void Endpoint::Emit(Napi::Env env, const char* kind, Napi::Value value) {
  if (handler_.IsEmpty() || !State::Of(env)->JsAllowed()) return;
  handler_.Call({Napi::String::New(env, kind), value});
}

/** Lengths an endpoint keeps a description of: a workload repeats a few sizes. */
constexpr size_t kDescriptionsKept = 64;

const std::string* Endpoint::Described(size_t length) const {
  auto found = described_.find(length);
  return found == described_.end() ? nullptr : &found->second.protocol;
}

void Endpoint::RememberDescribed(size_t length, const std::string& protocol) {
  if (described_.size() >= kDescriptionsKept && described_.count(length) == 0) described_.clear();
  Description& kept = described_[length];
  if (kept.protocol == protocol) return;
  kept.protocol = protocol;
  kept.report.Reset();
}

Napi::Object Endpoint::DescribedReport(Napi::Env env, size_t length, const std::string& protocol) {
  auto found = described_.find(length);
  if (found != described_.end() && found->second.protocol == protocol && !found->second.report.IsEmpty()) {
    return found->second.report.Value();
  }
  Napi::Object report = Napi::Object::New(env);
  Napi::String text = Napi::String::New(env, protocol);
  report.Set("protocol", text);
  report.Set("initialProtocol", text);
  report.Freeze();
  if (found != described_.end() && found->second.protocol == protocol) found->second.report = Napi::Persistent(report);
  return report;
}

// tagSend(tag: bigint, target, offset, length, id, completed?, describe?, quiet?) -> Promise<void | {protocol, ...}>;
// with `quiet`, undefined when UCX sent the message inside the call (Request::Start)
Napi::Value Endpoint::TagSend(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  CheckUsable(env);
  bool lossless = true;
  uint64_t tag = info[0].As<Napi::BigInt>().Uint64Value(&lossless);
  Span span = ResolveSpan(env, info[1], info[2], info[3]);
  Request* request = new Request(worker_, this, RequestKind::Send, info[4].As<Napi::Number>().Uint32Value(), env);
  request->OnCompleted(info[5]);
  request->Describe(info[6]);
  bool quiet = info.Length() > 7 && info[7].ToBoolean().Value();
  ucp_request_param_t param{};
  request->Prepare(param, &span);
  return request->Start(ucp_tag_send_nbx(ep_, span.address, span.length, tag, &param), "tag send", quiet);
}

// put/get(region, offset, length, remoteAddress: bigint, rkey, id, describe?) -> Promise<void | {protocol, ...}>
Napi::Value Endpoint::Rma(const Napi::CallbackInfo& info, bool put) {
  Napi::Env env = info.Env();
  CheckUsable(env);
  Span span = ResolveSpan(env, info[0], info[1], info[2]);
  bool lossless = true;
  uint64_t remote = info[3].As<Napi::BigInt>().Uint64Value(&lossless);
  RemoteKey* rkey = RemoteKey::Unwrap(info[4].As<Napi::Object>());
  rkey->CheckOpen(env);
  if (rkey->endpoint() != this) Throw(env, "INVALID_ARGUMENT", "the remote key was unpacked for another endpoint");
  Request* request = new Request(worker_, this, put ? RequestKind::Put : RequestKind::Get,
                                 info[5].As<Napi::Number>().Uint32Value(), env);
  request->Describe(info[6]);
  ucp_request_param_t param{};
  request->Prepare(param, &span);
  ucs_status_ptr_t result = put ? ucp_put_nbx(ep_, span.address, span.length, remote, rkey->handle(), &param)
                                : ucp_get_nbx(ep_, span.address, span.length, remote, rkey->handle(), &param);
  return request->Start(result, put ? "put" : "get");
}

Napi::Value Endpoint::Put(const Napi::CallbackInfo& info) { return Rma(info, true); }
Napi::Value Endpoint::Get(const Napi::CallbackInfo& info) { return Rma(info, false); }

// flush(id) -> Promise<void>: completes when every RMA issued before it is done remotely.
Napi::Value Endpoint::Flush(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  CheckUsable(env);
  Request* request = new Request(worker_, this, RequestKind::Flush, info[0].As<Napi::Number>().Uint32Value(), env);
  ucp_request_param_t param{};
  request->Prepare(param, nullptr);
  return request->Start(ucp_ep_flush_nbx(ep_, &param), "flush");
}

Napi::Value Endpoint::Transports(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  CheckUsable(env);
  ucp_transport_entry_t entries[32];
  ucp_ep_attr_t attr{};
  attr.field_mask = UCP_EP_ATTR_FIELD_TRANSPORTS;
  attr.transports.entries = entries;
  attr.transports.num_entries = 32;
  attr.transports.entry_size = sizeof(ucp_transport_entry_t);
  ucs_status_t status = ucp_ep_query(ep_, &attr);
  if (status != UCS_OK) ThrowStatus(env, status, "ucp_ep_query");
  Napi::Array result = Napi::Array::New(env);
  for (unsigned i = 0; i < attr.transports.num_entries; ++i) {
    Napi::Object entry = Napi::Object::New(env);
    entry.Set("transport", entries[i].transport_name);
    entry.Set("device", entries[i].device_name);
    result.Set(i, entry);
  }
  return result;
}

// This side's socket address, "address:port", on a connection made through a listener
// (ucp_ep_query UCP_EP_ATTR_FIELD_LOCAL_SOCKADDR): what the server's connection request says of
// the client, written as a listener writes it. undefined where UCX cannot tell (not a sockaddr
// connection, or not yet bound).
Napi::Value Endpoint::LocalAddress(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  CheckUsable(env);
  ucp_ep_attr_t attr{};
  attr.field_mask = UCP_EP_ATTR_FIELD_LOCAL_SOCKADDR;
  if (ucp_ep_query(ep_, &attr) != UCS_OK) return env.Undefined();
  const std::pair<std::string, unsigned> address = DescribeAddress(attr.local_sockaddr);
  if (address.first.empty() || address.second == 0) return env.Undefined();
  return Napi::String::New(env, address.first + ":" + std::to_string(address.second));
}

void Endpoint::DetachAll(Napi::Env env, bool closing) {
  std::set<Request*> requests = requests_;
  for (Request* request : requests) {
    if (failed_) {
      request->Detach(env, "UNAVAILABLE", std::string(request->what) + ": endpoint to " + peer_ + " failed: " +
                      ucs_status_string(failure_), failure_);
    } else {
      request->Detach(env, "CANCELLED", std::string(request->what) + ": the endpoint was closed", UCS_ERR_CANCELED);
    }
    ucp_request_cancel(worker_->handle(), request->ucxRequest);
  }
}

void Endpoint::DestroyRkeys() {
  std::set<RemoteKey*> rkeys = rkeys_;
  for (RemoteKey* rkey : rkeys) rkey->Destroy();
}

Napi::Value Endpoint::StartClose(Napi::Env env, bool force) {
  closing_ = true;
  worker_->UpdateRef();
  DetachAll(env, true);
  DestroyRkeys();
  Request* request = new Request(worker_, this, RequestKind::Close, 0, env);
  ucp_request_param_t param{};
  request->Prepare(param, nullptr);
  param.op_attr_mask |= UCP_OP_ATTR_FIELD_FLAGS;
  // UCX requires FORCE for an endpoint whose error callback fired; a graceful close would wait on it.
  param.flags = (force || failed_) ? UCP_EP_CLOSE_FLAG_FORCE : 0;
  return request->Start(ucp_ep_close_nbx(ep_, &param), "endpoint close");
}

// close(force) -> Promise<void>; resolves at once when already closed or closing.
Napi::Value Endpoint::Close(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (ep_ == nullptr || closing_) {
    Napi::Promise::Deferred done = Napi::Promise::Deferred::New(env);
    done.Resolve(env.Undefined());
    return done.Promise();
  }
  return StartClose(env, info[0].ToBoolean());
}

void Endpoint::OnFailed(Napi::Env env) {
  if (ep_ == nullptr || closing_) return;
  DetachAll(env, false);
  Emit(env, "error", MakeError(env, "UNAVAILABLE", "endpoint to " + peer_ + " failed: " + ucs_status_string(failure_),
                               StatusName(failure_)).Value());
  if (ep_ != nullptr && !closing_) StartClose(env, true);
}

void Endpoint::OnClosed(Napi::Env env) {
  if (ep_ == nullptr) return;
  ep_ = nullptr;
  for (Request* request : requests_) request->endpoint = nullptr;
  requests_.clear();
  worker_->Forget(this, nullptr);
  worker_->RemoveEndpoint(this);
  if (counted_) State::Of(env)->counters.endpoints--;
  counted_ = false;
  Emit(env, "close", env.Undefined());
  handler_.Reset();
}

void Endpoint::Destroy(bool fromJs) {
  if (ep_ == nullptr) return;
  Napi::Env env = Env();
  if (!fromJs) {
    handler_.Reset();  // no JS from finalizers and exit hooks
    for (Request* request : requests_) request->settled = true;
  }
  if (!closing_) StartClose(env, true);
  for (int i = 0; i < 1000 && ep_ != nullptr && !worker_->closed(); ++i) worker_->Flush(env);
  if (ep_ != nullptr) {
    // UCX did not finish the forced close; the worker's destruction releases it.
    worker_->DisownEndpoint(this);
    OnClosed(env);
  }
}

}  // namespace gdrpc

#include "worker.h"

#include "close_on_exec.h"
#include "context.h"
#include "endpoint.h"
#include "listener.h"
#include "request.h"
#include "state.h"
#include "status.h"

namespace gdrpc {

/** How long a worker on a transport that stays BUSY with nothing to progress is progressed in
 *  place, while the last such spell paid off, when GDRPC_STUCK_SPIN_US does not say
 *  (worker_progress.cc). */
constexpr uint64_t kStuckSpinNs = 200000;

Napi::Function Worker::Define(Napi::Env env) {
  return DefineClass(env, "Worker", {
    InstanceMethod<&Worker::TagRecv>("tagRecv"),
    InstanceMethod<&Worker::TagRecvInto>("tagRecvInto"),
    InstanceMethod<&Worker::TagProbe>("tagProbe"),
    InstanceMethod<&Worker::TagRecvTaken>("tagRecvTaken"),
    InstanceMethod<&Worker::TagRecvTakenInto>("tagRecvTakenInto"),
    InstanceMethod<&Worker::TagWatch>("tagWatch"),
    InstanceMethod<&Worker::TagUnwatch>("tagUnwatch"),
    InstanceMethod<&Worker::SweepOn>("sweep"),
    InstanceMethod<&Worker::SweepKnown>("sweepKnown"),
    InstanceMethod<&Worker::SweepHold>("sweepHold"),
    InstanceMethod<&Worker::SweepHeld>("sweepHeld"),
    InstanceMethod<&Worker::Progress>("progress"),
    InstanceMethod<&Worker::Cancel>("cancel"),
    InstanceMethod<&Worker::Stats>("stats"),
    InstanceMethod<&Worker::Ports>("ports"),
    InstanceMethod<&Worker::Activity>("activity"),
    InstanceMethod<&Worker::Close>("close"),
  });
}

// new Worker(context, busyPollUs, watchdogMs, deviceSpinUs, stuckSpinUs, allowedPeers?) (checked by
// core/ucx/worker.ts; allowedPeers: address prefixes as text, parsed here)
Worker::Worker(const Napi::CallbackInfo& info) : Napi::ObjectWrap<Worker>(info) {
  Napi::Env env = info.Env();
  context_ = Context::Unwrap(info[0].As<Napi::Object>());
  context_->CheckOpen(env);
  // busyPollUs < 0: the adaptive window (poll_window.h); 0: never spin; > 0: a fixed window.
  int64_t busyPollUs = info[1].As<Napi::Number>().Int64Value();
  poll_ = PollWindow(busyPollUs < 0 ? PollWindow::kAdaptive : busyPollUs * 1000);
  // The spell on a stuck transport (GDRPC_STUCK_SPIN_US, checked by Worker.create), else the default.
  stuckSpinNs_ = info[4].IsNumber() ? static_cast<uint64_t>(info[4].As<Napi::Number>().Int64Value()) * 1000 : kStuckSpinNs;
  // busyPollUs 0 asks for no polling at all: none for device transfers either.
  uint64_t deviceSpinNs = info[3].IsNumber() ? static_cast<uint64_t>(info[3].As<Napi::Number>().Int64Value()) * 1000 : DeviceWait::kDefaultLimitNs;
  deviceWait_ = DeviceWait(busyPollUs == 0 ? 0 : deviceSpinNs);
  unsigned watchdogMs = info[2].As<Napi::Number>().Uint32Value();

  if (info.Length() > 5 && info[5].IsArray()) {
    Napi::Array list = info[5].As<Napi::Array>();
    std::vector<PeerPrefix> allowed;
    for (uint32_t i = 0; i < list.Length(); i++) {
      PeerPrefix prefix;
      const std::string text = list.Get(i).ToString().Utf8Value();
      if (!ParsePeerPrefix(text, prefix)) Throw(env, "INVALID_ARGUMENT", "allowedPeers: not a numeric IPv4 or IPv6 address with an optional /bits: " + text);
      allowed.push_back(prefix);
    }
    guard_ = std::move(allowed);
  }

  // The TCP ports UCX opens are this worker's transports' own (uct/tcp listens on each device):
  // told apart from the process's other listening sockets by appearing across ucp_worker_create.
  const std::set<ino_t> before = ListeningTcpSockets();
  ucp_worker_params_t params{};
  params.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  // Only the Node main thread touches the worker, so UCX needs no locks.
  params.thread_mode = UCS_THREAD_MODE_SINGLE;
  ucs_status_t status = ucp_worker_create(context_->handle(), &params, &worker_);
  if (status != UCS_OK) ThrowStatus(env, status, "ucp_worker_create");
  for (ino_t socket : ListeningTcpSockets()) {
    if (before.count(socket) == 0) tcpSockets_.insert(socket);
  }
  if (guard_.has_value() && !tcpSockets_.empty() && !Guard(tcpSockets_)) {
    ucp_worker_destroy(worker_);
    worker_ = nullptr;
    Throw(env, "INTERNAL", "allowedPeers: could not attach the socket filter to this worker's TCP ports");
  }
  int fd = -1;
  status = ucp_worker_get_efd(worker_, &fd);
  if (status != UCS_OK) {
    ucp_worker_destroy(worker_);
    worker_ = nullptr;
    ThrowStatus(env, status, "ucp_worker_get_efd");
  }
  // Its transports' sockets, epoll and event descriptors are not for the programs this process
  // starts (close_on_exec.h).
  CloseOnExec();
  ucp_worker_attr_t attr{};
  attr.field_mask = UCP_WORKER_ATTR_FIELD_MAX_INFO_STRING;
  maxInfoString_ = ucp_worker_query(worker_, &attr) == UCS_OK ? attr.max_debug_string : 0;
  if (maxInfoString_ == 0) maxInfoString_ = 1024;  // a UCX that does not say: longer than any seen
  contextRef_ = Napi::Persistent(info[0].As<Napi::Object>());
  asyncContext_ = std::make_unique<Napi::AsyncContext>(env, "gdrpc.Worker");
  wakeup_ = std::make_unique<Wakeup>(env, fd, watchdogMs, [this] { OnWake(); });
  context_->AddWorker(this);
  State::Of(env)->counters.workers++;
  Kick();
}

Worker::~Worker() {
  FinalizerScope scope(State::Of(Env()));
  Destroy(false);
}

void Worker::CheckOpen(Napi::Env env) const {
  if (worker_ == nullptr) Throw(env, "FAILED_PRECONDITION", "the worker is closed");
}

void Worker::AddRequest(Request* request) {
  if (request->id == 0) request->id = internalId_--;
  requests_[request->id] = request;
  if (request->device) deviceWait_.Began(NowNs());
  UpdateRef();
}

void Worker::RemoveRequest(Request* request) {
  auto it = requests_.find(request->id);
  if (it != requests_.end() && it->second == request) {
    requests_.erase(it);
    if (request->device) deviceWait_.Ended();
  }
  UpdateRef();
}

void Worker::RemoveEndpoint(Endpoint* endpoint) {
  endpoints_.erase(endpoint);
  UpdateRef();
}

void Worker::RemoveListener(Listener* listener) {
  listeners_.erase(listener);
  UpdateRef();
}

void Worker::DisownEndpoint(Endpoint* endpoint) {
  for (auto& entry : requests_) {
    if (entry.second->endpoint == endpoint) entry.second->endpoint = nullptr;
  }
}

bool Worker::Guard(const std::set<ino_t>& sockets) {
  const std::vector<ListeningPort> ports = GuardSockets(sockets, *guard_);
  for (const ListeningPort& port : ports) {
    if (!port.guarded) return false;
  }
  guardShut_ += ShutUnallowed(ports, *guard_);
  return !ports.empty();
}

bool Worker::GuardPort(ino_t socket) {
  return guard_.has_value() && socket != 0 && Guard({socket});
}

// ports(): [{ address, port, guarded, kind: 'transport' | 'listener' }] of this worker's TCP ports.
Napi::Value Worker::Ports(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Napi::Array result = Napi::Array::New(env);
  uint32_t n = 0;
  auto add = [&](const ListeningPort& port, const char* kind) {
    Napi::Object entry = Napi::Object::New(env);
    entry.Set("address", port.address);
    entry.Set("port", static_cast<double>(port.port));
    entry.Set("guarded", port.guarded);
    entry.Set("kind", kind);
    result.Set(n++, entry);
  };
  if (worker_ == nullptr) return result;
  for (const ListeningPort& port : ListSockets(tcpSockets_, guard_.has_value())) add(port, "transport");
  for (Listener* listener : listeners_) {
    for (const ListeningPort& port : ListSockets({listener->socket()}, listener->guarded())) add(port, "listener");
  }
  return result;
}

int Worker::AddressVersion() {
  if (!addressVersion_.has_value() && worker_ != nullptr) {
    addressVersion_ = -1;
    ucp_worker_attr_t attr{};
    attr.field_mask = UCP_WORKER_ATTR_FIELD_ADDRESS;
    if (ucp_worker_query(worker_, &attr) == UCS_OK) {
      // The first byte of a packed worker address carries its version in its low 4 bits.
      addressVersion_ = reinterpret_cast<const uint8_t*>(attr.address)[0] & 0x0f;
      ucp_worker_release_address(worker_, attr.address);
    }
  }
  return addressVersion_.value_or(-1);
}

std::set<std::string> Worker::EndpointPeers() const {
  std::set<std::string> peers;
  for (const Endpoint* endpoint : endpoints_) peers.insert(endpoint->peer());
  return peers;
}

std::vector<ucp_conn_request_h> Worker::Forget(Endpoint* endpoint, Listener* listener) {
  std::vector<ucp_conn_request_h> dropped;
  auto forget = [&](Event& event) {
    if (endpoint != nullptr && event.kind == Event::EndpointFailed && event.endpoint == endpoint) event.endpoint = nullptr;
    if (listener != nullptr && event.kind == Event::ConnectionRequest && event.listener == listener) {
      event.listener = nullptr;
      dropped.push_back(event.connRequest);
    }
  };
  for (Event& event : events_) forget(event);
  // The batch Settle is working through (JS it runs may close a listener or an endpoint): the
  // events it has not reached yet.
  if (settling_ != nullptr) {
    for (size_t i = settlingNext_; i < settling_->size(); ++i) forget((*settling_)[i]);
  }
  return dropped;
}

void Worker::UpdateRef() {
  if (!wakeup_) return;
  bool live = !requests_.empty() || !listeners_.empty();
  for (Endpoint* endpoint : endpoints_) live = live || endpoint->connected();
  wakeup_->SetRef(live);
}

// cancel(id): rejects the request's promise with CANCELLED now and asks UCX to cancel it; the
// native request (and the memory it holds) lives until UCX reports completion.
Napi::Value Worker::Cancel(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (worker_ == nullptr) return env.Undefined();
  auto it = requests_.find(info[0].As<Napi::Number>().Uint32Value());
  if (it == requests_.end()) return env.Undefined();
  Request* request = it->second;
  request->Detach(env, "CANCELLED", std::string(request->what) + ": cancelled", UCS_ERR_CANCELED);
  ucp_request_cancel(worker_, request->ucxRequest);
  Kick();
  return env.Undefined();
}

// activity() -> how many times a wake-up has found UCX work to do (bytes moved, completions):
// sampled over time, a rate that tells streaming data from an occasional keepalive.
Napi::Value Worker::Activity(const Napi::CallbackInfo& info) {
  return Napi::Number::New(info.Env(), static_cast<double>(activeWakes_));
}

Napi::Value Worker::Stats(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Napi::Object stats = Napi::Object::New(env);
  stats.Set("liveRequests", static_cast<double>(requests_.size()));
  stats.Set("liveEndpoints", static_cast<double>(endpoints_.size()));
  stats.Set("liveListeners", static_cast<double>(listeners_.size()));
  stats.Set("takenMessages", static_cast<double>(taken_.size()));
  stats.Set("watchTakes", static_cast<double>(watchTakes_));
  stats.Set("sweptControl", static_cast<double>(sweptControl_));
  stats.Set("sweptData", static_cast<double>(sweptData_));
  stats.Set("sweepPending", static_cast<double>(sweepPending_));
  stats.Set("heldMessages", static_cast<double>(heldNow_));
  stats.Set("heldTotal", static_cast<double>(heldTotal_));
  stats.Set("liveRegions", static_cast<double>(context_ != nullptr ? context_->regionCount() : 0));
  stats.Set("kicks", static_cast<double>(kicks_));
  stats.Set("describedInline", static_cast<double>(describedInline_));
  stats.Set("payloadsAtPost", static_cast<double>(payloadsAtPost_));
  stats.Set("refusedRequests", static_cast<double>(refusedRequests_));
  stats.Set("uncheckedRequests", static_cast<double>(uncheckedRequests_));
  stats.Set("drainedSockets", static_cast<double>(drainedSockets_));
  stats.Set("drainsUnsettled", static_cast<double>(drainsUnsettled_));
  stats.Set("guardShut", static_cast<double>(guardShut_));
  stats.Set("stuckSpinLimitUs", static_cast<double>(stuckSpinNs_) / 1000);
  stats.Set("stuckSpins", static_cast<double>(stuckSpins_));
  stats.Set("stuckSleeps", static_cast<double>(stuckSleeps_));
  stats.Set("pollAdaptive", poll_.adaptive());
  stats.Set("pollWindowUs", static_cast<double>(poll_.windowNs()) / 1000);
  stats.Set("pollSpins", static_cast<double>(poll_.spins()));
  stats.Set("pollMisses", static_cast<double>(poll_.misses()));
  stats.Set("pollPreempted", static_cast<double>(poll_.preempted()));
  stats.Set("pollBusyMachine", static_cast<double>(poll_.busyMachine()));
  stats.Set("deviceSpinLimitUs", static_cast<double>(deviceWait_.limitNs()) / 1000);
  stats.Set("deviceInFlight", static_cast<double>(deviceWait_.inFlight()));
  stats.Set("deviceSpins", static_cast<double>(deviceWait_.spells()));
  stats.Set("deviceSpinLimits", static_cast<double>(deviceWait_.limited()));
  return stats;
}

Napi::Value Worker::Close(const Napi::CallbackInfo& info) {
  Destroy(true);
  return info.Env().Undefined();
}

void Worker::Destroy(bool fromJs) {
  if (worker_ == nullptr) return;
  Napi::Env env = Env();
  watch_.Disarm();  // nothing is taken, nobody told, while everything closes
  DropHeld(0, true);  // the sweep's held messages, while their endpoints are still open
  std::set<Listener*> listeners = listeners_;
  for (Listener* listener : listeners) listener->Destroy(fromJs);
  std::set<Endpoint*> endpoints = endpoints_;
  for (Endpoint* endpoint : endpoints) endpoint->Destroy(fromJs);
  std::unordered_map<uint32_t, Request*> requests = requests_;
  for (auto& entry : requests) {
    Request* request = entry.second;
    if (fromJs) request->Detach(env, "CANCELLED", std::string(request->what) + ": the worker was closed", UCS_ERR_CANCELED);
    else request->settled = true;  // no JS from finalizers and exit hooks
    ucp_request_cancel(worker_, request->ucxRequest);
  }
  for (int i = 0; i < 100 && !requests_.empty(); ++i) Flush(env);
  // What UCX has not completed by now is freed with the worker: settle our side without
  // ucp_request_free, but delete it only after ucp_worker_destroy, which can still complete these
  // requests (destroying a TCP endpoint purges its sends) and call back into them.
  requests = requests_;
  std::vector<Request*> orphans;
  for (auto& entry : requests) {
    entry.second->ucxRequest = nullptr;
    orphans.push_back(entry.second);
    entry.second->Finish(env, true);
  }
  events_.clear();
  State* state = State::Of(env);
  state->Releasing();
  wakeup_->Stop([state] { state->Released(); });
  wakeup_.reset();
  ucp_worker_destroy(worker_);
  events_.clear();  // what the destroy completed: nothing is left to settle
  for (Request* request : orphans) delete request;
  worker_ = nullptr;
  // The watch's callback and slot are the dispatcher's: held strongly, they would keep the closed
  // runtime and its buffers (8 MiB of them) alive for as long as the process lives. Let go once
  // the worker is closed: JS that ran during the close (a request's callback) could have watched
  // again while it was open. (Closed from a finalizer or the environment's teardown, they go
  // with this object, as contextRef_ does.)
  watch_.Disarm();
  watch_.slot = nullptr;
  if (fromJs) {
    watch_.callback.Reset();
    watch_.slotHolder.Reset();
  }
  context_->RemoveWorker(this);
  State::Of(env)->counters.workers--;
  if (fromJs) contextRef_.Reset();
}

}  // namespace gdrpc

// A UCP worker driven from the Node event loop (see wakeup.h), with the completion queue that
// UCX callbacks fill and the main thread drains after progress returns.
#pragma once
#include <napi.h>
#include <ucp/api/ucp.h>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <set>
#include <unordered_map>
#include <vector>
#include "conn_request_check.h"
#include "device_wait.h"
#include "poll_window.h"
#include "port_guard.h"
#include "wakeup.h"

namespace gdrpc {

/** The monotonic clock the worker's polling decisions use (ns). */
inline uint64_t NowNs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
      std::chrono::steady_clock::now().time_since_epoch()).count());
}

class Context;
class Endpoint;
class Listener;
struct Request;
struct Span;

/** Something a UCX callback recorded for the main thread. */
struct Event {
  enum Kind { RequestDone, EndpointFailed, ConnectionRequest, Taken } kind;
  Request* request = nullptr;
  Endpoint* endpoint = nullptr;
  Listener* listener = nullptr;
  ucp_conn_request_h connRequest = nullptr;
};

class Worker : public Napi::ObjectWrap<Worker> {
 public:
  static Napi::Function Define(Napi::Env env);
  explicit Worker(const Napi::CallbackInfo& info);
  ~Worker() override;

  ucp_worker_h handle() const { return worker_; }
  Context* context() const { return context_; }
  bool closed() const { return worker_ == nullptr; }
  /** Size of the longest info string ucp_request_query writes for this worker's requests. */
  size_t maxInfoString() const { return maxInfoString_; }
  void CheckOpen(Napi::Env env) const;

  // Called from UCX callbacks (inside progress): record only, never call UCX or JS.
  void Queue(Request* request) { events_.push_back({Event::RequestDone, request}); }
  void Queue(Event event) { events_.push_back(event); }

  void AddRequest(Request* request);
  void RemoveRequest(Request* request);
  void AddEndpoint(Endpoint* endpoint) { endpoints_.insert(endpoint); UpdateRef(); }
  /** "address:port" of every endpoint's peer (a closing listener leaves their connections alone). */
  std::set<std::string> EndpointPeers() const;
  /** A listener's close ended `sockets` accepted connections UCX had not delivered; `unsettled`:
   *  some were still open when its time ran out (stats: drainedSockets, drainsUnsettled). */
  /** The worker-address version this worker packs (0: v1, 1: v2; -1 when UCX would not say),
   *  asked once (conn_request_check.h). */
  int AddressVersion();
  /** A connection request's check before an endpoint is made of it (conn_request_check.h). */
  void CountRequestCheck(RequestCheck check) {
    if (check == RequestCheck::Invalid) refusedRequests_++;
    if (check == RequestCheck::Unchecked) uncheckedRequests_++;
  }
  void CountDrain(int sockets, bool unsettled) {
    drainedSockets_ += sockets;
    if (unsettled) drainsUnsettled_++;
  }
  void RemoveEndpoint(Endpoint* endpoint);
  /** The peers this worker's TCP ports admit (port_guard.h); none: anyone. */
  const std::optional<std::vector<PeerPrefix>>& guard() const { return guard_; }
  /** Guards a listener's port as the worker's own are (when they are); true when a guard is on. */
  bool GuardPort(ino_t socket);
  void AddListener(Listener* listener) { listeners_.insert(listener); UpdateRef(); }
  void RemoveListener(Listener* listener);
  /** Detaches every request from an endpoint that goes away before UCX finished with them. */
  void DisownEndpoint(Endpoint* endpoint);
  /** Drops queued events of an object that is going away; returns the dropped connection requests. */
  std::vector<ucp_conn_request_h> Forget(Endpoint* endpoint, Listener* listener);
  /** A described request that UCX completed inside its *_nbx call (stats: describedInline). */
  void CountDescribedInline() { describedInline_++; }
  /** Runs the worker on the next loop iteration. */
  void Kick() {
    kicks_++;
    if (wakeup_) wakeup_->Kick();
  }
  /** Kick(), unless this is called from a completion settled inside the wake-up's progress loop
   *  (an operation posted by a callback there): that loop progresses again, or schedules the
   *  next pass itself, before it sleeps. */
  void KickOutsideWake() { if (!inWakeLoop_) Kick(); }
  /** One progress pass, then the sweep (worker_sweep.cc): every pass goes through here. */
  unsigned Pass() {
    unsigned progressed = ucp_worker_progress(worker_);
    Sweep();
    return progressed;
  }
  /** A swept message's receive that was pending completed (worker_sweep.cc). */
  void SweepEnded() { sweepPending_--; }
  /** Recomputes whether the loop handle keeps the process alive. */
  void UpdateRef();
  /** Progress until idle and settle, without arming (used while closing). */
  void Flush(Napi::Env env);
  /** After a progress pass: an armed watch (tagWatch) takes the message it waits for, if one
   *  came, and its callback is queued; the loop is kicked to settle it when this is not the
   *  wake-up's own pass. */
  void CheckWatch();
  /** Closes everything below the worker and destroys it; `fromJs` false skips JS settling. */
  void Destroy(bool fromJs);

 private:
  Napi::Value TagRecv(const Napi::CallbackInfo& info);
  Napi::Value TagRecvInto(const Napi::CallbackInfo& info);
  Napi::Value TagProbe(const Napi::CallbackInfo& info);
  Napi::Value TagRecvTaken(const Napi::CallbackInfo& info);
  Napi::Value TagRecvTakenInto(const Napi::CallbackInfo& info);
  Napi::Value TagWatch(const Napi::CallbackInfo& info);
  Napi::Value TagUnwatch(const Napi::CallbackInfo& info);
  Napi::Value SweepOn(const Napi::CallbackInfo& info);
  Napi::Value SweepKnown(const Napi::CallbackInfo& info);
  Napi::Value SweepHold(const Napi::CallbackInfo& info);
  Napi::Value SweepHeld(const Napi::CallbackInfo& info);
  /** Drops what the sweep's rule says is no one's, from the head of UCX's queue, and takes a held
   *  tag's messages out of it into their line (worker_sweep.cc). */
  void Sweep();
  /** Receives a taken message into one byte: UCX completes it truncated, unread. */
  void Drop(ucp_tag_message_h message);
  /** Drops every message held under `tag` (all tags: `all`) and forgets its line. */
  void DropHeld(uint64_t tag, bool all = false);
  /** A message held by the sweep (a held line's oldest) that matches tag/mask, if there is one:
   *  its sender tag, length and UCX message; with `remove` it leaves its line (the caller's then). */
  bool TakeHeld(uint64_t tag, uint64_t mask, bool remove, ucp_tag_message_h* message, ucp_tag_recv_info_t* info);
  /** The oldest message that matches tag/mask: a held line's first (unless `held` is false), else
   *  UCX's queue's; with `remove` it is taken (the caller's then). Null when there is none. */
  ucp_tag_message_h Probe(uint64_t tag, uint64_t mask, bool remove, bool held, ucp_tag_recv_info_t* info);
  /** Receives a taken message into `span`, reporting through `slot` and `callback` as tagRecvInto
   *  does (tagRecvTakenInto, and tagRecvInto of a held message). */
  Napi::Value ReceiveTakenInto(Napi::Env env, ucp_tag_message_h message, const Span& span, uint32_t id, Napi::Uint32Array slot, Napi::Function callback);
  template <typename K>
  static void Count(std::unordered_map<K, uint32_t>& counts, K key, bool add) {
    if (add) {
      counts[key]++;
      return;
    }
    auto it = counts.find(key);
    if (it != counts.end() && --it->second == 0) counts.erase(it);
  }
  /** Takes the oldest message the watch matches out of UCX's unexpected queue, if there is one:
   *  kept under a new taken id, written to the watch's slot, the watch disarmed. */
  bool TakeWatched();
  /** Calls the watch's callback for a take CheckWatch queued (Settle). */
  void FireWatch();
  /** Holds a message taken out of UCX's unexpected queue until it is received; its taken id. */
  uint32_t Keep(ucp_tag_message_h message);
  /** Starts a payload receive; one pending after its *_nbx call gets one progress pass at once. */
  Napi::Value StartPayloadReceive(Napi::Env env, Request* request, ucs_status_ptr_t result);
  Napi::Value Progress(const Napi::CallbackInfo& info);
  Napi::Value Cancel(const Napi::CallbackInfo& info);
  Napi::Value Stats(const Napi::CallbackInfo& info);
  Napi::Value Ports(const Napi::CallbackInfo& info);
  /** Puts the guard on the listening `sockets` and shuts what they accepted from elsewhere before
   *  it went on; whether it found them and guarded every one it found. */
  bool Guard(const std::set<ino_t>& sockets);
  Napi::Value Activity(const Napi::CallbackInfo& info);
  Napi::Value Close(const Napi::CallbackInfo& info);

  /** The loop's wake-up: progress until idle, settle, arm (again on BUSY), or keep spinning. */
  void OnWake();
  /** Progresses until UCX is idle or, with `untilNs`, that time has come (`exhausted` then true). */
  bool ProgressUntilIdle(uint64_t untilNs = 0, bool* exhausted = nullptr);
  void Settle(Napi::Env env);

  Context* context_ = nullptr;
  Napi::ObjectReference contextRef_;
  ucp_worker_h worker_ = nullptr;
  std::unique_ptr<Wakeup> wakeup_;
  std::unique_ptr<Napi::AsyncContext> asyncContext_;
  std::vector<Event> events_;
  std::vector<Event>* settling_ = nullptr;  // the batch Settle is working through (Forget)
  size_t settlingNext_ = 0;                 // ... and the first of its events not yet handled
  std::unordered_map<uint32_t, Request*> requests_;
  std::unordered_map<uint32_t, ucp_tag_message_h> taken_;  // removed by tagProbe, not yet received
  uint32_t nextTaken_ = 1;
  /** tagWatch: the messages it takes, where it says so, whom it tells. */
  struct Watch {
    uint64_t tag = 0;
    uint64_t mask = 0;
    uint32_t* slot = nullptr;
    Napi::Reference<Napi::Value> slotHolder;
    Napi::FunctionReference callback;
    bool armed = false;  // looks after every progress pass
    bool fired = false;  // took a message; its callback is queued (Event::Taken)
    bool tellLater = false;  // ... and its event was settled where JS could not run: queued again
    /** Disarmed, nothing to tell; whether a take was waiting to be told. */
    bool Disarm() {
      const bool wasFired = fired;
      armed = fired = tellLater = false;
      return wasFired;
    }
  } watch_;
  uint64_t watchTakes_ = 0;  // messages a watch took (stats)
  /** sweep(): whether it runs, and the tags it leaves alone (sweepKnown), with their counts. */
  struct SweepRule {
    bool on = false;
    std::unordered_map<uint64_t, uint32_t> control;  // whole control tags
    std::unordered_map<uint32_t, uint32_t> data;     // payload tags' high 32 bits
  } sweep_;
  /** sweepHold(): a tag's messages the sweep takes out of UCX's queue when they are its oldest, in
   *  the order they came, so that it can look past them; `cap` bytes at most (`over` once one more
   *  would pass it: it is left in UCX's queue). Read through tagProbe, tagRecvInto and tagWatch,
   *  ahead of UCX's queue. */
  struct HeldMessage {
    ucp_tag_message_h message;
    uint64_t tag;
    uint64_t length;
  };
  struct HoldLine {
    std::deque<HeldMessage> queue;
    uint64_t bytes = 0;       // the held messages' weight: length and perMessage each
    uint64_t cap = 0;
    uint64_t perMessage = 0;
    bool on = false;
    bool over = false;
  };
  std::unordered_map<uint64_t, HoldLine> holds_;
  uint64_t heldNow_ = 0;       // messages held in all lines
  uint64_t heldTotal_ = 0;     // messages the sweep took into a line (stats)
  uint64_t sweptControl_ = 0;  // control messages the sweep dropped (stats)
  uint64_t sweptData_ = 0;     // payloads it dropped (stats)
  uint64_t sweepPending_ = 0;  // its receives UCX has not completed yet (stats)
  std::optional<int> addressVersion_;  // asked once; -1 when UCX would not say
  uint64_t refusedRequests_ = 0;
  uint64_t uncheckedRequests_ = 0;
  uint64_t drainedSockets_ = 0;
  uint64_t drainsUnsettled_ = 0;
  std::set<Endpoint*> endpoints_;
  std::set<Listener*> listeners_;
  std::set<ino_t> tcpSockets_;  // the TCP ports UCX opened with this worker (its transports' own)
  std::optional<std::vector<PeerPrefix>> guard_;
  uint64_t guardShut_ = 0;      // connections accepted before a guard went on, shut (stats)
  size_t maxInfoString_ = 0;
  PollWindow poll_{0};            // how long to keep polling after work (busyPollUs; poll_window.h)
  DeviceWait deviceWait_;         // polling while device transfers are in flight (device_wait.h)
  uint64_t activeWakes_ = 0;      // wake-up passes that found work (see activity())
  unsigned stuckBusy_ = 0;        // consecutive arms that said BUSY with nothing progressed
  uint64_t stuckSinceNs_ = 0;     // when the present BUSY-with-nothing-to-do spell began (0: none)
  uint64_t stuckSpinNs_ = 0;      // how long such a spell is progressed before sleeping (GDRPC_STUCK_SPIN_US)
  bool stuckSpinPays_ = true;     // whether the last spell ended in progress (else the next sleeps at once)
  uint64_t stuckSpins_ = 0;       // spells that ended in progress while spinning (stats)
  uint64_t stuckSleeps_ = 0;      // spells that slept kStuckRetryMs (stats)
  bool driving_ = false;
  bool inWakeLoop_ = false;       // inside OnWake's progress-and-settle loop (KickOutsideWake)
  uint64_t kicks_ = 0;            // progress passes scheduled for the next loop turn (stats)
  uint64_t describedInline_ = 0;  // described requests UCX completed inside the call (stats)
  uint64_t payloadsAtPost_ = 0;   // payload receives completed by the pass right after their post (stats)
  uint32_t internalId_ = 0xffffffffu;  // ids for requests JS cannot cancel (JS ids count up from 1)
};

}  // namespace gdrpc

// How a Worker is driven: a wake-up progresses UCX until idle, settles what UCX callbacks queued
// (JS runs there), and arms the event fd again, or keeps polling (poll_window.h, device_wait.h);
// and the progress passes JS asks for (progress(), closing).
#include "worker.h"

#include <exception>
#include <utility>
#include "endpoint.h"
#include "listener.h"
#include "request.h"
#include "state.h"

namespace gdrpc {

/** How long one wake-up may progress before it yields to the event loop. */
constexpr uint64_t kWakeBudgetNs = 2000000;
/** How soon a worker that stays BUSY with nothing to progress is looked at again. */
constexpr unsigned kStuckRetryMs = 1;

bool Worker::ProgressUntilIdle(uint64_t untilNs, bool* exhausted) {
  bool any = false;
  if (exhausted != nullptr) *exhausted = false;
  while (Pass() != 0) {
    any = true;
    if (untilNs != 0 && NowNs() >= untilNs) {
      if (exhausted != nullptr) *exhausted = true;
      break;
    }
  }
  return any;
}

void Worker::Settle(Napi::Env env) {
  // Each batch is taken off the queue before it runs: settling may cancel requests, whose callbacks
  // queue more events, and a JS exception from an event handler (an 'error' or 'close' listener)
  // must neither leave finished events queued to be finished twice nor skip the rest of the batch.
  // The first exception is rethrown once every event has been handled.
  std::exception_ptr first;
  // Settle may run inside another's batch (a worker closed from JS): that batch is restored after.
  std::vector<Event>* outer = settling_;
  size_t outerNext = settlingNext_;
  while (!events_.empty()) {
    std::vector<Event> batch;
    batch.swap(events_);
    settling_ = &batch;
    for (size_t i = 0; i < batch.size(); ++i) {
      settlingNext_ = i + 1;
      const Event event = batch[i];
      try {
        switch (event.kind) {
          case Event::RequestDone: event.request->Finish(env); break;
          case Event::EndpointFailed: if (event.endpoint) event.endpoint->OnFailed(env); break;
          case Event::ConnectionRequest:
            if (event.listener) event.listener->OnConnectionRequest(env, event.connRequest);
            break;
          case Event::Taken: FireWatch(); break;
        }
      } catch (...) {
        if (!first) first = std::current_exception();
      }
    }
  }
  settling_ = outer;
  settlingNext_ = outerNext;
  // Rethrown only where JS may run and catch it: settled from a finalizer or the environment's
  // teardown (CloseAll), an exception would leave through Node's own frames, which end the process
  // (std::terminate), and nobody is left to tell.
  if (first && State::Of(env)->JsAllowed()) std::rethrow_exception(first);
}

namespace {
/** Runs `f` when the scope is left, however it is left. */
template <typename F>
class ScopeExit {
 public:
  explicit ScopeExit(F f) : f_(std::move(f)) {}
  ~ScopeExit() { f_(); }
  ScopeExit(const ScopeExit&) = delete;
  ScopeExit& operator=(const ScopeExit&) = delete;

 private:
  F f_;
};
}  // namespace

void Worker::OnWake() {
  if (worker_ == nullptr || driving_) return;
  Napi::Env env = Env();
  Napi::HandleScope scope(env);
  driving_ = true;
  try {
    // The callback scope runs the microtasks of the promises settled here when it closes.
    Napi::CallbackScope callbackScope(env, *asyncContext_);
    // One wake-up works for a bounded time, then yields to the event loop and comes back on its
    // next turn (the idle kick): a transfer UCX keeps busy must not keep timers, deadlines and
    // keepalives from running.
    const uint64_t untilNs = NowNs() + kWakeBudgetNs;
    // Left before the callback scope closes (declared after it), on every path: the JS that runs
    // then is kicked. A loop cut short by a throw kicks too: what its callbacks posted was not.
    bool finished = false;
    ScopeExit leave([this, &finished] {
      inWakeLoop_ = false;
      if (!finished) Kick();
    });
    inWakeLoop_ = true;
    for (;;) {
      bool exhausted = false;
      bool active = ProgressUntilIdle(untilNs, &exhausted);
      CheckWatch();
      if (!events_.empty()) {
        Settle(env);
        active = true;
      }
      if (worker_ == nullptr) break;  // closed from JS while settling
      uint64_t now = NowNs();
      if (active) {
        activeWakes_++;
        stuckBusy_ = 0;
        if (stuckSinceNs_ != 0) {
          stuckSinceNs_ = 0;
          stuckSpins_++;
        }
        stuckSpinPays_ = true;
      }
      // A device transfer in flight keeps the worker polling; the window is told, and holds.
      bool spin = poll_.Update(now, active, deviceWait_.Spin(now));
      wakeup_->SetSpin(spin);
      if (spin) break;
      if (exhausted || now >= untilNs) {
        Kick();
        break;
      }
      if (active) continue;
      if (ucp_worker_arm(worker_) != UCS_ERR_BUSY) {
        stuckBusy_ = 0;
        break;
      }
      // BUSY once more although progress found nothing to do: a transport holds work that no fd
      // will announce. A CUDA copy in flight (cuda_ipc, cuda_copy) finishes in microseconds and is
      // seen only by polling: progress in place for a short spell. A transport stuck for good
      // (shared memory after a peer died mid-message) would spin a core for as long as that
      // lasts: once a spell has found nothing, the next ones sleep kStuckRetryMs at once.
      if (++stuckBusy_ >= 2) {
        if (stuckSinceNs_ == 0) stuckSinceNs_ = now;
        if (stuckSpinPays_ && now - stuckSinceNs_ < stuckSpinNs_) continue;
        stuckSpinPays_ = false;
        stuckSinceNs_ = 0;
        stuckSleeps_++;
        wakeup_->KickAfter(kStuckRetryMs);
        break;
      }
    }
    finished = true;
  } catch (const Napi::Error& error) {
    napi_fatal_exception(env, error.Value());
  }
  driving_ = false;
  // The callback scope has closed, its microtasks run (the reply of a request this wake-up found
  // has been sent): the polling window's stale machine sample is read now, off that path.
  if (worker_ != nullptr && poll_.SampleIfAsked(NowNs())) wakeup_->SetSpin(false);
}

namespace {
// Marks the worker as driving progress for a scope, restored on every path (exceptions included),
// so a throwing event handler cannot leave the worker refusing every later wake-up.
class DrivingScope {
 public:
  explicit DrivingScope(bool& flag) : flag_(flag), previous_(flag) { flag_ = true; }
  ~DrivingScope() { flag_ = previous_; }
  DrivingScope(const DrivingScope&) = delete;
  DrivingScope& operator=(const DrivingScope&) = delete;

 private:
  bool& flag_;
  bool previous_;
};
}  // namespace

void Worker::Flush(Napi::Env env) {
  if (worker_ == nullptr) return;
  DrivingScope driving(driving_);
  ProgressUntilIdle();
  CheckWatch();
  Settle(env);
}

Napi::Value Worker::Progress(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  CheckOpen(env);
  if (driving_) return Napi::Boolean::New(env, false);
  bool any = false;
  {
    DrivingScope driving(driving_);
    any = ProgressUntilIdle();
    CheckWatch();
    any = any || !events_.empty();
    Settle(env);
  }
  Kick();  // arm again from the loop, not from inside a JS call
  return Napi::Boolean::New(env, any);
}

}  // namespace gdrpc

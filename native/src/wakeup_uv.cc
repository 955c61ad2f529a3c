// Wakeup on libuv (the loop Node runs): uv_poll on the fd, a uv_timer watchdog, a uv_idle kick and
// a one-shot uv_timer for delayed retries. The uv headers come from the Node installation (see native/CMakeLists.txt).
#include "wakeup.h"
#include <uv.h>

namespace gdrpc {

const char* const Wakeup::kKind = "uv";

struct Wakeup::Handles {
  uv_poll_t poll;
  uv_timer_t timer;
  uv_idle_t idle;
  uv_timer_t retry;
  Callback onWake;
  Callback released;  // runs when the last handle is closed
  bool spin = false;
  int open = 4;  // handles not yet closed; the struct is freed when the last close callback runs
};

static void Run(Wakeup::Callback& callback) { callback(); }

Wakeup::Wakeup(Napi::Env env, int fd, unsigned watchdogMs, Callback onWake) : handles_(new Handles) {
  uv_loop_t* loop = nullptr;
  napi_get_uv_event_loop(env, &loop);
  handles_->onWake = std::move(onWake);
  uv_poll_init(loop, &handles_->poll, fd);
  uv_timer_init(loop, &handles_->timer);
  uv_idle_init(loop, &handles_->idle);
  uv_timer_init(loop, &handles_->retry);
  handles_->poll.data = handles_->timer.data = handles_->idle.data = handles_->retry.data = handles_;
  uv_poll_start(&handles_->poll, UV_READABLE, [](uv_poll_t* h, int, int) {
    Run(static_cast<Handles*>(h->data)->onWake);
  });
  if (watchdogMs > 0) {
    uv_timer_start(&handles_->timer, [](uv_timer_t* h) { Run(static_cast<Handles*>(h->data)->onWake); },
                   watchdogMs, watchdogMs);
  }
  // Only the poll handle ever keeps the process alive; the timer and the idle kick never do.
  uv_unref(reinterpret_cast<uv_handle_t*>(&handles_->timer));
  uv_unref(reinterpret_cast<uv_handle_t*>(&handles_->idle));
  uv_unref(reinterpret_cast<uv_handle_t*>(&handles_->retry));
  uv_unref(reinterpret_cast<uv_handle_t*>(&handles_->poll));
}

Wakeup::~Wakeup() { Stop(nullptr); }

void Wakeup::SetRef(bool ref) {
  if (handles_ == nullptr) return;
  uv_handle_t* poll = reinterpret_cast<uv_handle_t*>(&handles_->poll);
  if (ref) uv_ref(poll); else uv_unref(poll);
}

static void OnIdle(uv_idle_t* h) {
  Wakeup::Handles* handles = static_cast<Wakeup::Handles*>(h->data);
  if (!handles->spin) uv_idle_stop(h);
  Run(handles->onWake);
}

void Wakeup::Kick() {
  if (handles_ == nullptr) return;
  uv_idle_start(&handles_->idle, OnIdle);
}

void Wakeup::KickAfter(unsigned ms) {
  if (handles_ == nullptr) return;
  uv_timer_start(&handles_->retry, [](uv_timer_t* h) { Run(static_cast<Handles*>(h->data)->onWake); }, ms, 0);
}

void Wakeup::SetSpin(bool spin) {
  if (handles_ == nullptr) return;
  handles_->spin = spin;
  if (spin) uv_idle_start(&handles_->idle, OnIdle);
}

void Wakeup::Stop(Callback released) {
  if (handles_ == nullptr) {
    if (released) released();
    return;
  }
  handles_->released = std::move(released);
  uv_poll_stop(&handles_->poll);
  uv_timer_stop(&handles_->timer);
  uv_idle_stop(&handles_->idle);
  uv_timer_stop(&handles_->retry);
  auto onClose = [](uv_handle_t* h) {
    Handles* handles = static_cast<Handles*>(h->data);
    if (--handles->open > 0) return;
    Callback released = std::move(handles->released);
    delete handles;
    if (released) released();
  };
  uv_close(reinterpret_cast<uv_handle_t*>(&handles_->poll), onClose);
  uv_close(reinterpret_cast<uv_handle_t*>(&handles_->timer), onClose);
  uv_close(reinterpret_cast<uv_handle_t*>(&handles_->idle), onClose);
  uv_close(reinterpret_cast<uv_handle_t*>(&handles_->retry), onClose);
  handles_ = nullptr;
}

}  // namespace gdrpc

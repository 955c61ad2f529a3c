// Wakeup without libuv headers: a helper thread poll()s the worker's event fd (with the
// watchdog period as its timeout) and wakes the main thread through a Node-API thread-safe
// function; a kick is a call queued from the main thread itself. The thread never touches UCX or
// JS. It polls again only after the main thread has progressed and armed the worker, since the
// fd stays readable until then.
#include "wakeup.h"
#include <poll.h>
#include <unistd.h>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace gdrpc {

const char* const Wakeup::kKind = "thread";

enum CallKind : intptr_t { kWake = 1, kKick = 2 };

struct Wakeup::Handles {
  napi_env env = nullptr;
  napi_threadsafe_function tsfn = nullptr;
  std::thread thread;
  int fd = -1;
  int stopPipe[2] = {-1, -1};
  unsigned watchdogMs = 0;
  Callback onWake;
  Callback released;  // runs from the thread-safe function's finalizer
  std::mutex mutex;
  std::condition_variable cv;
  bool mayPoll = true;
  bool stopping = false;
  bool stopped = false;       // main thread only
  bool kickQueued = false;    // main thread only
  bool spin = false;          // main thread only

  void Loop() {
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mutex);
        cv.wait(lock, [this] { return mayPoll || stopping; });
        if (stopping) return;
        mayPoll = false;
      }
      pollfd fds[2] = {{fd, POLLIN, 0}, {stopPipe[0], POLLIN, 0}};
      int timeout = watchdogMs > 0 ? static_cast<int>(watchdogMs) : -1;
      poll(fds, 2, timeout);
      if (fds[1].revents != 0) return;
      napi_call_threadsafe_function(tsfn, reinterpret_cast<void*>(kWake), napi_tsfn_nonblocking);
    }
  }

  static void Call(napi_env, napi_value, void* context, void* data) {
    Handles* self = static_cast<Handles*>(context);
    if (self->stopped) return;
    if (reinterpret_cast<intptr_t>(data) == kKick) self->kickQueued = false;
    self->onWake();
    if (self->stopped) return;
    if (self->spin) self->QueueKick();
    if (reinterpret_cast<intptr_t>(data) == kWake) {
      std::lock_guard<std::mutex> lock(self->mutex);
      self->mayPoll = true;
      self->cv.notify_one();
    }
  }

  void QueueKick() {
    if (kickQueued || stopped) return;
    kickQueued = true;
    napi_call_threadsafe_function(tsfn, reinterpret_cast<void*>(kKick), napi_tsfn_nonblocking);
  }
};

Wakeup::Wakeup(Napi::Env env, int fd, unsigned watchdogMs, Callback onWake) : handles_(new Handles) {
  handles_->env = env;
  handles_->fd = fd;
  handles_->watchdogMs = watchdogMs;
  handles_->onWake = std::move(onWake);
  if (pipe(handles_->stopPipe) != 0) NAPI_THROW_VOID(Napi::Error::New(env, "pipe() failed"));
  napi_value name = Napi::String::New(env, "gdrpc.Worker.wakeup");
  napi_create_threadsafe_function(env, nullptr, nullptr, name, 0, 1, nullptr,
                                  [](napi_env, void*, void* context) {
                                    Handles* h = static_cast<Handles*>(context);
                                    Callback released = std::move(h->released);
                                    delete h;
                                    if (released) released();
                                  },
                                  handles_, Handles::Call, &handles_->tsfn);
  napi_unref_threadsafe_function(env, handles_->tsfn);
  handles_->thread = std::thread([h = handles_] { h->Loop(); });
}

Wakeup::~Wakeup() { Stop(nullptr); }

void Wakeup::SetRef(bool ref) {
  if (handles_ == nullptr) return;
  if (ref) napi_ref_threadsafe_function(handles_->env, handles_->tsfn);
  else napi_unref_threadsafe_function(handles_->env, handles_->tsfn);
}

void Wakeup::Kick() {
  if (handles_ != nullptr) handles_->QueueKick();
}

void Wakeup::KickAfter(unsigned) {
  // The helper thread's poll() times out every watchdog period: that is the retry here.
}

void Wakeup::SetSpin(bool spin) {
  if (handles_ == nullptr) return;
  handles_->spin = spin;
  if (spin) handles_->QueueKick();
}

void Wakeup::Stop(Callback released) {
  if (handles_ == nullptr) {
    if (released) released();
    return;
  }
  Handles* h = handles_;
  handles_ = nullptr;
  h->released = std::move(released);
  h->stopped = true;
  {
    std::lock_guard<std::mutex> lock(h->mutex);
    h->stopping = true;
    h->cv.notify_one();
  }
  ssize_t written = write(h->stopPipe[1], "x", 1);
  (void)written;
  h->thread.join();
  close(h->stopPipe[0]);
  close(h->stopPipe[1]);
  // Queued calls still arrive after this; they see `stopped`. The finalizer frees the struct.
  napi_release_threadsafe_function(h->tsfn, napi_tsfn_release);
}

}  // namespace gdrpc

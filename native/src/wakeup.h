// How the Node event loop wakes a worker up: the worker's event fd is watched by the loop, a
// watchdog timer covers missed wake-ups, and a "kick" runs the worker on the next loop turn (after
// an operation was posted, or repeatedly during a busy-poll window).
#pragma once
#include <napi.h>
#include <functional>

namespace gdrpc {

class Wakeup {
 public:
  using Callback = std::function<void()>;
  /** Which build this is: "uv" (the event loop's own handles: its check phase, where immediates
   *  run, comes between two wake-up passes) or "thread" (a helper thread and a thread-safe
   *  function, whose busy-poll passes follow each other without a loop turn). */
  static const char* const kKind;
  /** Watches `fd` for readability and starts the watchdog; `onWake` runs on the main thread. */
  Wakeup(Napi::Env env, int fd, unsigned watchdogMs, Callback onWake);
  ~Wakeup();
  /** Keeps the process alive (ref) only while the worker has live work. */
  void SetRef(bool ref);
  /** Runs onWake on the next loop iteration. */
  void Kick();
  /** Runs onWake once after `ms` milliseconds (a retry that must not spin); the thread variant
   *  leaves it to its watchdog. */
  void KickAfter(unsigned ms);
  /** Keeps running onWake on every loop iteration (busy poll) until set false. */
  void SetSpin(bool spin);
  /** Stops watching (before the fd is closed). The handles are released asynchronously, by code of
   *  this library on the event loop: `released` runs once that is over (environment teardown
   *  waits for it, see State). */
  void Stop(Callback released);

  struct Handles;

 private:
  Handles* handles_;
};

}  // namespace gdrpc

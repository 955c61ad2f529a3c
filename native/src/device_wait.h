// Whether a worker keeps polling because a transfer in device memory is in flight. UCX sees a CUDA
// copy end by polling its event; a worker asleep on its event fd hears of it only when a host
// function the driver runs on the copy's stream writes that fd and the process wakes, and on the
// H200 machine a worker that slept through a copy paid for it: 1 GiB between two processes on one
// GPU took 1,223-1,439 µs a call with the adaptive window against 787-793 µs with both processes
// polling (docs/binding.md).
// So while such a transfer is in flight the worker polls, for up to `limitNs` after the last one
// began: a peer that announces a tensor and never sends it costs at most that much spinning, and
// so does a request left pending for good; after that, and for a transfer that lasts longer, the
// worker sleeps on its fd as before.
#pragma once
#include <cstdint>

namespace gdrpc {

class DeviceWait {
 public:
  static constexpr uint64_t kDefaultLimitNs = 5000000;

  /** `limitNs` 0: never poll for device transfers. */
  explicit DeviceWait(uint64_t limitNs = 0) : limitNs_(limitNs) {}

  /** A device transfer began at `nowNs`. */
  void Began(uint64_t nowNs) {
    inFlight_++;
    beganNs_ = nowNs;
  }

  /** A device transfer ended. An end does not renew the limit: the transfers left may be ones
   *  that never end. */
  void Ended() { inFlight_--; }

  /** Whether to keep polling on the next loop turn at `nowNs`. */
  bool Spin(uint64_t nowNs) {
    bool spin = limitNs_ > 0 && inFlight_ > 0 && nowNs - beganNs_ < limitNs_;
    if (spin && !spinning_) spells_++;
    if (!spin && spinning_ && inFlight_ > 0) limited_++;
    spinning_ = spin;
    return spin;
  }

  uint64_t limitNs() const { return limitNs_; }
  unsigned inFlight() const { return inFlight_; }  // device transfers under way
  uint64_t spells() const { return spells_; }    // polling spells begun for device transfers
  uint64_t limited() const { return limited_; }  // spells that ended at the limit, transfers still in flight

 private:
  uint64_t limitNs_;
  unsigned inFlight_ = 0;
  uint64_t beganNs_ = 0;
  bool spinning_ = false;
  uint64_t spells_ = 0;
  uint64_t limited_ = 0;
};

}  // namespace gdrpc

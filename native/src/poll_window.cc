#include "poll_window.h"

#include <sys/resource.h>

#include <algorithm>

namespace gdrpc {

namespace {
/** Times this thread was preempted so far (involuntary context switches). */
long InvoluntarySwitches() {
  struct rusage usage {};
  return getrusage(RUSAGE_THREAD, &usage) == 0 ? usage.ru_nivcsw : 0;
}
}  // namespace

PollWindow::PollWindow(int64_t windowNs)
    : adaptive_(windowNs == kAdaptive), fixedNs_(windowNs > 0 ? static_cast<uint64_t>(windowNs) : 0) {}

bool PollWindow::Update(uint64_t nowNs, bool active) {
  if (!adaptive_) {
    if (active) lastActivityNs_ = nowNs;
    return fixedNs_ > 0 && nowNs - lastActivityNs_ < fixedNs_;
  }
  if (active) {
    uint64_t gap = lastActivityNs_ == 0 ? UINT64_MAX : nowNs - lastActivityNs_;
    if (gap <= kMaxWindowNs) {
      windowNs_ = std::max(windowNs_ - windowNs_ / 8, std::min(2 * gap, kMaxWindowNs));
    } else {
      windowNs_ /= 2;
      if (windowNs_ < kMinWindowNs) windowNs_ = 0;
    }
    lastActivityNs_ = nowNs;
  }
  bool want = windowNs_ > 0 && nowNs >= cooldownUntilNs_ && nowNs - lastActivityNs_ < windowNs_;
  if (want && !spinning_) {
    spinning_ = true;
    spins_++;
    checkedNs_ = nowNs;
    switchesAtCheck_ = InvoluntarySwitches();
  } else if (want && nowNs - checkedNs_ >= kCheckEveryNs) {
    // A spin kept alive by a stream of work: look for preemption now and then all the same.
    if (Preempted()) {
      EndSpin(nowNs, false);
      return false;
    }
    checkedNs_ = nowNs;
  } else if (!want && spinning_) {
    EndSpin(nowNs, !active);
  }
  return want;
}

void PollWindow::EndSpin(uint64_t nowNs, bool ranOut) {
  spinning_ = false;
  if (ranOut) {
    misses_++;
    windowNs_ /= 2;
    if (windowNs_ < kMinWindowNs) windowNs_ = 0;
  }
  if (Preempted()) {
    preempted_++;
    cooldownUntilNs_ = nowNs + cooldownNs_;
    cooldownNs_ = std::min(cooldownNs_ * 2, kMaxCooldownNs);
  } else {
    cooldownNs_ = kMinCooldownNs;
  }
}

bool PollWindow::Preempted() const {
  return InvoluntarySwitches() != switchesAtCheck_;
}

}  // namespace gdrpc

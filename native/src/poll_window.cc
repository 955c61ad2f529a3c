#include "poll_window.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

namespace gdrpc {

namespace {
/** The machine's idle and total CPU time so far, in ticks (/proc/stat); false where unreadable. */
bool CpuTicks(unsigned long long* idle, unsigned long long* total) {
  FILE* file = std::fopen("/proc/stat", "r");
  if (file == nullptr) return false;
  unsigned long long v[8] = {};
  int n = std::fscanf(file, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7]);
  std::fclose(file);
  if (n < 5) return false;
  *idle = v[3] + v[4];  // idle, iowait
  *total = 0;
  for (int i = 0; i < n; ++i) *total += v[i];
  return true;
}

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
  if (want && !spinning_ && !IdleCore(nowNs)) {
    busyMachine_++;
    want = false;
  }
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

bool PollWindow::IdleCore(uint64_t nowNs) {
  if (sampledNs_ != 0 && nowNs - sampledNs_ < kIdleSampleNs) return idleCore_;
  unsigned long long idle = 0, total = 0;
  if (!CpuTicks(&idle, &total)) return idleCore_ = true;
  if (sampledNs_ != 0 && total > totalTicks_) {
    static const long cores = std::max(1L, sysconf(_SC_NPROCESSORS_ONLN));
    // Idle cores over the period: the idle share of all ticks times the number of cores.
    double idleCores = static_cast<double>(idle - idleTicks_) / static_cast<double>(total - totalTicks_) * static_cast<double>(cores);
    idleCore_ = idleCores >= 0.5;
  }
  sampledNs_ = nowNs;
  idleTicks_ = idle;
  totalTicks_ = total;
  return idleCore_;
}

bool PollWindow::Preempted() const {
  return InvoluntarySwitches() != switchesAtCheck_;
}

}  // namespace gdrpc

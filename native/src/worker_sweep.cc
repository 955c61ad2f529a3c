// The sweep of a Worker: messages under tags that name no connection, dropped inside the binding
// right after the progress pass that brought them in (docs/binding.md "The sweep"). UCX reads its
// sockets into receive buffers of its own as fast as they deliver and keeps a message there until
// someone receives it; the dispatcher's reading in JavaScript came behind a flood under made-up
// keys by gigabytes, and UCX keeps that memory once its queue has shrunk (docs/security.md). Swept
// after every pass, what no one's message comes with is dropped before the next pass reads more;
// the sweep stops at the oldest message that is someone's (docs/security.md, Open gaps).
#include "worker.h"

#include <algorithm>

namespace gdrpc {

namespace {
constexpr uint64_t kControlBit = 1ull << 63;

/** A swept message's receive completed after its call (a rendezvous, or eager fragments whose
 *  rest came later): UCX's request is freed. One whose sender stopped mid-message is never
 *  completed, not even when the sender's endpoint closes (a helper session's review): it stays
 *  counted in sweepPending, and UCX reports its request at the worker's destroy. */
void SweptLater(void* request, ucs_status_t, const ucp_tag_recv_info_t*, void* user) {
  static_cast<Worker*>(user)->SweepEnded();
  ucp_request_free(request);
}

/** Where swept messages are received: one byte, so UCX completes them truncated, unread. */
uint8_t sweepSink[1];
}  // namespace

void Worker::Drop(ucp_tag_message_h message) {
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_DATATYPE |
                       UCP_OP_ATTR_FIELD_MEMORY_TYPE;
  param.cb.recv = SweptLater;
  param.user_data = this;
  param.datatype = ucp_dt_make_contig(1);
  param.memory_type = UCS_MEMORY_TYPE_HOST;
  ucs_status_ptr_t result = ucp_tag_msg_recv_nbx(worker_, sweepSink, sizeof(sweepSink), message, &param);
  if (result != nullptr && !UCS_PTR_IS_ERR(result)) sweepPending_++;
}

void Worker::Sweep() {
  if (!sweep_.on || worker_ == nullptr) return;
  for (;;) {
    // The oldest message of any tag: UCX finds it at the head of its list. A probe with any other
    // mask walks that list from the head until a message matches (ucp_tag_unexp_search), which a
    // first version paid on every pass: a line of one kind of message looked at past a backlog of
    // the other kind cost 3.9 ms a pass behind 200,000 queued messages (a helper session's review).
    ucp_tag_recv_info_t probe{};
    if (ucp_tag_probe_nb(worker_, 0, 0, 0, &probe) == nullptr) return;
    const uint64_t sender = probe.sender_tag;
    const bool control = (sender & kControlBit) != 0;
    if (control ? sweep_.control.count(sender) != 0 : sweep_.data.count(static_cast<uint32_t>(sender >> 32)) != 0) {
      // Someone's. A held tag's message is taken into its line, within its cap, and the look goes
      // on past it; any other ends the look: the dispatcher reads it, and what is behind it waits
      // for a pass after it was taken (UCX shows no message past the oldest one without that walk).
      auto hold = holds_.find(sender);
      if (hold == holds_.end() || !hold->second.on) return;
      HoldLine& line = hold->second;
      const uint64_t weight = probe.length + line.perMessage;
      if (line.bytes + weight > line.cap) {
        line.over = true;
        return;
      }
      ucp_tag_message_h message = ucp_tag_probe_nb(worker_, sender, ~0ull, 1, &probe);
      if (message == nullptr) return;
      line.queue.push_back({message, sender, probe.length});
      line.bytes += weight;
      heldNow_++;
      heldTotal_++;
      continue;
    }
    // The oldest message under its exact tag is the oldest of all, found through UCX's hash.
    ucp_tag_message_h message = ucp_tag_probe_nb(worker_, sender, ~0ull, 1, &probe);
    if (message == nullptr) return;
    if (control) sweptControl_++;
    else sweptData_++;
    Drop(message);
  }
}

bool Worker::TakeHeld(uint64_t tag, uint64_t mask, bool remove, ucp_tag_message_h* message, ucp_tag_recv_info_t* info) {
  if (heldNow_ == 0) return false;
  auto it = holds_.end();
  if (mask == ~0ull) {
    it = holds_.find(tag);
  } else {
    // Lines are few (connections whose reading waits on a message): the first that matches.
    for (it = holds_.begin(); it != holds_.end(); ++it) {
      if (!it->second.queue.empty() && (it->first & mask) == (tag & mask)) break;
    }
  }
  if (it == holds_.end() || it->second.queue.empty()) return false;
  HoldLine& line = it->second;
  const HeldMessage held = line.queue.front();
  *message = held.message;
  info->sender_tag = held.tag;
  info->length = held.length;
  if (!remove) return true;
  line.queue.pop_front();
  line.bytes -= held.length + line.perMessage;
  heldNow_--;
  if (!line.on && line.queue.empty()) holds_.erase(it);
  return true;
}

void Worker::DropHeld(uint64_t tag, bool all) {
  for (auto it = holds_.begin(); it != holds_.end();) {
    if (!all && it->first != tag) {
      ++it;
      continue;
    }
    for (const HeldMessage& held : it->second.queue) {
      sweptControl_++;
      if (worker_ != nullptr) Drop(held.message);
    }
    heldNow_ -= it->second.queue.size();
    it = holds_.erase(it);
  }
}

// sweep(on: boolean): from now on (or no longer), after every progress pass, the oldest unexpected
// message is dropped unread while its tag is not one sweepKnown named, and the next one looked at.
Napi::Value Worker::SweepOn(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  CheckOpen(env);
  sweep_.on = info[0].ToBoolean().Value();
  return env.Undefined();
}

// sweepKnown(controlTag: bigint, dataWord: number, known: boolean): the control tag, and payload
// tags whose high 32 bits are `dataWord` (0: none), are someone's (or, with `known` false, no
// longer). Counted: a tag named twice is known until forgotten twice.
Napi::Value Worker::SweepKnown(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  bool lossless = true;
  const uint64_t control = info[0].As<Napi::BigInt>().Uint64Value(&lossless);
  const uint32_t data = info[1].As<Napi::Number>().Uint32Value();
  const bool known = info[2].ToBoolean().Value();
  Count(sweep_.control, control, known);
  if (data != 0) Count(sweep_.data, data, known);
  // Its messages held in a line are no one's now.
  if (!known && sweep_.control.count(control) == 0) DropHeld(control);
  return env.Undefined();
}

// sweepHold(controlTag: bigint, capBytes: number, perMessage: number): from now on the sweep takes
// the tag's messages out of UCX's queue when they are its oldest, into a line of their own (read
// first by tagProbe, tagRecvInto and tagWatch), so that it can look past them: `capBytes` at most,
// each weighing its length and `perMessage` (which stays what it was while the line has messages),
// past which it leaves the next one where it is and says `over` (sweepHeld). 0: no more are taken
// (those held stay until read, or the tag is forgotten).
Napi::Value Worker::SweepHold(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  bool lossless = true;
  const uint64_t tag = info[0].As<Napi::BigInt>().Uint64Value(&lossless);
  const double cap = info[1].As<Napi::Number>().DoubleValue();
  if (cap > 0) {
    HoldLine& line = holds_[tag];
    line.on = true;
    line.over = false;
    line.cap = static_cast<uint64_t>(cap);
    // The messages held are weighed as they were taken.
    if (line.queue.empty()) line.perMessage = static_cast<uint64_t>(std::max(0.0, info[2].IsNumber() ? info[2].As<Napi::Number>().DoubleValue() : 0.0));
    Sweep();  // what waits at the head under the tag now, if the worker is swept
    return env.Undefined();
  }
  auto it = holds_.find(tag);
  if (it == holds_.end()) return env.Undefined();
  it->second.on = false;
  it->second.over = false;
  if (it->second.queue.empty()) holds_.erase(it);
  return env.Undefined();
}

// sweepHeld(controlTag: bigint) -> {messages, bytes, over}: the tag's line.
Napi::Value Worker::SweepHeld(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  bool lossless = true;
  const uint64_t tag = info[0].As<Napi::BigInt>().Uint64Value(&lossless);
  Napi::Object held = Napi::Object::New(env);
  auto it = holds_.find(tag);
  held.Set("messages", static_cast<double>(it == holds_.end() ? 0 : it->second.queue.size()));
  held.Set("bytes", static_cast<double>(it == holds_.end() ? 0 : it->second.bytes));
  held.Set("over", it != holds_.end() && it->second.over);
  return held;
}

}  // namespace gdrpc

// The tag receives of a Worker: a receive posted with a tag and mask, the probe that takes
// messages out of UCX's unexpected queue (the dispatcher's drain of payloads that came before
// their frame), and the receive of such a taken message. Progress and settling are worker_progress.cc's.
#include "worker.h"

#include <algorithm>
#include <iterator>

#include "request.h"
#include "state.h"
#include "status.h"

namespace gdrpc {

namespace {
/** A (tag: bigint, mask: bigint) pair of arguments, from `first` on. */
struct TagMask {
  uint64_t tag = 0;
  uint64_t mask = 0;
};

TagMask TagMaskArguments(const Napi::CallbackInfo& info, size_t first) {
  bool lossless = true;
  return {info[first].As<Napi::BigInt>().Uint64Value(&lossless), info[first + 1].As<Napi::BigInt>().Uint64Value(&lossless)};
}

/** The arguments both receives start with: (target, offset, length, tag: bigint, mask: bigint). */
struct ReceiveArgs {
  Span span;
  uint64_t tag = 0;
  uint64_t mask = 0;
};

ReceiveArgs ReceiveArguments(Napi::Env env, const Napi::CallbackInfo& info) {
  const TagMask match = TagMaskArguments(info, 3);
  return {ResolveSpan(env, info[0], info[1], info[2]), match.tag, match.mask};
}

/** A slot argument (tagRecvInto, tagRecvTakenInto, tagWatch): a Uint32Array of at least `words`. */
Napi::Uint32Array SlotArgument(Napi::Env env, Napi::Value value, size_t words) {
  if (!value.IsTypedArray() || value.As<Napi::TypedArray>().TypedArrayType() != napi_uint32_array ||
      value.As<Napi::TypedArray>().ElementLength() < words) {
    Throw(env, "INVALID_ARGUMENT", "slot must be a Uint32Array of at least " + std::to_string(words) + " words");
  }
  return value.As<Napi::Uint32Array>();
}

/** A callback argument (the slot receives' and the watch's). */
Napi::Function CallbackArgument(Napi::Env env, Napi::Value value) {
  if (!value.IsFunction()) Throw(env, "INVALID_ARGUMENT", "callback must be a function");
  return value.As<Napi::Function>();
}
}  // namespace

// tagRecv(target, offset, length, tag: bigint, mask: bigint, id, completed?, describe?) -> Promise<{senderTag, length}>
Napi::Value Worker::TagRecv(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  CheckOpen(env);
  ReceiveArgs into = ReceiveArguments(env, info);
  Request* request = new Request(this, nullptr, RequestKind::Recv, info[5].As<Napi::Number>().Uint32Value(), env);
  request->OnCompleted(info[6]);
  request->Describe(info[7]);
  ucp_request_param_t param{};
  request->Prepare(param, &into.span);
  return StartPayloadReceive(env, request, ucp_tag_recv_nbx(worker_, into.span.address, into.span.length, into.tag, into.mask, &param));
}

// tagRecvInto(target, offset, length, tag: bigint, mask: bigint, id, slot: Uint32Array(4), callback)
// -> boolean: a receive that makes no promise and no object (the dispatcher's control messages).
// True when a message was received inside the call, its sender tag and length in `slot`; false
// while pending: `callback()` once received (slot written first), `callback(error)` if it failed.
// A cancelled receive calls nothing. An immediate failure is thrown.
Napi::Value Worker::TagRecvInto(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  CheckOpen(env);
  ReceiveArgs into = ReceiveArguments(env, info);
  uint32_t id = info[5].As<Napi::Number>().Uint32Value();
  Napi::Uint32Array slot = SlotArgument(env, info[6], 4);
  Napi::Function callback = CallbackArgument(env, info[7]);
  // A message the sweep holds for this tag is older than any in UCX's queue: it comes first.
  ucp_tag_message_h held = nullptr;
  ucp_tag_recv_info_t heldInfo{};
  if (TakeHeld(into.tag, into.mask, true, &held, &heldInfo)) return ReceiveTakenInto(env, held, into.span, id, slot, callback);
  Request* request = new Request(this, nullptr, RequestKind::Recv, id, env);
  request->ReportInto(slot, callback);
  ucp_request_param_t param{};
  request->Prepare(param, &into.span);
  return request->Start(ucp_tag_recv_nbx(worker_, into.span.address, into.span.length, into.tag, into.mask, &param), "tag receive");
}

ucp_tag_message_h Worker::Probe(uint64_t tag, uint64_t mask, bool remove, bool held, ucp_tag_recv_info_t* info) {
  // The sweep's held messages (sweepHold) are older than those of their tag in UCX's queue.
  ucp_tag_message_h message = nullptr;
  if (held && TakeHeld(tag, mask, remove, &message, info)) return message;
  return ucp_tag_probe_nb(worker_, tag, mask, remove ? 1 : 0, info);
}

// tagProbe(tag, mask, remove, queueOnly?) -> {senderTag, length, taken?} | null. With `remove` the
// message leaves UCX's unexpected queue and is held here under the id `taken` until tagRecvTaken.
// The sweep's held lines are looked at first, unless `queueOnly`.
Napi::Value Worker::TagProbe(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  CheckOpen(env);
  const auto [tag, mask] = TagMaskArguments(info, 0);
  int remove = info.Length() > 2 && info[2].ToBoolean().Value() ? 1 : 0;
  // queueOnly: UCX's queue alone, not the sweep's held lines (what is at its head now).
  const bool held = !(info.Length() > 3 && info[3].ToBoolean().Value());
  // A message is taken only while no completion waits to be handed to JS: one of them may be the
  // receive of the frame that announces this message (a peer's frame precedes its payloads), and
  // taking the payload first would make it look unannounced. The loop settles them; probe later.
  if (remove != 0 && !events_.empty()) {
    Kick();
    return env.Null();
  }
  ucp_tag_recv_info_t probe{};
  ucp_tag_message_h message = Probe(tag, mask, remove != 0, held, &probe);
  if (message == nullptr) {
    Pass();  // a probe alone does not move messages in; one pass may
    CheckWatch();
    if (!events_.empty()) {
      Kick();  // completions that pass queued are settled from the loop
      if (remove != 0) return env.Null();
    }
    // The pass's sweep may have taken the message into a held line.
    message = Probe(tag, mask, remove != 0, held, &probe);
    if (message == nullptr) return env.Null();
  }
  Napi::Object result = Napi::Object::New(env);
  result.Set("senderTag", Napi::BigInt::New(env, static_cast<uint64_t>(probe.sender_tag)));
  result.Set("length", Napi::Number::New(env, static_cast<double>(probe.length)));
  if (remove != 0) result.Set("taken", Napi::Number::New(env, Keep(message)));
  return result;
}

// tagRecvTaken(taken, target, offset, length, id, completed?, describe?) -> Promise<{senderTag, length}>: receives a
// message that tagProbe removed from the unexpected queue.
Napi::Value Worker::TagRecvTaken(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  CheckOpen(env);
  auto it = taken_.find(info[0].As<Napi::Number>().Uint32Value());
  if (it == taken_.end()) Throw(env, "NOT_FOUND", "no taken message with this id (already received)");
  ucp_tag_message_h message = it->second;
  Span span = ResolveSpan(env, info[1], info[2], info[3]);
  taken_.erase(it);
  Request* request = new Request(this, nullptr, RequestKind::Recv, info[4].As<Napi::Number>().Uint32Value(), env);
  request->OnCompleted(info[5]);
  request->Describe(info[6]);
  ucp_request_param_t param{};
  request->Prepare(param, &span);
  return StartPayloadReceive(env, request, ucp_tag_msg_recv_nbx(worker_, span.address, span.length, message, &param));
}

// tagRecvTakenInto(taken, target, offset, length, id, slot: Uint32Array(4), callback) -> boolean:
// receives a message tagWatch or tagProbe took, reporting as tagRecvInto does (the dispatcher's
// control messages).
Napi::Value Worker::TagRecvTakenInto(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  CheckOpen(env);
  auto it = taken_.find(info[0].As<Napi::Number>().Uint32Value());
  if (it == taken_.end()) Throw(env, "NOT_FOUND", "no taken message with this id (already received)");
  Span span = ResolveSpan(env, info[1], info[2], info[3]);
  uint32_t id = info[4].As<Napi::Number>().Uint32Value();
  Napi::Uint32Array slot = SlotArgument(env, info[5], 4);
  Napi::Function callback = CallbackArgument(env, info[6]);
  ucp_tag_message_h message = it->second;
  taken_.erase(it);
  return ReceiveTakenInto(env, message, span, id, slot, callback);
}

Napi::Value Worker::ReceiveTakenInto(Napi::Env env, ucp_tag_message_h message, const Span& span, uint32_t id, Napi::Uint32Array slot, Napi::Function callback) {
  Request* request = new Request(this, nullptr, RequestKind::Recv, id, env);
  ucp_request_param_t param{};
  // Most taken messages are whole and received inside the call: the JS references a pending
  // receive needs (its buffer, slot and callback) are made only for one that is pending.
  request->Prepare(param, &span, false);
  ucs_status_ptr_t result = ucp_tag_msg_recv_nbx(worker_, span.address, span.length, message, &param);
  if (result == nullptr) {
    request->slot = slot.Data();
    request->WriteSlot();
    delete request;
    return Napi::Boolean::New(env, true);
  }
  request->Hold(span);
  request->ReportInto(slot, callback);
  return request->Start(result, "tag receive");
}

// tagWatch(tag, mask, slot: Uint32Array(5), callback) -> boolean: takes the oldest message that
// matches out of UCX's unexpected queue, now or once one comes (after a progress pass), without
// receiving it: its sender tag, length and taken id (for tagRecvTakenInto) go to `slot`. True when
// one was taken inside the call; false while the watch waits, `callback()` once it took one (a
// call while a take waits to be told changes nothing). One watch at a time, one message a watch:
// another call re-arms it. Unlike a posted receive, which
// UCX matches to whatever message comes first and cannot give up once matched (a rendezvous whose
// sender stops holds it for good), the caller sees who sent a message before it receives a byte.
Napi::Value Worker::TagWatch(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  CheckOpen(env);
  const TagMask match = TagMaskArguments(info, 0);
  Napi::Uint32Array slot = SlotArgument(env, info[2], 5);
  Napi::Function callback = CallbackArgument(env, info[3]);
  watch_.tag = match.tag;
  watch_.mask = match.mask;
  // The dispatcher passes the same slot and callback every time: their references are kept.
  if (watch_.slotHolder.IsEmpty() || !watch_.slotHolder.Value().StrictEquals(slot)) {
    watch_.slotHolder = Napi::Persistent(static_cast<Napi::Value>(slot));
    watch_.slot = slot.Data();
  }
  if (watch_.callback.IsEmpty() || !watch_.callback.Value().StrictEquals(callback)) {
    watch_.callback = Napi::Persistent(callback);
  }
  // A take already queued to be told is told as before (the slot holds it): nothing new now.
  if (watch_.fired) return Napi::Boolean::New(env, false);
  watch_.armed = true;
  return Napi::Boolean::New(env, TakeWatched());
}

// tagUnwatch() -> boolean: disarms the watch. True when it had taken a message not yet told: the
// slot holds it, and it is the caller's now (the callback is not called).
Napi::Value Worker::TagUnwatch(const Napi::CallbackInfo& info) {
  return Napi::Boolean::New(info.Env(), watch_.Disarm());
}

uint32_t Worker::Keep(ucp_tag_message_h message) {
  uint32_t id = nextTaken_++;
  if (nextTaken_ == 0) nextTaken_ = 1;
  taken_[id] = message;
  return id;
}

bool Worker::TakeWatched() {
  ucp_tag_recv_info_t probe{};
  ucp_tag_message_h message = Probe(watch_.tag, watch_.mask, true, true, &probe);
  if (message == nullptr) return false;
  watchTakes_++;
  watch_.armed = false;
  WriteTagWords(watch_.slot, probe.sender_tag, probe.length);
  watch_.slot[4] = Keep(message);
  return true;
}

void Worker::CheckWatch() {
  if (watch_.tellLater) {
    watch_.tellLater = false;
    Queue(Event{Event::Taken});
    return;
  }
  if (!watch_.armed || worker_ == nullptr || !TakeWatched()) return;
  watch_.fired = true;
  Queue(Event{Event::Taken});
  KickOutsideWake();
}

void Worker::FireWatch() {
  if (!watch_.fired) return;  // unwatched since
  if (!State::Of(Env())->JsAllowed()) {
    // Settled where JS may not run (a finalizer's close): told from the loop's next wake-up.
    watch_.tellLater = true;
    Kick();
    return;
  }
  watch_.fired = false;
  watch_.callback.Value().Call({});
}

Napi::Value Worker::StartPayloadReceive(Napi::Env env, Request* request, ucs_status_ptr_t result) {
  const bool pending = result != nullptr && !UCS_PTR_IS_ERR(result);
  Napi::Value promise = request->Start(result, "tag receive");
  if (!pending || worker_ == nullptr) return promise;
  // A payload's receive is posted after its frame was handled in JS, and its bytes (or, for a
  // rendezvous, the sender's RTS) usually came in meanwhile but lie in the transport until the
  // worker is progressed: posted, the receive waits for the next wake-up's pass. One pass here
  // matches them now, and a receive that pass completed settles before this call returns, as one
  // UCX completed inside ucp_tag_recv_nbx does. Register kicked the loop: it settles whatever
  // else the pass completed, and arms the worker again.
  Pass();
  CheckWatch();
  if (request->status == UCS_INPROGRESS) return promise;
  // Its completion was queued by this pass, after whatever was queued before: look from the end.
  auto done = std::find_if(events_.rbegin(), events_.rend(), [request](const Event& event) {
    return event.kind == Event::RequestDone && event.request == request;
  });
  if (done == events_.rend()) return promise;
  events_.erase(std::next(done).base());
  payloadsAtPost_++;
  request->Finish(env);
  return promise;
}

}  // namespace gdrpc

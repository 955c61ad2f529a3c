// The sweep of a Worker: messages under tags that name no connection, dropped inside the binding
// right after the progress pass that brought them in (docs/binding.md "The sweep"). UCX reads its
// sockets into receive buffers of its own as fast as they deliver and keeps a message there until
// someone receives it; the dispatcher's reading in JavaScript came behind a flood under made-up
// keys by gigabytes, and UCX keeps that memory once its queue has shrunk (docs/security.md). Swept
// after every pass, what no one's message comes with is dropped before the next pass reads more;
// the sweep stops at the oldest message that is someone's (docs/security.md, Open gaps).
#include "worker.h"

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
    // The oldest message is someone's: the dispatcher reads it, and what is behind it waits for a
    // pass after it was taken (UCX shows no message past the oldest one without that walk).
    if ((sender & kControlBit) != 0 ? sweep_.control.count(sender) != 0 : sweep_.data.count(static_cast<uint32_t>(sender >> 32)) != 0) return;
    // The oldest message under its exact tag is the oldest of all, found through UCX's hash.
    ucp_tag_message_h message = ucp_tag_probe_nb(worker_, sender, ~0ull, 1, &probe);
    if (message == nullptr) return;
    if ((sender & kControlBit) != 0) sweptControl_++;
    else sweptData_++;
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
  return env.Undefined();
}

}  // namespace gdrpc

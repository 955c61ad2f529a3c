// UCX opens its sockets, epoll and event descriptors without FD_CLOEXEC, so every process this
// one starts (child_process.spawn, which passes only the descriptors its stdio names) inherited
// them: a child outliving its parent kept the parent's listening port, and a restarted server
// could not listen there until the child ended. libuv, and so Node, opens everything of its own
// with close-on-exec: in a Node process a descriptor without it is one a library left so.
#pragma once

namespace gdrpc {

/** Marks close-on-exec every descriptor above stderr with one close_range(CLOSE_RANGE_CLOEXEC)
 *  (returns -1: how many were new is not known); where the kernel lacks it, every socket and
 *  anonymous-inode descriptor (epoll, eventfd, timerfd) that lacks the flag, by a scan of
 *  /proc/self/fd (returns how many it marked). Runs after UCX made some (a worker, a listener, a
 *  connection's lanes). */
int CloseOnExec();

}  // namespace gdrpc

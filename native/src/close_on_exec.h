// UCX opens its sockets, epoll and event descriptors without FD_CLOEXEC, so every process this
// one starts (child_process.spawn, which passes only the descriptors its stdio names) inherited
// them: a child outliving its parent kept the parent's listening port, and a restarted server
// could not listen there until the child ended. libuv, and so Node, opens everything of its own
// with close-on-exec: in a Node process a descriptor without it is one a library left so.
#pragma once

namespace gdrpc {

/** Marks close-on-exec every socket and anonymous-inode descriptor (epoll, eventfd, timerfd)
 *  above stderr that lacks it; returns how many it marked. Runs after UCX made some (a worker,
 *  a listener, a connection's lanes). */
int CloseOnExec();

}  // namespace gdrpc

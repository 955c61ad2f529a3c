// A connection request's client-written bytes, checked before UCX parses them. UCX 1.22 reads the
// private data a client sends with its request (the sockaddr data and the client's packed worker
// address) only when the server makes an endpoint from the request, and aborts the whole process
// on an always-on assertion when that address carries a version it does not know (address.c,
// ucp_address_unpack_header): one 80-byte TCP message from anyone who can reach the port, before
// any admission. The check refuses such a request first. It reads UCX's private layout of a
// request, so it runs only on the UCX version whose layout it knows, and only once the request
// itself confirms that layout (docs/security.md "Connection requests").
#pragma once
#include <sys/socket.h>
#include <ucp/api/ucp.h>
#include <string>

namespace gdrpc {

enum class RequestCheck {
  Valid,     // the headers UCX would assert on are ones it takes
  Invalid,   // UCX would abort on it, or refuse it: reject without making an endpoint
  Unchecked  // another UCX version, or a layout this code does not recognise
};

/** Checks `request`, whose client address UCX reported as `client` (ucp_conn_request_query).
 *  `ownVersion` is the worker-address version this process packs (0: v1, 1: v2; -1 unknown): a
 *  peer of the same deployment packs the same, and a v2 address can make UCX 1.22 abort further
 *  in (a segment size of 0 in its interface attributes: an always-on assertion in
 *  ucp_ep_config_init), so a v2 address is taken only where this process packs v2 itself. `why`
 *  says what is wrong with an Invalid one. */
RequestCheck CheckConnRequest(ucp_conn_request_h request, const sockaddr_storage& client, int ownVersion, std::string* why);

}  // namespace gdrpc

#include "conn_request_check.h"
#include <netinet/in.h>
#include <cstdint>
#include <cstring>

namespace gdrpc {

namespace {

/** UCX 1.22's ucp_conn_request_t (src/ucp/core/ucp_ep.h), field for field: the client's sockaddr
 *  data follows it. Only its size and the offset of client_address are used. */
struct ConnRequestLayout {
  void* listener;
  void* uctListener;
  void* uctRequest;
  uint8_t cmIndex;
  char deviceName[32];  // UCT_DEVICE_NAME_MAX
  void* remoteDeviceAddress;
  sockaddr_storage clientAddress;
  void* endpoint;
};

/** UCX versions whose request layout and private-data format this file follows. */
bool KnownVersion() {
  unsigned major = 0, minor = 0, release = 0;
  ucp_get_version(&major, &minor, &release);
  return major == 1 && minor == 22;
}

/** Whether two socket addresses name the same family, address and port. */
bool SameAddress(const sockaddr_storage& a, const sockaddr_storage& b) {
  if (a.ss_family != b.ss_family) return false;
  if (a.ss_family == AF_INET) {
    const auto& x = reinterpret_cast<const sockaddr_in&>(a);
    const auto& y = reinterpret_cast<const sockaddr_in&>(b);
    return x.sin_port == y.sin_port && x.sin_addr.s_addr == y.sin_addr.s_addr;
  }
  if (a.ss_family == AF_INET6) {
    const auto& x = reinterpret_cast<const sockaddr_in6&>(a);
    const auto& y = reinterpret_cast<const sockaddr_in6&>(b);
    return x.sin6_port == y.sin6_port && std::memcmp(&x.sin6_addr, &y.sin6_addr, sizeof(x.sin6_addr)) == 0;
  }
  return false;
}

// The client's sockaddr data (ucp_wireup_sockaddr_data_*): an 8-byte endpoint id, then a header
// byte whose top 3 bits are its version (v1: 0, v2: 1); v1 adds an address mode and a device
// index byte. The packed worker address follows; its first byte's low 4 bits are its version.
constexpr size_t kEndpointIdBytes = 8;
constexpr unsigned kSaDataVersionShift = 5;
constexpr unsigned kVersionV1 = 0;
constexpr unsigned kVersionV2 = 1;
constexpr uint8_t kV1AddressModeCm = 1u << 1;  // UCP_WIREUP_SA_DATA_CM_ADDR
// Every endpoint the binding makes asks for peer error handling: a gdrpc peer's request says so
// (v1: the header byte is the mode itself, and UCX ends the process with a fatal error on one it
// does not know, ucp_ep_err_mode_init_flags; v2: its flag bits, PEER set and FAILOVER clear).
// Another mode is no gdrpc peer's, and each would cost the worker an endpoint configuration.
constexpr uint8_t kV2ErrorModeBits = 0x03;
constexpr uint8_t kV2ErrorModePeer = 0x01;
constexpr uint8_t kAddressVersionMask = 0x0f;

}  // namespace

RequestCheck CheckConnRequest(ucp_conn_request_h request, const sockaddr_storage& client, int ownVersion, std::string* why) {
  static const bool known = KnownVersion();
  if (!known) return RequestCheck::Unchecked;
  const auto* layout = reinterpret_cast<const ConnRequestLayout*>(request);
  // The layout is right for this request when the client address sits where it says.
  if (!SameAddress(layout->clientAddress, client)) return RequestCheck::Unchecked;
  const auto* data = reinterpret_cast<const uint8_t*>(layout + 1);
  const unsigned version = data[kEndpointIdBytes] >> kSaDataVersionShift;
  const uint8_t* address = nullptr;
  if (version == kVersionV1) {
    if (data[kEndpointIdBytes] != UCP_ERR_HANDLING_MODE_PEER) {
      *why = "sockaddr data v1 with error-handling mode " + std::to_string(data[kEndpointIdBytes]) + " (a gdrpc peer asks for " +
             std::to_string(UCP_ERR_HANDLING_MODE_PEER) + ")";
      return RequestCheck::Invalid;
    }
    if (data[kEndpointIdBytes + 1] != kV1AddressModeCm) {
      *why = "sockaddr data v1 with address mode " + std::to_string(data[kEndpointIdBytes + 1]);
      return RequestCheck::Invalid;
    }
    address = data + kEndpointIdBytes + 3;
  } else if (version == kVersionV2) {
    if ((data[kEndpointIdBytes] & kV2ErrorModeBits) != kV2ErrorModePeer) {
      *why = "sockaddr data v2 without peer error handling (flags " + std::to_string(data[kEndpointIdBytes] & kV2ErrorModeBits) + ")";
      return RequestCheck::Invalid;
    }
    address = data + kEndpointIdBytes + 1;
  } else {
    *why = "sockaddr data of version " + std::to_string(version + 1);
    return RequestCheck::Invalid;
  }
  const unsigned addressVersion = address[0] & kAddressVersionMask;
  if (addressVersion != kVersionV1 && addressVersion != kVersionV2) {
    *why = "a worker address of version " + std::to_string(addressVersion + 1);
    return RequestCheck::Invalid;
  }
  if (ownVersion >= 0 && addressVersion != static_cast<unsigned>(ownVersion)) {
    *why = "a worker address of version " + std::to_string(addressVersion + 1) + " where this process packs version " +
           std::to_string(ownVersion + 1) + " (UCX_ADDRESS_VERSION)";
    return RequestCheck::Invalid;
  }
  return RequestCheck::Valid;
}

}  // namespace gdrpc

// A raw peer for a UCX worker's own uct/tcp interface port (the port UCX listens on for its tcp
// transport, not the gdrpc listener): tests find that port through /proc, speak just enough of the
// uct/tcp handshake to be accepted, and then deliver one hand-made UCP wireup message, to see how a
// server copes with a peer that skips the gdrpc listener. Linux only (reads /proc); IPv4 peers.
import { connect, type Socket } from 'node:net';
import { readFileSync, readdirSync, readlinkSync } from 'node:fs';

/** TCP ports on which process `pid` listens (from /proc/<pid>/net/tcp and tcp6, matched to the socket inodes in /proc/<pid>/fd), with the local address of each. */
export function listeningSockets(pid: number): Array<{ address: string; port: number }> {
  const inodes = new Set<string>();
  for (const fd of readdirSync(`/proc/${pid}/fd`)) {
    try {
      const target = /^socket:\[(\d+)\]$/.exec(readlinkSync(`/proc/${pid}/fd/${fd}`));
      if (target) inodes.add(target[1]!);
    } catch { /* the descriptor closed while we looked */ }
  }
  const found: Array<{ address: string; port: number }> = [];
  for (const table of ['tcp', 'tcp6']) {
    let text = '';
    try { text = readFileSync(`/proc/${pid}/net/${table}`, 'utf8'); } catch { continue; } // no IPv6
    for (const row of text.split('\n').slice(1)) {
      // Columns: sl local_address rem_address st ... ; the 10th is the socket inode. State 0A = LISTEN.
      const cols = row.trim().split(/\s+/);
      if (cols.length < 10 || cols[3] !== '0A' || !inodes.has(cols[9]!)) continue;
      const [hexAddress, hexPort] = cols[1]!.split(':') as [string, string];
      found.push({ address: procAddress(hexAddress), port: parseInt(hexPort, 16) });
    }
  }
  return found;
}

/** The kernel prints addresses as 32-bit words in host (little-endian) byte order. */
function procAddress(hex: string): string {
  const words = hex.match(/.{8}/g)!.map((w) => w.match(/../g)!.reverse().join(''));
  if (words.length === 1) return words[0]!.match(/../g)!.map((b) => parseInt(b, 16)).join('.');
  const groups = words.join('').match(/.{4}/g)!.join(':');
  return new URL(`http://[${groups}]/`).hostname.slice(1, -1); // the URL parser compresses it
}

/** What became of a raw peer's attempt. */
export interface RawIfaceResult { connected: boolean; acked: boolean; closedByPeer: boolean; error?: string }

// uct/tcp framing: after a 64-bit magic number, every message is an active message (AM) whose
// 5-byte header is an AM id (u8) and the payload length (u32 LE). All integers little-endian.
const MAGIC = Buffer.from('78563412bebafeca', 'hex'); // 0xCAFEBABE12345678
const CM_AM_ID = 32; // uct/tcp's connection-management messages
const WIREUP_AM_ID = 1; // UCP's wireup messages
/** The acceptor's answer to a connection request: CM message, 4 bytes, event 2 (ack). */
const CONN_ACK = Buffer.from('200400000002000000', 'hex');

function am(id: number, payload: Buffer): Buffer {
  const header = Buffer.alloc(5);
  header[0] = id;
  header.writeUInt32LE(payload.length, 1);
  return Buffer.concat([header, payload]);
}

/** Connection request "to the iface": event 1, flags 0, a connection id, then our sockaddr_in. */
function connRequest(ip: string, port: number): Buffer {
  const body = Buffer.alloc(13 + 16);
  body.writeUInt32LE(1, 0);
  body[4] = 0;
  body.writeBigUInt64LE(BigInt(Math.floor(Math.random() * 2 ** 48)), 5);
  body.writeUInt16LE(2, 13); // AF_INET
  body.writeUInt16BE(port, 15);
  ip.split('.').forEach((octet, i) => { body[17 + i] = Number(octet) & 0xff; });
  return am(CM_AM_ID, body);
}

/**
 * Wireup REQUEST (type 1, err_mode 1, conn_sn 0, our endpoint id, dst_ep_id 0 = "new peer"),
 * followed by a packed worker address. The address is one a real gdrpc client sent on this host
 * (loopback device, one tcp interface, its ports set to 0) with a fresh uuid; only its first byte
 * (the version in the low nibble, flags above it; 0x20 = version 1 with uuid) is meant to vary.
 */
function wireupRequest(firstByte: number): Buffer {
  const head = Buffer.alloc(20);
  head[0] = 1;
  head[1] = 1;
  head.writeUInt16LE(0, 2);
  head.writeBigUInt64LE(0x1234n, 4);
  head.writeBigUInt64LE(0n, 12);
  const uuid = Buffer.from(Array.from({ length: 8 }, () => Math.floor(Math.random() * 256)));
  const rest = Buffer.from('01' + '0e' + '010287d5bf430c79fbacf9ffffef' + 'cf19' + '17b75138539e3e4bd7e0373701032300'
    + '02' + 'c2' + '0000' + '0a' + '0000' + '0500000000000000' + '81' + '8680', 'hex');
  return am(WIREUP_AM_ID, Buffer.concat([head, Buffer.from([firstByte & 0xff]), uuid, rest]));
}

/** Connects to `host:port` (optionally from `localAddress`, e.g. '127.0.0.3'), and if connected sends the uct/tcp magic, a to-iface CONN_REQ, waits up to `ackMs` for the CONN_ACK, then sends one UCP wireup REQUEST (dst_ep_id 0) carrying a packed worker address whose first byte (version|flags) is `addressFirstByte` (0x23 = version 3 with the uuid flag, the byte that aborts UCX 1.22). Resolves after `settleMs` more with what happened; never rejects; `connectTimeoutMs` bounds the connect (a connection whose SYNs are dropped never completes: resolve connected:false). Resolves early if the connection closes (the peer died or hung up): closedByPeer then says so. */
export function sendCraftedWireup(options: { host: string; port: number; localAddress?: string; addressFirstByte?: number; connectTimeoutMs?: number; ackMs?: number; settleMs?: number }): Promise<RawIfaceResult> {
  const { host, port, localAddress, addressFirstByte = 0x23, connectTimeoutMs = 2000, ackMs = 1000, settleMs = 500 } = options;
  return new Promise((resolve) => {
    const result: RawIfaceResult = { connected: false, acked: false, closedByPeer: false };
    const timers: NodeJS.Timeout[] = [];
    let done = false;
    let sent = false;
    let received = Buffer.alloc(0);
    const finish = (): void => {
      if (done) return;
      done = true;
      timers.forEach(clearTimeout);
      socket.destroy();
      resolve(result);
    };
    const sendWireup = (): void => {
      if (sent || done) return;
      sent = true;
      socket.write(wireupRequest(addressFirstByte));
      timers.push(setTimeout(finish, settleMs));
    };
    let socket: Socket;
    try {
      socket = connect({ host, port, ...(localAddress === undefined ? {} : { localAddress }) });
    } catch (e) { // e.g. an invalid localAddress
      resolve({ ...result, error: String(e) });
      return;
    }
    timers.push(setTimeout(() => { if (!result.connected) { result.error ??= 'connect timed out'; finish(); } }, connectTimeoutMs));
    socket.on('connect', () => {
      result.connected = true;
      socket.write(Buffer.concat([MAGIC, connRequest(socket.localAddress ?? '0.0.0.0', socket.localPort ?? 0)]));
      timers.push(setTimeout(sendWireup, ackMs)); // send anyway when no ack comes
    });
    socket.on('data', (chunk: Buffer) => {
      received = Buffer.concat([received, chunk]);
      if (!result.acked && received.length >= CONN_ACK.length && received.subarray(0, CONN_ACK.length).equals(CONN_ACK)) {
        result.acked = true;
        sendWireup();
      }
    });
    socket.on('error', (e: NodeJS.ErrnoException) => {
      result.error ??= e.code ?? e.message;
      if (result.connected && (e.code === 'ECONNRESET' || e.code === 'EPIPE')) result.closedByPeer = true;
    });
    socket.on('close', () => {
      if (done) return; // we closed it
      if (result.connected) result.closedByPeer = true;
      finish();
    });
  });
}

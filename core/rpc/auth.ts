// Admission by a shared token, challenge-response (docs/wire.md "Handshake and admission"): the
// server sends a random challenge, the client answers with an HMAC over it and both connection
// ids, so the token never travels and a proof cannot be replayed on another connection.
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';

const LABEL = Buffer.from('gdrpc-auth-v1');

/** A fresh 32-byte challenge. */
export function newChallenge(): Uint8Array {
  return randomBytes(32);
}

/** The client's proof of knowing `token` for this challenge and pair of connection ids. */
export function authProof(token: string, challenge: Uint8Array, serverConn: number, clientConn: number): Uint8Array {
  const ids = Buffer.alloc(8);
  ids.writeUInt32BE(serverConn, 0);
  ids.writeUInt32BE(clientConn, 4);
  return createHmac('sha256', Buffer.from(token, 'utf8')).update(LABEL).update(challenge).update(ids).digest();
}

/** Constant-time check of a proof; false for a missing or wrong-length one. */
export function verifyProof(token: string, challenge: Uint8Array, serverConn: number, clientConn: number, proof: Uint8Array | undefined): boolean {
  if (proof === undefined || proof.length !== 32) return false;
  return timingSafeEqual(authProof(token, challenge, serverConn, clientConn), proof);
}

// Admission by a shared token, challenge-response (docs/wire.md "Handshake and admission"): the
// server sends a random challenge, the client answers with an HMAC over it and both connection
// keys, so the token never travels and a proof cannot be replayed on another connection.
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';

const LABEL = Buffer.from('gdrpc-auth-v2');

/** A fresh 32-byte challenge. */
export function newChallenge(): Uint8Array {
  return randomBytes(32);
}

/** The client's proof of knowing `token` for this challenge and pair of connection keys, and,
 *  when given, the client's address on the connection ("address:port", as the server's listener
 *  saw it): the server checks it against the connection the keys name. */
export function authProof(token: string, challenge: Uint8Array, serverKey: bigint, clientKey: bigint, clientAddress?: string): Uint8Array {
  const ids = Buffer.alloc(16);
  ids.writeBigUInt64BE(serverKey, 0);
  ids.writeBigUInt64BE(clientKey, 8);
  const hmac = createHmac('sha256', Buffer.from(token, 'utf8')).update(LABEL).update(challenge).update(ids);
  if (clientAddress !== undefined) hmac.update(Buffer.from(clientAddress, 'utf8'));
  return hmac.digest();
}

/** Constant-time check of a proof; false for a missing or wrong-length one. */
export function verifyProof(token: string, challenge: Uint8Array, serverKey: bigint, clientKey: bigint, proof: Uint8Array | undefined, clientAddress?: string): boolean {
  if (proof === undefined || proof.length !== 32) return false;
  return timingSafeEqual(authProof(token, challenge, serverKey, clientKey, clientAddress), proof);
}

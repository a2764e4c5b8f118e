// Idempotency keys: generated ones (UUIDv7) and the check every key passes
// before it is sent.

/** The longest key idem accepts (docs/api.md, "Idempotency"). */
export const maxKeyLength = 255;

/**
 * keyProblem returns why key cannot be an Idempotency-Key, or "" when it
 * can: 1 to 255 visible ASCII characters, as idem requires.
 */
export function keyProblem(key: string): string {
  if (key.length === 0) {
    return "idempotency key is empty";
  }
  if (key.length > maxKeyLength) {
    return `idempotency key is ${key.length} characters, over the limit of ${maxKeyLength}`;
  }
  for (let i = 0; i < key.length; i++) {
    const c = key.charCodeAt(i);
    if (c < 0x21 || c > 0x7e) {
      return `idempotency key has a character that is not visible ASCII at index ${i}`;
    }
  }
  return "";
}

/**
 * uuidv7 returns a version 7 UUID (RFC 9562): 48 bits of Unix milliseconds
 * from nowMs, then 74 random bits from fill. Keys sort by creation time,
 * which keeps the server's key index local.
 */
export function uuidv7(nowMs: number, fill: (bytes: Uint8Array<ArrayBuffer>) => void): string {
  const b = new Uint8Array(16);
  fill(b);
  let ms = Math.max(0, Math.floor(nowMs));
  for (let i = 5; i >= 0; i--) {
    b[i] = ms % 256;
    ms = Math.floor(ms / 256);
  }
  b[6] = 0x70 | (b[6]! & 0x0f);
  b[8] = 0x80 | (b[8]! & 0x3f);
  let hex = "";
  for (const x of b) {
    hex += x.toString(16).padStart(2, "0");
  }
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

/** cryptoFill fills bytes from the platform's CSPRNG (Web Crypto: Node 20+ and browsers). */
export function cryptoFill(bytes: Uint8Array<ArrayBuffer>): void {
  globalThis.crypto.getRandomValues(bytes);
}

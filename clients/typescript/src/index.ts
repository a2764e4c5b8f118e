// @idemhq/idem-client: the client's half of idem's Idempotency-Key
// contract on fetch (Node 20+ and browsers, no dependencies).
//
// - idemFetch: a fetch that names the key once and retries safely.
// - IdemClient: typed calls for idem's API on it.

export { IdemClient, type Answer, type CallOptions, type ClientOptions, type Replayed } from "./client.js";
export { IdemError, BadInputError, codes, ProblemError, RetryBudgetError, isRetryable, type Problem } from "./errors.js";
export {
  defaultRetry,
  idemFetch,
  keyHeader,
  replayedHeader,
  retryAfterMs,
  retryableStatus,
  type Attempt,
  type FetchOptions,
  type IdemFetch,
  type RetryConfig,
} from "./fetch.js";
export { maxKeyLength, uuidv7 } from "./key.js";
export type * from "./types.js";

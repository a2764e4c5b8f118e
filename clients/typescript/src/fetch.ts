// The retrying fetch: the client's half of the Idempotency-Key contract.
//
// One key per intent, not per attempt: a POST without a key gets one
// before its first attempt, and every retry of it carries that same key,
// so whichever attempts reached the server, the work happens once and the
// later attempts get its stored answer (Idempotent-Replayed: true).
//
// What is retried is what is safe and useful to retry under the same key:
// a transport error (the request may or may not have reached the server:
// the key makes that question moot), 409 request_in_flight (a twin is still
// running), 425, 429, 502, 503 and 504. Everything else is final: a 2xx, a
// 4xx refusal (400 and 422 are answers about the request, which sending it
// again cannot change; so is 409 idempotency_key_expired: the work was done
// and its answer is no longer kept), and a 500 (idem stores no 500, but a
// fault that recurs is not helped by hammering it).

import { BadInputError, ProblemError, RetryBudgetError, codes, type Problem } from "./errors.js";
import { cryptoFill, keyProblem, uuidv7 } from "./key.js";

/** The header that carries the key. */
export const keyHeader = "Idempotency-Key";
/** The header with which idem marks a stored answer given again. */
export const replayedHeader = "Idempotent-Replayed";

/** RetryConfig bounds the retries of one request. */
export interface RetryConfig {
  /**
   * Attempts per request, the first included: the retry budget. Default 5;
   * 1 (never retry) to 100.
   */
  maxAttempts?: number;
  /**
   * The bound of the first backoff, in ms; it doubles with each retry: the
   * n-th retry without Retry-After waits a uniformly random time in
   * [0, min(maxDelayMs, baseDelayMs * 2^(n-1))] ("full jitter"). Default
   * 100; 1 to 60000.
   */
  baseDelayMs?: number;
  /**
   * Caps every wait, in ms, a Retry-After included (a longer Retry-After is
   * waited for this long). Default 5000 (or baseDelayMs if larger);
   * baseDelayMs to 3600000.
   */
  maxDelayMs?: number;
  /**
   * Bounds one attempt, in ms, until its answer's headers: an attempt that
   * runs out is a transport error and is retried. Default 0: only the
   * request's signal bounds it; 0 to 3600000.
   */
  attemptTimeoutMs?: number;
  /**
   * Refuses, before sending, a request whose body cannot be sent again (a
   * ReadableStream). Default false: such a request is sent once and never
   * retried.
   */
  requireReplayableBody?: boolean;
}

/** What one attempt got, for FetchOptions.onAttempt. */
export interface Attempt {
  /** 1 for the first attempt. */
  n: number;
  /** The answer's status; 0 after a transport error. */
  status: number;
  /** The transport error, if any. */
  error?: unknown;
  /** The Idempotency-Key the attempt carried, if any. */
  key: string | undefined;
  /** True when this attempt's answer (or error) ends the call. */
  final: boolean;
}

/** FetchOptions configures idemFetch: the retry bounds and the seams tests inject. */
export interface FetchOptions extends RetryConfig {
  /** The fetch that sends each attempt. Default globalThis.fetch. */
  fetch?: typeof globalThis.fetch;
  /** The clock, in ms since the Unix epoch (for Retry-After dates and keys). Default Date.now. */
  now?: () => number;
  /** Waits ms, or rejects with signal.reason once signal aborts. Default a setTimeout. */
  sleep?: (ms: number, signal?: AbortSignal) => Promise<void>;
  /** The jitter's source, in [0, 1). Default Math.random. */
  random?: () => number;
  /**
   * Makes the key of a request that needs one (POST, PATCH) and has none,
   * once per request, never per attempt. Default a UUIDv7. A key stored
   * with the caller's own record (an order) survives a crash of the
   * caller: pass it instead (CallOptions.idempotencyKey). "" sends the
   * request without a key (a route that takes none): it is then sent once,
   * and again only when the connection could not be made.
   */
  newKey?: () => string;
  /** Called after every attempt. */
  onAttempt?: (a: Attempt) => void;
}

/** The retry bounds after defaults, as idemFetch uses them. */
export interface RetryBounds {
  maxAttempts: number;
  baseDelayMs: number;
  maxDelayMs: number;
  attemptTimeoutMs: number;
  requireReplayableBody: boolean;
}

export const defaultRetry: Readonly<RetryBounds> = Object.freeze({
  maxAttempts: 5,
  baseDelayMs: 100,
  maxDelayMs: 5000,
  attemptTimeoutMs: 0,
  requireReplayableBody: false,
});

/** retryBounds applies the defaults to c and checks the bounds; it throws BadInputError. */
export function retryBounds(c: RetryConfig = {}): RetryBounds {
  const baseDelayMs = c.baseDelayMs ?? defaultRetry.baseDelayMs;
  const b: RetryBounds = {
    maxAttempts: c.maxAttempts ?? defaultRetry.maxAttempts,
    baseDelayMs,
    maxDelayMs: c.maxDelayMs ?? Math.max(defaultRetry.maxDelayMs, baseDelayMs),
    attemptTimeoutMs: c.attemptTimeoutMs ?? defaultRetry.attemptTimeoutMs,
    requireReplayableBody: c.requireReplayableBody ?? defaultRetry.requireReplayableBody,
  };
  const within = (name: string, v: number, lo: number, hi: number) => {
    if (typeof v !== "number" || !Number.isInteger(v) || v < lo || v > hi) {
      throw new BadInputError(`${name} ${String(v)} is outside ${lo}..${hi} (an integer)`);
    }
  };
  within("maxAttempts", b.maxAttempts, 1, 100);
  within("baseDelayMs", b.baseDelayMs, 1, 60_000);
  within("maxDelayMs", b.maxDelayMs, b.baseDelayMs, 3_600_000);
  within("attemptTimeoutMs", b.attemptTimeoutMs, 0, 3_600_000);
  return b;
}

/** The methods that need a key: those HTTP does not define as idempotent (idem requires one on every POST under /v1/). */
export function needsKey(method: string): boolean {
  return method === "POST" || method === "PATCH";
}

/**
 * retryableStatus reports whether an answer with this status may be retried
 * under the same key. A 409 whose problem code is idempotency_key_expired is
 * final all the same; idemFetch reads the code.
 */
export function retryableStatus(status: number): boolean {
  switch (status) {
    case 409: // request_in_flight: a twin is still running; its answer comes next
    case 425:
    case 429:
    case 502:
    case 503:
    case 504:
      return true;
    default:
      return false;
  }
}

/**
 * keyExpired reports whether res is idem's 409 idempotency_key_expired,
 * which every retry would get again: the work was done, and its answer is
 * no longer kept. It reads a clone, so res's body is left for the caller.
 */
async function keyExpired(res: Response): Promise<boolean> {
  if (res.status !== 409 || res.body === null) {
    return false;
  }
  const problem = await readProblem(res.clone());
  return problem.code === codes.idempotencyKeyExpired;
}

/**
 * retryAfterMs reads a Retry-After header (RFC 9110: delay-seconds or an
 * HTTP date) as ms from nowMs; undefined when absent or unreadable. A date
 * in the past is 0.
 */
export function retryAfterMs(value: string | null, nowMs: number): number | undefined {
  if (value === null) {
    return undefined;
  }
  const v = value.trim();
  if (/^\d+$/.test(v)) {
    return Number(v) * 1000;
  }
  // An HTTP date starts with its weekday (IMF-fixdate, RFC 850 or asctime
  // form); Date.parse alone would take far more than HTTP allows.
  const t = /^(Mon|Tue|Wed|Thu|Fri|Sat|Sun)[a-z]*,? /.test(v) ? Date.parse(v) : NaN;
  if (Number.isNaN(t)) {
    return undefined;
  }
  return Math.max(0, t - nowMs);
}

/** isReplayable reports whether a body can be sent again on a retry. A stream is read once. */
function isReplayable(body: BodyInit | null | undefined): boolean {
  if (body === null || body === undefined) {
    return true;
  }
  return !(typeof ReadableStream !== "undefined" && body instanceof ReadableStream);
}

function defaultSleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(signal.reason);
      return;
    }
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal!.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

/** An IdemFetch is a fetch that keys and retries; see idemFetch. */
export type IdemFetch = (input: string | URL | Request, init?: RequestInit) => Promise<Response>;

/**
 * idemFetch returns a fetch that keeps the client's half of the
 * Idempotency-Key contract (docs/clients.md, "Retry rules"):
 *
 * - a POST or PATCH without an Idempotency-Key gets one (options.newKey, a
 *   UUIDv7 by default), and every attempt carries that same key;
 * - a transport error (before or after the request was written: the key
 *   makes a second arrival of a processed request a replay) and the
 *   answers 409 (in flight; not 409 idempotency_key_expired, which is
 *   final), 425, 429, 502, 503 and 504 are retried, after
 *   Retry-After (seconds or an HTTP date) when the answer has one, else
 *   after an exponential backoff with full jitter; every wait is capped at
 *   maxDelayMs;
 * - within maxAttempts and the request's signal;
 * - but a POST or PATCH sent without a key (newKey returned "") is sent
 *   once, and again only when the connection could not be made (nothing
 *   was written): without a key a second arrival is a second operation.
 *
 * It resolves with the first final answer: a 2xx, a 4xx refusal (400, 422
 * and the others) or a 500, as it is, unread. It rejects with
 * RetryBudgetError when every attempt got something worth retrying, with
 * the signal's reason once the signal aborts, and with BadInputError,
 * before anything is sent, for a key idem would refuse (or a stream body
 * under requireReplayableBody). A body that cannot be sent again (a
 * ReadableStream) is sent once, and whatever it gets is final. A Request's
 * body is read into memory first, so that it can be sent again.
 *
 * The options are checked at once: a bad bound throws BadInputError.
 */
export function idemFetch(options: FetchOptions = {}): IdemFetch {
  const bounds = retryBounds(options);
  const send = options.fetch ?? ((input: string | URL | Request, init?: RequestInit) => globalThis.fetch(input, init));
  const now = options.now ?? Date.now;
  const sleep = options.sleep ?? defaultSleep;
  const random = options.random ?? Math.random;
  const newKey = options.newKey ?? (() => uuidv7(now(), cryptoFill));
  const onAttempt = options.onAttempt;

  return async (input, init) => {
    const { url, req } = await unpack(input, init);
    const method = (req.method ?? "GET").toUpperCase();
    const replayable = isReplayable(req.body);
    if (!replayable && bounds.requireReplayableBody) {
      throw new BadInputError(`${method} ${String(url)}: the body is a stream, which cannot be sent again`);
    }
    const headers = new Headers(req.headers);
    let key = headers.get(keyHeader) ?? undefined;
    if (key === undefined && needsKey(method)) {
      // newKey may return "": the request goes without a key.
      const k = newKey();
      if (k !== "") {
        key = k;
        headers.set(keyHeader, key);
      }
    }
    if (key !== undefined) {
      const why = keyProblem(key);
      if (why !== "") {
        throw new BadInputError(why);
      }
    }
    const signal = req.signal ?? undefined;
    const maxAttempts = replayable ? bounds.maxAttempts : 1;
    // A POST or PATCH without a key has no replay to fall back on: a
    // second arrival would do the work again. It is sent again only when
    // its attempt never reached the server. A Standard Webhooks delivery
    // is keyed by its webhook-id, which its receiver dedupes by.
    const keyless = key === undefined && needsKey(method) && !headers.has("webhook-id");

    for (let n = 1; ; n++) {
      if (signal?.aborted) {
        throw signal.reason;
      }
      let response: Response | undefined;
      let failure: unknown;
      try {
        response = await attempt(send, bounds.attemptTimeoutMs, url, { ...req, method, headers, signal });
      } catch (err) {
        failure = err;
      }
      const answered = response !== undefined && (!retryableStatus(response.status) || (await keyExpired(response)));
      // The caller's signal ending makes nothing retryable; an answer that
      // is final has arrived all the same and is returned.
      const retry = !answered && !signal?.aborted && (!keyless || (response === undefined && notSent(failure)));
      onAttempt?.({ n, status: response?.status ?? 0, error: failure, key, final: !retry || n >= maxAttempts });
      if (!answered && signal?.aborted) {
        throw signal.reason;
      }
      if (!retry || !replayable) {
        // Final, or sent once because it cannot be sent again: the answer
        // is the caller's to read.
        if (response !== undefined) {
          return response;
        }
        throw failure;
      }
      let wait: number | undefined;
      if (response !== undefined) {
        wait = retryAfterMs(response.headers.get("Retry-After"), now());
        failure = await problemOf(response, key);
      }
      if (n >= maxAttempts) {
        throw new RetryBudgetError(n, failure, response, key);
      }
      if (wait === undefined) {
        const bound = Math.min(bounds.maxDelayMs, bounds.baseDelayMs * 2 ** Math.min(n - 1, 40));
        wait = Math.floor(random() * (bound + 1));
      }
      await sleep(Math.min(wait, bounds.maxDelayMs), signal);
    }
  };
}

/** The error codes of a connection that could not be made: nothing of the request was written. */
const connectFailures = new Set(["ECONNREFUSED", "ENOTFOUND", "EAI_AGAIN", "EHOSTUNREACH", "ENETUNREACH", "UND_ERR_CONNECT_TIMEOUT"]);

/**
 * notSent reports whether a rejected fetch never reached the server: the
 * connection could not be made (Node's fetch puts the socket's code on the
 * error's cause). Any other failure may follow work the server did.
 */
export function notSent(err: unknown): boolean {
  for (let e = err, depth = 0; e !== null && typeof e === "object" && depth < 4; depth++) {
    const code = (e as { code?: unknown }).code;
    if (typeof code === "string" && connectFailures.has(code)) {
      return true;
    }
    e = (e as { cause?: unknown }).cause;
  }
  return false;
}

/** unpack turns fetch's arguments into a URL and one RequestInit; a Request's body is read into memory. */
async function unpack(input: string | URL | Request, init: RequestInit | undefined): Promise<{ url: string | URL; req: RequestInit }> {
  if (typeof Request === "undefined" || !(input instanceof Request)) {
    return { url: input as string | URL, req: { ...init } };
  }
  const body = input.body === null ? undefined : await input.arrayBuffer();
  return {
    url: input.url,
    req: {
      method: input.method,
      headers: input.headers,
      body,
      signal: input.signal,
      credentials: input.credentials,
      mode: input.mode,
      redirect: input.redirect,
      referrer: input.referrer,
      referrerPolicy: input.referrerPolicy,
      integrity: input.integrity,
      keepalive: input.keepalive,
      cache: input.cache,
      ...init,
    },
  };
}

/**
 * attempt sends one attempt, bounded by timeoutMs (0: only by the
 * caller's signal) until its answer's headers.
 */
async function attempt(send: typeof globalThis.fetch, timeoutMs: number, url: string | URL, init: RequestInit): Promise<Response> {
  if (timeoutMs === 0) {
    return send(url, init);
  }
  const ctl = new AbortController();
  const outer = init.signal ?? undefined;
  const onAbort = () => ctl.abort(outer?.reason);
  if (outer?.aborted) {
    onAbort();
  }
  outer?.addEventListener("abort", onAbort, { once: true });
  const timer = setTimeout(() => ctl.abort(new Error(`idem: the attempt got no answer within ${timeoutMs} ms`)), timeoutMs);
  try {
    return await send(url, { ...init, signal: ctl.signal });
  } finally {
    clearTimeout(timer);
    outer?.removeEventListener("abort", onAbort);
  }
}

/** problemOf reads a retried answer (bounded) into the ProblemError a budget error keeps as its cause. */
async function problemOf(res: Response, key: string | undefined): Promise<ProblemError> {
  return new ProblemError(res.status, await readProblem(res), res.headers.get(replayedHeader) === "true", key);
}

/** readLimitBytes bounds what is read of an answer that is not a success: enough for any problem. */
const readLimitBytes = 64 << 10;

/**
 * readProblem reads a problem+json body (at most 64 KiB: a proxy's error
 * page can be large); a body that is not one gives a problem with the
 * status and the body's start as its detail.
 */
export async function readProblem(res: Response): Promise<Problem> {
  let text: string;
  try {
    text = await readText(res, readLimitBytes);
  } catch {
    return { status: res.status };
  }
  try {
    const v: unknown = JSON.parse(text);
    if (v !== null && typeof v === "object" && !Array.isArray(v)) {
      return v as Problem;
    }
  } catch {
    // Not JSON, or cut at the limit: a proxy's page, say.
  }
  return { status: res.status, detail: text.slice(0, 200) };
}

/** readText reads at most limit bytes of res's body as UTF-8 and cancels the rest. */
async function readText(res: Response, limit: number): Promise<string> {
  if (res.body === null) {
    return "";
  }
  const reader = res.body.getReader();
  const chunks: Uint8Array[] = [];
  let size = 0;
  try {
    while (size < limit) {
      const { done, value } = await reader.read();
      if (done) {
        break;
      }
      chunks.push(value);
      size += value.byteLength;
    }
  } finally {
    if (size >= limit) {
      await reader.cancel().catch(() => {});
    }
    reader.releaseLock();
  }
  const all = new Uint8Array(size);
  let at = 0;
  for (const c of chunks) {
    all.set(c, at);
    at += c.byteLength;
  }
  return new TextDecoder().decode(all.subarray(0, limit));
}

// The typed client for idem's HTTP API (docs/api.md), on idemFetch.

import { BadInputError, ProblemError } from "./errors.js";
import { idemFetch, keyHeader, needsKey, readProblem, replayedHeader, type FetchOptions, type IdemFetch } from "./fetch.js";
import { cryptoFill, keyProblem, uuidv7 } from "./key.js";
import type {
  Account,
  Balance,
  BatchResult,
  EntryPage,
  EventPage,
  NewAccount,
  NewReversal,
  NewSettlement,
  TransferPage,
  NewTransfer,
  NewWebhookEndpoint,
  Transfer,
  TransferWithReversals,
  WebhookAttemptPage,
  WebhookEndpoint,
  WebhookEndpointPage,
  WebhookEndpointPatch,
  WebhookReplay,
  WebhookReplayResult,
} from "./types.js";

/** ClientOptions configures an IdemClient. */
export interface ClientOptions extends FetchOptions {
  /** The service's URL with its scheme, e.g. "http://localhost:8080". Required. */
  baseUrl: string;
  /** An API key (`--api-keys tenant:key`), sent as `Authorization: Bearer`. */
  apiKey?: string;
}

/** CallOptions are a call's own: its key and its signal. */
export interface CallOptions {
  /**
   * The Idempotency-Key of a write. Pass the key you stored with your own
   * record of the intent (an order row) before the first attempt: then a
   * resend after your process crashed is the same intent, and idem answers
   * it with the first attempt's stored answer instead of doing the work
   * twice. Without one, the client makes a UUIDv7 that lives only as long
   * as this call. 1 to 255 visible ASCII characters.
   */
  idempotencyKey?: string;
  /** Aborts the call, between attempts too. */
  signal?: AbortSignal;
}

/** Replayed marks every answer: true when it is a stored answer given again. */
export interface Replayed {
  readonly replayed: boolean;
}

/** An Answer is a resource as the server answered it, with `replayed`. */
export type Answer<T> = T & Replayed;

/** The most ids and cursors may hold before they are refused here (idem's ids are 1 to 128 characters). */
const maxPathValueLength = 1024;

/**
 * IdemClient calls idem's API. Each write carries one Idempotency-Key on
 * every attempt (the caller's or a generated one) and is retried as
 * idemFetch says; each answer has `replayed`; each refusal is a
 * ProblemError with the problem's stable `code`.
 */
export class IdemClient {
  readonly baseUrl: string;
  readonly #fetch: IdemFetch;
  readonly #authorization: string | undefined;
  readonly #newKey: () => string;

  /** Throws BadInputError for a base URL without an http(s) scheme or a bound out of range. */
  constructor(options: ClientOptions) {
    if (options === null || typeof options !== "object") {
      throw new BadInputError("options are required");
    }
    this.baseUrl = checkBaseUrl(options.baseUrl);
    if (options.apiKey !== undefined && (typeof options.apiKey !== "string" || options.apiKey === "" || /[\r\n]/.test(options.apiKey))) {
      throw new BadInputError("apiKey must be a non-empty string on one line");
    }
    this.#authorization = options.apiKey === undefined ? undefined : `Bearer ${options.apiKey}`;
    this.#fetch = idemFetch(options);
    const now = options.now ?? Date.now;
    this.#newKey = options.newKey ?? (() => uuidv7(now(), cryptoFill));
  }

  /** POST /v1/accounts: 201 Account (also when it exists with the same fields). */
  async createAccount(account: NewAccount, options?: CallOptions): Promise<Answer<Account>> {
    return this.#call("POST", "/v1/accounts", account, options);
  }

  /** GET /v1/accounts/{id}: the account with its current totals. */
  async getAccount(id: string, options?: CallOptions): Promise<Answer<Account>> {
    return this.#call("GET", `/v1/accounts/${segment("account id", id)}`, undefined, options);
  }

  /**
   * GET /v1/accounts/{id}/balance: the balance as believed at asOf (default
   * now). An answer for an asOf, once given, is the answer forever.
   */
  async getBalance(id: string, query: { asOf?: Date | string } = {}, options?: CallOptions): Promise<Answer<Balance>> {
    const q = new URLSearchParams();
    setAsOf(q, query.asOf);
    return this.#call("GET", `/v1/accounts/${segment("account id", id)}/balance${qs(q)}`, undefined, options);
  }

  /** GET /v1/accounts/{id}/entries: one page of entries, newest first; follow nextCursor with `after`. */
  async listEntries(
    id: string,
    query: { asOf?: Date | string; limit?: number; after?: string } = {},
    options?: CallOptions,
  ): Promise<Answer<EntryPage>> {
    const q = new URLSearchParams();
    setAsOf(q, query.asOf);
    setLimit(q, query.limit);
    setCursor(q, query.after);
    return this.#call("GET", `/v1/accounts/${segment("account id", id)}/entries${qs(q)}`, undefined, options);
  }

  /** POST /v1/transfers: 201 Transfer, or its stored answer replayed. */
  async createTransfer(transfer: NewTransfer, options?: CallOptions): Promise<Answer<Transfer>> {
    checkAmount("amount", transfer?.amount, false);
    return this.#call("POST", "/v1/transfers", transfer, options);
  }

  /**
   * POST /v1/transfers/batch: 1 to 1000 transfers, each created, existing
   * or refused on its own; one key covers the whole request.
   */
  async createTransfers(transfers: NewTransfer[], options?: CallOptions): Promise<Answer<BatchResult>> {
    if (!Array.isArray(transfers) || transfers.length < 1 || transfers.length > 1000) {
      throw new BadInputError("a batch holds 1 to 1000 transfers");
    }
    transfers.forEach((t, i) => checkAmount(`transfers[${i}].amount`, t?.amount, false));
    return this.#call("POST", "/v1/transfers/batch", { transfers }, options);
  }

  /** GET /v1/transfers/{id}: the transfer with its reversals, oldest first. */
  async getTransfer(id: string, options?: CallOptions): Promise<Answer<TransferWithReversals>> {
    return this.#call("GET", `/v1/transfers/${segment("transfer id", id)}`, undefined, options);
  }

  /** POST /v1/transfers/{id}/reversals: 201 the reversal; without amount, all that remains. */
  async reverseTransfer(id: string, reversal: NewReversal = {}, options?: CallOptions): Promise<Answer<Transfer>> {
    checkAmount("amount", reversal?.amount, true);
    return this.#call("POST", `/v1/transfers/${segment("transfer id", id)}/reversals`, reversal, options);
  }

  /** POST /v1/transfers/{id}/post: 201 the post of hold id; without amount, all that is held (the rest is released). */
  async postPending(id: string, post: NewSettlement = {}, options?: CallOptions): Promise<Answer<Transfer>> {
    checkAmount("amount", post?.amount, true);
    return this.#call("POST", `/v1/transfers/${segment("transfer id", id)}/post`, post, options);
  }

  /** POST /v1/transfers/{id}/void: 201 the void of hold id, which releases all of it. */
  async voidPending(id: string, voiding: Omit<NewSettlement, "amount"> = {}, options?: CallOptions): Promise<Answer<Transfer>> {
    if ((voiding as NewSettlement)?.amount != null) {
      throw new BadInputError("a void releases the whole hold and takes no amount");
    }
    return this.#call("POST", `/v1/transfers/${segment("transfer id", id)}/void`, voiding, options);
  }

  /** GET /v1/transfers: one page of the tenant's transfers by id; status "pending" lists the open holds. */
  async listTransfers(
    query: { status?: string; accountId?: string; limit?: number; after?: string } = {},
    options?: CallOptions,
  ): Promise<Answer<TransferPage>> {
    const q = new URLSearchParams();
    if (query.status !== undefined) q.set("status", query.status);
    if (query.accountId !== undefined) q.set("account_id", query.accountId);
    setLimit(q, query.limit);
    setCursor(q, query.after);
    return this.#call("GET", `/v1/transfers${qs(q)}`, undefined, options);
  }

  /** GET /v1/events: one page of the tenant's events in commit order; follow nextCursor with `after`. */
  async listEvents(query: { after?: string; limit?: number } = {}, options?: CallOptions): Promise<Answer<EventPage>> {
    const q = new URLSearchParams();
    setCursor(q, query.after);
    setLimit(q, query.limit);
    return this.#call("GET", `/v1/events${qs(q)}`, undefined, options);
  }

  /** POST /v1/webhook-endpoints: 201 the endpoint with its secret, shown in this answer only. */
  async createWebhookEndpoint(endpoint: NewWebhookEndpoint, options?: CallOptions): Promise<Answer<WebhookEndpoint>> {
    return this.#call("POST", "/v1/webhook-endpoints", endpoint, options);
  }

  /** GET /v1/webhook-endpoints/{id}: the endpoint, without its secret. */
  async getWebhookEndpoint(id: string, options?: CallOptions): Promise<Answer<WebhookEndpoint>> {
    return this.#call("GET", `/v1/webhook-endpoints/${segment("endpoint id", id)}`, undefined, options);
  }

  /** GET /v1/webhook-endpoints: one page of the tenant's endpoints in id order. */
  async listWebhookEndpoints(query: { after?: string; limit?: number } = {}, options?: CallOptions): Promise<Answer<WebhookEndpointPage>> {
    const q = new URLSearchParams();
    setCursor(q, query.after);
    setLimit(q, query.limit);
    return this.#call("GET", `/v1/webhook-endpoints${qs(q)}`, undefined, options);
  }

  /** PATCH /v1/webhook-endpoints/{id}: `enabled: true` re-enables one failures disabled. */
  async updateWebhookEndpoint(id: string, patch: WebhookEndpointPatch, options?: CallOptions): Promise<Answer<WebhookEndpoint>> {
    return this.#call("PATCH", `/v1/webhook-endpoints/${segment("endpoint id", id)}`, patch, options);
  }

  /**
   * DELETE /v1/webhook-endpoints/{id}, under an Idempotency-Key like every
   * write (a new one when options has none): a retry answers as the first.
   */
  async deleteWebhookEndpoint(id: string, options: CallOptions = {}): Promise<Replayed> {
    const path = `/v1/webhook-endpoints/${segment("endpoint id", id)}`;
    return this.#call("DELETE", path, undefined, { ...options, idempotencyKey: options.idempotencyKey ?? this.#newKey() });
  }

  /** POST /v1/webhook-endpoints/{id}/rotate-secret: the new secret; the old one signs beside it for 24 hours. */
  async rotateWebhookEndpointSecret(id: string, secret?: string, options?: CallOptions): Promise<Answer<WebhookEndpoint>> {
    return this.#call("POST", `/v1/webhook-endpoints/${segment("endpoint id", id)}/rotate-secret`, secret === undefined ? {} : { secret }, options);
  }

  /** GET /v1/webhook-endpoints/{id}/attempts: one page of attempts, newest first; of one event with eventId. */
  async listWebhookAttempts(
    id: string,
    query: { eventId?: string; after?: string; limit?: number } = {},
    options?: CallOptions,
  ): Promise<Answer<WebhookAttemptPage>> {
    const q = new URLSearchParams();
    if (query.eventId !== undefined) {
      q.set("event_id", query.eventId);
    }
    setCursor(q, query.after);
    setLimit(q, query.limit);
    return this.#call("GET", `/v1/webhook-endpoints/${segment("endpoint id", id)}/attempts${qs(q)}`, undefined, options);
  }

  /** POST /v1/webhook-endpoints/{id}/replay: send deliveries again, with their webhook-id unchanged. */
  async replayWebhookEndpoint(id: string, replay: WebhookReplay, options?: CallOptions): Promise<Answer<WebhookReplayResult>> {
    return this.#call("POST", `/v1/webhook-endpoints/${segment("endpoint id", id)}/replay`, replay, options);
  }

  /**
   * request sends any call of idem's API: method, a path from "/" with its
   * query, and a body sent as JSON. The typed calls above are this, with
   * their checks; it is here for routes they do not cover.
   */
  async request<T = unknown>(method: string, path: string, body?: unknown, options?: CallOptions): Promise<Answer<T>> {
    if (typeof path !== "string" || !path.startsWith("/")) {
      throw new BadInputError(`path ${JSON.stringify(path)} does not start with "/"`);
    }
    return this.#call(method, path, body, options);
  }

  // #call sends one request and reads its answer: a 2xx's JSON with
  // `replayed`, or a ProblemError. Input errors are thrown before this
  // returns a promise (by the callers' checks) or as its rejection.
  async #call<T>(method: string, path: string, body: unknown, options: CallOptions = {}): Promise<Answer<T>> {
    const headers = new Headers({ Accept: "application/json, application/problem+json" });
    if (this.#authorization !== undefined) {
      headers.set("Authorization", this.#authorization);
    }
    // The key is made here rather than in idemFetch, so that every error
    // of the call can name it.
    // A newKey that returns "" sends the request without a key.
    const key = options.idempotencyKey ?? (needsKey(method.toUpperCase()) ? this.#newKey() || undefined : undefined);
    if (key !== undefined) {
      const why = typeof key === "string" ? keyProblem(key) : "idempotency key must be a string";
      if (why !== "") {
        throw new BadInputError(why);
      }
      headers.set(keyHeader, key);
    }
    const init: RequestInit = { method, headers };
    if (body !== undefined) {
      headers.set("Content-Type", "application/json");
      init.body = JSON.stringify(body);
    }
    if (options.signal !== undefined) {
      init.signal = options.signal;
    }
    const res = await this.#fetch(this.baseUrl + path, init);
    const replayed = res.headers.get(replayedHeader) === "true";
    if (res.status < 200 || res.status > 299) {
      throw new ProblemError(res.status, await readProblem(res), replayed, key);
    }
    if (res.status === 204) {
      // No body (DELETE).
      return Object.assign({}, { replayed }) as Answer<T>;
    }
    let value: unknown;
    try {
      value = await res.json();
    } catch {
      value = undefined;
    }
    if (value === null || typeof value !== "object" || Array.isArray(value)) {
      throw new ProblemError(res.status, { status: res.status, code: "unexpected_answer", detail: "the answer is not a JSON object" }, replayed, key);
    }
    return Object.assign(value as T & object, { replayed }) as Answer<T>;
  }
}

/** checkBaseUrl returns the URL without a trailing slash; it throws for one idem cannot be reached at. */
function checkBaseUrl(raw: unknown): string {
  if (typeof raw !== "string" || raw === "") {
    throw new BadInputError("baseUrl is required, e.g. \"http://localhost:8080\"");
  }
  if (!/^https?:\/\//i.test(raw)) {
    throw new BadInputError(`baseUrl ${JSON.stringify(raw)} has no http:// or https:// scheme`);
  }
  let u: URL;
  try {
    u = new URL(raw);
  } catch {
    throw new BadInputError(`baseUrl ${JSON.stringify(raw)} is not a URL`);
  }
  if (u.search !== "" || u.hash !== "") {
    throw new BadInputError(`baseUrl ${JSON.stringify(raw)} has a query or fragment`);
  }
  return u.href.replace(/\/+$/, "");
}

function segment(what: string, v: unknown): string {
  if (typeof v !== "string" || v === "" || v.length > maxPathValueLength) {
    throw new BadInputError(`${what} must be a string of 1 to ${maxPathValueLength} characters`);
  }
  return encodeURIComponent(v);
}

function checkAmount(what: string, v: unknown, optional: boolean): void {
  if (v === undefined || v === null) {
    if (optional) {
      return;
    }
    throw new BadInputError(`${what} is required`);
  }
  // Past 2^53 a JS number no longer holds every integer: the amount sent
  // could differ from the one meant.
  if (typeof v !== "number" || !Number.isSafeInteger(v) || v <= 0) {
    throw new BadInputError(`${what} ${String(v)} is not a positive safe integer`);
  }
}

function setAsOf(q: URLSearchParams, asOf: Date | string | undefined): void {
  if (asOf === undefined) {
    return;
  }
  if (asOf instanceof Date) {
    if (Number.isNaN(asOf.getTime())) {
      throw new BadInputError("asOf is an invalid Date");
    }
    q.set("as_of", asOf.toISOString());
    return;
  }
  if (typeof asOf !== "string" || asOf === "") {
    throw new BadInputError("asOf must be a Date or an RFC 3339 string");
  }
  q.set("as_of", asOf);
}

function setLimit(q: URLSearchParams, limit: number | undefined): void {
  if (limit === undefined) {
    return;
  }
  if (!Number.isInteger(limit) || limit < 1 || limit > 1000) {
    throw new BadInputError(`limit ${String(limit)} is outside 1..1000`);
  }
  q.set("limit", String(limit));
}

function setCursor(q: URLSearchParams, after: string | undefined): void {
  if (after === undefined) {
    return;
  }
  if (typeof after !== "string" || after === "" || after.length > maxPathValueLength) {
    throw new BadInputError(`after must be a cursor of 1 to ${maxPathValueLength} characters`);
  }
  q.set("after", after);
}

function qs(q: URLSearchParams): string {
  const s = q.toString();
  return s === "" ? "" : `?${s}`;
}

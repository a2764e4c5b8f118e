// The errors a call can end with. Each has a stable `code` to switch on
// (never on `message`, which is for people and may change), and
// `idempotencyKey`, the key the request went out under, so a caller whose
// retries ran out can send the same intent again later.

/** IdemError is the base of every error this package throws itself. */
export class IdemError extends Error {
  /** A stable, machine-readable code: the server's problem code or one of this package's. */
  readonly code: string;
  /** The Idempotency-Key the request was sent with, if it had one. */
  readonly idempotencyKey: string | undefined;

  constructor(code: string, message: string, options?: { cause?: unknown; idempotencyKey?: string | undefined }) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.name = new.target.name;
    this.code = code;
    this.idempotencyKey = options?.idempotencyKey;
  }
}

/**
 * The stable problem codes of idem's API (docs/api.md). Switch on
 * ProblemError.code with these; a code not listed here (a
 * `transfer_exists_with_different_<field>`, a newer server's) is still
 * passed through as it is.
 */
export const codes = Object.freeze({
  invalidRequest: "invalid_request",
  idempotencyKeyMissing: "idempotency_key_missing",
  idempotencyKeyInvalid: "idempotency_key_invalid",
  idempotencyKeyReused: "idempotency_key_reused",
  /**
   * 409, final, never retried: the work was done once, long enough ago
   * that its answer is no longer kept (the server's --key-retention), and
   * it is not done again. Read the result by its own means (getTransfer,
   * transfers); a new operation takes a new key.
   */
  idempotencyKeyExpired: "idempotency_key_expired",
  requestInFlight: "request_in_flight",
  bodyTooLarge: "body_too_large",
  unsupportedMediaType: "unsupported_media_type",
  misdirectedRequest: "misdirected_request",
  unauthorized: "unauthorized",
  notFound: "not_found",
  unavailable: "unavailable",
  internalError: "internal_error",
  accountNotFound: "account_not_found",
  currencyMismatch: "currency_mismatch",
  sameAccount: "same_account",
  insufficientFunds: "insufficient_funds",
  amountOverflow: "amount_overflow",
  reversalExceedsRemaining: "reversal_exceeds_remaining",
  cannotReverseReversal: "cannot_reverse_reversal",
  cannotReversePending: "cannot_reverse_pending",
  transferNotPending: "transfer_not_pending",
  amountExceedsPending: "amount_exceeds_pending",
  pendingTransferAlreadyPosted: "pending_transfer_already_posted",
  pendingTransferAlreadyVoided: "pending_transfer_already_voided",
  pendingTransferAlreadyExpired: "pending_transfer_already_expired",
} as const);

/** Problem is an RFC 9457 problem details object as idem answers it. */
export interface Problem {
  type?: string;
  title?: string;
  status?: number;
  detail?: string;
  code?: string;
  [member: string]: unknown;
}

/**
 * ProblemError is an answer the server gave that is not a success: a
 * refusal (400, 404, 422 …) or a final fault. `code` is the problem's
 * stable code (`insufficient_funds`, `idempotency_key_reused`, …).
 * `replayed` is true when the answer is the stored outcome of an earlier
 * attempt under the same key (a business refusal is stored and replayed
 * like a success).
 */
export class ProblemError extends IdemError {
  readonly status: number;
  readonly problem: Problem;
  readonly replayed: boolean;

  constructor(status: number, problem: Problem, replayed: boolean, idempotencyKey?: string) {
    const code = typeof problem.code === "string" && problem.code !== "" ? problem.code : `http_${status}`;
    const detail = typeof problem.detail === "string" ? problem.detail : (problem.title ?? "");
    super(code, `idem: ${status} ${code}${detail ? `: ${detail}` : ""}`, { idempotencyKey });
    this.status = status;
    this.problem = problem;
    this.replayed = replayed;
  }
}

/**
 * RetryBudgetError: every attempt the retry budget (maxAttempts) allowed
 * got an answer worth retrying (409 in flight, 425, 429, 502, 503, 504) or
 * a transport error. Whether the server did the work is unknown: send the
 * same intent again later under the same `idempotencyKey`. `cause` is the
 * last attempt's error (a ProblemError for an answer); `status` is the
 * last answer's status, 0 after a transport error; `response` is the last
 * answer (its body already read).
 */
export class RetryBudgetError extends IdemError {
  readonly attempts: number;
  readonly status: number;
  readonly response: Response | undefined;

  constructor(attempts: number, cause: unknown, response: Response | undefined, idempotencyKey?: string) {
    const last =
      response !== undefined
        ? `${response.status}${cause instanceof ProblemError && !cause.code.startsWith("http_") ? ` ${cause.code}` : ""}`
        : String(cause instanceof Error ? cause.message : cause);
    super("budget_exhausted", `idem: retry budget exhausted after ${attempts} attempt(s), the last: ${last}`, { cause, idempotencyKey });
    this.attempts = attempts;
    this.status = response?.status ?? 0;
    this.response = response;
  }
}

/**
 * BadInputError: the call or the client's options are wrong (a base
 * URL without a scheme, a key over 255 characters, a negative budget …).
 * Thrown before anything is sent.
 */
export class BadInputError extends IdemError {
  constructor(message: string) {
    super("bad_input", `idem: ${message}`);
  }
}

/** isRetryable reports whether err ended a call that may be sent again under the same key later. */
export function isRetryable(err: unknown): boolean {
  return err instanceof RetryBudgetError;
}

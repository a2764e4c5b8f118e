// The resources of idem's API, as docs/api.md and /openapi.json describe
// them. Amounts are integer minor units; a JS number holds them exactly up
// to Number.MAX_SAFE_INTEGER (2^53 - 1), and the client refuses a larger
// one rather than send a different amount.

/** Balance flags of an account. */
export interface Flags {
  debits_must_not_exceed_credits?: boolean;
  credits_must_not_exceed_debits?: boolean;
}

/** The body of POST /v1/accounts. Without id, the id is derived from the Idempotency-Key. */
export interface NewAccount {
  id?: string;
  currency: string;
  flags?: Flags;
  metadata?: Record<string, unknown>;
}

export interface Account {
  id: string;
  currency: string;
  flags: Flags;
  metadata?: Record<string, unknown>;
  debits_posted: number;
  credits_posted: number;
  /** credits_posted - debits_posted. */
  balance: number;
  /** What the account's open holds reserve, debit and credit side. */
  debits_pending: number;
  credits_pending: number;
  /** balance - debits_pending. */
  available: number;
  created_at: string;
}

/** The body of POST /v1/transfers (and each item of a batch). Without id, the id is derived from the key. */
export interface NewTransfer {
  id?: string;
  debit_account_id: string;
  credit_account_id: string;
  /** A positive integer of minor units. */
  amount: number;
  currency: string;
  metadata?: Record<string, unknown>;
  /** A hold: reserves amount until posted, voided or expired. */
  pending?: boolean;
  /** A hold's timeout, 1..34560000 seconds (400 days); absent: never. */
  timeout_seconds?: number;
}

/** The body of POST /v1/transfers/{id}/post (without amount: all that is held) and /void (no amount). */
export interface NewSettlement {
  id?: string;
  amount?: number | null;
  metadata?: Record<string, unknown>;
}

/** A hold is pending until settled, then posted, voided or expired; any other transfer is posted. */
export type TransferStatus = "pending" | "posted" | "voided" | "expired";

export interface Transfer {
  id: string;
  debit_account_id: string;
  credit_account_id: string;
  amount: number;
  currency: string;
  metadata?: Record<string, unknown>;
  /** Set on a reversal: the transfer it reverses. */
  reverses_id?: string;
  /** Set on a reversal. */
  reason?: string;
  status: TransferStatus;
  /** Set on a hold, with timeout_seconds and expires_at when it has a timeout, and settled_by once settled. */
  pending?: boolean;
  timeout_seconds?: number;
  expires_at?: string;
  settled_by?: string;
  /** Set on a settlement: the hold it settles, and what it did. */
  pending_id?: string;
  settles?: "post" | "void" | "expire";
  created_at: string;
}

export interface TransferPage {
  data: Transfer[];
  /** null on the last page. */
  next_cursor: string | null;
}

/** GET /v1/transfers/{id}'s answer: the transfer and its reversals, oldest first. */
export interface TransferWithReversals extends Transfer {
  reversals: Transfer[];
}

/** The body of POST /v1/transfers/{id}/reversals. Without amount, all that remains unreversed. */
export interface NewReversal {
  id?: string;
  amount?: number | null;
  reason?: string;
  metadata?: Record<string, unknown>;
}

/** One transfer's result in a batch, in request order. */
export interface BatchItem {
  status: "created" | "existing" | "refused";
  /** The transfer, for created and existing. */
  transfer?: Transfer;
  /** Why, for refused: code is one of POST /v1/transfers's 422 codes, invalid_request or invalid_amount. */
  error?: { code: string; field?: string; message?: string };
}

export interface BatchResult {
  data: BatchItem[];
}

export interface Balance {
  account_id: string;
  as_of: string;
  debits_posted: number;
  credits_posted: number;
  balance: number;
  debits_pending: number;
  credits_pending: number;
  available: number;
}

export interface Entry {
  transfer_id: string;
  account_id: string;
  sequence: number;
  amount: number;
  direction: "debit" | "credit";
  debits_posted: number;
  credits_posted: number;
  balance: number;
  debits_pending: number;
  credits_pending: number;
  created_at: string;
}

export interface EntryPage {
  data: Entry[];
  /** null on the last page. */
  next_cursor: string | null;
}

export interface Event {
  id: string;
  /** account.created, transfer.created, transfer.reversed, transfer.pending, transfer.posted, transfer.voided, transfer.expired, webhook.<provider>.<type>. */
  type: string;
  created_at: string;
  payload: unknown;
  /** null until the relay has published the event. */
  published_at: string | null;
}

export interface EventPage {
  data: Event[];
  next_cursor: string | null;
}

/** POST /v1/webhook-endpoints's body: a receiver of the tenant's events (docs/webhooks-out.md). */
export interface NewWebhookEndpoint {
  url: string;
  /** Exact type names or a prefix and ".*"; empty: every type. */
  event_types?: string[];
  description?: string;
  /** Default true. */
  enabled?: boolean;
  /** Deliveries a second per process; 0 (default): unbounded. */
  rate_limit?: number;
  /** whsec_…; default a generated one. */
  secret?: string;
}

/** PATCH /v1/webhook-endpoints/{id}'s body: absent members are left as they are. */
export type WebhookEndpointPatch = Partial<Omit<NewWebhookEndpoint, "secret">>;

export interface WebhookEndpoint {
  id: string;
  url: string;
  description: string;
  event_types: string[];
  enabled: boolean;
  rate_limit: number;
  created_at: string;
  updated_at: string;
  /** The first failure since the last success; null while healthy. */
  failing_since: string | null;
  /** When failures disabled the endpoint. */
  disabled_at: string | null;
  disabled_reason?: string;
  /** In the answers of create and rotate-secret only. */
  secret?: string;
  /** 2 during a rotation's overlap. */
  secrets_active: number;
}

export interface WebhookEndpointPage {
  data: WebhookEndpoint[];
  next_cursor: string | null;
}

export interface WebhookAttempt {
  id: string;
  /** The event's id: the webhook-id of every attempt and replay. */
  event_id: string;
  attempt: number;
  at: string;
  /** 0 when no answer came. */
  status: number;
  latency_ms: number;
  /** The answer's first 1 KiB. */
  response: string;
  error?: string;
}

export interface WebhookAttemptPage {
  data: WebhookAttempt[];
  next_cursor: string | null;
}

/** One of the two. */
export interface WebhookReplay {
  since?: string;
  event_id?: string;
}

export interface WebhookReplayResult {
  /** The deliveries made pending again. */
  deliveries: number;
}

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
}

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
  created_at: string;
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
  created_at: string;
}

export interface EntryPage {
  data: Entry[];
  /** null on the last page. */
  next_cursor: string | null;
}

export interface Event {
  id: string;
  /** account.created, transfer.created, transfer.reversed, webhook.<provider>.<type>. */
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

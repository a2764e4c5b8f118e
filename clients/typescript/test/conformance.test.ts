// The conformance suite both clients pass: every case of
// clients/conformance/cases.json, with the server's answers played by an
// injected fetch and time by an injected clock (no test sleeps).

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

import { BadInputError, IdemClient, ProblemError, RetryBudgetError, idemFetch, type FetchOptions } from "../src/index.js";
import { readProblem } from "../src/fetch.js";

interface Config {
  base_delay_ms?: number;
  max_delay_ms?: number;
  max_attempts?: number;
  require_replayable_body?: boolean;
  keyless?: boolean;
  now?: string;
}

interface ScriptedAttempt {
  status?: number;
  headers?: Record<string, string>;
  body?: unknown;
  transport_error?: "before_write" | "after_write";
}

interface Case {
  name: string;
  config?: Config;
  request: {
    method: string;
    path: string;
    body: unknown;
    key: string | null;
    body_replayable?: boolean;
    cancel_after_attempts?: number;
  };
  attempts: ScriptedAttempt[];
  expect: {
    attempts: number;
    key_sent: boolean;
    same_key?: boolean;
    waits_ms?: number[];
    waits_max_ms?: number[];
    outcome: { status: number; replayed: boolean } | { error: { status?: number; code?: string; kind?: string } };
  };
}

// The package's root is two levels above build/test.
const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
export const casesPath = join(root, "..", "conformance", "cases.json");

const file = JSON.parse(readFileSync(casesPath, "utf8")) as { version: number; config: Config; cases: Case[] };

test("the cases file is version 1 and has cases", () => {
  assert.equal(file.version, 1);
  assert.ok(file.cases.length >= 20, `only ${file.cases.length} cases`);
});

/** A run is what the injected seams saw. */
interface Run {
  keys: (string | null)[];
  waits: number[];
}

/** seams returns the injected fetch, clock and sleep playing c's attempts. */
function seams(c: Case, cfg: Config, run: Run, abort: AbortController): FetchOptions {
  let clock = Date.parse(cfg.now ?? "2030-01-01T00:00:00Z");
  return {
    now: () => clock,
    // Just under 1: each backoff is its bound, the largest full jitter allows.
    random: () => 1 - 1e-12,
    sleep: async (ms, signal) => {
      run.waits.push(ms);
      if (c.request.cancel_after_attempts !== undefined && run.keys.length >= c.request.cancel_after_attempts) {
        abort.abort();
      }
      if (signal?.aborted) {
        throw signal.reason;
      }
      clock += ms;
    },
    fetch: async (input, init) => {
      const i = run.keys.length;
      const headers = new Headers(init?.headers);
      run.keys.push(headers.get("Idempotency-Key"));
      const body = init?.body;
      if (body instanceof ReadableStream) {
        await new Response(body).text(); // a stream is read once
      }
      const a = c.attempts[i];
      assert.ok(a !== undefined, `attempt ${i + 1} of ${String(input)} is more than the case scripts`);
      if (a.transport_error !== undefined) {
        // In fetch, a request that never reached the server and one whose
        // connection dropped before the answer are both a rejected fetch.
        // Node's fetch puts the socket's code on the cause: a connection
        // refused is one that was never made.
        const cause = Object.assign(new Error(`scripted ${a.transport_error}`), a.transport_error === "before_write" ? { code: "ECONNREFUSED" } : {});
        throw new TypeError("fetch failed", { cause });
      }
      const text = typeof a.body === "string" ? a.body : JSON.stringify(a.body);
      return new Response(a.status === 204 ? null : text, { status: a.status, headers: a.headers });
    },
  };
}

for (const c of file.cases) {
  test(`conformance: ${c.name}`, async () => {
    const cfg: Config = { ...file.config, ...c.config };
    const run: Run = { keys: [], waits: [] };
    const abort = new AbortController();
    const options: FetchOptions = {
      ...seams(c, cfg, run, abort),
      baseDelayMs: cfg.base_delay_ms,
      maxDelayMs: cfg.max_delay_ms,
      maxAttempts: cfg.max_attempts,
      requireReplayableBody: cfg.require_replayable_body,
      ...(cfg.keyless === true ? { newKey: () => "" } : {}),
    };
    let finalStatus = -1;
    options.onAttempt = (a) => {
      if (a.final) {
        finalStatus = a.status;
      }
    };
    const key = c.request.key ?? undefined;

    let outcome: { status: number; replayed: boolean } | undefined;
    let error: unknown;
    try {
      if (c.request.body_replayable === false) {
        // Only the raw fetch takes a stream body.
        const f = idemFetch(options);
        const headers = new Headers({ "Content-Type": "application/json" });
        if (key !== undefined) {
          headers.set("Idempotency-Key", key);
        }
        const res = await f(`http://idem.test${c.request.path}`, {
          method: c.request.method,
          headers,
          body: new Response(JSON.stringify(c.request.body)).body,
          signal: abort.signal,
          // @ts-expect-error: Node's fetch needs duplex for a stream body; the DOM type lacks it.
          duplex: "half",
        });
        if (res.ok) {
          outcome = { status: res.status, replayed: res.headers.get("Idempotent-Replayed") === "true" };
        } else {
          throw new ProblemError(res.status, await readProblem(res), res.headers.get("Idempotent-Replayed") === "true");
        }
      } else {
        const client = new IdemClient({ baseUrl: "http://idem.test", ...options });
        const answer = await client.request(c.request.method, c.request.path, c.request.body ?? undefined, {
          idempotencyKey: key,
          signal: abort.signal,
        });
        // An answer has no status member: the status is the final attempt's.
        outcome = { status: finalStatus, replayed: answer.replayed };
      }
    } catch (err) {
      error = err;
    }

    const e = c.expect;
    assert.equal(run.keys.length, e.attempts, "attempts");
    assert.equal(run.keys.length > 0 && run.keys[0] !== null, e.key_sent, "key_sent");
    if (e.same_key && run.keys.length > 0) {
      assert.ok(run.keys.every((k) => k === run.keys[0]), `the keys differ: ${run.keys.join(", ")}`);
      if (key !== undefined) {
        assert.equal(run.keys[0], key, "the caller's key is sent unchanged");
      } else if (e.key_sent) {
        assert.match(run.keys[0] ?? "", /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/, "a UUIDv7");
      }
    }
    if (e.waits_ms !== undefined) {
      assert.deepEqual(run.waits, e.waits_ms, "waits");
    }
    if (e.waits_max_ms !== undefined) {
      assert.equal(run.waits.length, e.waits_max_ms.length, `waits ${run.waits.join(", ")}`);
      run.waits.forEach((w, i) => assert.ok(w >= 0 && w <= e.waits_max_ms![i]!, `wait ${i + 1} is ${w} ms, over ${e.waits_max_ms![i]}`));
    }

    if ("status" in e.outcome) {
      assert.equal(error, undefined, `the call failed: ${String(error)}`);
      assert.deepEqual(outcome, e.outcome);
      return;
    }
    const want = e.outcome.error;
    assert.notEqual(error, undefined, `the call succeeded: ${JSON.stringify(outcome)}`);
    switch (want.kind) {
      case undefined:
        assert.ok(error instanceof ProblemError, `${String(error)} is not a ProblemError`);
        assert.equal(error.status, want.status);
        assert.equal(error.code, want.code);
        break;
      case "budget_exhausted":
        assert.ok(error instanceof RetryBudgetError, `${String(error)} is not a RetryBudgetError`);
        assert.equal(error.code, "budget_exhausted");
        assert.equal(error.attempts, e.attempts);
        if (key !== undefined) {
          assert.equal(error.idempotencyKey, key);
        }
        break;
      case "context":
        assert.equal(error, abort.signal.reason, "the signal's reason");
        break;
      case "transport":
        assert.ok(error instanceof TypeError, `${String(error)} is not fetch's TypeError`);
        break;
      case "invalid_request":
        assert.ok(error instanceof BadInputError, `${String(error)} is not a BadInputError`);
        assert.equal(error.code, "bad_input");
        break;
      default:
        assert.fail(`unknown error kind ${want.kind}`);
    }
  });
}

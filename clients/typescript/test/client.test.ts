// The checks made before anything is sent, and the generated keys.

import assert from "node:assert/strict";
import { test } from "node:test";

import { BadInputError, IdemClient, ProblemError, RetryBudgetError, codes, idemFetch, uuidv7 } from "../src/index.js";

const never: typeof fetch = async () => assert.fail("nothing may be sent");

test("bad options are refused when the client is made", () => {
  const cases: [string, () => unknown][] = [
    ["a base URL without a scheme", () => new IdemClient({ baseUrl: "localhost:8080", fetch: never })],
    ["a base URL of another scheme", () => new IdemClient({ baseUrl: "ftp://localhost", fetch: never })],
    ["no base URL", () => new IdemClient({ baseUrl: "", fetch: never })],
    ["a negative budget", () => new IdemClient({ baseUrl: "http://localhost:8080", maxAttempts: -1, fetch: never })],
    ["a budget over 100", () => new IdemClient({ baseUrl: "http://localhost:8080", maxAttempts: 101, fetch: never })],
    ["a max delay under the base", () => idemFetch({ baseDelayMs: 500, maxDelayMs: 100 })],
    ["a negative attempt timeout", () => idemFetch({ attemptTimeoutMs: -1 })],
  ];
  for (const [name, make] of cases) {
    assert.throws(make, (e: unknown) => e instanceof BadInputError && e.code === "bad_input", name);
  }
});

test("bad calls are refused before anything is sent", async () => {
  const idem = new IdemClient({ baseUrl: "http://localhost:8080/", fetch: never });
  assert.equal(idem.baseUrl, "http://localhost:8080");
  const t = { debit_account_id: "a", credit_account_id: "b", amount: 1, currency: "EUR" };
  const calls: [string, () => Promise<unknown>][] = [
    ["a key over 255 characters", () => idem.createTransfer(t, { idempotencyKey: "k".repeat(256) })],
    ["an empty key", () => idem.createTransfer(t, { idempotencyKey: "" })],
    ["an amount past 2^53", () => idem.createTransfer({ ...t, amount: 2 ** 53 })],
    ["a fractional amount", () => idem.createTransfer({ ...t, amount: 1.5 })],
    ["an empty batch", () => idem.createTransfers([])],
    ["an empty id", () => idem.getAccount("")],
    ["a limit over 1000", () => idem.listEvents({ limit: 1001 })],
    ["an invalid date", () => idem.getBalance("a", { asOf: new Date(NaN) })],
    ["a path without /", () => idem.request("GET", "v1/events")],
  ];
  for (const [name, call] of calls) {
    await assert.rejects(call(), (e: unknown) => e instanceof BadInputError, name);
  }
});

test("a key of 255 characters is sent as it is", async () => {
  let sent: string | null = null;
  const idem = new IdemClient({
    baseUrl: "http://localhost:8080",
    fetch: async (_u, init) => {
      sent = new Headers(init?.headers).get("Idempotency-Key");
      return new Response("{}", { status: 201, headers: { "Idempotent-Replayed": "true" } });
    },
  });
  const key = "k".repeat(255);
  const a = await idem.createAccount({ currency: "EUR" }, { idempotencyKey: key });
  assert.equal(sent, key);
  assert.equal(a.replayed, true);
});

test("generated keys are UUIDv7 carrying the clock's milliseconds", () => {
  const ms = Date.parse("2030-01-01T00:00:00.123Z");
  const k = uuidv7(ms, (b) => b.fill(0xff));
  assert.match(k, /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
  assert.equal(parseInt(k.replace(/-/g, "").slice(0, 12), 16), ms);
  assert.notEqual(uuidv7(ms, (b) => crypto.getRandomValues(b)), uuidv7(ms, (b) => crypto.getRandomValues(b)));
});

test("the backoff is full jitter: random 0 waits 0, random near 1 waits the bound", async () => {
  for (const [r, want] of [
    [0, [0, 0, 0]],
    [1 - 1e-12, [100, 200, 400]],
  ] as const) {
    const waits: number[] = [];
    const f = idemFetch({
      random: () => r,
      sleep: async (ms) => void waits.push(ms),
      fetch: async () => new Response("", { status: waits.length < 3 ? 503 : 200 }),
    });
    assert.equal((await f("http://localhost:8080/v1/events")).status, 200);
    assert.deepEqual(waits, want);
  }
});

test("a Request's body is read once and sent on every attempt, under one key", async () => {
  const seen: [string | null, string][] = [];
  const f = idemFetch({
    sleep: async () => {},
    fetch: async (_u, init) => {
      seen.push([new Headers(init?.headers).get("Idempotency-Key"), await new Response(init?.body).text()]);
      return new Response("", { status: seen.length === 1 ? 502 : 201 });
    },
  });
  const res = await f(new Request("http://localhost:8080/v1/accounts", { method: "POST", body: '{"currency":"EUR"}' }));
  assert.equal(res.status, 201);
  assert.equal(seen.length, 2);
  assert.equal(seen[0]![1], '{"currency":"EUR"}');
  assert.deepEqual(seen[1], seen[0]);
  assert.notEqual(seen[0]![0], null);
});

test("an attempt past attemptTimeoutMs is a transport error, retried under the same key", async () => {
  const keys: (string | null)[] = [];
  const f = idemFetch({
    attemptTimeoutMs: 5,
    sleep: async () => {},
    fetch: (_u, init) => {
      keys.push(new Headers(init?.headers).get("Idempotency-Key"));
      if (keys.length === 1) {
        // The first attempt hangs until its timeout aborts it.
        return new Promise((_, reject) => init!.signal!.addEventListener("abort", () => reject(init!.signal!.reason)));
      }
      return Promise.resolve(new Response("{}", { status: 201 }));
    },
  });
  const res = await f("http://localhost:8080/v1/transfers", { method: "POST", body: "{}" });
  assert.equal(res.status, 201);
  assert.equal(keys.length, 2);
  assert.equal(keys[1], keys[0]);
});

test("the caller's abort during an attempt is final: the signal's reason, no retry", async () => {
  const ctl = new AbortController();
  let attempts = 0;
  const f = idemFetch({
    sleep: async () => {},
    fetch: async () => {
      attempts++;
      ctl.abort();
      throw new DOMException("aborted", "AbortError");
    },
  });
  await assert.rejects(f("http://localhost:8080/v1/transfers", { method: "POST", body: "{}", signal: ctl.signal }), (e) => e === ctl.signal.reason);
  assert.equal(attempts, 1);
});

test("a retried answer's body is read up to 64 KiB, not to its end", { timeout: 60_000 }, async () => {
  let pulled = 0;
  const endless = () =>
    new ReadableStream<Uint8Array>({
      pull(c) {
        pulled++;
        c.enqueue(new Uint8Array(16 << 10).fill(0x61));
      },
    });
  const f = idemFetch({ maxAttempts: 2, sleep: async () => {}, fetch: async () => new Response(endless(), { status: 502 }) });
  await assert.rejects(f("http://localhost:8080/v1/events"), (e: unknown) => e instanceof RetryBudgetError && e.status === 502);
  assert.ok(pulled < 20, `${pulled} chunks of 16 KiB read`);
});

test("a final answer that arrives as the signal aborts is returned", async () => {
  const ctl = new AbortController();
  const f = idemFetch({
    fetch: async () => {
      ctl.abort();
      return new Response("{}", { status: 201 });
    },
  });
  const res = await f("http://localhost:8080/v1/transfers", { method: "POST", body: "{}", signal: ctl.signal });
  assert.equal(res.status, 201);
});

test("a refusal names the key the call was sent under, a generated one too", async () => {
  let sent: string | null = null;
  const idem = new IdemClient({
    baseUrl: "http://localhost:8080",
    fetch: async (_u, init) => {
      sent = new Headers(init?.headers).get("Idempotency-Key");
      return new Response('{"status":422,"code":"same_account"}', { status: 422, headers: { "Content-Type": "application/problem+json" } });
    },
  });
  const t = { debit_account_id: "a", credit_account_id: "a", amount: 1, currency: "EUR" };
  await assert.rejects(idem.createTransfer(t), (e: unknown) => e instanceof ProblemError && e.code === "same_account" && e.idempotencyKey === sent && sent !== null);
});

test("a 409 idempotency_key_expired is final: sent once, a ProblemError with its code, the body whole", async () => {
  const body = '{"type":"about:blank","title":"Conflict","status":409,"detail":"done; the answer is no longer kept","code":"idempotency_key_expired"}';
  let calls = 0;
  const waits: number[] = [];
  const idem = new IdemClient({
    baseUrl: "http://localhost:8080",
    sleep: async (ms: number) => {
      waits.push(ms);
    },
    fetch: async () => {
      calls++;
      if (calls > 1) {
        return new Response('{"id":"t2"}', { status: 201, headers: { "Content-Type": "application/json" } });
      }
      return new Response(body, { status: 409, headers: { "Content-Type": "application/problem+json" } });
    },
  });
  const t = { debit_account_id: "a", credit_account_id: "b", amount: 1, currency: "EUR" };
  await assert.rejects(
    idem.createTransfer(t, { idempotencyKey: "order-7" }),
    (e: unknown) =>
      e instanceof ProblemError &&
      e.code === codes.idempotencyKeyExpired &&
      e.status === 409 &&
      e.problem.detail === "done; the answer is no longer kept" &&
      e.idempotencyKey === "order-7",
  );
  assert.equal(calls, 1);
  assert.deepEqual(waits, []);

  // The bare fetch returns the answer with its body unread.
  calls = 0;
  const f = idemFetch({ sleep: async () => {}, fetch: async () => (calls++, new Response(body, { status: 409, headers: { "Content-Type": "application/problem+json" } })) });
  const res = await f("http://localhost:8080/v1/transfers", { method: "POST", body: "{}" });
  assert.equal(res.status, 409);
  assert.equal(await res.text(), body);
  assert.equal(calls, 1);
});

test("a POST without a key reaches the server once; a connection never made is tried again", async () => {
  const { createServer } = await import("node:http");
  let posts = 0;
  const server = createServer((req, res) => {
    posts++;
    req.resume();
    req.on("end", () => {
      if (req.url === "/drop") {
        req.socket.destroy();
        return;
      }
      res.writeHead(502, { "Content-Type": "text/plain" }).end("bad gateway");
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const port = (server.address() as { port: number }).port;
  try {
    const keyless = idemFetch({ newKey: () => "", baseDelayMs: 1, maxDelayMs: 1 });
    const post = (f: typeof keyless, url: string) => f(url, { method: "POST", headers: { "Content-Type": "application/json" }, body: '{"amount":1}' });

    const res = await post(keyless, `http://127.0.0.1:${port}/bad-gateway`);
    assert.equal(res.status, 502);
    await res.text();
    assert.equal(posts, 1, "a keyless 502 is final");

    posts = 0;
    await assert.rejects(post(keyless, `http://127.0.0.1:${port}/drop`), TypeError);
    assert.equal(posts, 1, "a keyless POST whose connection dropped is final");

    posts = 0;
    const keyed = idemFetch({ baseDelayMs: 1, maxDelayMs: 1, maxAttempts: 3 });
    await assert.rejects(post(keyed, `http://127.0.0.1:${port}/drop`), RetryBudgetError);
    assert.equal(posts, 3, "a keyed POST is retried");
  } finally {
    await new Promise((resolve) => server.close(resolve));
  }

  // The port is closed now: every attempt is a refused connection.
  let attempts = 0;
  const refused = idemFetch({ newKey: () => "", baseDelayMs: 1, maxDelayMs: 1, maxAttempts: 3, onAttempt: () => attempts++ });
  await assert.rejects(refused(`http://127.0.0.1:${port}/x`, { method: "POST", body: "{}" }), RetryBudgetError);
  assert.equal(attempts, 3, "a keyless POST never sent is tried again");
});

// The TypeScript client against a real `idem serve` on the dialect the Go
// test names (cmd/idem/typescript_test.go runs this file once per
// dialect). Each test asserts what the ledger holds, not only what the
// client was answered.

import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

import { IdemClient, ProblemError, codes, RetryBudgetError, idemFetch, type Attempt } from "../src/index.js";
import { dialect, env, freshDB, get, serve, sh, waitFor } from "./serve.js";

const here = dirname(fileURLToPath(import.meta.url));
let seq = 0;
/** A prefix that keeps each test's ids apart on a database the tests share. */
const prefix = () => `ts${Date.now().toString(36)}${(seq++).toString(36)}-`;

/** An injected sleep that records the waits and lets real time pass only briefly. */
function quickSleep(waits: number[], onWait?: (n: number) => Promise<void>, realCapMs = 50) {
  return async (ms: number, signal?: AbortSignal) => {
    waits.push(ms);
    await onWait?.(waits.length);
    if (signal?.aborted) {
      throw signal.reason;
    }
    await new Promise((r) => setTimeout(r, Math.min(ms, realCapMs)));
  };
}

test(`${dialect}: the typed calls, each route once`, async (t) => {
  const s = await serve(freshDB());
  t.after(() => s.kill());
  const p = prefix();
  const idem = new IdemClient({ baseUrl: s.url });

  const bank = await idem.createAccount({ id: `${p}bank`, currency: "EUR" });
  assert.equal(bank.replayed, false);
  const again = await idem.createAccount({ id: `${p}bank`, currency: "EUR" });
  assert.equal(again.id, bank.id, "an account that exists with the same fields is answered again");
  await idem.createAccount({ id: `${p}alice`, currency: "EUR", flags: { debits_must_not_exceed_credits: true } });

  const t1 = await idem.createTransfer({ id: `${p}t1`, debit_account_id: `${p}bank`, credit_account_id: `${p}alice`, amount: 5000, currency: "EUR" });
  assert.equal(t1.amount, 5000);
  const before = new Date(Date.parse(t1.created_at) - 1000);

  const batch = await idem.createTransfers([
    { id: `${p}t2`, debit_account_id: `${p}alice`, credit_account_id: `${p}bank`, amount: 1000, currency: "EUR" },
    { id: `${p}t3`, debit_account_id: `${p}alice`, credit_account_id: `${p}bank`, amount: 99_999_999, currency: "EUR" },
  ]);
  assert.deepEqual(
    batch.data.map((d) => [d.status, d.error?.code]),
    [
      ["created", undefined],
      ["refused", "insufficient_funds"],
    ],
  );

  const rev = await idem.reverseTransfer(`${p}t1`, { amount: 500, reason: "refund" });
  assert.equal(rev.reverses_id, `${p}t1`);
  const got = await idem.getTransfer(`${p}t1`);
  assert.deepEqual(got.reversals.map((r) => r.id), [rev.id]);
  assert.equal(got.replayed, false);

  const alice = await idem.getAccount(`${p}alice`);
  assert.equal(alice.balance, 5000 - 1000 - 500);
  const then = await idem.getBalance(`${p}alice`, { asOf: before });
  assert.equal(then.balance, 0, "the balance before the first transfer");
  const now = await idem.getBalance(`${p}alice`);
  assert.equal(now.balance, 3500);

  const page1 = await idem.listEntries(`${p}alice`, { limit: 2 });
  assert.equal(page1.data.length, 2);
  assert.notEqual(page1.next_cursor, null);
  const page2 = await idem.listEntries(`${p}alice`, { limit: 2, after: page1.next_cursor! });
  assert.deepEqual(
    [...page1.data, ...page2.data].map((e) => [e.transfer_id, e.direction, e.amount]),
    [
      [rev.id, "debit", 500],
      [`${p}t2`, "debit", 1000],
      [`${p}t1`, "credit", 5000],
    ],
  );

  const seen = new Set<string>();
  let after: string | undefined;
  for (let i = 0; i < 100; i++) {
    const page = await idem.listEvents({ after, limit: 1000 });
    for (const e of page.data) {
      const payload = e.payload as { id?: string };
      if (payload.id?.startsWith(p) || payload.id === rev.id) {
        seen.add(`${e.type} ${payload.id}`);
      }
    }
    if (page.next_cursor === null || page.data.length === 0) {
      break;
    }
    after = page.next_cursor;
  }
  for (const want of [`account.created ${p}bank`, `transfer.created ${p}t1`, `transfer.created ${p}t2`, `transfer.reversed ${rev.id}`]) {
    assert.ok(seen.has(want), `no event ${want} in ${[...seen].join(", ")}`);
  }

  await assert.rejects(idem.getTransfer(`${p}nope`), (e: unknown) => e instanceof ProblemError && e.status === 404 && e.code === "not_found");

  // Holds: reserve, list the open ones, post part, a second settlement refused.
  const hold = await idem.createTransfer({
    id: `${p}h1`, debit_account_id: `${p}alice`, credit_account_id: `${p}bank`, amount: 800, currency: "EUR",
    pending: true, timeout_seconds: 3600,
  });
  assert.equal(hold.status, "pending");
  const held = await idem.getAccount(`${p}alice`);
  assert.deepEqual([held.debits_pending, held.available], [800, 3500 - 800]);
  const open = await idem.listTransfers({ status: "pending", accountId: `${p}alice` });
  assert.deepEqual(open.data.map((h) => h.id), [`${p}h1`]);
  const captured = await idem.postPending(`${p}h1`, { amount: 600 });
  assert.deepEqual([captured.status, captured.pending_id, captured.amount], ["posted", `${p}h1`, 600]);
  await assert.rejects(idem.voidPending(`${p}h1`), (e: unknown) => e instanceof ProblemError && e.code === "pending_transfer_already_posted");
  const after1 = await idem.getBalance(`${p}alice`);
  assert.deepEqual([after1.debits_pending, after1.balance, after1.available], [0, 2900, 2900]);
});

test(`${dialect}: webhook endpoints: register, receive, attempts, rotate, replay, delete`, async (t) => {
  const received: string[] = [];
  const { createServer } = await import("node:http");
  const receiver = createServer((req, res) => {
    received.push(String(req.headers["webhook-id"]));
    req.resume();
    res.writeHead(204).end();
  });
  await new Promise<void>((r) => receiver.listen(0, "127.0.0.1", () => r()));
  t.after(() => receiver.close());
  const port = (receiver.address() as { port: number }).port;
  const s = await serve(freshDB(), { args: ["--webhook-allow-networks=127.0.0.0/8", "--relay-poll=10ms"] });
  t.after(() => s.kill());
  const p = prefix();
  const idem = new IdemClient({ baseUrl: s.url });

  const ep = await idem.createWebhookEndpoint({ url: `http://127.0.0.1:${port}/hooks`, event_types: ["account.*"] });
  assert.match(ep.secret ?? "", /^whsec_/);
  assert.equal((await idem.getWebhookEndpoint(ep.id)).secret, undefined, "a read shows no secret");
  await idem.createAccount({ id: `${p}hooked`, currency: "EUR" });
  await waitFor("the delivery", () => received.length === 1);
  await waitFor("the attempt logged", async () => (await idem.listWebhookAttempts(ep.id)).data.length === 1);
  const attempts = await idem.listWebhookAttempts(ep.id);
  assert.equal(attempts.data[0]!.status, 204);
  assert.equal(attempts.data[0]!.event_id, received[0]);

  const rotated = await idem.rotateWebhookEndpointSecret(ep.id);
  assert.equal(rotated.secrets_active, 2);
  const replay = await idem.replayWebhookEndpoint(ep.id, { event_id: received[0] });
  assert.equal(replay.deliveries, 1);
  await waitFor("the replay", () => received.length === 2);
  assert.equal(received[1], received[0], "a replay keeps the webhook-id");

  const off = await idem.updateWebhookEndpoint(ep.id, { enabled: false });
  assert.equal(off.enabled, false);
  const gone = await idem.deleteWebhookEndpoint(ep.id, { idempotencyKey: `${p}del` });
  assert.equal(gone.replayed, false);
  const again = await idem.deleteWebhookEndpoint(ep.id, { idempotencyKey: `${p}del` });
  assert.equal(again.replayed, true, "a retried delete answers the stored 204");
  assert.equal((await idem.listWebhookEndpoints()).data.length, 0);
});

test(`${dialect}: the client dies after the server answered; a second process resends the stored key`, async (t) => {
  const s = await serve(freshDB());
  t.after(() => s.kill());
  const p = prefix();
  const idem = new IdemClient({ baseUrl: s.url });
  await idem.createAccount({ id: `${p}bank`, currency: "EUR" });
  await idem.createAccount({ id: `${p}alice`, currency: "EUR" });
  const orderFile = join(mkdtempSync(join(tmpdir(), "idem-order-")), "order.json");
  const child = join(here, "durable-child.js");

  // The first process: killed once the answer has arrived, before it reads it.
  const first = spawn(process.execPath, [child, s.url, orderFile, p, "die"], { stdio: ["ignore", "pipe", "pipe"] });
  let out1 = "";
  let err1 = "";
  first.stdout!.on("data", (c) => (out1 += c));
  first.stderr!.on("data", (c) => (err1 += c));
  const firstExit = new Promise<NodeJS.Signals | null>((r) => first.once("exit", (_code, sig) => r(sig)));
  await waitFor(`the first client's answer (stderr: ${err1})`, () => out1.includes("answer-arrived") || first.exitCode !== null);
  first.kill("SIGKILL");
  assert.equal(await firstExit, "SIGKILL", `the first client was not killed: ${out1} ${err1}`);
  const order = JSON.parse(readFileSync(orderFile, "utf8")) as { key: string };

  // The second process: the same order, so the same key.
  const second = spawn(process.execPath, [child, s.url, orderFile, p], { stdio: ["ignore", "pipe", "pipe"] });
  let out2 = "";
  let err2 = "";
  second.stdout!.on("data", (c) => (out2 += c));
  second.stderr!.on("data", (c) => (err2 += c));
  const code = await new Promise<number | null>((r) => second.once("exit", (c) => r(c)));
  assert.equal(code, 0, `second client: ${out2} ${err2}`);
  const answer = JSON.parse(out2.trim()) as { transfer: { id: string; amount: number; created_at: string }; replayed: boolean };
  assert.equal(answer.replayed, true, "the second process gets the first's stored answer");

  // The ledger holds one transfer.
  const alice = await get(s.url, `/v1/accounts/${p}alice`);
  assert.equal(alice.body.credits_posted, 700);
  const entries = await get(s.url, `/v1/accounts/${p}alice/entries`);
  assert.equal(entries.body.data.length, 1);
  assert.equal(entries.body.data[0].transfer_id, answer.transfer.id);
  // And a third send of the order is the same answer again.
  const third = await idem.createTransfer(
    { debit_account_id: `${p}bank`, credit_account_id: `${p}alice`, amount: 700, currency: "EUR" },
    { idempotencyKey: order.key },
  );
  assert.equal(third.replayed, true);
  assert.equal(third.id, answer.transfer.id);
  assert.equal(third.created_at, answer.transfer.created_at);
});

test(`${dialect}: the server dies mid-burst; every transfer asked for exists exactly once`, async (t) => {
  const db = freshDB();
  let s = await serve(db);
  t.after(() => s.kill());
  const addr = s.addr;
  const p = prefix();
  const setup = new IdemClient({ baseUrl: s.url });
  await setup.createAccount({ id: `${p}a`, currency: "EUR" });
  await setup.createAccount({ id: `${p}b`, currency: "EUR" });

  const workers = 4;
  const perWorker = 25;
  const idem = new IdemClient({ baseUrl: s.url, maxAttempts: 40, baseDelayMs: 20, maxDelayMs: 300, attemptTimeoutMs: 10_000 });
  let done = 0;
  let restarted = false;
  const outcomes: ("ok" | "budget")[] = [];
  const keyOf = (w: number, i: number) => `${p}key-${w}-${i}`;
  const body = (w: number, i: number) => ({
    id: `${p}t-${w}-${i}`,
    debit_account_id: `${p}a`,
    credit_account_id: `${p}b`,
    amount: 1 + w * 1000 + i,
    currency: "EUR",
  });
  const work = async (w: number) => {
    for (let i = 0; i < perWorker; i++) {
      try {
        const tr = await idem.createTransfer(body(w, i), { idempotencyKey: keyOf(w, i) });
        assert.equal(tr.id, body(w, i).id);
        outcomes.push("ok");
      } catch (err) {
        // The only final error allowed is a budget that ran out: a resend
        // under the same key settles it below.
        assert.ok(err instanceof RetryBudgetError, `transfer ${w}-${i}: ${String(err)}`);
        outcomes.push("budget");
      }
      done++;
    }
  };
  const chaos = (async () => {
    await waitFor("a third of the burst", () => done >= (workers * perWorker) / 3);
    await s.kill(); // SIGKILL mid-burst
    await new Promise((r) => setTimeout(r, 300));
    s = await serve(db, { addr });
    restarted = true;
  })();
  await Promise.all([...Array.from({ length: workers }, (_, w) => work(w)), chaos]);
  assert.ok(restarted);
  assert.equal(outcomes.length, workers * perWorker);

  // The durable intents: resend every one under its key; each is the
  // stored answer of the one transfer it made, or makes it now.
  const check = new IdemClient({ baseUrl: s.url });
  let expected = 0;
  for (let w = 0; w < workers; w++) {
    for (let i = 0; i < perWorker; i++) {
      const tr = await check.createTransfer(body(w, i), { idempotencyKey: keyOf(w, i) });
      assert.equal(tr.id, body(w, i).id);
      assert.equal(tr.amount, body(w, i).amount);
      expected += body(w, i).amount;
    }
  }
  const b = await get(s.url, `/v1/accounts/${p}b`);
  assert.equal(b.body.credits_posted, expected, "b was credited each transfer exactly once");
  let entries = 0;
  const ids = new Set<string>();
  let after = "";
  for (;;) {
    const page = await get(s.url, `/v1/accounts/${p}b/entries?limit=1000${after}`);
    for (const e of page.body.data) {
      ids.add(e.transfer_id);
      entries++;
    }
    if (page.body.next_cursor === null) {
      break;
    }
    after = `&after=${encodeURIComponent(page.body.next_cursor)}`;
  }
  assert.equal(entries, workers * perWorker, "one entry per transfer asked for");
  assert.equal(ids.size, workers * perWorker);
});

test(`${dialect}: 409 in flight is retried with the same key after Retry-After; a stream body is sent once`, async (t) => {
  const db = freshDB();
  const plain = await serve(db);
  const p = prefix();
  const setup = new IdemClient({ baseUrl: plain.url });
  await setup.createAccount({ id: `${p}a`, currency: "EUR" });
  await setup.createAccount({ id: `${p}b`, currency: "EUR" });
  await plain.kill();

  // This process stops every claimed request just before its commit.
  let s = await serve(db, { env: { IDEM_FAILPOINT: "keeper.before_commit" }, args: ["--in-flight-wait", "200ms"] });
  t.after(() => s.kill());
  const addr = s.addr;
  const key = `${p}stuck`;
  const body = { debit_account_id: `${p}a`, credit_account_id: `${p}b`, amount: 5, currency: "EUR" };
  // The first copy: held at the failpoint, never answered.
  const stuck = fetch(`${s.url}/v1/transfers`, {
    method: "POST",
    headers: { "Idempotency-Key": key, "Content-Type": "application/json" },
    body: JSON.stringify(body),
  }).catch(() => undefined);
  await waitFor("the failpoint", () => s.stderr().includes("failpoint: keeper.before_commit"));

  // A stream body cannot be sent twice: its 409 is returned, after one attempt.
  const streamAttempts: Attempt[] = [];
  const raw = idemFetch({ onAttempt: (a) => streamAttempts.push(a) });
  const res = await raw(`${s.url}/v1/transfers`, {
    method: "POST",
    headers: { "Idempotency-Key": key, "Content-Type": "application/json" },
    body: new Response(JSON.stringify(body)).body,
    // @ts-expect-error: Node's fetch needs duplex for a stream body; the DOM type lacks it.
    duplex: "half",
  });
  assert.equal(res.status, 409);
  assert.equal(((await res.json()) as { code: string }).code, "request_in_flight");
  assert.equal(streamAttempts.length, 1);

  // The client: 409, then (the stuck copy killed, a plain server in its
  // place, as after a crash) its retry under the same key does the work.
  const waits: number[] = [];
  const attempts: Attempt[] = [];
  const idem = new IdemClient({
    baseUrl: s.url,
    onAttempt: (a) => attempts.push(a),
    sleep: quickSleep(waits, async (n) => {
      if (n === 1) {
        await s.kill();
        await stuck;
        s = await serve(db, { addr });
      }
    }),
  });
  const tr = await idem.createTransfer(body, { idempotencyKey: key });
  assert.deepEqual(
    attempts.map((a) => [a.status, a.key]),
    [
      [409, key],
      [201, key],
    ],
  );
  assert.deepEqual(waits, [1000], "the server's Retry-After: 1");
  assert.equal(tr.replayed, false, "the stuck copy committed nothing");
  const bAcct = await get(s.url, `/v1/accounts/${p}b`);
  assert.equal(bAcct.body.credits_posted, 5);
});

test(`${dialect}: 422 and 400 are never retried; a stored refusal is replayed`, async (t) => {
  const s = await serve(freshDB());
  t.after(() => s.kill());
  const p = prefix();
  const attempts: Attempt[] = [];
  const idem = new IdemClient({ baseUrl: s.url, onAttempt: (a) => attempts.push(a) });
  await idem.createAccount({ id: `${p}a`, currency: "EUR", flags: { debits_must_not_exceed_credits: true } });
  await idem.createAccount({ id: `${p}b`, currency: "EUR" });
  const body = { debit_account_id: `${p}a`, credit_account_id: `${p}b`, amount: 10, currency: "EUR" };

  // A business refusal is stored: its resend is the same refusal, replayed.
  attempts.length = 0;
  const refused = (replayed: boolean) => (e: unknown) =>
    e instanceof ProblemError && e.status === 422 && e.code === codes.insufficientFunds && e.replayed === replayed;
  await assert.rejects(idem.createTransfer(body, { idempotencyKey: `${p}k1` }), refused(false));
  await assert.rejects(idem.createTransfer(body, { idempotencyKey: `${p}k1` }), refused(true));
  assert.equal(attempts.length, 2, "each call sent once");

  // The same key with another body: 422 idempotency_key_reused, sent once.
  attempts.length = 0;
  await assert.rejects(
    idem.createTransfer({ ...body, amount: 11 }, { idempotencyKey: `${p}k1` }),
    (e: unknown) => e instanceof ProblemError && e.status === 422 && e.code === "idempotency_key_reused",
  );
  assert.equal(attempts.length, 1);

  // A 400 stores nothing: sent once, and the key stays free for the
  // corrected request.
  attempts.length = 0;
  await assert.rejects(
    idem.request("POST", "/v1/transfers", { ...body, debit_account_id: `${p}b`, credit_account_id: `${p}a`, colour: "red" }, { idempotencyKey: `${p}k2` }),
    (e: unknown) => e instanceof ProblemError && e.status === 400 && e.code === "invalid_request",
  );
  assert.equal(attempts.length, 1);
  const ok = await idem.createTransfer({ ...body, debit_account_id: `${p}b`, credit_account_id: `${p}a` }, { idempotencyKey: `${p}k2` });
  assert.equal(ok.replayed, false);

  const a = await get(s.url, `/v1/accounts/${p}a`);
  assert.equal(a.body.debits_posted, 0, "the refused transfer wrote nothing");
  assert.equal(a.body.credits_posted, 10, "the corrected one, once");
});

if (dialect === "postgres") {
  test("postgres: 503 while the database is stopped is retried after Retry-After until it is back", async (t) => {
    const s = await serve(env("IDEM_TEST_PG_PAUSE_URL"));
    t.after(() => s.kill());
    const p = prefix();
    const setup = new IdemClient({ baseUrl: s.url });
    await setup.createAccount({ id: `${p}a`, currency: "EUR" });
    await setup.createAccount({ id: `${p}b`, currency: "EUR" });

    await sh(env("IDEM_TEST_PG_PAUSE"));
    let resumed = false;
    t.after(async () => {
      if (!resumed) {
        await sh(env("IDEM_TEST_PG_RESUME"));
      }
    });
    const waits: number[] = [];
    const attempts: Attempt[] = [];
    const idem = new IdemClient({
      baseUrl: s.url,
      maxAttempts: 100,
      onAttempt: (a) => attempts.push(a),
      sleep: quickSleep(waits, async (n) => {
        if (n === 1) {
          await sh(env("IDEM_TEST_PG_RESUME"));
          resumed = true;
        }
      }, 250),
    });
    const key = `${p}down`;
    const tr = await idem.createTransfer({ debit_account_id: `${p}a`, credit_account_id: `${p}b`, amount: 3, currency: "EUR" }, { idempotencyKey: key });
    assert.equal(attempts[0]!.status, 503);
    assert.equal(waits[0], 1000, "the server's Retry-After: 1");
    assert.ok(attempts.every((a) => a.key === key));
    assert.equal(attempts.at(-1)!.status, 201);
    assert.equal(tr.replayed, false, "nothing was stored while the database was down");
    const b = await get(s.url, `/v1/accounts/${p}b`);
    assert.equal(b.body.credits_posted, 3);
  });
}

// A client process for "the client dies": it keeps its order, and the
// order's Idempotency-Key, in a file it writes before the first attempt
// (the durable intent), then sends the transfer.
//
//   node durable-child.js BASE_URL ORDER_FILE PREFIX [die]
//
// PREFIX starts the ids of the two accounts (PREFIXbank, PREFIXalice).
//
// With "die" it writes "answer-arrived" to stdout once the server's answer
// has arrived and then waits, without reading it, to be SIGKILLed: the
// server has done the work and this process never learns it. Without, it
// prints the answer it gets as one JSON line.

import { randomUUID } from "node:crypto";
import { closeSync, existsSync, fsyncSync, openSync, readFileSync, renameSync, writeSync } from "node:fs";

import { IdemClient, ProblemError } from "../src/index.js";

interface Order {
  key: string;
  debit: string;
  credit: string;
  amount: number;
}

const [baseUrl, orderFile, prefix, mode] = process.argv.slice(2);
if (baseUrl === undefined || orderFile === undefined || prefix === undefined) {
  throw new Error("usage: durable-child.js BASE_URL ORDER_FILE PREFIX [die]");
}

// The intent first, then the call: a crash between the two leaves an
// order with a key and no transfer, which a resend completes.
let order: Order;
if (existsSync(orderFile)) {
  order = JSON.parse(readFileSync(orderFile, "utf8")) as Order;
} else {
  order = { key: `order-${randomUUID()}`, debit: `${prefix}bank`, credit: `${prefix}alice`, amount: 700 };
  const tmp = `${orderFile}.tmp`;
  const fd = openSync(tmp, "w");
  writeSync(fd, JSON.stringify(order));
  fsyncSync(fd);
  closeSync(fd);
  renameSync(tmp, orderFile);
}

const client = new IdemClient({
  baseUrl,
  fetch:
    mode === "die"
      ? async (input, init) => {
          await fetch(input, init);
          process.stdout.write("answer-arrived\n");
          setInterval(() => {}, 60_000); // stay alive until killed
          return new Promise<Response>(() => {}); // never read: killed here
        }
      : fetch,
});

try {
  const t = await client.createTransfer(
    { debit_account_id: order.debit, credit_account_id: order.credit, amount: order.amount, currency: "EUR" },
    { idempotencyKey: order.key },
  );
  process.stdout.write(JSON.stringify({ transfer: t, replayed: t.replayed }) + "\n");
} catch (err) {
  process.stdout.write(JSON.stringify({ error: String(err), code: err instanceof ProblemError ? err.code : undefined }) + "\n");
  process.exitCode = 1;
}

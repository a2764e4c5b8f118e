// Helpers of the tests against a real `idem serve`: the binary, the
// database and the processes come from the Go test that runs node
// (cmd/idem/typescript_test.go), through the environment:
//
//   IDEM_BIN            the idem binary
//   IDEM_TEST_DIALECT   postgres or sqlite
//   IDEM_TEST_PG_URL    (postgres) a database of the test's own
//   IDEM_TEST_PG_PAUSE_URL, IDEM_TEST_PG_PAUSE, IDEM_TEST_PG_RESUME
//                       (postgres) a cluster of the test's own and the
//                       shell commands that stop and start it again

import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

export function env(name: string): string {
  const v = process.env[name];
  if (v === undefined || v === "") {
    throw new Error(`${name} is not set: run these tests through \`scripts/test -run TestTypeScriptClient ./cmd/idem/\``);
  }
  return v;
}

export const dialect = env("IDEM_TEST_DIALECT");

/** freshDB is a --db value: a new SQLite file, or the test's PostgreSQL database. */
export function freshDB(): string {
  if (dialect === "sqlite") {
    return "sqlite:" + join(mkdtempSync(join(tmpdir(), "idem-ts-")), "idem.db");
  }
  return env("IDEM_TEST_PG_URL");
}

/** A Serve is a running `idem serve`. */
export interface Serve {
  url: string;
  addr: string;
  proc: ChildProcess;
  stderr: () => string;
  exited: Promise<void>;
  kill: () => Promise<void>;
}

const servingRE = /msg="idem serving" addr=(\S+)/;

/** serve starts `idem serve` on db at addr (a free port by default) and waits until it listens. */
export function serve(db: string, options: { addr?: string; env?: Record<string, string>; args?: string[] } = {}): Promise<Serve> {
  const proc = spawn(env("IDEM_BIN"), ["serve", "--addr", options.addr ?? "127.0.0.1:0", "--db", db, ...(options.args ?? [])], {
    env: { ...process.env, ...options.env },
    stdio: ["ignore", "ignore", "pipe"],
  });
  let log = "";
  const exited = new Promise<void>((resolve) => proc.once("exit", () => resolve()));
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      proc.kill("SIGKILL");
      reject(new Error(`idem serve did not start within 60s:\n${log}`));
    }, 60_000);
    proc.stderr!.setEncoding("utf8");
    proc.stderr!.on("data", (chunk: string) => {
      log += chunk;
      const m = servingRE.exec(log);
      if (m !== null) {
        clearTimeout(timer);
        const addr = m[1]!;
        resolve({
          url: `http://${addr}`,
          addr,
          proc,
          stderr: () => log,
          exited,
          kill: async () => {
            if (proc.exitCode === null && proc.signalCode === null) {
              proc.kill("SIGKILL");
            }
            await exited;
          },
        });
      }
    });
    proc.once("exit", (code, signal) => {
      clearTimeout(timer);
      reject(new Error(`idem serve exited (${code ?? signal}) before listening:\n${log}`));
    });
  });
}

/** waitFor polls cond every 20 ms for up to 30 s. */
export async function waitFor(what: string, cond: () => boolean | Promise<boolean>): Promise<void> {
  const deadline = Date.now() + 30_000;
  while (!(await cond())) {
    if (Date.now() > deadline) {
      throw new Error(`${what}: not within 30s`);
    }
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** sh runs a shell command line and rejects with its output when it fails. */
export function sh(line: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const p = spawn("sh", ["-c", line], { stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    p.stdout!.on("data", (c) => (out += c));
    p.stderr!.on("data", (c) => (out += c));
    p.once("exit", (code) => (code === 0 ? resolve() : reject(new Error(`${line}: exit ${code}\n${out}`))));
  });
}

/** get reads a JSON resource with plain fetch (no retries): the tests' view of the ledger. */
export async function get(base: string, path: string): Promise<{ status: number; body: any }> {
  const res = await fetch(base + path);
  return { status: res.status, body: await res.json() };
}

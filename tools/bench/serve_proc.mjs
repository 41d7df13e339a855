// mi-serve as a child process, for the benchmarks here and the server's
// node tests (tests/serve/*.mjs): started on a free port (--port 0, the
// port read from its "listening on" line), ready when /health answers 200,
// stopped with SIGTERM.
import { spawn } from "node:child_process";
import path from "node:path";

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// {p, port, base, log()}: the process, its port and base URL, its stderr
// so far. Rejects when it exits or stays unready for `timeoutMs`.
export async function startServer(build, args, { env = process.env, timeoutMs = 120000 } = {}) {
  const p = spawn(path.join(build, "bin", "mi-serve"), ["--port", "0", ...args],
    { stdio: ["ignore", "ignore", "pipe"], env });
  let log = "", exited = null;
  const port = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error("mi-serve did not start:\n" + log)), timeoutMs);
    p.stderr.on("data", (d) => {
      log += d;
      const m = /listening on http:\/\/127\.0\.0\.1:(\d+)/.exec(log);
      if (m) { clearTimeout(timer); resolve(Number(m[1])); }
    });
    p.on("exit", (c) => { exited = c; clearTimeout(timer); reject(new Error(`mi-serve exited ${c}:\n${log}`)); });
  });
  const base = `http://127.0.0.1:${port}`;
  for (const t0 = Date.now(); ; ) {
    const ok = await fetch(`${base}/health`).then((r) => r.status === 200, () => false);
    if (ok) break;
    if (exited !== null) throw new Error(`mi-serve exited ${exited} while loading:\n${log}`);
    if (Date.now() - t0 > timeoutMs) throw new Error("mi-serve never became ready:\n" + log);
    await sleep(50);
  }
  return { p, port, base, log: () => log };
}

// SIGTERM, then its exit code (0: it drained and stopped cleanly).
export async function stopServer(s) {
  const done = new Promise((r) => s.p.on("exit", (c) => r(c)));
  s.p.kill("SIGTERM");
  return await done;
}

// One Prometheus sample of /metrics by name (NaN when absent).
export async function metric(base, name) {
  const t = await fetch(`${base}/metrics`).then((r) => r.text());
  return Number(new RegExp(`^${name} ([0-9.e+-]+)$`, "m").exec(t)?.[1] ?? NaN);
}

// The named checks of a node test script: each one that throws is logged
// and counted, and the script goes on, so one run reports every failure.
let failures = 0;

// Logs a failure that is no check's (e.g. how a server exited) and counts it.
export function fail(why) {
  failures++;
  console.log(`FAIL ${why}`);
}

// Runs the check fn: "ok   NAME", or "FAIL NAME: why" and counted.
export async function check(name, fn) {
  try {
    await fn();
    console.log(`ok   ${name}`);
  } catch (e) {
    fail(`${name}: ${e.stack || e}`);
  }
}

// Ends the script: the tally, and exit 1 when a check failed.
export function finish() {
  console.log(failures ? `${failures} failed` : "all passed");
  process.exit(failures ? 1 : 0);
}

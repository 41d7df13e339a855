#!/usr/bin/env node
// Experience reuse, measured (issue 25, item 7): three defects planted in a
// copy of the CKB's model.qwen3, each generated on three shapes, without and
// with the experience the first shape's run wrote.
//
//   node tools/bench/experience_reuse.mjs [--build DIR] [--out DIR] [--json FILE]
//
// For each defect: the first shape runs on a planted CKB copy with no
// experience (a candidate fails, a failure-mode repair clears it, mi-gen
// writes the experience); every shape then runs once on a fresh planted copy
// (without) and once on the copy holding that experience (with). Printed: a
// markdown table (candidates, wall seconds) and, with --json, every run.
// MI_ORACLE=0: the defects are caught by stage 5 against the float64 model
// (stage 4 is N/A for checkpoints no committed golden holds), so the
// oracle's one-off 40 s per checkpoint stays out of the comparison.
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";

const args = process.argv.slice(2);
const opt = (name, dflt) => {
  const i = args.indexOf(name);
  return i >= 0 && i + 1 < args.length ? args[i + 1] : dflt;
};
const src = path.resolve(path.dirname(new URL(import.meta.url).pathname), "../..");
const build = path.resolve(opt("--build", path.join(src, "build")));
const work = path.resolve(opt("--out", fs.mkdtempSync(path.join(os.tmpdir(), "mi-exp-reuse-"))));
const jsonOut = opt("--json", null);
fs.mkdirSync(work, { recursive: true });

const shapes = ["tiny-untied", "small", "tiny"]; // tiny last: hidden/heads == head_dim there
const defects = {
  eps: {
    what: "every RMSNorm's eps bound to config:layer_norm_eps (absent: 1e-5) instead of rms_norm_eps",
    plant: (m) => {
      stepsOf(m, "operator.rmsnorm").forEach((s) => (s.args.eps = "config:layer_norm_eps"));
      if (!m.config.some((c) => c.name === "layer_norm_eps"))
        m.config.push({ name: "layer_norm_eps", type: "number", meaning: "planted", default: 1e-5 });
    },
  },
  theta: {
    what: "every RoPE's theta a literal 10000 instead of config:rope_theta",
    plant: (m) => stepsOf(m, "operator.rope").forEach((s) => (s.args.theta = "10000")),
  },
  scale: {
    what: "attention scale 1/sqrt(hidden_size / num_attention_heads) instead of 1/sqrt(head_dim)",
    plant: (m) =>
      stepsOf(m, "operator.attention").forEach((s) => (s.args.scale = "rsqrt:hidden_size / num_attention_heads")),
  },
};

function stepsOf(m, op) {
  return ["prologue", "layer_sequence", "epilogue"].flatMap((k) => m[k] || []).filter((s) => s.operator === op);
}

function plantedCkb(dir, defect) {
  fs.rmSync(dir, { recursive: true, force: true });
  fs.cpSync(path.join(src, "ckb"), dir, { recursive: true });
  const p = path.join(dir, "models/qwen3.json");
  const m = JSON.parse(fs.readFileSync(p, "utf8"));
  defects[defect].plant(m);
  m.summary = `planted: ${defects[defect].what}`;
  fs.writeFileSync(p, JSON.stringify(m, null, 2));
  return dir;
}

function tool(name, argv, env = {}) {
  const t0 = process.hrtime.bigint();
  const r = spawnSync(path.join(build, "bin", name), argv, {
    encoding: "utf8",
    env: { ...process.env, MI_ORACLE: "0", MI_CKB_LEARN: "1", ...env },
    stdio: ["ignore", "pipe", "pipe"],
    maxBuffer: 64 << 20,
  });
  return { rc: r.status, err: r.stderr, wall: Number(process.hrtime.bigint() - t0) / 1e9 };
}

function model(shape) {
  const dir = path.join(work, `model-${shape}`);
  if (!fs.existsSync(path.join(dir, "config.json"))) {
    const r = tool("mi-mkmodel", ["--shape", shape, "--seed", "7", "--dtype", "bf16", "--out", dir]);
    if (r.rc !== 0) throw new Error(`mi-mkmodel ${shape}: ${r.err}`);
  }
  return dir;
}

let n = 0;
function generate(ckb, shape) {
  const out = path.join(work, `engine-${n++}`);
  const r = tool("mi-gen", ["--model", model(shape), "--platform", "cpu", "--dtype", "bf16", "--tp", "1", "--out", out,
    "--ckb", ckb, "--goldens", path.join(src, "tests/goldens"), "--seed", "3", "-t", "2"]);
  let man = null;
  try {
    man = JSON.parse(fs.readFileSync(path.join(out, "manifest.json"), "utf8"));
  } catch {}
  const applied = (man?.experience_consulted || []).filter((e) => e.applied).map((e) => e.id);
  const res = { rc: r.rc, candidates: man?.iterations ?? null, wall_s: +r.wall.toFixed(1), repairs: (man?.repairs || []).map((x) => x.failure_mode), applied };
  if (r.rc !== 0) res.error = r.err.trim().split("\n").slice(-1)[0];
  process.stderr.write(`  ${shape}: exit ${r.rc}, ${res.candidates} candidate(s), ${res.wall_s} s${applied.length ? ", experience applied" : ""}${res.repairs.length ? ", repaired by " + res.repairs.join(",") : ""}\n`);
  return res;
}

const cpu = (fs.readFileSync("/proc/cpuinfo", "utf8").match(/model name\s*:\s*(.*)/) || [, "?"])[1];
const runs = [];
for (const d of Object.keys(defects)) {
  process.stderr.write(`defect ${d}: ${defects[d].what}\n`);
  const learnt = plantedCkb(path.join(work, `ckb-${d}-learnt`), d);
  const first = generate(learnt, shapes[0]); // writes the experience
  const exp = fs.existsSync(path.join(learnt, "experience"))
    ? fs.readdirSync(path.join(learnt, "experience")).filter((f) => f.startsWith("gen_"))
    : [];
  for (const s of shapes) {
    const without = s === shapes[0] ? first : generate(plantedCkb(path.join(work, `ckb-${d}-fresh`), d), s);
    const withExp = generate(learnt, s);
    runs.push({ defect: d, shape: s, without, with: withExp, experience: exp });
  }
}
const reports = (d) => {
  const dir = path.join(work, `ckb-${d}-learnt`, "failure_reports");
  return fs.existsSync(dir) ? fs.readdirSync(dir).length : 0;
};

const cell = (r) => (r.rc === 0 ? `${r.candidates} / ${r.wall_s} s` : `exit ${r.rc}`);
console.log(`Host: ${cpu}, ${os.cpus().length} CPUs; ${new Date().toISOString().slice(0, 16)} UTC; MI_ORACLE=0\n`);
console.log("| defect | shape | without experience: candidates / wall | with: candidates / wall | applied |");
console.log("| --- | --- | ---: | ---: | --- |");
for (const r of runs)
  console.log(`| ${r.defect} | ${r.shape}${r.shape === shapes[0] ? " (writes it)" : ""} | ${cell(r.without)} | ${cell(r.with)} | ${r.with.applied.length ? "yes" : "no"} |`);
console.log(`\nfailure reports in each learnt CKB: ${Object.keys(defects).map((d) => `${d} ${reports(d)}`).join(", ")}`);
if (jsonOut) fs.writeFileSync(jsonOut, JSON.stringify({ host: cpu, shapes, defects: Object.fromEntries(Object.entries(defects).map(([k, v]) => [k, v.what])), runs }, null, 2));
const bad = runs.filter((r) => r.without.rc !== 0 || r.with.rc !== 0);
process.exit(bad.length ? 1 : 0);
